"""The event bus: one increasing id, a retained window, bounded fan-out.

Publishing never blocks and never slows the publisher: each subscriber has a
bounded buffer (``buffer`` events and ``buffer_bytes`` of encoded JSON), and a
subscriber that falls behind is cut off with a ``gap`` marker; it resumes from
its last id (``since``) on its next watch.

Events are typed (:mod:`trainee.events`): a producer publishes its kind's data
Struct and the bus wraps it in the kind's envelope (id, ts, session) and encodes it
once, for the byte bounds. A kind's name with a JSON object (notes from
``events_publish``, tests) is checked against the kind's Struct first: an unknown
kind or a field of the wrong type is :class:`~trainee.events.InvalidEvent`, and
nothing is published.

Subscribers take events in batches (:meth:`Subscription.next_batch`,
:meth:`Subscription.batches`, :func:`chunks`): the one batcher of the socket's
``events_watch``, the SSE stream and the integrations.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from trainee.events import (
    Event,
    EventData,
    InvalidEvent,
    NoteEvent,
    data_of,
    envelope,
    is_note,
)
from trainee.spec import wire

RETAIN_BYTES = 2 * 2**20
"""Encoded JSON bytes of events kept for replay; older ones are read from the store."""
BUFFER_BYTES = 8 * 2**20
"""Encoded JSON bytes of events queued for one subscriber before it is cut off."""
EVENTS_PER_BATCH = 500
"""Events in one batch: one ``events`` notification, one write of the SSE stream."""
BATCH_BYTES = 4 * 2**20
"""Encoded bytes of one live batch (a notification is one frame, and frames stop at
16 MiB); a larger event goes alone."""

_encode = msgspec.json.encode


class Subscription:
    """A live view of the bus, starting after ``since``."""

    def __init__(
        self,
        bus: EventBus,
        send: MemoryObjectSendStream[tuple[Event, int]],
        receive: MemoryObjectReceiveStream[tuple[Event, int]],
        session: str | None,
        kinds: frozenset[str] | None,
        max_bytes: int = BUFFER_BYTES,
    ) -> None:
        self._bus = bus
        self._send = send
        self._receive = receive
        self.session = session
        self.kinds = kinds
        self.dropped = False
        self.max_bytes = max_bytes
        self.queued_bytes = 0
        self._held: tuple[Event, int] | None = None
        """An event taken from the stream that did not fit the last batch."""

    def wants(self, event: Event) -> bool:
        if self.session is not None and event.session != self.session:
            return False
        return self.kinds is None or event.kind in self.kinds

    def offer(self, event: Event, size: int = 0) -> None:
        """Queue ``event`` (``size``: its encoded bytes); over either bound the
        subscriber is cut off (``dropped``) and its stream ends after what it holds."""
        if self.dropped or not self.wants(event):
            return
        if self.queued_bytes + size > self.max_bytes and self.queued_bytes:
            self.dropped = True
            self._send.close()
            return
        try:
            self._send.send_nowait((event, size))
            self.queued_bytes += size
        except anyio.WouldBlock:
            self.dropped = True
            self._send.close()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.dropped = True

    def _taken(self, item: tuple[Event, int]) -> Event:
        self.queued_bytes -= item[1]
        return item[0]

    def _item_nowait(self) -> tuple[Event, int]:
        if self._held is not None:
            item, self._held = self._held, None
            return item
        return self._receive.receive_nowait()

    async def _item(self) -> tuple[Event, int]:
        if self._held is not None:
            item, self._held = self._held, None
            return item
        return await self._receive.receive()

    def receive_nowait(self) -> Event:
        """The next queued event without waiting (anyio.WouldBlock when none is queued)."""
        return self._taken(self._item_nowait())

    async def receive(self) -> Event:
        """The next event; anyio.EndOfStream once the subscription ended."""
        return self._taken(await self._item())

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            try:
                item = await self._item()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            yield self._taken(item)

    async def next_batch(
        self,
        *,
        timeout: float | None = None,
        max_events: int = EVENTS_PER_BATCH,
        max_bytes: int = BATCH_BYTES,
    ) -> list[Event] | None:
        """The one batcher: wait (at most ``timeout`` seconds; 0: not at all) for an
        event, then take what is already queued, at most ``max_events`` of at most
        ``max_bytes`` encoded (a larger event goes alone). ``[]`` when the time passed
        with none; None once the subscription ended with nothing left (:attr:`dropped`
        says whether it was cut off)."""
        first: tuple[Event, int] | None = None
        try:
            if timeout == 0:
                first = self._item_nowait()
            else:
                with anyio.move_on_after(timeout):
                    first = await self._item()
        except anyio.WouldBlock:
            return []
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None
        if first is None:
            return []
        size = first[1]
        batch = [self._taken(first)]
        while len(batch) < max_events:
            try:
                item = self._item_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            if size + item[1] > max_bytes:
                self._held = item  # the first of the next batch
                break
            size += item[1]
            batch.append(self._taken(item))
        return batch

    async def batches(
        self, *, max_events: int = EVENTS_PER_BATCH, max_bytes: int = BATCH_BYTES
    ) -> AsyncIterator[list[Event]]:
        """Live events in batches (:meth:`next_batch`) until the subscription ends."""
        while True:
            batch = await self.next_batch(max_events=max_events, max_bytes=max_bytes)
            if batch is None:
                return
            yield batch

    def close(self) -> None:
        self._bus._subscribers.discard(self)
        self._send.close()
        self._receive.close()


class EventBus:
    """Daemon-wide stream of events with a retained window for replay."""

    def __init__(
        self,
        *,
        retain: int = 50_000,
        retain_bytes: int = RETAIN_BYTES,
        buffer: int = 10_000,
        buffer_bytes: int = BUFFER_BYTES,
        first_id: int = 1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._window: deque[Event] = deque()
        self._sizes: deque[int] = deque()
        self._retain = retain
        self._retain_bytes = retain_bytes
        self._window_bytes = 0
        self._buffer = buffer
        self._buffer_bytes = buffer_bytes
        self._next_id = first_id
        self._clock = clock
        self._subscribers: set[Subscription] = set()

    @property
    def last_id(self) -> int:
        return self._next_id - 1

    @property
    def oldest_id(self) -> int:
        return self._window[0].id if self._window else self._next_id

    def publish(
        self,
        kind: EventData | str,
        data: Mapping[str, Any] | None = None,
        *,
        session: str | None = None,
    ) -> Event:
        """Publish ``publish(RoundStarted(...), session=...)``, or a kind's name and its
        data as a JSON object (a note, or checked against the kind's Struct:
        InvalidEvent, and nothing published, when it does not fit)."""
        if isinstance(kind, EventData):
            if data is not None:
                raise TypeError("publish(data) takes the data Struct alone")
            payload = kind
        elif is_note(kind):
            note = NoteEvent(
                id=self._next_id,
                ts=self._clock(),
                session=session,
                kind=kind,
                data=dict(data or {}),
            )
            return self._publish(note)
        else:
            payload = data_of(kind, data or {})
        return self._publish(envelope(payload, id=self._next_id, ts=self._clock(), session=session))

    def _publish(self, event: Event) -> Event:
        self._next_id += 1
        size = self._keep(event)
        for sub in list(self._subscribers):
            sub.offer(event, size)
            if sub.dropped:
                self._subscribers.discard(sub)
        return event

    def _keep(self, event: Event) -> int:
        """Add ``event`` to the window; drop the oldest beyond ``retain`` events or
        ``retain_bytes`` of encoded JSON (output events can be large: the count alone
        would let a chatty job's lines hold gigabytes). The newest is always kept."""
        size = len(_encode(event))
        self._window.append(event)
        self._sizes.append(size)
        self._window_bytes += size
        while len(self._window) > 1 and (
            len(self._window) > self._retain or self._window_bytes > self._retain_bytes
        ):
            self._window.popleft()
            self._window_bytes -= self._sizes.popleft()
        return size

    @property
    def window_bytes(self) -> int:
        """Encoded bytes of the retained events."""
        return self._window_bytes

    def replay(
        self, since: int, *, session: str | None = None, limit: int | None = None
    ) -> tuple[list[Event], bool]:
        """Retained events with ``id > since``; the flag says events were lost before the window."""
        gap = since + 1 < self.oldest_id and since < self.last_id
        out: list[Event] = []
        for event in self._window:
            if event.id <= since or (session is not None and event.session != session):
                continue
            out.append(event)
            if limit is not None and len(out) >= limit:
                break
        return out, gap

    def subscribe(
        self,
        *,
        since: int | None = None,
        session: str | None = None,
        kinds: Iterable[str] | None = None,
    ) -> tuple[Subscription, list[Event], bool]:
        """Subscribe to live events; returns the subscription plus the backlog after ``since``.

        Both are taken in one synchronous step, so nothing falls between them.
        """
        send, receive = anyio.create_memory_object_stream[tuple[Event, int]](self._buffer)
        sub = Subscription(
            self, send, receive, session, frozenset(kinds) if kinds else None, self._buffer_bytes
        )
        backlog: list[Event] = []
        gap = False
        if since is not None:
            events, gap = self.replay(since, session=session)
            backlog = [e for e in events if sub.wants(e)]
        self._subscribers.add(sub)
        return sub, backlog, gap


def wire_event(event: Event) -> wire.Event:
    """``event`` as the untyped envelope the event lists' results declare (the same JSON)."""
    return wire.Event(
        id=event.id,
        kind=event.kind,
        ts=event.ts,
        session=event.session,
        data=event.data if isinstance(event, NoteEvent) else msgspec.to_builtins(event.data),
    )


def chunks(events: Sequence[Event], max_events: int = EVENTS_PER_BATCH) -> Iterator[list[Event]]:
    """A backlog in batches of at most ``max_events``. Its bytes need no bound: a backlog
    comes from the window, which holds at most RETAIN_BYTES (< BATCH_BYTES) of them."""
    for start in range(0, len(events), max_events):
        yield list(events[start : start + max_events])


__all__ = [
    "BATCH_BYTES",
    "EVENTS_PER_BATCH",
    "EventBus",
    "InvalidEvent",
    "Subscription",
    "chunks",
    "wire_event",
]
