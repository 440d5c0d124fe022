"""Finding the daemon, starting one in the background when none answers."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from trainee import errors, paths
from trainee.rpc.client import RpcClient

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

START_TIMEOUT = 30.0


def log_path() -> Path:
    return paths.socket_path().with_name("daemon.log")


def connect(timeout: float | None = 60.0) -> RpcClient:
    """A connected client, or DaemonNotRunning."""
    client = RpcClient(paths.socket_path(), timeout=timeout)
    client.connect()
    return client


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def spawn_daemon(extra_args: list[str] | None = None) -> str:
    """Start a background daemon and wait for its readiness line (no sleeps).

    Returns the line the daemon wrote: ``READY <url>`` or ``ALREADY ...`` when
    another daemon won the race (which is fine: it serves the same socket).
    """
    import select
    import subprocess

    sock = paths.socket_path()
    folder = sock.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = log_path()
    read_fd, write_fd = os.pipe()
    port, _ = paths.http_port()
    cmd = [
        sys.executable,
        "-m",
        "trainee.daemon",
        "--port",
        str(port),
        "--port-fallback",  # the CLI needs the socket: a taken HTTP port gives way
        "--ready-fd",
        str(write_fd),
        *(extra_args or []),
    ]
    with open(log, "ab") as log_fh:
        os.chmod(log, 0o600)
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=log_fh,
            pass_fds=(write_fd,),
            start_new_session=True,  # a Ctrl-C in the terminal that started it is not its
            cwd="/",  # it holds no project's folder (every path it gets is absolute)
            close_fds=True,
        )
    os.close(write_fd)
    line = b""
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise errors.DaemonNotRunning(
                    f"the daemon did not become ready within {START_TIMEOUT:.0f}s; see {log}",
                    {"reason": "start_timeout", "log": str(log), "tail": _tail(log)},
                )
            ready, _, _ = select.select([read_fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            line += chunk
    finally:
        os.close(read_fd)
    text = line.decode(errors="replace").strip()
    if text.startswith("READY"):
        return text
    if text.startswith("ALREADY"):
        _wait_until_serving(deadline)
        return text
    code = proc.poll()
    raise errors.DaemonNotRunning(
        f"the daemon failed to start{f' (exit {code})' if code is not None else ''}: "
        f"{text or 'no readiness line'}\nlast lines of {log}:\n{_tail(log, 8)}",
        {"reason": "start_failed", "log": str(log)},
    )


def _wait_until_serving(deadline: float) -> None:
    """Another daemon won the start race and holds the lock: wait until it answers."""
    delay = 0.01
    while True:
        try:
            connect(5.0).close()
            return
        except errors.DaemonNotRunning:
            if time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def ensure_daemon(timeout: float | None = 60.0) -> RpcClient:
    """Connect to the daemon, starting one first when none answers."""
    try:
        return connect(timeout)
    except errors.DaemonNotRunning:
        pass
    spawn_daemon()
    return connect(timeout)


def call(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    autostart: bool = True,
    timeout: float | None = 60.0,
) -> Any:
    """One call; a daemon is started first when none answers (unless not ``autostart``)."""
    client = ensure_daemon(timeout) if autostart else connect(timeout)
    with client:
        return client.call(method, params or {})
