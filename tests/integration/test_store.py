"""The Store against real SQLite files: every method, WAL, outside readers/writers, migrations."""

from __future__ import annotations

import os
import select
import shutil
import sqlite3
import stat
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
import pytest

from trainee.errors import InvalidState, NotFound
from trainee.launch.layout import ProjectLayout
from trainee.spec.wire import Event
from trainee.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    DecisionRecord,
    RoundRecord,
    SessionRecord,
    Store,
    write_ledgers,
    write_report,
    write_research_state,
)
from trainee.store.db import POINT_BATCH

T = TypeVar("T")

SECRET = "sk-test-0123456789-very-secret"


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(fn)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "proj" / ".trainee" / "runtime.sqlite3"


def session_rec(index: int = 1, **fields: Any) -> SessionRecord:
    base: dict[str, Any] = {
        "index": index,
        "project_root": "/work/proj",
        "policy": "llm",
        "security_mode": "guarded",
        "max_rounds": 5,
        "env": {"OPENAI_API_KEY": SECRET, "PATH": "/usr/bin"},
        "spec": {"metrics": {"specs": [{"name": "val_loss", "goal": "min"}]}},
        "cwd": "/work/proj",
    }
    base.update(fields)
    return SessionRecord(**base)


def round_rec(session: int, index: int, **fields: Any) -> RoundRecord:
    return RoundRecord(session=session, index=index, **fields)


def decision_rec(session: int, round_: int, **fields: Any) -> DecisionRecord:
    base: dict[str, Any] = {
        "session": session,
        "round": round_,
        "provider": "openai",
        "model": "gpt-4o-mini",
        "policy": "llm",
        "prompt": [
            {"role": "system", "content": "You tune training runs."},
            {"role": "user", "content": "Baseline val_loss=0.5. Next params?"},
        ],
        "raw_response": '{"params": {"lr": 0.05}}',
        "plan": {"params": {"lr": 0.05}, "hypothesis": "smaller lr"},
        "problems": [{"field": "params.lr", "message": "fixed after repair"}],
        "repaired": True,
        "accepted": True,
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "cost_usd": 0.0012,
        "latency_sec": 1.5,
    }
    base.update(fields)
    return DecisionRecord(**base)


