"""The event bus keeps its replay window bounded in bytes, not only in events.

Found by the soak: a chatty job's output events (up to 200 lines each) stayed in the
50,000-event window, and the daemon's memory grew with every round. Older events are
still in the store; the bus says so with its ``gap`` flag.
"""

from __future__ import annotations

import msgspec

from trainee.session.bus import RETAIN_BYTES, EventBus


def _output(round_: int, width: int) -> dict[str, object]:
    lines = [{"stream": "stdout", "text": f"step={i} " + "x" * width} for i in range(200)]
    return {"project": "/p", "round": round_, "lines": lines, "skipped": 0}


def test_large_events_are_dropped_by_size_and_replay_reports_the_gap() -> None:
    bus = EventBus()
    first = bus.publish("output", _output(1, 200), session="session-0001")
    size = len(msgspec.json.encode(first))
    count = 3 * RETAIN_BYTES // size
    for i in range(count):
        bus.publish("output", _output(i, 200), session="session-0001")
    assert bus.window_bytes <= RETAIN_BYTES
    assert bus.window_bytes > RETAIN_BYTES - 2 * size, "the window is used, not emptied"
    events, gap = bus.replay(0, session="session-0001")
    assert gap, "the events dropped from the window are reported"
    assert events[-1].id == bus.last_id and events[0].id == bus.oldest_id > first.id
    assert [e.id for e in events] == list(range(bus.oldest_id, bus.last_id + 1))


def test_small_events_are_still_bounded_by_count() -> None:
    bus = EventBus(retain=100)
    for i in range(250):
        bus.publish("activity", {"round": i})
    events, gap = bus.replay(0)
    assert len(events) == 100 and gap
    assert events[0].id == bus.last_id - 99


def test_an_event_larger_than_the_window_is_kept_alone() -> None:
    bus = EventBus(retain_bytes=1000)
    bus.publish("note", {"text": "a"})
    big = bus.publish("output", _output(1, 50))
    events, _ = bus.replay(0)
    assert events == [big], "the newest event is always kept"
