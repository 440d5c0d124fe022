"""Records: derived session ids, status and finiteness checks, re-validation by type."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from trainee.launch.layout import session_id
from trainee.states import RoundStatus, SessionStatus
from trainee.store.records import (
    ROUND_STATUSES,
    SESSION_STATUSES,
    DecisionRecord,
    RoundRecord,
    SessionRecord,
    format_session_id,
    validate_record,
)


def session(**fields: object) -> SessionRecord:
    base: dict[str, object] = {
        "index": 3,
        "project_root": "/p",
        "policy": "llm",
        "security_mode": "guarded",
        "max_rounds": 4,
    }
    base.update(fields)
    return SessionRecord(**base)  # type: ignore[arg-type]


def test_session_id_follows_the_index_like_the_layout() -> None:
    for index in (1, 7, 42, 12345):
        assert format_session_id(index) == session_id(index)
    assert session().id == "session-0003"
    assert session(id="session-0003").id == "session-0003"
    with pytest.raises(ValueError, match="does not match index 3"):
        session(id="session-0004")


def test_statuses_are_checked() -> None:
    # one source of truth: the records take their statuses from trainee.states
    assert {s.value for s in SessionStatus} == SESSION_STATUSES
    assert {s.value for s in RoundStatus} == ROUND_STATUSES
    assert "completed_without_metrics" in ROUND_STATUSES
    assert "stopping" not in SESSION_STATUSES and "lost" not in ROUND_STATUSES  # never written
    with pytest.raises(ValueError, match="session status 'paused'"):
        session(status="paused")
    with pytest.raises(ValueError, match="round status 'done'"):
        RoundRecord(session=1, index=1, status="done")


def test_round_metrics_must_be_finite() -> None:
    with pytest.raises(ValueError, match="primary_metric must be finite"):
        RoundRecord(session=1, index=1, primary_metric=float("inf"))
    with pytest.raises(ValueError, match=r"finals\['loss'\] must be finite"):
        RoundRecord(session=1, index=1, finals={"loss": float("nan")})
    assert RoundRecord(session=1, index=1, finals={"loss": 0.5}, primary_metric=0.5)


def test_validate_record_checks_types_and_names_the_field() -> None:
    good = session(spec={"root": Path("/p")})
    assert validate_record(good).spec == {"root": "/p"}
    with pytest.raises(ValueError, match=r"invalid SessionRecord: .*\$\.max_rounds"):
        validate_record(session(max_rounds="four"))
    with pytest.raises(ValueError, match=r"invalid RoundRecord: .*\$\.tail_offsets"):
        validate_record(RoundRecord(session=1, index=1, tail_offsets={"f": "x"}))  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="invalid DecisionRecord"):
        validate_record(
            DecisionRecord(
                session=1, round=1, provider="p", model="m", policy="x", plan={"a": object()}
            )
        )


def test_records_round_trip_through_json() -> None:
    rec = RoundRecord(
        session=2,
        index=5,
        status="completed",
        params={"lr": 0.1, "opt": "adam", "deep": True},
        diff={"lr": {"from": 0.2, "to": 0.1}},
        finals={"loss": 0.25},
        primary_metric=0.25,
        warnings=["w"],
        tail_offsets={"a.log": 10},
    )
    assert msgspec.json.decode(msgspec.json.encode(rec), type=RoundRecord) == rec
