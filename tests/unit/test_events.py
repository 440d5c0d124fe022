"""The event types (trainee/events.py): every kind round-trips through its JSON, a kind
that is not one is a clear error, and the bus publishes only what fits its kind."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from trainee import events as ev
from trainee.session.bus import EventBus, chunks, wire_event
from trainee.spec import wire
from trainee.states import RoundStatus, SessionStatus, StopReason

SAMPLES: dict[str, ev.EventData] = {
    "daemon.started": ev.DaemonStarted(pid=42, http_url="http://127.0.0.1:8765"),
    "session.started": ev.SessionStarted(max_rounds=6, policy="llm"),
    "decision.started": ev.DecisionStarted(round=2, policy="llm", slots=1, at=1.5),
    "decision": ev.Decision(
        round=2,
        source="",
        notes=["a note"],
        policy="llm",
        provider="local",
        model="m",
        hypothesis="a larger lr converges faster",
        change_summary="lr 0.1",
        params={"lr": 0.1, "layers": 2, "name": "a", "flag": True},
        diff={"lr": {"from": 0.01, "to": 0.1}},
        expected="lower val_loss",
        stop=False,
        stop_reason="",
        repaired=False,
        response_format="json_schema",
        attempts=2,
        failed_attempts=[ev.FailedAttempt(provider="p", kind="timeout", error="slow")],
        batch=1,
        batch_size=2,
    ),
    "batch.started": ev.BatchStarted(batch=1, rounds=[2, 3]),
    "batch.finished": ev.BatchFinished(
        batch=1, rounds=[2, 3], statuses=[RoundStatus.COMPLETED, RoundStatus.FAILED]
    ),
    "round.started": ev.RoundStarted(
        round=2,
        params={"lr": 0.1},
        diff={"lr": {"from": 0.01, "to": 0.1}},
        hypothesis="h",
        command="python train.py --lr 0.1",
        attempt=0,
        backend="local",
        job_id=None,
        batch=1,
    ),
    "round.readopted": ev.RoundReadopted(round=2, pid=1234, job_id=None, backend="local"),
    "round.rerun": ev.RoundRerun(round=2, attempt=1),
    "round.promoted": ev.RoundPromoted(
        round=7, from_round=3, rung=2, budget=6.0, reason="best of 3 at rung 1"
    ),
    "output": ev.Output(
        round=2,
        lines=[
            ev.OutputLine(stream="stdout", text="step=1 loss=0.5"),
            ev.OutputLine(stream="stderr", text="warning"),
        ],
        skipped=3,
    ),
    "metric": ev.Metric(round=2, points=[("loss", 0.5, 1, 7), ("acc", None, None, 8)]),
    "activity": ev.Activity(round=2, last_activity_at=12.5),
    "round.state": ev.RoundState(round=2, state="queued", detail="Priority"),
    "round.finished": ev.RoundFinished(
        round=2,
        status=RoundStatus.COMPLETED,
        metric=0.4,
        metric_name="val_loss",
        finals={"val_loss": 0.4, "acc": None},
        verdict="kept",
        verdict_reason="better than the best",
        duration_sec=3.5,
        returncode=0,
        error=None,
        batch=1,
        best_round=2,
    ),
    "session.finished": ev.SessionFinished(
        status=SessionStatus.FINISHED,
        stop_reason=StopReason.MAX_ROUNDS,
        error=None,
        stop_detail=None,
        policy="llm",
        best_round=2,
        best_metric=0.4,
        best_params={"lr": 0.1},
        baseline_metric=0.5,
        metric_name="val_loss",
        report="/p/report.md",
        log_tail=[],
    ),
}


def test_every_kind_has_a_sample_here() -> None:
    assert set(SAMPLES) == set(ev.KINDS)
    assert len(ev.KINDS) == len(set(ev.KINDS))
    for kind, data in SAMPLES.items():
        assert ev.kind_of(data) == kind
        assert ev.kind_of(type(data)) == kind
        assert ev.kind_of(ev.EVENT_TYPES[kind]) == kind


@pytest.mark.parametrize("kind", ev.KINDS)
def test_every_kind_round_trips_through_its_json(kind: str) -> None:
    data = SAMPLES[kind]
    if isinstance(data, ev.SessionData):
        data.project = "/the/project"
    event = ev.envelope(data, id=17, ts=1.5, session="session-0001")
    assert event.kind == kind and isinstance(event, ev.EVENT_TYPES[kind])
    encoded = msgspec.json.encode(event)
    as_json = msgspec.json.decode(encoded)
    # the envelope every client already reads
    assert set(as_json) == {"id", "kind", "ts", "session", "data"} and as_json["kind"] == kind
    assert ev.decode_event(encoded) == event
    assert ev.decode_event(as_json) == event
    # the untyped envelope of the event lists' results is the same JSON
    assert msgspec.json.decode(msgspec.json.encode(wire_event(event))) == as_json


def test_a_kind_that_is_not_one_is_a_clear_error() -> None:
    with pytest.raises(ev.UnknownEventKind) as caught:
        ev.decode_event({"kind": "round.exploded", "id": 1, "ts": 1.0, "data": {}})
    message = str(caught.value)
    assert "'round.exploded'" in message and "round.finished" in message and "note" in message
    with pytest.raises(ev.UnknownEventKind):
        ev.decode_event(b'{"kind": "gap", "id": 1, "ts": 1.0}')
    with pytest.raises(ev.InvalidEvent, match="JSON object"):
        ev.decode_event(b"[1, 2]")


def test_a_known_kind_of_the_wrong_shape_names_the_field() -> None:
    bad = {"kind": "round.rerun", "id": 1, "ts": 1.0, "data": {"round": "two", "attempt": 1}}
    with pytest.raises(ev.InvalidEvent, match=r"round.rerun.*\$\.data\.round"):
        ev.decode_event(bad)
    with pytest.raises(ev.InvalidEvent, match=r"missing required field `attempt`"):
        ev.decode_event(msgspec.json.encode({**bad, "data": {"round": 2}}))


def test_notes_carry_any_object() -> None:
    note = ev.decode_event({"kind": "note.user", "id": 3, "ts": 1.0, "data": {"n": [1, 2]}})
    assert (
        isinstance(note, ev.NoteEvent) and note.kind == "note.user" and note.data == {"n": [1, 2]}
    )
    assert ev.project_of(note) is None


def test_unknown_fields_are_ignored_for_newer_daemons() -> None:
    raw = {"kind": "round.rerun", "id": 1, "ts": 1.0, "data": {"round": 2, "attempt": 1, "x": 0}}
    event = ev.decode_event(raw)
    assert isinstance(event, ev.RoundRerunEvent) and event.data.attempt == 1


def test_the_schema_names_every_kind_and_its_fields() -> None:
    schema = ev.events_schema()
    mapping = schema["discriminator"]["mapping"]
    assert schema["discriminator"]["propertyName"] == "kind"
    assert list(mapping) == list(ev.KINDS)
    finished = schema["$defs"]["RoundFinished"]
    assert {"round", "status", "metric", "verdict", "best_round"} <= set(finished["properties"])
    status = schema["$defs"]["RoundStatus"]
    assert set(status["enum"]) == {s.value for s in RoundStatus}
    assert {"$ref": "#/$defs/NoteEvent"} in schema["anyOf"]
    assert schema["$defs"]["NoteEvent"]["properties"]["kind"]["pattern"] == ev.NOTE_PATTERN


def test_the_bus_checks_what_it_is_given_by_name_and_publishes_nothing_wrong() -> None:
    bus = EventBus()
    event = bus.publish("round.rerun", {"round": 2, "attempt": 1}, session="session-0001")
    assert isinstance(event, ev.RoundRerunEvent) and event.data.round == 2
    last = bus.last_id
    with pytest.raises(ev.UnknownEventKind):
        bus.publish("round.exploded", {})
    with pytest.raises(ev.InvalidEvent, match=r"\$\.round"):
        bus.publish("round.rerun", {"round": "two", "attempt": 1})
    assert bus.last_id == last and bus.replay(last)[0] == []
    typed = bus.publish(ev.RoundRerun(round=3, attempt=2, project="/p"), session="session-0001")
    assert isinstance(typed, ev.RoundRerunEvent) and ev.project_of(typed) == "/p"
    note = bus.publish("note", {"text": "hello"})
    assert isinstance(note, ev.NoteEvent)
    assert isinstance(wire_event(note), wire.Event)


def _events(bus: EventBus, n: int, text: str = "x") -> None:
    for i in range(n):
        bus.publish(
            ev.Output(round=1, lines=[ev.OutputLine(stream="stdout", text=text)], skipped=i)
        )


def test_one_batcher_takes_what_is_queued_within_its_bounds() -> None:
    async def main() -> list[Any]:
        bus = EventBus()
        sub, _, _ = bus.subscribe()
        out: list[Any] = [await sub.next_batch(timeout=0), await sub.next_batch(timeout=0.01)]
        _events(bus, 7)
        out.append([e.id for e in await sub.next_batch(max_events=3) or []])
        out.append([e.id for e in await sub.next_batch() or []])
        _events(bus, 3, "y" * 1000)
        size = len(msgspec.json.encode(bus.replay(bus.last_id - 1)[0][0]))
        first = await sub.next_batch(max_bytes=2 * size)  # the third waits for the next
        second = await sub.next_batch(timeout=0)
        out.append((len(first or []), len(second or [])))
        sub.close()
        out.append(await sub.next_batch())
        return out

    empty, timed_out, three, rest, by_bytes, ended = anyio.run(main)
    assert empty == [] and timed_out == []
    assert len(three) == 3 and len(rest) == 4 and rest[0] == three[-1] + 1
    assert by_bytes == (2, 1)
    assert ended is None


def test_batches_end_with_the_subscription_and_chunks_cut_a_backlog() -> None:
    async def main() -> list[int]:
        bus = EventBus()
        sub, _, _ = bus.subscribe()
        _events(bus, 5)
        sizes: list[int] = []
        async for batch in sub.batches(max_events=2):
            sizes.append(len(batch))
            if sum(sizes) == 5:
                sub.close()
        return sizes

    assert anyio.run(main) == [2, 2, 1]
    bus = EventBus()
    _events(bus, 5)
    events, _ = bus.replay(0)
    assert [len(c) for c in chunks(events, 2)] == [2, 2, 1]


def test_a_note_kind_ending_in_a_newline_is_not_a_note() -> None:
    """Python's ``$`` matches before a final newline: the pattern refuses it anyway."""
    assert ev.is_note("note") and ev.is_note("note.user")
    assert not ev.is_note("note\n") and not ev.is_note("note.user\n")
    with pytest.raises(ev.InvalidEvent):
        ev.decode_event({"kind": "note\n", "id": 3, "ts": 1.0, "data": {}})
