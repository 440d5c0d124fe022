"""The store checks every status write of a round and of a session against trainee.states,
reading the old status in the same transaction, on a real SQLite file."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import anyio
import pytest

from trainee.errors import InternalError
from trainee.rpc.protocol import as_trainee_error
from trainee.states import (
    ROUND_TRANSITIONS,
    SESSION_TRANSITIONS,
    RoundStatus,
    SessionStatus,
    TransitionError,
)
from trainee.store import RoundRecord, SessionRecord, Store


def _session(index: int = 1, **fields: object) -> SessionRecord:
    base: dict[str, object] = {
        "index": index,
        "project_root": "/p",
        "policy": "llm",
        "security_mode": "guarded",
        "max_rounds": 3,
    }
    base.update(fields)
    return SessionRecord(**base)  # type: ignore[arg-type]


def _stored_status(path: Path, sql: str) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute(sql).fetchone()[0])


def test_every_round_transition_is_allowed_or_refused_by_the_table(tmp_path: Path) -> None:
    path = tmp_path / "runtime.sqlite3"

    async def main() -> None:
        async with await Store.open(path) as store:
            await store.create_session(_session())
            index = 0
            for old in RoundStatus:
                for new in RoundStatus:
                    index += 1
                    await store.upsert_round(RoundRecord(session=1, index=index, status=old))
                    legal = new == old or new in ROUND_TRANSITIONS[old]
                    if legal:
                        rec = await store.update_round(1, index, status=new, returncode=3)
                        assert (rec.status, rec.returncode) == (new, 3)
                        continue
                    with pytest.raises(TransitionError) as info:
                        await store.update_round(1, index, status=new, returncode=3)
                    message = str(info.value)
                    assert f"round {index} of session-0001" in message
                    assert f"{old} -> {new}" in message
                    # nothing changed: not the status, not the other field
                    rec = await store.get_round(1, index)
                    assert (rec.status, rec.returncode) == (old, None)

    anyio.run(main)


def test_a_finished_round_is_never_reopened_by_an_upsert(tmp_path: Path) -> None:
    path = tmp_path / "runtime.sqlite3"

    async def main() -> None:
        async with await Store.open(path) as store:
            await store.create_session(_session())
            await store.upsert_round(RoundRecord(session=1, index=1, status="running"))
            await store.update_round(1, 1, status="completed", primary_metric=0.5)
            with pytest.raises(TransitionError, match="completed -> pending"):
                await store.upsert_round(RoundRecord(session=1, index=1, hypothesis="again"))
            # the same finished status again changes nothing and is allowed
            await store.update_round(1, 1, status="completed", primary_metric=0.5)

    anyio.run(main)
    assert _stored_status(path, "SELECT status FROM rounds") == "completed"


def test_every_session_transition_is_allowed_or_refused_by_the_table(tmp_path: Path) -> None:
    path = tmp_path / "runtime.sqlite3"

    async def main() -> None:
        async with await Store.open(path) as store:
            index = 0
            for old in SessionStatus:
                for new in SessionStatus:
                    index += 1
                    await store.create_session(_session(index, status=old))
                    legal = new == old or new in SESSION_TRANSITIONS[old]
                    if legal:
                        assert (await store.update_session(index, status=new)).status == new
                        continue
                    with pytest.raises(TransitionError) as info:
                        await store.update_session(index, status=new, tokens=7)
                    assert "session-" in str(info.value) and f"{old} -> {new}" in str(info.value)
                    rec = await store.get_session(index)
                    assert (rec.status, rec.tokens) == (old, 0)

    anyio.run(main)


def test_an_unknown_status_stays_a_value_error_naming_the_field(tmp_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(tmp_path / "runtime.sqlite3") as store:
            await store.create_session(_session())
            await store.upsert_round(RoundRecord(session=1, index=1))
            with pytest.raises(ValueError, match="round status 'lost'"):
                await store.update_round(1, 1, status="lost")
            with pytest.raises(ValueError, match="session status 'stopping'"):
                await store.update_session(1, status="stopping")

    anyio.run(main)


def test_the_daemon_reports_a_transition_error_as_an_internal_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> TransitionError:
        async with await Store.open(tmp_path / "runtime.sqlite3") as store:
            await store.create_session(_session(status="finished"))
            try:
                await store.update_session(1, status="failed")
            except TransitionError as exc:
                return exc
        raise AssertionError("finished -> failed was allowed")

    exc = anyio.run(main)
    with caplog.at_level(logging.ERROR):
        err = as_trainee_error(exc, where="session_stop")
    assert isinstance(err, InternalError)
    incident = err.data["incident"]
    assert str(err) == f"Internal error (incident {incident})"
    # the traceback, naming both states, is in the log under that incident only
    assert any(
        incident in r.getMessage() and "finished -> failed" in str(r.exc_info[1])
        for r in caplog.records
        if r.exc_info
    )
