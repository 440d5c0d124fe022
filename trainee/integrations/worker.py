"""One daemon thread per sink, fed through a bounded queue.

The event loop only ever calls :meth:`Worker.submit`, which never blocks: a full queue
(a tracking server that has stopped answering) drops the item and says so. The thread
is a daemon thread, so a request stuck in a dead server never holds the daemon's
exit; each item's failure goes to ``on_error`` (called in the thread).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["QUEUE_CAPACITY", "Worker"]

QUEUE_CAPACITY = 64
"""Items waiting for one sink; past this the newest are dropped (with a warning)."""

T = TypeVar("T")
log = logging.getLogger("trainee.integrations")

_STOP = object()


class Worker(Generic[T]):
    """Run ``handle(item)`` for each submitted item, in order, in one daemon thread."""

    def __init__(
        self,
        name: str,
        handle: Callable[[T], None],
        on_error: Callable[[T, BaseException], None],
        *,
        capacity: int = QUEUE_CAPACITY,
    ) -> None:
        self.name = name
        self._handle = handle
        self._on_error = on_error
        self._queue: queue.Queue[object] = queue.Queue(maxsize=capacity)
        self._closed = False
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> bool:
        """Queue ``item``; False (nothing queued) when the queue is full or closed."""
        if self._closed:
            return False
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def close(self) -> None:
        """No more items: the thread ends once the queued ones are handled."""
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                self._queue.put_nowait(_STOP)
                return
            except queue.Full:
                # never wait on a stuck sink: drop the oldest waiting item to make room
                with contextlib.suppress(queue.Empty):
                    self._queue.get_nowait()
                    log.warning("%s: dropped an item to close the queue", self.name)

    def wait(self, timeout: float) -> bool:
        """Block until the thread ended (True) or ``timeout`` passed (False)."""
        return self.done.wait(timeout)

    def _run(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    return
                try:
                    self._handle(item)  # type: ignore[arg-type]
                except BaseException as exc:
                    try:
                        self._on_error(item, exc)  # type: ignore[arg-type]
                    except Exception:
                        log.exception("%s: reporting a failure failed", self.name)
        finally:
            self.done.set()
