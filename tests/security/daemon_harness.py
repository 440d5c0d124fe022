"""A daemon for the red-team tests: real process, real socket, real uvicorn, a low
open-file limit (TRAINEE_FD_LIMIT=256) so the descriptor budget is reached in a
bounded test, and the check every attack ends with."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.security.attacks import Probe, Target, fds_of, rpc
from tests.support.daemon import Daemon, base_env, kill_leftover_daemons
from tests.support.timing import scaled

FD_LIMIT = 256
LOG_BOUND = 2 * 2**20
"""The daemon's log after any attack: no flood (the issue saw 42 MB in a minute)."""
P99_BOUND_MS = 2000.0
"""Other clients' p99 latency under attack, nominal (times conftest's factor)."""


@contextmanager
def started_daemon(**env: str) -> Iterator[tuple[Daemon, Target]]:
    runtime = Path(tempfile.mkdtemp(prefix="tr-sec-", dir="/tmp"))
    daemon_env = {**base_env(runtime), "TRAINEE_FD_LIMIT": str(FD_LIMIT), **env}
    daemon = Daemon(runtime=runtime, env=daemon_env)
    line = daemon.start()
    assert line.startswith("READY"), f"daemon did not start: {line!r}\n{daemon.log}"
    assert daemon.proc is not None
    target = Target(daemon.socket, daemon.http_url, daemon.token, daemon.proc.pid)
    try:
        yield daemon, target
    finally:
        daemon.stop()
        kill_leftover_daemons(daemon)
        shutil.rmtree(runtime, ignore_errors=True)


def assert_unharmed(daemon: Daemon, target: Target, probe: Probe | None = None) -> None:
    """The daemon is up, answers a new client at once, others were answered within the
    bound all along, nothing was started, and its log is no flood."""
    assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log[-3000:]
    reply = rpc(target.socket, "daemon_hello", timeout=scaled(10))
    assert reply["result"]["pid"] == target.pid
    sessions = rpc(target.socket, "sessions_list", timeout=scaled(10))
    assert sessions["result"]["sessions"] == [], "an attack started a session"
    if probe is not None:
        assert not probe.errors, probe.errors[:5]
        assert probe.socket_ms and probe.http_ms, "the probe got no answer at all"
        assert probe.worst_p99_ms < scaled(P99_BOUND_MS), (probe.worst_p99_ms, probe.worst_ms)
    assert fds_of(target.pid) < FD_LIMIT
    size = os.path.getsize(daemon.runtime / "daemon.log")
    assert size < LOG_BOUND, f"daemon log is {size} bytes"
    assert "Traceback" not in daemon.log, daemon.log[-3000:]
