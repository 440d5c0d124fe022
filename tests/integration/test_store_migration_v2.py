"""Schema migration 2 on a real database a version-1 trainee left behind.

The version-1 file is made the way that trainee made it: ``MIGRATIONS[0]`` run with the
sqlite3 module, ``user_version`` 1, and a project, a session, a decision and rounds
inserted with version 1's columns only. Opening it with :class:`Store` must bring it to
version 2 without touching the old rows: the old rounds read back as local rounds of
step 0, and the new columns (backend, job_id, batch) round-trip.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from trainee.errors import InvalidState
from trainee.store import MIGRATIONS, SCHEMA_VERSION, RoundRecord, Store

T = TypeVar("T")

ROOT = "/work/proj"
NOW = 1_700_000_000.0


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(fn)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "proj" / ".trainee" / "runtime.sqlite3"


def plain(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None, timeout=0)


def columns(path: Path, table: str) -> list[str]:
    conn = plain(path)
    try:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def user_version(path: Path) -> int:
    conn = plain(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


V1_ROUND: dict[str, Any] = {
    "session": 1,
    "index": 2,
    "status": "completed",
    "params": json.dumps({"lr": 0.01, "optimizer": "adamw"}),
    "diff": json.dumps({"lr": {"from": 0.1, "to": 0.01}}),
    "decision_id": 1,
    "hypothesis": "a smaller lr converges",
    "expected": "val_loss below 0.5",
    "verdict": "kept",
    "verdict_reason": "new best",
    "command": "python train.py --lr 0.01",
    "config_path": None,
    "monitor_pid": 4242,
    "monitor_start_time": 987654,
    "log_offset": 1024,
    "tail_offsets": json.dumps({"/work/proj/.trainee/logs/train.log": 77}),
    "started_at": NOW + 10,
    "ended_at": NOW + 70,
    "returncode": 0,
    "signal": None,
    "finals": json.dumps({"val_loss": 0.42}),
    "primary_metric": 0.42,
    "warnings": json.dumps(["a warning"]),
    "failure_tail": json.dumps([]),
    "last_activity_at": NOW + 69,
    "attempt": 1,
}


def make_v1(path: Path) -> None:
    """A database exactly as trainee with schema version 1 left it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = plain(path)
    try:
        conn.executescript(MIGRATIONS[0])
        conn.execute("PRAGMA user_version = 1")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(
            "INSERT INTO projects (root, spec, created_at, updated_at) VALUES (?, ?, ?, ?)",
            (ROOT, json.dumps({"run": {"max_rounds": 3}}), NOW, NOW),
        )
        conn.execute(
            'INSERT INTO sessions ("index", id, project_root, status, policy, security_mode, '
            "max_rounds, created_at, updated_at, spec, env, cwd, baseline_round, best_round) "
            "VALUES (1, 'session-0001', ?, 'finished', 'llm', 'guarded', 3, ?, ?, '{}', "
            '\'{"PATH": "/usr/bin"}\', ?, 1, 2)',
            (ROOT, NOW, NOW, ROOT),
        )
        conn.execute(
            "INSERT INTO decisions (session, round, provider, model, policy, created_at) "
            "VALUES (1, 2, 'openai', 'gpt-4o-mini', 'llm', ?)",
            (NOW,),
        )
        conn.execute(
            'INSERT INTO rounds (session, "index", status, params, started_at, ended_at, '
            "returncode, primary_metric, finals) VALUES (1, 1, 'completed', ?, ?, ?, 0, 0.5, ?)",
            (json.dumps({"lr": 0.1}), NOW, NOW + 5, json.dumps({"val_loss": 0.5})),
        )
        names = list(V1_ROUND)
        conn.execute(
            f"INSERT INTO rounds ({', '.join(repr(n) if n == 'index' else n for n in names)}) "
            f"VALUES ({', '.join('?' for _ in names)})",
            [V1_ROUND[n] for n in names],
        )
        conn.execute(
            "INSERT INTO metric_points (session, round, name, value, step, seq) "
            "VALUES (1, 2, 'val_loss', 0.42, 100, 0)"
        )
    finally:
        conn.close()
    assert user_version(path) == 1
    assert "backend" not in columns(path, "rounds")


def test_the_v1_script_is_the_first_migration() -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 2
    assert "CREATE TABLE rounds" in MIGRATIONS[0]
    assert "backend" not in MIGRATIONS[0]


def test_a_v1_database_is_migrated_and_its_rounds_read_back_as_local(db_path: Path) -> None:
    make_v1(db_path)

    async def main() -> tuple[int, list[RoundRecord]]:
        async with await Store.open(db_path) as store:
            version = await store.schema_version()
            rounds = await store.list_rounds(1)
            session = await store.get_session(1)
            assert (session.status, session.best_round, session.env) == (
                "finished",
                2,
                {"PATH": "/usr/bin"},
            )
            points = await store.points(1, 2)
            assert [(p.name, p.value, p.step) for p in points] == [("val_loss", 0.42, 100)]
            return version, rounds

    version, rounds = run(main)

    assert version == SCHEMA_VERSION
    assert user_version(db_path) == SCHEMA_VERSION
    rounds_columns = columns(db_path, "rounds")
    assert rounds_columns[rounds_columns.index("backend") :][:3] == ["backend", "job_id", "batch"]
    assert [r.index for r in rounds] == [1, 2]
    for r in rounds:
        assert (r.backend, r.job_id, r.batch) == ("local", None, 0)
    old = rounds[1]
    assert old.params == {"lr": 0.01, "optimizer": "adamw"}
    assert old.diff == {"lr": {"from": 0.1, "to": 0.01}}
    assert (old.status, old.verdict, old.decision_id) == ("completed", "kept", 1)
    assert (old.monitor_pid, old.monitor_start_time, old.attempt) == (4242, 987654, 1)
    assert old.tail_offsets == {"/work/proj/.trainee/logs/train.log": 77}
    assert old.finals == {"val_loss": 0.42} and old.primary_metric == 0.42
    assert old.warnings == ["a warning"]
    assert old.command == "python train.py --lr 0.01"


