"""The daemon's log: every logger (trainee's, uvicorn's, asyncio's) to stderr, rate-limited.

A client that makes the daemon log on every connection (thousands of refused or
malformed connections a second) must not fill the disk: each kind of message
(logger + message template) may burst ``burst`` records, then one per
``interval`` seconds; what is held back is counted and the next record of that
kind says how many were suppressed. On top, all records together are capped
at ``max_per_minute``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["RateLimit", "setup_logging"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RateLimit(logging.Filter):
    """A token bucket per message kind plus one for everything."""

    def __init__(
        self,
        *,
        burst: int = 20,
        interval: float = 5.0,
        max_per_minute: int = 600,
        kinds: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.interval = interval
        self.max_per_minute = max_per_minute
        self.kinds = kinds
        self.clock = clock
        self._buckets: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        self._global = [float(max_per_minute), clock()]
        self._suppressed: dict[tuple[str, str], int] = {}
        self.suppressed_total = 0

    def _take(self, bucket: list[float], capacity: float, rate: float, now: float) -> bool:
        tokens, last = bucket
        tokens = min(capacity, tokens + (now - last) * rate)
        if tokens < 1:
            bucket[0], bucket[1] = tokens, now
            return False
        bucket[0], bucket[1] = tokens - 1, now
        return True

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg)[:200])
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = [float(self.burst), now]
            self._buckets[key] = bucket
            if len(self._buckets) > self.kinds:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        ok = self._take(bucket, self.burst, 1 / self.interval, now) and self._take(
            self._global, self.max_per_minute, self.max_per_minute / 60, now
        )
        if not ok:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            self.suppressed_total += 1
            if len(self._suppressed) > self.kinds:
                self._suppressed.pop(next(iter(self._suppressed)))
            return False
        held = self._suppressed.pop(key, 0)
        if held:
            record.msg = f"{record.msg} [{held} similar message(s) suppressed]"
        return True


def setup_logging(level: str) -> RateLimit:
    """Send every logger to stderr through one rate-limited handler (once per process)."""
    root = logging.getLogger()
    for handler in root.handlers:
        for existing in handler.filters:
            if isinstance(existing, RateLimit):
                logging.getLogger("trainee").setLevel(level)
                return existing
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    limit = RateLimit()
    handler.addFilter(limit)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("trainee").setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "asyncio"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    return limit
