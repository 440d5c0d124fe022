"""The live view in a real terminal (a pty read by a terminal emulator), attach's
Ctrl-C, and commands that outlive their daemon.

The project is the mlp-flags example whose command first waits while the file
``hold`` exists, printing a line every 50 ms: round 1 runs (and floods its output)
for as long as the test needs, with no timing guess.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import signal
import struct
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pyte  # type: ignore[import-untyped]
import pytest

from tests.support.daemon import Daemon, copy_example, run_cli
from tests.support.loop import wait_until
from tests.support.processes import assert_no_training_left
from tests.support.timing import wait_for
from trainee.cli.live import TAIL_LINES

pytestmark = pytest.mark.e2e

COLS, ROWS = 110, 30


class Terminal:
    """A command on a pty whose output feeds a VT emulator (with scroll-back)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.screen = pyte.HistoryScreen(COLS, ROWS, history=5000)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        self._lock = threading.Lock()
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: a window of a known size, then the command
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
                os.chdir(cwd)
                env = {**env, "TERM": "xterm-256color", "COLUMNS": str(COLS), "LINES": str(ROWS)}
                env.pop("NO_COLOR", None)
                os.execve(sys.executable, [sys.executable, "-m", "trainee", *argv], env)
            finally:
                os._exit(127)
        self.status: int | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self.raw += chunk
                self.stream.feed(chunk)

    def lines(self) -> list[str]:
        """Every line shown so far: the scroll-back, then the screen."""
        with self._lock:
            history = [
                "".join(line[x].data for x in range(COLS)).rstrip()
                for line in self.screen.history.top
            ]
            return history + [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines())

    def wait_for(self, what: str | Callable[[str], bool], timeout: float = 90.0) -> str:
        """The screen's text once ``what`` is on it (or ``what(text)`` holds)."""
        done = (lambda t: what in t) if isinstance(what, str) else what

        def shown() -> tuple[str] | None:
            text = self.text()
            if done(text):
                return (text,)
            if self.status is None and self._exited():
                text = self.text()
                if done(text):
                    return (text,)
                pytest.fail(f"exited ({self.status}) before {what!r}:\n{text[-4000:]}")
            return None

        (text,) = wait_for(shown, repr(what), timeout=timeout, detail=lambda: self.text()[-4000:])
        return text

    def ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")  # the line discipline sends SIGINT to the foreground job

    def _exited(self) -> bool:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.status = os.waitstatus_to_exitcode(status)
        return self.status is not None

    def wait_exit(self, timeout: float = 90.0) -> int:
        try:
            wait_for(
                self._exited,
                "the command to exit",
                timeout=timeout,
                detail=lambda: self.text()[-4000:],
            )
        except pytest.fail.Exception:
            os.kill(self.pid, signal.SIGKILL)
            raise
        self._reader.join(5)
        assert self.status is not None
        return self.status

    def close(self) -> None:
        if self.status is None and not self._exited():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self.fd)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """mlp-flags whose command waits (printing) while ``hold`` exists."""
    project = copy_example("mlp-flags", tmp_path)
    hold = project / "hold"
    hold.write_text("")
    (project / "held.py").write_text(
        "import os, runpy, sys, time\nstep = 0\n"
        f"while os.path.exists({str(hold)!r}):\n"
        "    print(f'holding step {step}', flush=True)\n    step += 1\n    time.sleep(0.05)\n"
        "sys.argv[0] = 'train.py'\nrunpy.run_path('train.py', run_name='__main__')\n"
    )
    config = project / ".trainee" / "project.yaml"
    config.write_text(config.read_text().replace("- train.py", "- held.py"))
    try:
        yield project
    finally:
        hold.unlink(missing_ok=True)
        assert_no_training_left(project)


def _holding_lines(term: Terminal) -> list[str]:
    return [line for line in term.lines() if "holding step" in line]


