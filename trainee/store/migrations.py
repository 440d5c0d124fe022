"""Numbered schema migrations, tracked by ``PRAGMA user_version``.

``MIGRATIONS[n - 1]`` takes the schema from version ``n - 1`` to ``n``. Each step
runs in its own ``BEGIN IMMEDIATE`` transaction together with the version bump,
so a failing step leaves the database exactly at the previous version. Append new
steps; never edit a released one.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import aiosqlite
import anyio

from trainee.errors import InvalidState

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "is_busy", "migrate", "split_statements"]

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6

_V1 = """
CREATE TABLE projects (
    root        TEXT PRIMARY KEY,
    spec        TEXT NOT NULL DEFAULT '{}',
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);

CREATE TABLE sessions (
    "index"         INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    project_root    TEXT NOT NULL,
    status          TEXT NOT NULL,
    stop_reason     TEXT,
    policy          TEXT NOT NULL,
    security_mode   TEXT NOT NULL,
    max_rounds      INTEGER NOT NULL,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    finished_at     REAL,
    spec            TEXT NOT NULL DEFAULT '{}',
    env             TEXT NOT NULL DEFAULT '{}',
    cwd             TEXT NOT NULL DEFAULT '',
    best_round      INTEGER,
    baseline_round  INTEGER,
    tokens          INTEGER NOT NULL DEFAULT 0,
    cost_usd        REAL NOT NULL DEFAULT 0,
    error           TEXT
);
CREATE INDEX sessions_status ON sessions (status);

CREATE TABLE decisions (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    session             INTEGER NOT NULL REFERENCES sessions ("index") ON DELETE CASCADE,
    round               INTEGER NOT NULL,
    provider            TEXT NOT NULL,
    model               TEXT NOT NULL,
    policy              TEXT NOT NULL,
    prompt              TEXT NOT NULL DEFAULT '[]',
    raw_response        TEXT,
    plan                TEXT,
    problems            TEXT NOT NULL DEFAULT '[]',
    repaired            INTEGER NOT NULL DEFAULT 0,
    accepted            INTEGER NOT NULL DEFAULT 0,
    prompt_tokens       INTEGER NOT NULL DEFAULT 0,
    completion_tokens   INTEGER NOT NULL DEFAULT 0,
    cost_usd            REAL,
    latency_sec         REAL NOT NULL DEFAULT 0,
    created_at          REAL NOT NULL
);
CREATE INDEX decisions_session_round ON decisions (session, round);

CREATE TABLE rounds (
    session             INTEGER NOT NULL REFERENCES sessions ("index") ON DELETE CASCADE,
    "index"             INTEGER NOT NULL,
    status              TEXT NOT NULL,
    params              TEXT NOT NULL DEFAULT '{}',
    diff                TEXT NOT NULL DEFAULT '{}',
    decision_id         INTEGER REFERENCES decisions (id),
    hypothesis          TEXT NOT NULL DEFAULT '',
    expected            TEXT NOT NULL DEFAULT '',
    verdict             TEXT,
    verdict_reason      TEXT NOT NULL DEFAULT '',
    command             TEXT NOT NULL DEFAULT '',
    config_path         TEXT,
    monitor_pid         INTEGER,
    monitor_start_time  INTEGER,
    log_offset          INTEGER NOT NULL DEFAULT 0,
    tail_offsets        TEXT NOT NULL DEFAULT '{}',
    started_at          REAL,
    ended_at            REAL,
    returncode          INTEGER,
    signal              TEXT,
    finals              TEXT NOT NULL DEFAULT '{}',
    primary_metric      REAL,
    warnings            TEXT NOT NULL DEFAULT '[]',
    failure_tail        TEXT NOT NULL DEFAULT '[]',
    last_activity_at    REAL,
    attempt             INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session, "index")
);
CREATE INDEX rounds_verdict ON rounds (verdict);

CREATE TABLE metric_points (
    session  INTEGER NOT NULL,
    round    INTEGER NOT NULL,
    name     TEXT NOT NULL,
    value    REAL NOT NULL,
    step     INTEGER,
    seq      INTEGER NOT NULL,
    PRIMARY KEY (session, round, name, seq),
    FOREIGN KEY (session, round) REFERENCES rounds (session, "index") ON DELETE CASCADE
);

