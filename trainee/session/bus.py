"""The event bus: one increasing id, a retained window, bounded fan-out.

Publishing never blocks and never slows the publisher: each subscriber has a
bounded buffer (``buffer`` events and ``buffer_bytes`` of encoded JSON), and a
subscriber that falls behind is cut off with a ``gap`` marker; it resumes from
its last id (``since``) on its next watch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from trainee.spec.wire import Event

RETAIN_BYTES = 2 * 2**20
"""Encoded JSON bytes of events kept for replay; older ones are read from the store."""
BUFFER_BYTES = 8 * 2**20
"""Encoded JSON bytes of events queued for one subscriber before it is cut off."""

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

    def receive_nowait(self) -> Event:
        """The next queued event without waiting (anyio.WouldBlock when none is queued)."""
        return self._taken(self._receive.receive_nowait())

    async def receive(self) -> Event:
        """The next event; anyio.EndOfStream once the subscription ended."""
        return self._taken(await self._receive.receive())

    async def __aiter__(self) -> AsyncIterator[Event]:
        async for item in self._receive:
            yield self._taken(item)

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
        self._sinks: list[Callable[[Event], None]] = []

    @property
    def last_id(self) -> int:
        return self._next_id - 1

    @property
    def oldest_id(self) -> int:
        return self._window[0].id if self._window else self._next_id

    def add_sink(self, sink: Callable[[Event], None]) -> None:
        """Call ``sink`` synchronously with every published event (e.g. the store)."""
        self._sinks.append(sink)

    def publish(
        self, kind: str, data: dict[str, Any] | None = None, *, session: str | None = None
    ) -> Event:
        event = Event(
            id=self._next_id, kind=kind, ts=self._clock(), session=session, data=data or {}
        )
        self._next_id += 1
        size = self._keep(event)
        for sink in self._sinks:
            sink(event)
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