STATUS = re.compile(r"^round 1/2 · \d+(?:s|m\d\ds) · no baseline yet", re.M)


def test_run_keeps_a_status_line_over_a_bounded_tail_and_outlives_its_daemon(
    venv_daemon: Daemon, held: Path
) -> None:
    term = Terminal(
        ["run", "--policy", "random", "--max-rounds", "2", "--unsafe"], venv_daemon.env, held
    )
    try:
        term.wait_for(lambda t: bool(STATUS.search(t)) and "holding step 40" in t)
        shown = _holding_lines(term)
        # the tail is bounded: however much the job prints, only the last lines are on
        # screen and none ever scrolled into the terminal's history
        assert 0 < len(shown) <= TAIL_LINES, shown
        assert "None" not in term.text()

        venv_daemon.stop(signal.SIGKILL)  # the round runs on under its monitor
        term.wait_for("the daemon went away: starting one")
        term.wait_for("round 1: re-adopted its running monitor")
        term.wait_for(lambda t: "holding step" in t and bool(STATUS.search(t)))

        term.ctrl_c()  # in run: stop the session, watch it end
        term.wait_for("stopping session-0001… (Ctrl-C again to detach)")
        assert term.wait_exit() == 130
        text = term.text()
        assert "session-0001: stopped (user_stop)" in text and "report:" in text
        assert len(_holding_lines(term)) <= TAIL_LINES
    finally:
        term.close()
    listed = run_cli("sessions", "--json", env=venv_daemon.env, cwd=held)
    assert [s["id"] for s in listed.json()["sessions"]] == ["session-0001"]  # one session only


def test_attach_detaches_on_ctrl_c_and_status_restarts_a_dead_daemon(
    venv_daemon: Daemon, held: Path
) -> None:
    env = venv_daemon.env
    started = run_cli("run", "--policy", "random", "--max-rounds", "2", "--unsafe", "--detach",
                      env=env, cwd=held)  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert started.stdout == "session-0001\n"
    for hint in ("trainee attach session-0001", "trainee logs -f session-0001",
                 "trainee stop session-0001"):  # fmt: skip
        assert hint in started.stderr, started.stderr

    term = Terminal(["attach", "session-0001", "--full-output"], env, held)
    try:  # every output line this time: they scroll up past the tail's bound
        term.wait_for(lambda t: bool(STATUS.search(t)) and len(_holding_lines(term)) > TAIL_LINES)
        term.ctrl_c()
        assert term.wait_exit() == 0
        assert "detached from session-0001" in term.text()
        assert re.search(r"^  stop it: +trainee stop session-0001$", term.text(), re.M)
    finally:
        term.close()
    wait_until(env, held, lambda s: s["running"] and s["current_round"]["status"] == "running",
               what="the session to run on after the detach")  # fmt: skip

    venv_daemon.stop(signal.SIGKILL)
    status = run_cli("status", env=env, cwd=held)  # starts a daemon, which resumes the session
    assert status.returncode == 0, status.stderr
    assert "daemon   running" in status.stdout
    assert re.search(r"^session-0001\s+running\s", status.stdout, re.M), status.stdout
    state = wait_until(env, held, lambda s: s["running"], what="the resumed session")
    assert state["current_round"]["attempt"] == 0  # re-adopted, not run again

    stop = run_cli("stop", env=env, cwd=held)
    assert stop.returncode == 0, stop.stderr
    assert re.search(
        r"^stopped session-0001: round \d+ stopped after \d+\.\d s$", stop.stdout, re.M
    )
    again = run_cli("stop", "--json", env=env, cwd=held)
    assert again.returncode == 0, again.stderr
    assert again.json()["stopped"] is False
    assert again.json()["message"] == (
        f"nothing to stop: no session is running in {held}; "
        "the latest, session-0001 is stopped (user_stop)"
    )
    assert json.loads(run_cli("call", "loop_get", env=env, cwd=held).stdout)["running"] is False
