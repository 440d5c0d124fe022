"""The runtime database: one aiosqlite connection (the one writer) and typed repositories.

Every mutating method is one ``BEGIN IMMEDIATE ... COMMIT`` transaction under a
lock, rolled back on any error, so a bad call changes nothing. The database runs
in WAL mode: a user reading ``runtime.sqlite3`` in the sqlite3 shell while a
session runs never blocks the store, and a user *writing* to it briefly is waited
for (``busy_timeout``); a lock held longer becomes a clear InvalidState.
sqlite3/aiosqlite exceptions never leave this module.
"""

from __future__ import annotations

import hashlib
import math
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

import aiosqlite
import anyio
import msgspec

from trainee import events as ev
from trainee.errors import InvalidState, NotFound
from trainee.spec.wire import Event
from trainee.states import check_round_transition, check_session_transition
from trainee.store.migrations import MIGRATIONS, is_busy, migrate
from trainee.store.records import (
    ROUND_STATUSES,
    SESSION_STATUSES,
    TERMINAL_SESSION_STATUSES,
    DecisionRecord,
    MetricPointRecord,
    Record,
    RoundRecord,
    SessionRecord,
    format_session_id,
    to_builtins,
    validate_record,
)

__all__ = ["POINT_BATCH", "Store", "redact_prompt"]

R = TypeVar("R", bound=Record)

POINT_BATCH = 500
"""Metric points per ``executemany`` call."""

_SQLITE_NOTADB = 26


def _q(name: str) -> str:
    return f'"{name}"'


def _encode_json(value: Any) -> str:
    return msgspec.json.encode(to_builtins(value)).decode()


class _Table(Generic[R]):
    """How one record type maps onto one table (same names; JSON and bool columns)."""

    def __init__(
        self,
        name: str,
        record: type[R],
        *,
        key: tuple[str, ...],
        json: Collection[str] = (),
        bools: Collection[str] = (),
        generated: Collection[str] = (),
    ) -> None:
        self.name = name
        self.record = record
        self.key = key
        self.json = frozenset(json)
        self.bools = frozenset(bools)
        self.columns = tuple(f.name for f in msgspec.structs.fields(record))
        self.inserted = tuple(c for c in self.columns if c not in generated)
        self.select = f"SELECT {', '.join(map(_q, self.columns))} FROM {name}"

    def values(self, rec: R, columns: Iterable[str]) -> list[Any]:
        out: list[Any] = []
        for column in columns:
            value = getattr(rec, column)
            out.append(_encode_json(value) if column in self.json else value)
        return out

    def load(self, row: sqlite3.Row) -> R:
        data: dict[str, Any] = {}
        for column in self.columns:
            value = row[column]
            if column in self.json and value is not None:
                value = msgspec.json.decode(value)
            elif column in self.bools:
                value = bool(value)
            data[column] = value
        try:
            return msgspec.convert(data, type=self.record)
        except msgspec.ValidationError as exc:
            raise InvalidState(f"a row of table {self.name} is invalid: {exc}") from None

    def insert_sql(self, *, upsert: bool = False) -> str:
        cols = ", ".join(map(_q, self.inserted))
        marks = ", ".join("?" for _ in self.inserted)
        sql = f"INSERT INTO {self.name} ({cols}) VALUES ({marks})"
        if upsert:
            rest = [c for c in self.inserted if c not in self.key]
            sets = ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in rest)
            sql += f" ON CONFLICT ({', '.join(map(_q, self.key))}) DO UPDATE SET {sets}"
        return sql

    def where_key(self) -> str:
        return " AND ".join(f"{_q(c)} = ?" for c in self.key)


_SESSIONS = _Table("sessions", SessionRecord, key=("index",), json=("spec", "env"))
_ROUNDS = _Table(
    "rounds",
    RoundRecord,
    key=("session", "index"),
    json=("params", "diff", "tail_offsets", "finals", "warnings", "failure_tail"),
)
_DECISIONS = _Table(
    "decisions",
    DecisionRecord,
    key=("id",),
    json=("prompt", "plan", "problems", "attempts"),
    bools=("repaired", "accepted"),
    generated=("id",),
)
_POINTS = _Table("metric_points", MetricPointRecord, key=("session", "round", "name", "seq"))