def test_cluster_rounds_round_trip_after_the_migration(db_path: Path) -> None:
    make_v1(db_path)

    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.upsert_round(
                RoundRecord(
                    session=1,
                    index=3,
                    status="running",
                    params={"lr": 0.003},
                    backend="slurm",
                    job_id="123",
                    batch=2,
                    started_at=NOW + 100,
                )
            )
            got = await store.get_round(1, 3)
            assert (got.backend, got.job_id, got.batch) == ("slurm", "123", 2)
            assert got.params == {"lr": 0.003}
            updated = await store.update_round(1, 3, job_id="124", status="completed")
            assert (updated.backend, updated.job_id, updated.batch) == ("slurm", "124", 2)
            # the old local round is untouched by writes to another
            assert (await store.get_round(1, 2)).backend == "local"
            await store.update_round(1, 2, backend="ray", job_id="raysubmit_abc", batch=1)

    run(main)

    async def reopen() -> dict[int, tuple[str, str | None, int]]:
        async with await Store.open(db_path) as store:
            assert await store.schema_version() == SCHEMA_VERSION
            return {r.index: (r.backend, r.job_id, r.batch) for r in await store.list_rounds(1)}

    assert run(reopen) == {
        1: ("local", None, 0),
        2: ("ray", "raysubmit_abc", 1),
        3: ("slurm", "124", 2),
    }
    conn = plain(db_path)
    try:
        row = conn.execute(
            'SELECT backend, job_id, batch FROM rounds WHERE session = 1 AND "index" = 3'
        ).fetchone()
    finally:
        conn.close()
    assert row == ("slurm", "124", 2)  # job ids are text, not numbers


def test_a_row_written_by_an_old_writer_after_the_migration_gets_the_defaults(
    db_path: Path,
) -> None:
    make_v1(db_path)

    async def migrate_only() -> None:
        async with await Store.open(db_path):
            pass

    run(migrate_only)
    conn = plain(db_path)
    try:
        conn.execute("INSERT INTO rounds (session, \"index\", status) VALUES (1, 9, 'pending')")
    finally:
        conn.close()

    async def read() -> RoundRecord:
        async with await Store.open(db_path) as store:
            return await store.get_round(1, 9)

    got = run(read)
    assert (got.backend, got.job_id, got.batch) == ("local", None, 0)


def test_a_migration_2_that_fails_leaves_the_database_at_version_1(db_path: Path) -> None:
    """A hand-made column clashes with the migration's second statement: the whole step is
    rolled back (the first ALTER TABLE too) and the data stays readable at version 1."""
    make_v1(db_path)
    conn = plain(db_path)
    try:
        conn.execute("ALTER TABLE rounds ADD COLUMN job_id TEXT")
    finally:
        conn.close()
    before = columns(db_path, "rounds")

    with pytest.raises(InvalidState, match=r"migration 2 .* rolled back .* version 1"):
        run(lambda: Store.open(db_path))

    assert user_version(db_path) == 1
    assert columns(db_path, "rounds") == before
    assert "backend" not in before
    conn = plain(db_path)
    try:
        assert conn.execute("SELECT count(*) FROM rounds").fetchone()[0] == 2
    finally:
        conn.close()


def test_the_migration_is_applied_once(db_path: Path) -> None:
    make_v1(db_path)

    async def open_twice() -> None:
        for _ in range(2):
            async with await Store.open(db_path) as store:
                assert await store.schema_version() == SCHEMA_VERSION

    run(open_twice)
    assert columns(db_path, "rounds").count("backend") == 1


def test_migration_3_keeps_old_decisions_and_sessions_readable(db_path: Path) -> None:
    """Decisions stored before every request was kept read back with no requests and no
    format; sessions with no stop detail."""
    make_v1(db_path)
    conn = sqlite3.connect(db_path)
    try:
        conn.execute(
            "INSERT INTO decisions (session, round, provider, model, policy, created_at) "
            "VALUES (1, 2, 'openai', 'gpt-4o-mini', 'llm', 0)"
        )
        conn.commit()
    finally:
        conn.close()

    async def main() -> tuple[Any, Any]:
        async with await Store.open(db_path) as store:
            decisions = await store.list_decisions(1)
            return decisions[-1], await store.get_session(1)

    decision, session = run(main)
    assert (decision.attempts, decision.response_format, decision.source) == ([], None, "")
    assert session.stop_detail is None
    assert {"attempts", "response_format", "source"} <= set(columns(db_path, "decisions"))