CREATE TABLE events (
    id       INTEGER PRIMARY KEY,
    session  TEXT,
    kind     TEXT NOT NULL,
    ts       REAL NOT NULL,
    data     TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_session_id ON events (session, id);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
"""

_V2 = """
ALTER TABLE rounds ADD COLUMN backend TEXT NOT NULL DEFAULT 'local';
ALTER TABLE rounds ADD COLUMN job_id TEXT;
ALTER TABLE rounds ADD COLUMN batch INTEGER NOT NULL DEFAULT 0;
"""
"""Rounds launched on a cluster engine (the backend and its job id, for re-adoption) and
the step of parallel candidates each round belongs to."""

_V3 = """
ALTER TABLE decisions ADD COLUMN attempts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE decisions ADD COLUMN response_format TEXT;
ALTER TABLE decisions ADD COLUMN source TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN stop_detail TEXT;
"""
"""Every request of a decision (negotiation steps, failover, the repair) with the format
that answered and whose point it was (the hybrid's S1..Sk, own, or the optimizer fallback);
the text a policy gave with its stop (a stop is not an error)."""

_V4 = """
ALTER TABLE rounds ADD COLUMN launch_token TEXT;
ALTER TABLE rounds ADD COLUMN control_layout INTEGER NOT NULL DEFAULT 1;
"""
"""Exactly-once launches: the token of a round's launch, recorded before its monitor (or
cluster job) starts; and where the round's control files are (1: in its workspace, as
rounds launched before this version kept them; 2: in ``<data_dir>/control/``)."""

_V5 = """
DROP TABLE IF EXISTS projects;
"""
"""The daemon's known projects are its projects.json (``projects_list``), not a table of
each project's database: the ``projects`` table was never written by a released version."""

_V6 = """
ALTER TABLE rounds ADD COLUMN rung INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rounds ADD COLUMN budget REAL;
ALTER TABLE rounds ADD COLUMN promoted_from INTEGER;
"""
"""Cheap screening (``run.screen``): the rung a round ran at (0: no screening), its
budget, and the round it was promoted from."""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6)
SCHEMA_VERSION = len(MIGRATIONS)


def split_statements(script: str) -> list[str]:
    """The complete SQL statements of ``script`` (trigger bodies kept whole).

    The last statement may omit its semicolon; an unterminated one (an open string
    or trigger body) is a ValueError.
    """
    statements: list[str] = []
    buffer = ""
    pieces = script.split(";")
    for number, piece in enumerate(pieces, start=1):
        buffer += piece if number == len(pieces) else piece + ";"
        if number == len(pieces) and buffer.strip():
            buffer += ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip(" \t\r\n;"):
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip(" \t\r\n;"):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buffer.strip()!r}")
    return statements


def is_busy(exc: sqlite3.Error) -> bool:
    """True when ``exc`` means another connection holds a lock (SQLITE_BUSY/LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc)
    return "locked" in text or "busy" in text


async def user_version(conn: aiosqlite.Connection) -> int:
    rows = list(await conn.execute_fetchall("PRAGMA user_version"))
    return int(rows[0][0])


def _future_error(path: Path, found: int, known: int) -> InvalidState:
    return InvalidState(
        f"database {path} has schema version {found}, newer than this trainee knows "
        f"({known}); upgrade trainee or set TRAINEE_DATA_DIR to use another database",
        {"path": str(path), "schema_version": found, "known_version": known},
    )


async def migrate(conn: aiosqlite.Connection, path: Path, migrations: Sequence[str]) -> int:
    """Bring the database on ``conn`` (autocommit mode) up to ``len(migrations)``.

    Returns the final version. A version newer than ``migrations`` knows, or a step
    that fails (rolled back, leaving the previous version), raises InvalidState.
    """
    known = len(migrations)
    for number, script in enumerate(migrations, start=1):
        try:
            await conn.execute("BEGIN IMMEDIATE")
            found = await user_version(conn)
            if found > known:
                raise _future_error(path, found, known)
            if found >= number:
                await conn.execute("COMMIT")
                continue
            for statement in split_statements(script):
                await conn.execute(statement)
            await conn.execute(f"PRAGMA user_version = {number}")
            await conn.execute("COMMIT")
        except BaseException as exc:
            with anyio.CancelScope(shield=True), contextlib.suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")  # queued even after a cancelled BEGIN
            if isinstance(exc, sqlite3.Error) and is_busy(exc):
                raise  # another program holds the lock: the caller says so clearly
            if isinstance(exc, (sqlite3.Error, ValueError)):
                raise InvalidState(
                    f"migration {number} of {path} failed and was rolled back "
                    f"(the schema stays at version {number - 1}): {exc}",
                    {"path": str(path), "migration": number, "reason": str(exc)},
                ) from exc
            raise
    found = await user_version(conn)
    if found > known:
        raise _future_error(path, found, known)
    return found
