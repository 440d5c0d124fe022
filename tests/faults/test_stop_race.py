"""A stop reaches a guarded round at every moment of its start (issue 19).

Through the real daemon, real bwrap rounds and the real ``trainee stop``. Each moment
is hit exactly: the daemon (or the round's monitor) holds the launch at a named point
(``TRAINEE_TEST_PAUSE_AT``, see trainee.testhooks) while the test stops the session;
the test releases the launch once the stop is recorded (the session's stop.json).
Or the daemon dies right after recording a stop (``TRAINEE_TEST_CRASH_AT=stop.recorded``)
or is restarted into a re-adoption held at its start.

Every case asserts: the round ends ``stopped``; its job either never started or got
SIGTERM (``train.py`` writes a marker in its handler) and ended well within the grace
(no SIGKILL: the grace is long); it never ran to its end; ``trainee stop`` answered
within a scaled bound and said what it did; nothing of the round is left running.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import Node, assert_no_orphans, job_env
from tests.support.daemon import base_env, kill_leftover_daemons, run_cli
from tests.support.projects import LR_TUNING_YAML, VAL_LOSS_METRICS_YAML
from tests.support.timing import pause, scaled
from trainee.testhooks import CRASH_ENV, PAUSE_ENV

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

SESSION = "session-0001"
GRACE = 20
"""The rounds' stop grace: a job SIGKILLed after it (a lost stop) takes this long."""
STOP_WAIT = 15
"""``trainee stop --wait``: longer than a stopped round takes, shorter than the grace."""
SCRIPTED_STOPS = 12

TRAIN_PY = """\
import os, signal, sys, time

round_dir = os.environ["TRAINEE_ROUND_DIR"]


def mark(name, text=""):
    with open(os.path.join(round_dir, name), "w") as fh:
        fh.write(text or str(time.time()))


def on_term(*_):
    mark("sigterm")
    print("got SIGTERM", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
mark("started", str(os.getpid()))
first = os.environ.get("TRAINEE_ROUND_INDEX") == "1" and "BASELINE_SEC" in os.environ
end = time.monotonic() + float(os.environ.get("BASELINE_SEC" if first else "RUN_SEC", "120"))
step = 0
while time.monotonic() < end:
    print(f"step {step} loss={1.0 / (step + 1):.4f}", flush=True)
    step += 1
    time.sleep(0.05)
print("final val_loss=0.5", flush=True)
mark("finished")
"""

PROJECT_YAML = (
    """\
version: 1
launch:
  command: [python, train.py]
run:
  max_rounds: {max_rounds}
  timeout_minutes: 10
  parallel: {parallel}
"""
    + VAL_LOSS_METRICS_YAML
    + """\
advanced:
  security_mode: guarded
  stop_grace_sec: {grace}
"""
)


def make_project(root: Path, *, parallel: int = 1, max_rounds: int = 3) -> Path:
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN_PY)
    (root / ".trainee" / "project.yaml").write_text(
        PROJECT_YAML.format(parallel=parallel, max_rounds=max_rounds, grace=GRACE)
    )
    (root / ".trainee" / "tuning.yaml").write_text(LR_TUNING_YAML)
    return root


