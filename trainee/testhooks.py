"""Deterministic fault injection for the tests. Stdlib only; inert unless asked.

``TRAINEE_TEST_CRASH_AT=<point>[:<n>]`` in the daemon's environment makes the daemon
SIGKILL itself the ``n``-th time (default: the first) it reaches the named point, so
a test can kill it at an exact instant of a launch (after the intent is stored, after
the monitor started, ...) instead of hoping a timer hits it. The job never sees the
variable: every inherited ``TRAINEE_*`` variable is dropped from its environment.

``TRAINEE_TEST_PAUSE_AT=<point>[:<n>]=<dir>`` instead holds the launch there (the
``n``-th time): ``<dir>/<point>.reached`` is created, and the launch goes on once the
test creates ``<dir>/<point>.go``. A test does something (a stop) at that exact
instant. Pauses of the daemon (:func:`pause_wanted` + :func:`wait_released`, the
waiting off the event loop) let it go on answering meanwhile; the monitor's own
points (``shim.*``) are passed to it as ``--test-pause`` (it imports nothing of trainee).
"""

from __future__ import annotations

import os
import signal
import time

__all__ = [
    "CRASH_ENV",
    "PAUSE_ENV",
    "PAUSE_POINTS",
    "POINTS",
    "crash_point",
    "pause_wanted",
    "wait_released",
]

CRASH_ENV = "TRAINEE_TEST_CRASH_AT"
PAUSE_ENV = "TRAINEE_TEST_PAUSE_AT"
POINTS = (
    "launch.before_intent",
    "launch.after_intent",
    "monitor.spawned",
    "launch.after_submit",
    "launch.after_record",
)
"""The named instants of a launch, in order: the round rendered, nothing recorded; the
intent (token) stored, nothing started; the monitor process started, not yet ready; the
job started, not yet recorded as running; recorded as running. (Elsewhere:
``stop.recorded``, a session's stop written to its stop file, not delivered yet.)"""

PAUSE_POINTS = (
    "monitor.before_spawn",
    "shim.before_exec",
    "shim.spawned",
    "backend.submitted",
    "backend.adopting",
)
"""Where a launch can be held: the monitor not started yet; started, its signal
handlers set and the stop file checked, the command not forked; the command forked
(bwrap starting), the monitor not ready; the job running, not recorded yet; a
restarted daemon about to re-adopt a round."""
PAUSE_LIMIT = 600.0

_seen: dict[str, int] = {}
_paused: dict[str, int] = {}


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


def _pause_spec() -> tuple[str, int, str] | None:
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted:
        return None
    target, _, folder = wanted.partition("=")
    point, _, count = target.partition(":")
    return point, int(count) if count.isdigit() else 1, folder


def pause_wanted(name: str) -> str | None:
    """The folder of the pause at ``name`` when :data:`PAUSE_ENV` holds the launch this
    time (counted), else None. Cheap: inert unless asked."""
    spec = _pause_spec()
    if spec is None or spec[0] != name:
        return None
    _paused[name] = _paused.get(name, 0) + 1
    return spec[2] if _paused[name] == spec[1] else None


def wait_released(name: str, folder: str) -> None:
    """Say ``name`` is reached and block until the test releases it (bounded)."""
    with open(os.path.join(folder, f"{name}.reached"), "w") as f:
        f.write(f"{os.getpid()}\n")
    go = os.path.join(folder, f"{name}.go")
    limit = time.monotonic() + PAUSE_LIMIT
    while not os.path.exists(go) and time.monotonic() < limit:
        time.sleep(0.01)