def plain(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection, like a user's sqlite3 shell (autocommit, no busy wait)."""
    return sqlite3.connect(path, isolation_level=None, timeout=0)


def scalar(path: Path, sql: str) -> Any:
    conn = plain(path)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


# -- opening and migrations ----------------------------------------------------------


def test_open_creates_a_private_wal_database(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            assert await store.schema_version() == SCHEMA_VERSION == len(MIGRATIONS)
            assert scalar(db_path, "PRAGMA journal_mode") == "wal"
            assert (db_path.parent / "runtime.sqlite3-wal").exists()

    run(main)
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    assert scalar(db_path, "PRAGMA user_version") == SCHEMA_VERSION
    tables = {
        row[0]
        for row in plain(db_path).execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    assert {"sessions", "rounds", "decisions", "metric_points", "events"} <= tables
    assert "projects" not in tables  # the daemon's projects.json is the one list


def test_open_twice_is_idempotent(db_path: Path) -> None:
    async def first() -> None:
        async with await Store.open(db_path) as store:
            await store.create_session(session_rec(1))

    async def second() -> list[SessionRecord]:
        async with await Store.open(db_path) as store:
            assert await store.schema_version() == SCHEMA_VERSION
            return await store.list_sessions()

    run(first)
    sessions = run(second)
    assert [s.id for s in sessions] == ["session-0001"]
    assert scalar(db_path, "PRAGMA user_version") == SCHEMA_VERSION


def test_a_database_from_the_future_is_refused_and_left_alone(db_path: Path) -> None:
    run(lambda: _open_close(db_path))
    conn = plain(db_path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = db_path.read_bytes()

    with pytest.raises(InvalidState, match=r"newer than this trainee knows") as info:
        run(lambda: _open_close(db_path))
    assert str(db_path) in info.value.message
    assert scalar(db_path, "PRAGMA user_version") == SCHEMA_VERSION + 1
    assert db_path.read_bytes() == before


async def _open_close(path: Path, cls: type[Store] = Store) -> None:
    store = await cls.open(path)
    await store.close()


def test_a_failing_migration_rolls_back_to_the_previous_version(db_path: Path) -> None:
    class Broken(Store):
        migrations = (*MIGRATIONS, "CREATE TABLE extra (a); INSERT INTO missing VALUES (1);")

    run(lambda: _open_close(db_path))
    with pytest.raises(InvalidState, match=rf"migration {SCHEMA_VERSION + 1} .* rolled back"):
        run(lambda: _open_close(db_path, Broken))
    assert scalar(db_path, "PRAGMA user_version") == SCHEMA_VERSION
    assert scalar(db_path, "SELECT count(*) FROM sqlite_master WHERE name = 'extra'") == 0
    run(lambda: _open_close(db_path))  # the real schema still opens


def test_a_failing_first_migration_leaves_an_empty_database(db_path: Path) -> None:
    class Broken(Store):
        migrations = ("CREATE TABLE a (x); CREATE INDEX a_x ON a (x); CREATE TABLE a (y);",)

    with pytest.raises(InvalidState, match=r"migration 1 .* version 0"):
        run(lambda: _open_close(db_path, Broken))
    assert scalar(db_path, "PRAGMA user_version") == 0
    assert scalar(db_path, "SELECT count(*) FROM sqlite_master") == 0


def test_a_later_migration_applies_on_top_of_an_existing_database(db_path: Path) -> None:
    class Newer(Store):
        migrations = (*MIGRATIONS, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);")

    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.create_session(session_rec(1))
        async with await Newer.open(db_path) as store:
            assert await store.schema_version() == SCHEMA_VERSION + 1
            assert [s.index for s in await store.list_sessions()] == [1]

    run(main)
    assert scalar(db_path, "SELECT count(*) FROM sqlite_master WHERE name = 'notes'") == 1


def test_a_file_that_is_not_a_database_is_refused_unchanged(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"this is not sqlite at all, just some text\n" * 100)
    before = db_path.read_bytes()
    with pytest.raises(InvalidState, match="is not a trainee database"):
        run(lambda: _open_close(db_path))
    assert db_path.read_bytes() == before


def test_a_folder_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InvalidState, match="cannot create the database"):
        run(lambda: _open_close(blocker / "runtime.sqlite3"))


def test_a_closed_store_refuses_calls(db_path: Path) -> None:
    async def main() -> None:
        store = await Store.open(db_path)
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(InvalidState, match="closed"):
            await store.list_sessions()
        with pytest.raises(InvalidState, match="closed"):
            await store.create_session(session_rec(1))

    run(main)


# -- projects and sessions --------------------------------------------------------------


def test_sessions_create_get_list_update(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            assert await store.next_session_index() == 1
            created = await store.create_session(session_rec(1))
            assert created.id == "session-0001"
            assert await store.next_session_index() == 2
            await store.create_session(session_rec(2, status="finished"))
            got = await store.get_session(1)
            assert got == created
            assert got.env == {"OPENAI_API_KEY": SECRET, "PATH": "/usr/bin"}
            assert got.spec["metrics"]["specs"][0]["name"] == "val_loss"

            updated = await store.update_session(
                1, status="stopped", stop_reason="user_stop", tokens=150, cost_usd=0.25
            )
            assert (updated.status, updated.stop_reason, updated.tokens) == (
                "stopped",
                "user_stop",
                150,
            )
            assert updated.updated_at >= created.updated_at
            assert await store.get_session(1) == updated
            fixed = await store.update_session(1, updated_at=123.0, best_round=3)
            assert (fixed.updated_at, fixed.best_round) == (123.0, 3)

            assert [s.index for s in await store.list_sessions()] == [1, 2]
            assert [s.index for s in await store.list_sessions(status="finished")] == [2]
            assert await store.list_sessions(status="failed") == []

    run(main)


def test_session_errors_change_nothing(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            original = await store.create_session(session_rec(1))
            with pytest.raises(InvalidState, match="session-0001 already exists"):
                await store.create_session(session_rec(1, policy="other"))
            with pytest.raises(NotFound, match="session-0009"):
                await store.get_session(9)
            with pytest.raises(NotFound, match="session-0009"):
                await store.update_session(9, status="finished")
            with pytest.raises(ValueError, match=r"unknown field.*colour"):
                await store.update_session(1, colour="blue")
            with pytest.raises(ValueError, match="cannot be changed"):
                await store.update_session(1, id="session-0002")
            with pytest.raises(ValueError, match="max_rounds"):
                await store.update_session(1, status="finished", max_rounds="many")
            with pytest.raises(ValueError, match="status"):
                await store.update_session(1, status="exploded")
            with pytest.raises(ValueError, match="status"):
                await store.list_sessions(status="exploded")
            with pytest.raises(ValueError, match="invalid SessionRecord"):
                await store.create_session(session_rec(2, env={"A": 1}))
            assert await store.get_session(1) == original
            assert [s.index for s in await store.list_sessions()] == [1]
            # The failed calls left no transaction open: writes still work.
            assert (await store.update_session(1, status="finished")).status == "finished"

    run(main)


# -- rounds, decisions, points ------------------------------------------------------------


def test_rounds_upsert_update_get_list(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.create_session(session_rec(1))
            await store.create_session(session_rec(2))
            decision = await store.add_decision(decision_rec(1, 2))
            await store.upsert_round(round_rec(1, 2, params={"lr": 0.05}, status="running"))
            first = await store.upsert_round(
                round_rec(1, 1, params={"lr": 0.1, "layers": 4}, status="running", started_at=10.0)
            )
            await store.upsert_round(round_rec(2, 1))
            assert await store.get_round(1, 1) == first

            full = round_rec(
                1,
                2,
                status="completed",
                params={"lr": 0.05, "layers": 4},
                diff={"lr": {"from": 0.1, "to": 0.05}},
                decision_id=decision.id,
                hypothesis="a smaller lr lowers val_loss",
                expected="val_loss < 0.5",
                verdict="kept",
                verdict_reason="new best",
                command="python train.py --config cfg.yaml",
                config_path="/p/.trainee/runs/session-0001/round-0002/config.yaml",
                monitor_pid=4242,
                monitor_start_time=987654,
                log_offset=2048,
                tail_offsets={"/p/logs/train.log": 100},
                started_at=20.0,
                ended_at=80.5,
                returncode=0,
                signal=None,
                finals={"val_loss": 0.4, "loss": 0.3},
                primary_metric=0.4,
                warnings=["slow epoch"],
                failure_tail=[],
                last_activity_at=80.0,
                attempt=1,
            )
            assert await store.upsert_round(full) == full
            assert await store.get_round(1, 2) == full

            updated = await store.update_round(
                1, 1, status="failed", returncode=1, failure_tail=["Traceback", "Boom"]
            )
            assert updated.failure_tail == ["Traceback", "Boom"]
            assert updated.params == {"lr": 0.1, "layers": 4}
            assert await store.get_round(1, 1) == updated

            assert [r.index for r in await store.list_rounds(1)] == [1, 2]
            assert [r.index for r in await store.list_rounds(2)] == [1]
            assert await store.list_rounds(3) == []

    run(main)


def test_round_errors_change_nothing(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.create_session(session_rec(1))
            original = await store.upsert_round(round_rec(1, 1, params={"lr": 0.1}))
            with pytest.raises(NotFound, match="session-0007"):
                await store.upsert_round(round_rec(7, 1))
            with pytest.raises(NotFound, match="decision 99"):
                await store.upsert_round(round_rec(1, 1, decision_id=99))
            with pytest.raises(NotFound, match="decision 99"):
                await store.update_round(1, 1, decision_id=99)
            with pytest.raises(NotFound, match="round 5 of session-0001"):
                await store.update_round(1, 5, status="running")
            with pytest.raises(NotFound, match="round 5 of session-0001"):
                await store.get_round(1, 5)
            with pytest.raises(ValueError, match=r"unknown field.*speed"):
                await store.update_round(1, 1, speed=3)
            with pytest.raises(ValueError, match="cannot be changed"):
                await store.update_round(1, 1, index=2)
            with pytest.raises(ValueError, match="finite"):
                await store.update_round(1, 1, finals={"val_loss": float("nan")})
            with pytest.raises(ValueError, match="tail_offsets"):
                await store.update_round(1, 1, tail_offsets={"a": "x"})
            assert await store.get_round(1, 1) == original
            assert await store.list_rounds(7) == []

    run(main)


def test_decisions_store_the_prompt_only_in_debug(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.create_session(session_rec(1))
            quiet = await store.add_decision(decision_rec(1, 2))
            loud = await store.add_decision(decision_rec(1, 3, accepted=False), debug=True)
            assert (quiet.id, loud.id) == (1, 2)

            assert [m["role"] for m in quiet.prompt] == ["system", "user"]
            assert all(set(m) == {"role", "sha256", "length"} for m in quiet.prompt)
            assert quiet.prompt[1]["length"] == len("Baseline val_loss=0.5. Next params?")
            assert "Baseline" not in msgspec.json.encode(quiet.prompt).decode()
            assert loud.prompt[1]["content"] == "Baseline val_loss=0.5. Next params?"

            assert await store.get_decision(1) == quiet
            got = await store.get_decision(2)
            assert got == loud
            assert (got.repaired, got.accepted) == (True, False)
            assert got.plan == {"params": {"lr": 0.05}, "hypothesis": "smaller lr"}
            assert [d.id for d in await store.list_decisions(1)] == [1, 2]
            assert await store.list_decisions(2) == []
            with pytest.raises(NotFound, match="decision 3"):
                await store.get_decision(3)
            with pytest.raises(NotFound, match="session-0002"):
                await store.add_decision(decision_rec(2, 1))
            assert len(await store.list_decisions(1)) == 2

    run(main)


def test_metric_points(db_path: Path) -> None:
    count = POINT_BATCH * 2 + 17

    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.create_session(session_rec(1))
            await store.upsert_round(round_rec(1, 1))
            await store.upsert_round(round_rec(1, 2))
            points = [("loss", 1.0 / (i + 1), i, i) for i in range(count)]
            await store.add_points(1, 1, points)
            await store.add_points(1, 1, [("val_loss", 0.9, None, count)])
            await store.add_points(1, 2, [("loss", 0.2, 1, 0)])
            await store.add_points(1, 2, [])

            all_points = await store.points(1)
            assert len(all_points) == count + 2
            assert [(p.round, p.seq) for p in all_points] == sorted(
                (p.round, p.seq) for p in all_points
            )
            loss = await store.points(1, round=1, name="loss")
            assert [p.seq for p in loss] == list(range(count))
            assert loss[3].value == pytest.approx(0.25)
            val = await store.points(1, name="val_loss")
            assert [(p.value, p.step) for p in val] == [(0.9, None)]

            # Re-reading the same log after a restart does not duplicate points.
            await store.add_points(1, 2, [("loss", 0.15, 1, 0)])
            assert [(p.value, p.seq) for p in await store.points(1, round=2)] == [(0.15, 0)]

            with pytest.raises(NotFound, match="round 9"):
                await store.add_points(1, 9, [("loss", 1.0, 0, 0)])
            with pytest.raises(ValueError, match="finite"):
                await store.add_points(1, 2, [("loss", 1.0, 2, 1), ("loss", float("nan"), 3, 2)])
            with pytest.raises(ValueError, match="seq"):
                await store.add_points(1, 2, [("loss", 1.0, 2, "x")])  # type: ignore[list-item]
            assert len(await store.points(1, round=2)) == 1

    run(main)


# -- events ------------------------------------------------------------------------------


def ev(id_: int, session: str | None = "session-0001", kind: str = "round.output") -> Event:
    return Event(id=id_, kind=kind, ts=1000.0 + id_, session=session, data={"n": id_})


def test_events_append_page_and_filter(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            assert await store.last_event_id() == 0
            assert await store.events_since(0) == []
            await store.append_events([])
            batch = [ev(i, "session-0001" if i % 2 else "session-0002") for i in range(1, 8)]
            await store.append_events(batch[:3])
            await store.append_events([*batch[3:], ev(9, None, "daemon.started")])
            assert await store.last_event_id() == 9

            everything = await store.events_since(0)
            assert everything == [*batch, ev(9, None, "daemon.started")]

            # Cursor paging: each page starts after the last id seen, nothing missed or repeated.
            seen: list[int] = []
            cursor = 0
            while page := await store.events_since(cursor, limit=2):
                assert len(page) <= 2
                seen += [e.id for e in page]
                cursor = page[-1].id
            assert seen == [1, 2, 3, 4, 5, 6, 7, 9]

            mine = await store.events_since(0, session="session-0001")
            assert [e.id for e in mine] == [1, 3, 5, 7]
            assert [e.id for e in await store.events_since(3, session="session-0001")] == [5, 7]
            assert [e.id for e in await store.events_since(3, session="session-0002", limit=1)] == [
                4
            ]
            with pytest.raises(ValueError, match="limit"):
                await store.events_since(0, limit=0)

    run(main)


def test_event_ids_must_increase_and_a_refused_batch_changes_nothing(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.append_events([ev(5), ev(6)])
            with pytest.raises(InvalidState, match="not after the last stored event id 6"):
                await store.append_events([ev(6), ev(7)])
            with pytest.raises(InvalidState, match="must increase"):
                await store.append_events([ev(8), ev(8)])
            with pytest.raises(ValueError, match="not JSON"):
                await store.append_events([Event(id=10, kind="x", ts=1.0, data={"bad": object()})])
            assert [e.id for e in await store.events_since(0)] == [5, 6]
            await store.append_events([ev(7)])
            assert await store.last_event_id() == 7

    run(main)
    conn = plain(db_path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE events SET kind = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM events")
    conn.close()


# -- journal ------------------------------------------------------------------------------


def test_journal_lists_ended_sessions_newest_first(db_path: Path) -> None:
    async def main() -> list[dict[str, Any]]:
        async with await Store.open(db_path) as store:
            for index in (1, 2, 3, 4):
                await store.create_session(session_rec(index))
            await store.upsert_round(round_rec(1, 1, params={"lr": 0.1}, primary_metric=0.5))
            await store.upsert_round(
                round_rec(
                    1,
                    2,
                    params={"lr": 1.0},
                    diff={"lr": {"from": 0.1, "to": 1.0}},
                    hypothesis="bigger steps",
                    verdict="rejected",
                    verdict_reason="diverged",
                    primary_metric=2.0,
                )
            )
            await store.upsert_round(
                round_rec(1, 3, params={"lr": 0.05}, verdict="kept", primary_metric=0.4)
            )
            await store.update_session(
                1, status="finished", finished_at=200.0, baseline_round=1, best_round=3
            )
            await store.update_session(2, status="failed", finished_at=300.0, error="boom")
            await store.update_session(4, status="stopped", finished_at=100.0)
            # session 3 is still running: not in the journal.
            return await store.journal()

    entries = run(main)
    assert [e["session"] for e in entries] == ["session-0002", "session-0001", "session-0004"]
    first = entries[1]
    assert first["baseline"] == {"round": 1, "metric": 0.5, "params": {"lr": 0.1}}
    assert first["best"] == {"round": 3, "metric": 0.4, "params": {"lr": 0.05}}
    assert first["rejected"] == [
        {
            "round": 2,
            "diff": {"lr": {"from": 0.1, "to": 1.0}},
            "params": {"lr": 1.0},
            "hypothesis": "bigger steps",
            "metric": 2.0,
            "reason": "diverged",
        }
    ]
    assert entries[0]["best"] is None and entries[0]["rejected"] == []

    async def limited() -> list[dict[str, Any]]:
        async with await Store.open(db_path) as store:
            return await store.journal(limit=1)

    assert [e["session"] for e in run(limited)] == ["session-0002"]


# -- concurrency and outside programs -------------------------------------------------------


def test_concurrent_writers_in_one_process_are_serialized(db_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.create_session(session_rec(1))

            async def writer(index: int) -> None:
                await store.upsert_round(round_rec(1, index, params={"i": index}, status="running"))
                await store.add_points(1, index, [("loss", float(index), 0, 0)])
                await store.update_round(1, index, status="completed", primary_metric=index)

            async with anyio.create_task_group() as tg:
                for index in range(1, 21):
                    tg.start_soon(writer, index)
                for start in range(1, 41, 4):
                    tg.start_soon(store.append_events, [ev(i) for i in range(start, start + 4)])

            rounds = await store.list_rounds(1)
            assert [r.index for r in rounds] == list(range(1, 21))
            assert all(r.status == "completed" for r in rounds)
            assert len(await store.points(1)) == 20
            assert len(await store.events_since(0, limit=100)) == 40

    run(main)


def test_an_outside_reader_holding_a_transaction_does_not_block_the_store(db_path: Path) -> None:
    run(lambda: _open_close(db_path))
    reader = plain(db_path)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0

    async def main() -> None:
        async with await Store.open(db_path) as store:
            await store.create_session(session_rec(1))
            await store.upsert_round(round_rec(1, 1))
            await store.add_points(1, 1, [("loss", 0.5, 1, 1)])
            await store.append_events([ev(1), ev(2)])
            await store.update_session(1, status="finished")
            # The reader still sees its snapshot while it holds its transaction.
            assert reader.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
            assert (await store.get_session(1)).status == "finished"

    try:
        run(main)
    finally:
        reader.execute("COMMIT")
    assert reader.execute("SELECT status FROM sessions").fetchall() == [("finished",)]
    assert reader.execute("SELECT count(*) FROM events").fetchone()[0] == 2
    reader.close()


def test_a_write_lock_held_too_long_is_a_clear_error_and_changes_nothing(db_path: Path) -> None:
    run(lambda: _open_close(db_path))
    other = plain(db_path)

    async def main() -> None:
        async with await Store.open(db_path, busy_timeout=0.2) as store:
            await store.create_session(session_rec(1))
            other.execute("BEGIN IMMEDIATE")
            try:
                with pytest.raises(InvalidState) as info:
                    await store.update_session(1, status="finished")
                assert info.value.message.startswith("database is locked by another program: ")
                assert str(db_path) in info.value.message
                with pytest.raises(InvalidState, match="locked by another program"):
                    await store.append_events([ev(1)])
                # Reads still work while another program holds the write lock.
                assert (await store.get_session(1)).status == "running"
            finally:
                other.execute("COMMIT")
            assert (await store.update_session(1, status="finished")).status == "finished"
            assert [e.id for e in await store.events_since(0)] == []

    run(main)
    other.close()


def test_opening_while_another_program_holds_the_write_lock(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    other = plain(db_path)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE user_notes (body TEXT)")
    try:
        with pytest.raises(InvalidState, match="database is locked by another program"):
            anyio.run(partial(Store.open, db_path, busy_timeout=0.2))
    finally:
        other.execute("ROLLBACK")
        other.close()
    run(lambda: _open_close(db_path))
    assert scalar(db_path, "PRAGMA user_version") == SCHEMA_VERSION


def test_a_brief_outside_write_lock_is_waited_for(db_path: Path) -> None:
    run(lambda: _open_close(db_path))
    other = plain(db_path)

    async def main() -> None:
        async with await Store.open(db_path, busy_timeout=60) as store:
            await store.create_session(session_rec(1))
            other.execute("BEGIN IMMEDIATE")
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(store.update_session, 1, status="finished"))
                tg.start_soon(_write_then_release, store, other)
            assert (await store.get_session(1)).status == "finished"

    run(main)
    other.close()


async def _write_then_release(store: Store, other: sqlite3.Connection) -> None:
    # Once the store's writer holds its own lock it is about to wait on SQLite's lock.
    # The outside program then keeps its lock a little longer (the "brief" lock of this
    # scenario: without busy_timeout the write fails at once), then lets the write through.
    deadline = time.monotonic() + 30
    while not store._lock.locked():
        assert time.monotonic() < deadline, "the store never started its write"
        await anyio.sleep(0.005)
    await anyio.sleep(0.5)
    assert other.execute("SELECT status FROM sessions").fetchone()[0] == "running"
    other.execute("COMMIT")


def test_a_write_cancelled_while_waiting_leaves_no_transaction_behind(db_path: Path) -> None:
    run(lambda: _open_close(db_path))
    other = plain(db_path)

    async def main() -> None:
        async with await Store.open(db_path, busy_timeout=60) as store:
            await store.create_session(session_rec(1))
            other.execute("BEGIN IMMEDIATE")
            scope = anyio.CancelScope()

            async def write() -> None:
                with scope:
                    await store.update_session(1, status="finished")

            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                deadline = time.monotonic() + 30
                while not store._lock.locked():
                    assert time.monotonic() < deadline, "the store never started its write"
                    await anyio.sleep(0.005)
                scope.cancel()
                other.execute("COMMIT")
            assert scope.cancelled_caught
            assert (await store.get_session(1)).status == "running"
            assert (await store.update_session(1, tokens=5)).tokens == 5

    run(main)
    other.close()


class Shell:
    """The real ``sqlite3`` command-line shell on a database, driven line by line."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            ["sqlite3", str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def run(self, sql: str, timeout: float = 30) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{sql}\nSELECT '--done--';\n".encode())
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        data = b""
        deadline = time.monotonic() + timeout
        while not data.endswith(b"--done--\n"):
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"sqlite3 shell did not answer: {data!r}"
            chunk = os.read(fd, 65536)
            assert chunk, f"sqlite3 shell exited: {data!r}"
            data += chunk
        return data.decode().splitlines()[:-1]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b".quit\n")
        self.proc.stdin.close()
        self.proc.wait(30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def shell(db_path: Path) -> Iterator[Shell]:
    if shutil.which("sqlite3") is None:
        pytest.skip("the sqlite3 shell is not installed")
    run(lambda: _open_close(db_path))
    sh = Shell(db_path)
    try:
        yield sh
    finally:
        if sh.proc.poll() is None:
            sh.close()


def test_the_sqlite3_shell_reading_while_a_session_runs(db_path: Path, shell: Shell) -> None:
    assert shell.run("BEGIN; SELECT count(*) FROM sessions;") == ["0"]

    async def main() -> None:
        async with await Store.open(db_path, busy_timeout=0.5) as store:
            await store.create_session(session_rec(1))
            await store.upsert_round(round_rec(1, 1))
            await store.append_events([ev(1)])
            assert shell.run("SELECT count(*) FROM sessions;") == ["0"]
            # The user's shell now takes the write lock and keeps it: a clear error.
            assert shell.run("COMMIT; BEGIN IMMEDIATE;") == []
            with pytest.raises(InvalidState, match="locked by another program"):
                await store.update_round(1, 1, status="running")
            assert shell.run("ROLLBACK;") == []
            await store.update_round(1, 1, status="running")

    run(main)
    assert shell.run("SELECT id, status FROM sessions;") == ["session-0001|running"]
    assert shell.run("SELECT status FROM rounds;") == ["running"]


# -- exports from stored rows ----------------------------------------------------------------


def test_exports_from_the_store_never_contain_the_session_env(tmp_path: Path) -> None:
    project = ProjectLayout.for_root(tmp_path / "proj", env={})
    layout = project.session(1)

    async def main() -> tuple[SessionRecord, list[RoundRecord], list[DecisionRecord]]:
        async with await Store.open(project.database) as store:
            await store.create_session(session_rec(1))
            await store.upsert_round(
                round_rec(1, 1, status="completed", params={"lr": 0.1}, primary_metric=0.5)
            )
            decision = await store.add_decision(decision_rec(1, 2), debug=True)
            await store.upsert_round(
                round_rec(
                    1,
                    2,
                    status="completed",
                    params={"lr": 0.05},
                    diff={"lr": {"from": 0.1, "to": 0.05}},
                    decision_id=decision.id,
                    hypothesis="smaller lr",
                    expected="val_loss < 0.5",
                    verdict="kept",
                    primary_metric=0.4,
                )
            )
            await store.update_session(
                1, status="finished", baseline_round=1, best_round=2, finished_at=time.time()
            )
            return (
                await store.get_session(1),
                await store.list_rounds(1),
                await store.list_decisions(1),
            )

    session, rounds, decisions = run(main)
    assert session.env["OPENAI_API_KEY"] == SECRET
    write_ledgers(layout, session, rounds)
    write_research_state(layout, msgspec.json.encode({"baseline": {"round": 1}}))
    report = write_report(
        layout, session, rounds, metric_name="val_loss", goal="min", decisions=decisions
    )
    assert report == layout.report
    written = sorted(p.name for p in layout.artifacts.iterdir())
    assert written == [
        "report.md",
        "report_chart.svg",
        "report_parallel.svg",
        "report_slices.svg",
        "research_state.json",
        "result_ledger.csv",
        "result_ledger.jsonl",
    ]
    for path in layout.artifacts.iterdir():
        text = path.read_text()
        assert SECRET not in text, path
        assert "OPENAI_API_KEY" not in text, path
    jsonl = [msgspec.json.decode(line) for line in layout.ledger_jsonl.read_text().splitlines()]
    assert [row["index"] for row in jsonl] == [1, 2]
    assert "20.00% better than baseline" in report.read_text()
    assert os.path.getsize(layout.ledger_csv) > 0