class Race:
    """One daemon (restartable, its environment changeable), one project, one pause folder."""

    def __init__(self, tmp: Path) -> None:
        self.runtime = Path(tempfile.mkdtemp(prefix="tr-s-", dir="/tmp"))
        self.pauses = tmp / "pauses"
        self.pauses.mkdir()
        self.project = make_project(tmp / "proj")
        self.cli_env = base_env(self.runtime)
        self.node = Node(self.runtime, dict(self.cli_env))

    def start(self, **hooks: str) -> None:
        env = dict(self.cli_env)
        env.update(hooks)
        self.node.env = env
        self.node.start()

    def start_session(self, *, baseline_sec: float | None = None) -> str:
        env = job_env(self.cli_env, RUN_SEC="120")
        if baseline_sec is not None:
            env["BASELINE_SEC"] = str(baseline_sec)
        return self.node.start_session(self.project, env=env, mode="guarded")

    def round_dir(self, index: int, session: str = SESSION) -> Path:
        return self.project / ".trainee" / "runs" / session / f"round-{index:04d}"

    def stop_file(self, session: str = SESSION) -> Path:
        return self.project / ".trainee" / "control" / session / "stop.json"

    def log(self, index: int, session: str = SESSION) -> str:
        path = self.project / ".trainee" / "artifacts" / session / f"round-{index:04d}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_file(self, path: Path, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + scaled(timeout)
        while not path.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what} ({path})\n{self.node.log[-3000:]}")
            pause(0.01)

    def reached(self, point: str) -> None:
        self.wait_file(self.pauses / f"{point}.reached", f"the launch to reach {point}")

    def release(self, point: str) -> None:
        (self.pauses / f"{point}.go").write_text("")

    def stop_cli(self) -> subprocess.Popen[str]:
        """``trainee stop`` in the project, started (it answers within --wait)."""
        return subprocess.Popen(
            [sys.executable, "-m", "trainee", "stop", "--wait", str(STOP_WAIT)],
            env=self.cli_env,
            cwd=self.project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish_stop(self, proc: subprocess.Popen[str], started: float) -> str:
        """The answer of ``trainee stop``, which must come within the scaled bound."""
        try:
            out, err = proc.communicate(timeout=scaled(STOP_WAIT + 10))
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"trainee stop did not return\n{self.node.log[-3000:]}")
        took = time.monotonic() - started
        assert proc.returncode == 0, err
        assert took < scaled(STOP_WAIT + 10), f"trainee stop took {took:.1f} s: {out}"
        return out

    def state(self, session: str = SESSION) -> dict[str, Any]:
        return self.node.state(self.project, session)

    def round_of(self, index: int, session: str = SESSION) -> dict[str, Any]:
        rounds = {r["index"]: r for r in self.state(session)["rounds"]}
        return rounds[index]

    def assert_stopped(self, index: int, *, asked: float, job: str, session: str = SESSION) -> None:
        """Round ``index`` ended ``stopped``, well within the grace of the stop asked at
        ``asked`` (time.time()). ``job``: "never" (the command never started), "sigterm"
        (its handler ran) or "ended" (it started and SIGTERM ended it: its handler ran,
        or the signal came before it could install one)."""
        rnd = self.round_of(index, session)
        assert rnd["status"] == "stopped", rnd
        folder = self.round_dir(index, session)
        log = self.log(index, session)
        assert not (folder / "finished").exists(), f"round {index} ran to its end\n{log[-2000:]}"
        assert "SIGKILL" not in log, f"round {index} needed SIGKILL\n{log[-2000:]}"
        ended = rnd["ended_at"]
        assert ended is not None and ended - asked < GRACE / 2, (rnd, asked)
        if job == "never":
            assert not (folder / "started").exists(), f"round {index}'s job ran\n{log[-2000:]}"
        elif job == "sigterm":
            assert (folder / "sigterm").exists(), f"round {index}: no SIGTERM\n{log[-2000:]}"
        else:
            if (folder / "started").exists() and not (folder / "sigterm").exists():
                # SIGTERM came before the handler: the job died of it (bwrap says 143)
                assert rnd["returncode"] in (143, -15) or rnd["signal"] == "SIGTERM", rnd

    def close(self) -> None:
        self.node.kill(signal.SIGTERM)
        kill_leftover_daemons(self.node.daemon)
        assert_no_orphans(self.project)
        shutil.rmtree(self.runtime, ignore_errors=True)


@contextmanager
def race(tmp: Path) -> Iterator[Race]:
    r = Race(tmp)
    try:
        yield r
    finally:
        r.close()


STOPPED_LINE = re.compile(r"^stopped session-0001: round (\d+) stopped after (\d+\.\d) s$", re.M)


@pytest.mark.parametrize(
    ("point", "wait_job", "job"),
    [
        # the monitor not started yet: it finds the stop and never starts the job
        ("monitor.before_spawn", False, "never"),
        # the monitor started, about to fork the job: the child finds it before exec
        ("shim.before_exec", False, "never"),
        # the job forked, bwrap setting the sandbox up, the monitor not ready yet
        ("shim.spawned", False, "ended"),
        # the same with the job inside running its handler already
        ("shim.spawned", True, "sigterm"),
        # the job runs, its launch is being recorded (exactly-once launches)
        ("backend.submitted", True, "sigterm"),
    ],
    ids=["before-monitor", "before-exec", "bwrap-starting", "monitor-not-ready", "recording"],
)
def test_a_stop_while_the_round_starts_reaches_it(
    tmp_path: Path, point: str, wait_job: bool, job: str
) -> None:
    with race(tmp_path) as r:
        r.start(**{PAUSE_ENV: f"{point}={r.pauses}"})
        r.start_session()
        r.reached(point)
        if wait_job:
            r.wait_file(r.round_dir(1) / "started", "the job to start")
            pause(0.2)  # its handler is set before it says it started; this is margin
        asked, started = time.time(), time.monotonic()
        stop = r.stop_cli()
        r.wait_file(r.stop_file(), "the stop to be recorded")
        r.release(point)
        out = r.finish_stop(stop, started)
        assert STOPPED_LINE.search(out), out
        r.assert_stopped(1, asked=asked, job=job)
        assert r.state()["session"]["stop_reason"] == "user_stop"


