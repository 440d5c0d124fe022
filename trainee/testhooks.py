"""Deterministic fault injection for the tests. Stdlib only; inert unless asked.

``TRAINEE_TEST_CRASH_AT=<point>[:<n>]`` in the daemon's environment makes the daemon
SIGKILL itself the ``n``-th time (default: the first) it reaches the named point, so
a test can kill it at an exact instant of a launch (after the intent is stored, after
the monitor started, ...) instead of hoping a timer hits it. The job never sees the
variable: every inherited ``TRAINEE_*`` variable is dropped from its environment.
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_ENV", "POINTS", "crash_point"]

CRASH_ENV = "TRAINEE_TEST_CRASH_AT"
POINTS = (
    "launch.before_intent",
    "launch.after_intent",
    "monitor.spawned",
    "launch.after_submit",
    "launch.after_record",
)
"""The named instants of a launch, in order: the round rendered, nothing recorded; the
intent (token) stored, nothing started; the monitor process started, not yet ready; the
job started, not yet recorded as running; recorded as running."""

_seen: dict[str, int] = {}


def crash_point(name: str) -> None:
    """SIGKILL this process here if :data:`CRASH_ENV` names this point (and count)."""
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    point, _, count = wanted.partition(":")
    if point != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] == (int(count) if count.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)
