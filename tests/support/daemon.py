"""A real daemon process, the real CLI, and the environment they share with a test.

:class:`Daemon` starts ``python -m trainee.daemon`` on a private socket and waits for its
readiness line; :func:`run_cli` runs ``python -m trainee``; :func:`started_daemon` is
the start/stop/clean-up every daemon fixture uses (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.timing import scaled

REPO = Path(__file__).resolve().parents[2]


def base_env(runtime: Path, home: Path | None = None) -> dict[str, str]:
    """The environment of a daemon/CLI confined to ``runtime`` (socket, token, log)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TRAINEE_", "NOTIFY_", "LISTEN_"))
    }
    env["TRAINEE_SOCKET"] = str(runtime / "trainee.sock")
    env["TRAINEE_HTTP_PORT"] = "0"
    env["HOME"] = str(home or runtime / "home")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("XDG_RUNTIME_DIR", None)
    return env


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@dataclass
class Daemon:
    """A real ``python -m trainee.daemon`` process on a private socket."""

    runtime: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    http_url: str = ""
    extra_args: list[str] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.runtime / "trainee.sock"

    @property
    def token(self) -> str:
        return (self.runtime / "token").read_text().strip()

    @property
    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.runtime / "daemon.log").read_text()
        return ""

    def start(self, *args: str, timeout: float = 30.0) -> str:
        """Start the daemon and wait for its readiness line (no sleeps)."""
        timeout = scaled(timeout)
        read_fd, write_fd = os.pipe()
        log = open(self.runtime / "daemon.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainee.daemon",
                    "--port",
                    "0",
                    "--ready-fd",
                    str(write_fd),
                    *self.extra_args,
                    *args,
                ],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
            log.close()
        line = b""
        deadline = time.monotonic() + timeout
        try:
            while not line.endswith(b"\n") and time.monotonic() < deadline:
                ready, _, _ = select.select([read_fd], [], [], deadline - time.monotonic())
                if ready:
                    chunk = os.read(read_fd, 4096)
                    if not chunk:
                        break
                    line += chunk
        finally:
            os.close(read_fd)
        text = line.decode().strip()
        if text.startswith("READY"):
            self.http_url = text.split()[1]
        return text

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        timeout = scaled(timeout)
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def cli(self, *args: str, input: str | None = None, timeout: float = 60.0) -> CliResult:
        return run_cli(*args, env=self.env, input=input, timeout=timeout)


def run_cli(
    *args: str,
    env: dict[str, str],
    input: str | None = None,
    timeout: float = 60.0,
    cwd: Path | None = None,
) -> CliResult:
    proc = subprocess.run(
        [sys.executable, "-m", "trainee", *args],
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=scaled(timeout),
        cwd=cwd,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def copy_example(name: str, dest: Path) -> Path:
    """A fresh copy of ``examples/<name>`` (without runtime state) at ``dest/<name>``."""
    target = dest / name
    shutil.copytree(
        REPO / "examples" / name,
        target,
        ignore=shutil.ignore_patterns(
            "runtime.sqlite3*", "artifacts", "runs", "logs", "cache", "outputs", "__pycache__"
        ),
    )
    return target


def venv_env(runtime: Path) -> dict[str, str]:
    """A private daemon's environment where ``python`` is this venv's (it has numpy)."""
    env = base_env(runtime)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def kill_leftover_daemons(d: Daemon) -> None:
    """Stop any daemon the CLI autostarted on this test's socket."""
    lock = d.runtime / "trainee.sock.lock"
    with contextlib.suppress(OSError, ValueError):
        pid = int(lock.read_text().strip() or 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if pid else b""
        if b"trainee.daemon" in cmdline:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                select.select([], [], [], 0.05)


@contextlib.contextmanager
def started_daemon(
    runtime: Path,
    env: Callable[[Path], dict[str, str]] = base_env,
    *,
    remove: bool = False,
) -> Iterator[Daemon]:
    """A started daemon on ``runtime`` (``env(runtime)`` its environment); at the end it is
    stopped, any daemon the CLI autostarted on its socket too, and ``runtime`` removed
    when ``remove``."""
    d = Daemon(runtime=runtime, env=env(runtime))
    line = d.start()
    assert line.startswith("READY"), f"daemon did not start: {line!r}\n{d.log}"
    try:
        yield d
    finally:
        d.stop()
        kill_leftover_daemons(d)
        if remove:
            shutil.rmtree(runtime, ignore_errors=True)