def test_a_stop_recorded_by_a_daemon_that_died_is_honoured_by_the_next(tmp_path: Path) -> None:
    with race(tmp_path) as r:
        r.start(**{CRASH_ENV: "stop.recorded"})
        r.start_session()
        r.wait_file(r.round_dir(1) / "started", "the job to start")
        asked = time.time()
        with pytest.raises(Exception):  # noqa: B017 - the daemon dies answering it
            r.node.rpc("loop_stop", {"project_root": str(r.project)}, timeout=30)
        assert r.stop_file().exists()
        assert not r.node.alive()
        r.node.kill()  # reaps the daemon that killed itself
        r.start()
        r.node.wait_finished(r.project)
        r.assert_stopped(1, asked=asked, job="sigterm")
        assert r.state()["session"]["status"] == "stopped"
        # resumed by the user, the session runs again: the old stop is done with
        run = run_cli("run", "--resume", SESSION, "--detach", env=r.cli_env, cwd=r.project)
        assert run.returncode == 0, run.stderr
        assert not r.stop_file().exists()
        r.wait_file(r.round_dir(2) / "started", "round 2 of the resumed session", timeout=60)
        asked, started = time.time(), time.monotonic()
        out = r.finish_stop(r.stop_cli(), started)
        assert "stopped session-0001: round 2 stopped after" in out, out
        r.assert_stopped(2, asked=asked, job="sigterm")


def test_a_stop_during_re_adoption_after_a_restart(tmp_path: Path) -> None:
    with race(tmp_path) as r:
        r.start()
        r.start_session()
        r.wait_file(r.round_dir(1) / "started", "the job to start")
        r.node.kill(signal.SIGKILL)
        r.start(**{PAUSE_ENV: f"backend.adopting={r.pauses}"})
        r.reached("backend.adopting")
        asked, started = time.time(), time.monotonic()
        stop = r.stop_cli()
        r.wait_file(r.stop_file(), "the stop to be recorded")
        r.release("backend.adopting")
        out = r.finish_stop(stop, started)
        assert STOPPED_LINE.search(out), out
        r.assert_stopped(1, asked=asked, job="sigterm")


def test_a_stop_while_a_parallel_step_starts_reaches_every_round(tmp_path: Path) -> None:
    with race(tmp_path) as r:
        (r.project / ".trainee" / "project.yaml").write_text(
            PROJECT_YAML.format(parallel=3, max_rounds=4, grace=GRACE)
        )
        # round 1 (the baseline) ends at once; the second monitor started is one of
        # the step's three, held while the others start
        r.start(**{PAUSE_ENV: f"shim.spawned:2={r.pauses}"})
        r.start_session(baseline_sec=0.3)
        r.reached("shim.spawned")
        asked, started = time.time(), time.monotonic()
        stop = r.stop_cli()
        r.wait_file(r.stop_file(), "the stop to be recorded")
        r.release("shim.spawned")
        out = r.finish_stop(stop, started)
        assert out.startswith("stopped session-0001: round"), out
        state = r.node.wait_finished(r.project)
        step = [x for x in state["rounds"] if x["index"] > 1]
        assert len(step) == 3, state["rounds"]
        for x in step:
            r.assert_stopped(x["index"], asked=asked, job="ended")


def test_twelve_scripted_stops_all_reach_their_round(tmp_path: Path) -> None:
    """The stop that was lost once in twelve: a session started and stopped at once,
    at moments spread over the round's start (0 to 0.55 s after loop_start)."""
    with race(tmp_path) as r:
        r.start()
        for i in range(SCRIPTED_STOPS):
            session = f"session-{i + 1:04d}"
            assert r.start_session() == session
            pause(0.05 * i)
            asked, started = time.time(), time.monotonic()
            out = r.finish_stop(r.stop_cli(), started)
            assert out.startswith(f"stopped {session}"), out
            state = r.node.wait_finished(r.project, session=session, timeout=30)
            assert state["session"]["status"] == "stopped", state["session"]
            for rnd in state["rounds"]:
                r.assert_stopped(rnd["index"], asked=asked, job="ended", session=session)
            assert_no_orphans(r.project)