def redact_prompt(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each message reduced to its role, the sha256 and the length of its content."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content", "")
        text = content if isinstance(content, str) else _encode_json(content)
        out.append(
            {
                "role": str(message.get("role", "")),
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
                "length": len(text),
            }
        )
    return out


def _round_name(session: int, index: int) -> str:
    return f"round {index} of {format_session_id(session)}"


def _point_row(session: int, round_: int, point: Sequence[Any]) -> tuple[Any, ...]:
    if len(point) != 4:
        raise ValueError(f"a metric point is (name, value, step, seq), got {point!r}")
    name, value, step, seq = point
    if not isinstance(name, str) or not name:
        raise ValueError(f"metric point name must be a non-empty string, got {name!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"metric point {name!r} value must be a finite number, got {value!r}")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise ValueError(f"metric point {name!r} step must be an int or None, got {step!r}")
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise ValueError(f"metric point {name!r} seq must be an int, got {seq!r}")
    return (session, round_, name, float(value), step, seq)


def _check_fields(
    table: _Table[Any], fields: dict[str, Any], *, immutable: Collection[str], method: str
) -> None:
    unknown = sorted(set(fields) - set(table.columns))
    if unknown:
        raise ValueError(
            f"{method}: unknown field(s) {', '.join(unknown)}; "
            f"known: {', '.join(c for c in table.columns if c not in immutable)}"
        )
    fixed = sorted(set(fields) & set(immutable))
    if fixed:
        raise ValueError(f"{method}: field(s) {', '.join(fixed)} cannot be changed")


class Store:
    """The project's ``runtime.sqlite3``. Open with :meth:`open`; close with :meth:`close`."""

    migrations: ClassVar[Sequence[str]] = MIGRATIONS

    def __init__(self, path: Path, conn: aiosqlite.Connection, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._conn: aiosqlite.Connection | None = conn
        self._lock = anyio.Lock()

    # -- lifecycle ---------------------------------------------------------------

    @classmethod
    async def open(cls, path: Path | str, *, busy_timeout: float = 5.0) -> Self:
        """Open (creating it and its folder if needed) and migrate the database at ``path``."""
        path = Path(path).expanduser().absolute()
        _prepare_file(path)
        conn: aiosqlite.Connection | None = None
        try:
            conn = await _connect(path, busy_timeout)
            conn.row_factory = sqlite3.Row
            await conn.execute(f"PRAGMA busy_timeout = {max(0, int(busy_timeout * 1000))}")
            rows = list(await conn.execute_fetchall("PRAGMA journal_mode = WAL"))
            mode = str(rows[0][0]).lower() if rows else ""
            if mode != "wal":
                raise InvalidState(
                    f"cannot put the database {path} in WAL mode (journal mode is {mode!r})",
                    {"path": str(path)},
                )
            await conn.execute("PRAGMA synchronous = NORMAL")
            await conn.execute("PRAGMA foreign_keys = ON")
            await migrate(conn, path, cls.migrations)
        except BaseException as exc:
            if conn is not None:
                with anyio.CancelScope(shield=True):
                    await conn.close()
            if isinstance(exc, sqlite3.Error):
                raise _db_error(path, busy_timeout, exc, "opening it") from None
            raise
        return cls(path, conn, busy_timeout)

    async def close(self) -> None:
        """Close the connection (idempotent); later calls raise InvalidState."""
        with anyio.CancelScope(shield=True):  # closing must finish even during shutdown
            async with self._lock:
                conn, self._conn = self._conn, None
                if conn is not None:
                    await conn.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def schema_version(self) -> int:
        async with self._reading("reading the schema version") as conn:
            rows = list(await conn.execute_fetchall("PRAGMA user_version"))
        return int(rows[0][0])

    # -- transactions ------------------------------------------------------------

    def _open_conn(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise InvalidState(f"the store for {self.path} is closed")
        return self._conn

    @asynccontextmanager
    async def _transaction(
        self, doing: str, *, write: bool = True
    ) -> AsyncIterator[aiosqlite.Connection]:
        """One transaction under the lock; COMMIT on success, ROLLBACK on any error."""
        async with self._lock:
            conn = self._open_conn()
            try:
                await conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                yield conn
                await conn.execute("COMMIT")
            except BaseException as exc:
                # Always queue a ROLLBACK: a BEGIN cancelled while it waited for another
                # program's lock still runs on aiosqlite's thread, and must not leave an
                # open transaction behind. "No transaction is active" is fine.
                with anyio.CancelScope(shield=True), suppress(sqlite3.Error):
                    await conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _db_error(self.path, self.busy_timeout, exc, doing) from None
                raise

    @asynccontextmanager
    async def _reading(self, doing: str) -> AsyncIterator[aiosqlite.Connection]:
        """Single-statement reads: the lock (no interleaving with a write), no transaction."""
        async with self._lock:
            conn = self._open_conn()
            try:
                yield conn
            except sqlite3.Error as exc:
                raise _db_error(self.path, self.busy_timeout, exc, doing) from None

    @staticmethod
    async def _all(
        conn: aiosqlite.Connection, table: _Table[R], tail: str = "", params: Sequence[Any] = ()
    ) -> list[R]:
        rows = await conn.execute_fetchall(f"{table.select} {tail}", params)
        return [table.load(row) for row in rows]

    @staticmethod
    async def _exists(conn: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> bool:
        rows = list(await conn.execute_fetchall(sql, params))
        return bool(rows)

    async def _require_session(self, conn: aiosqlite.Connection, index: int) -> None:
        if not await self._exists(conn, 'SELECT 1 FROM sessions WHERE "index" = ?', (index,)):
            raise NotFound(f"{format_session_id(index)} not found in {self.path}")

    async def _require_round(self, conn: aiosqlite.Connection, session: int, index: int) -> None:
        await self._require_session(conn, session)
        sql = 'SELECT 1 FROM rounds WHERE session = ? AND "index" = ?'
        if not await self._exists(conn, sql, (session, index)):
            raise NotFound(f"round {index} of {format_session_id(session)} not found")

    async def _update(
        self,
        conn: aiosqlite.Connection,
        table: _Table[R],
        current: R,
        fields: dict[str, Any],
    ) -> R:
        new = validate_record(msgspec.structs.replace(current, **fields))
        columns = list(fields)
        sets = ", ".join(f"{_q(c)} = ?" for c in columns)
        keys = [getattr(current, k) for k in table.key]
        sql = f"UPDATE {table.name} SET {sets} WHERE {table.where_key()}"
        await conn.execute(sql, [*table.values(new, columns), *keys])
        return new

    # -- sessions ----------------------------------------------------------------

    async def next_session_index(self) -> int:
        async with self._reading("reading the next session index") as conn:
            rows = list(
                await conn.execute_fetchall('SELECT COALESCE(MAX("index"), 0) FROM sessions')
            )
        return int(rows[0][0]) + 1

    async def create_session(self, rec: SessionRecord) -> SessionRecord:
        """Insert a new session; InvalidState if its index is taken."""
        rec = validate_record(rec)
        async with self._transaction(f"creating {rec.id}") as conn:
            if await self._exists(conn, 'SELECT 1 FROM sessions WHERE "index" = ?', (rec.index,)):
                raise InvalidState(f"{rec.id} already exists in {self.path}")
            await conn.execute(_SESSIONS.insert_sql(), _SESSIONS.values(rec, _SESSIONS.inserted))
        return rec

    async def update_session(self, index: int, /, **fields: Any) -> SessionRecord:
        """Change some fields of a session (``updated_at`` defaults to now); returns the row."""
        _check_fields(_SESSIONS, fields, immutable=("index", "id"), method="update_session")
        fields.setdefault("updated_at", time.time())
        async with self._transaction(f"updating {format_session_id(index)}") as conn:
            current = await self._all(conn, _SESSIONS, 'WHERE "index" = ?', (index,))
            if not current:
                raise NotFound(f"{format_session_id(index)} not found in {self.path}")
            if fields.get("status") in SESSION_STATUSES:  # an unknown one: ValueError below
                check_session_transition(
                    current[0].status, fields["status"], what=format_session_id(index)
                )
            return await self._update(conn, _SESSIONS, current[0], fields)

    async def get_session(self, index: int) -> SessionRecord:
        async with self._reading(f"reading {format_session_id(index)}") as conn:
            rows = await self._all(conn, _SESSIONS, 'WHERE "index" = ?', (index,))
        if not rows:
            raise NotFound(f"{format_session_id(index)} not found in {self.path}")
        return rows[0]

    async def list_sessions(self, *, status: str | None = None) -> list[SessionRecord]:
        """Sessions in index order, optionally only those with ``status``."""
        params: tuple[str, ...] = ()
        if status is None:
            tail = 'ORDER BY "index"'
        elif status in SESSION_STATUSES:
            tail, params = 'WHERE status = ? ORDER BY "index"', (status,)
        else:
            raise ValueError(f"session status {status!r} is not one of {sorted(SESSION_STATUSES)}")
        async with self._reading("listing sessions") as conn:
            return await self._all(conn, _SESSIONS, tail, params)

    # -- rounds ------------------------------------------------------------------

    async def upsert_round(self, rec: RoundRecord) -> RoundRecord:
        """Insert the round or replace every field of the stored one."""
        rec = validate_record(rec)
        async with self._transaction(f"saving round {rec.index} of session {rec.session}") as conn:
            await self._require_session(conn, rec.session)
            if rec.decision_id is not None and not await self._exists(
                conn, "SELECT 1 FROM decisions WHERE id = ?", (rec.decision_id,)
            ):
                raise NotFound(f"decision {rec.decision_id} not found in {self.path}")
            stored = await self._all(
                conn, _ROUNDS, 'WHERE session = ? AND "index" = ?', (rec.session, rec.index)
            )
            if stored:
                check_round_transition(
                    stored[0].status, rec.status, what=_round_name(rec.session, rec.index)
                )
            await conn.execute(
                _ROUNDS.insert_sql(upsert=True), _ROUNDS.values(rec, _ROUNDS.inserted)
            )
        return rec

    async def update_round(self, session: int, index: int, /, **fields: Any) -> RoundRecord:
        _check_fields(_ROUNDS, fields, immutable=("session", "index"), method="update_round")
        doing = f"updating round {index} of {format_session_id(session)}"
        async with self._transaction(doing) as conn:
            current = await self._all(
                conn, _ROUNDS, 'WHERE session = ? AND "index" = ?', (session, index)
            )
            if not current:
                raise NotFound(f"round {index} of {format_session_id(session)} not found")
            if fields.get("decision_id") is not None and not await self._exists(
                conn, "SELECT 1 FROM decisions WHERE id = ?", (fields["decision_id"],)
            ):
                raise NotFound(f"decision {fields['decision_id']} not found in {self.path}")
            if fields.get("status") in ROUND_STATUSES:  # an unknown one: ValueError below
                check_round_transition(
                    current[0].status, fields["status"], what=_round_name(session, index)
                )
            return await self._update(conn, _ROUNDS, current[0], fields)

    async def get_round(self, session: int, index: int) -> RoundRecord:
        async with self._reading(f"reading round {index} of session {session}") as conn:
            rows = await self._all(
                conn, _ROUNDS, 'WHERE session = ? AND "index" = ?', (session, index)
            )
        if not rows:
            raise NotFound(f"round {index} of {format_session_id(session)} not found")
        return rows[0]

    async def list_rounds(self, session: int) -> list[RoundRecord]:
        async with self._reading(f"listing rounds of session {session}") as conn:
            return await self._all(conn, _ROUNDS, 'WHERE session = ? ORDER BY "index"', (session,))

    # -- decisions ---------------------------------------------------------------

    async def add_decision(self, rec: DecisionRecord, *, debug: bool = False) -> DecisionRecord:
        """Insert a decision and return it with its new ``id``.

        The prompt is kept in full only when ``debug`` is on; otherwise each message
        becomes ``{"role", "sha256", "length"}``.
        """
        rec = validate_record(rec)
        if not debug:
            rec = msgspec.structs.replace(rec, prompt=redact_prompt(rec.prompt))
        async with self._transaction(f"saving a decision of session {rec.session}") as conn:
            await self._require_session(conn, rec.session)
            cursor = await conn.execute(
                _DECISIONS.insert_sql(), _DECISIONS.values(rec, _DECISIONS.inserted)
            )
            new_id = cursor.lastrowid
            await cursor.close()
        if new_id is None:  # pragma: no cover - sqlite always reports the rowid of an INSERT
            raise InvalidState(f"the new decision got no id in {self.path}")
        return msgspec.structs.replace(rec, id=new_id)

    async def list_decisions(self, session: int) -> list[DecisionRecord]:
        async with self._reading(f"listing decisions of session {session}") as conn:
            return await self._all(conn, _DECISIONS, "WHERE session = ? ORDER BY id", (session,))

    async def get_decision(self, id: int) -> DecisionRecord:
        async with self._reading(f"reading decision {id}") as conn:
            rows = await self._all(conn, _DECISIONS, "WHERE id = ?", (id,))
        if not rows:
            raise NotFound(f"decision {id} not found in {self.path}")
        return rows[0]

    # -- metric points -----------------------------------------------------------

    async def add_points(
        self, session: int, round: int, points: Sequence[tuple[str, float, int | None, int]]
    ) -> None:
        """Store ``(name, value, step, seq)`` points of a round in one transaction.

        A point with the same ``(name, seq)`` as a stored one replaces it, so
        re-reading a log after a restart does not duplicate points.
        """
        rows = [_point_row(session, round, p) for p in points]
        if not rows:
            return
        cols = ", ".join(map(_q, _POINTS.columns))
        sql = (
            f"INSERT INTO metric_points ({cols}) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (session, round, name, seq) "
            "DO UPDATE SET value = excluded.value, step = excluded.step"
        )
        async with self._transaction(f"saving metric points of round {round}") as conn:
            await self._require_round(conn, session, round)
            for start in range(0, len(rows), POINT_BATCH):
                await conn.executemany(sql, rows[start : start + POINT_BATCH])

    async def points(
        self, session: int, round: int | None = None, name: str | None = None
    ) -> list[MetricPointRecord]:
        """Points of a session, optionally of one round and/or one metric, by round then seq."""
        where: list[str] = ["session = ?"]
        args: list[Any] = [session]
        if round is not None:
            where.append("round = ?")
            args.append(round)
        if name is not None:
            where.append("name = ?")
            args.append(name)
        tail = " AND ".join(where)
        async with self._reading(f"reading metric points of session {session}") as conn:
            return await self._all(conn, _POINTS, f"WHERE {tail} ORDER BY round, seq, name", args)

    # -- events ------------------------------------------------------------------

    async def append_events(self, events: Sequence[ev.Event | Event]) -> None:
        """Append events whose ids (given by the bus) increase past every stored id."""
        if not events:
            return
        rows: list[tuple[Any, ...]] = []
        previous: int | None = None
        for event in events:
            if previous is not None and event.id <= previous:
                raise InvalidState(
                    f"event ids must increase: {event.id} follows {previous} in one batch"
                )
            previous = event.id
            try:
                data = _encode_json(event.data)
            except (NotImplementedError, TypeError) as exc:
                raise ValueError(
                    f"event {event.id} ({event.kind}) data is not JSON: {exc}"
                ) from None
            rows.append((event.id, event.session, event.kind, float(event.ts), data))
        async with self._transaction(f"appending {len(rows)} events") as conn:
            last = await self._last_event_id(conn)
            if events[0].id <= last:
                raise InvalidState(
                    f"event id {events[0].id} is not after the last stored event id {last} "
                    f"in {self.path}; event ids must increase"
                )
            await conn.executemany(
                "INSERT INTO events (id, session, kind, ts, data) VALUES (?, ?, ?, ?, ?)", rows
            )

    async def events_since(
        self, since: int, *, session: str | None = None, limit: int = 1000
    ) -> list[Event]:
        """Up to ``limit`` events with ``id > since`` (of one session if given), oldest first."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        params: list[Any] = [since]
        sql = "WHERE id > ?"
        if session is not None:
            sql, params = "WHERE session = ? AND id > ?", [session, since]
        async with self._reading("reading events") as conn:
            rows = await conn.execute_fetchall(
                f"SELECT id, session, kind, ts, data FROM events {sql} ORDER BY id LIMIT ?",
                [*params, limit],
            )
        return [
            Event(
                id=row["id"],
                kind=row["kind"],
                ts=row["ts"],
                session=row["session"],
                data=msgspec.json.decode(row["data"]),
            )
            for row in rows
        ]

    async def last_event_id(self) -> int:
        """The highest stored event id, 0 when there are none."""
        async with self._reading("reading the last event id") as conn:
            return await self._last_event_id(conn)

    @staticmethod
    async def _last_event_id(conn: aiosqlite.Connection) -> int:
        rows = list(await conn.execute_fetchall("SELECT COALESCE(MAX(id), 0) FROM events"))
        return int(rows[0][0])

    # -- journal -----------------------------------------------------------------

    async def journal(self, limit: int = 10) -> list[dict[str, Any]]:
        """Ended sessions, newest first: baseline, best params/metric and rejected changes."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        marks = ", ".join("?" for _ in TERMINAL_SESSION_STATUSES)
        async with self._transaction("reading the journal", write=False) as conn:
            sessions = await self._all(
                conn,
                _SESSIONS,
                f"WHERE status IN ({marks}) "
                'ORDER BY COALESCE(finished_at, updated_at) DESC, "index" DESC LIMIT ?',
                [*sorted(TERMINAL_SESSION_STATUSES), limit],
            )
            rounds: dict[int, list[RoundRecord]] = {s.index: [] for s in sessions}
            if sessions:
                marks = ", ".join("?" for _ in sessions)
                for rec in await self._all(
                    conn,
                    _ROUNDS,
                    f'WHERE session IN ({marks}) ORDER BY session, "index"',
                    [s.index for s in sessions],
                ):
                    rounds[rec.session].append(rec)
        return [_journal_entry(s, rounds[s.index]) for s in sessions]


def _journal_entry(session: SessionRecord, rounds: list[RoundRecord]) -> dict[str, Any]:
    by_index = {r.index: r for r in rounds}

    def pick(index: int | None) -> dict[str, Any] | None:
        rec = by_index.get(index) if index is not None else None
        if rec is None:
            return None
        return {"round": rec.index, "metric": rec.primary_metric, "params": rec.params}

    return {
        "session": session.id,
        "status": session.status,
        "stop_reason": session.stop_reason,
        "finished_at": session.finished_at,
        "rounds": len(rounds),
        "baseline": pick(session.baseline_round),
        "best": pick(session.best_round),
        "rejected": [
            {
                "round": r.index,
                "diff": r.diff,
                "params": r.params,
                "hypothesis": r.hypothesis,
                "metric": r.primary_metric,
                "reason": r.verdict_reason,
            }
            for r in rounds
            if r.verdict == "rejected"
        ],
    }


async def _connect(path: Path, busy_timeout: float) -> aiosqlite.Connection:
    pending = aiosqlite.connect(str(path), isolation_level=None, timeout=busy_timeout)
    try:
        return await pending
    except BaseException:
        # A failed connect stops aiosqlite's worker thread without waiting for it; wait
        # here so it never reports to an event loop that has closed meanwhile.
        thread = getattr(pending, "_thread", None)
        if isinstance(thread, threading.Thread) and thread.is_alive():
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(thread.join, 10.0)
        raise


def _prepare_file(path: Path) -> None:
    """Create the database file owner-only (it keeps the caller's env) or check the old one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidState(
            f"cannot create the database {path}: its folder cannot be made ({exc.strerror})",
            {"path": str(path), "reason": str(exc.strerror)},
        ) from None
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        return
    except FileExistsError:
        pass
    except OSError as exc:
        raise InvalidState(
            f"cannot create the database {path}: {exc.strerror}",
            {"path": str(path), "reason": str(exc.strerror)},
        ) from None
    if not path.is_file():
        raise InvalidState(f"the database {path} is not a regular file", {"path": str(path)})
    if not os.access(path, os.R_OK | os.W_OK):
        raise InvalidState(
            f"the database {path} is not readable and writable by this user", {"path": str(path)}
        )


def _db_error(path: Path, busy_timeout: float, exc: sqlite3.Error, doing: str) -> InvalidState:
    code = getattr(exc, "sqlite_errorcode", None)
    base = code & 0xFF if isinstance(code, int) else None
    reason = str(exc)
    data = {"path": str(path), "reason": reason}
    if is_busy(exc):
        return InvalidState(
            f"database is locked by another program: {path} (waited {busy_timeout:g} s while "
            f"{doing}); end the other program's open transaction, e.g. in the sqlite3 shell, "
            "and retry",
            data,
        )
    if base == _SQLITE_NOTADB:
        return InvalidState(f"{path} is not a trainee database: {reason}", data)
    return InvalidState(f"database error in {path} while {doing}: {reason}", data)
