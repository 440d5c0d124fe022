"""A stop that reaches the round monitor while bwrap is still starting the job.

bwrap forwards no signals, and before it has executed the job there is no process of
the job to send SIGTERM to: the monitor must hold the SIGTERM until the job exists
(and not SIGKILL it after the grace, nor let it run to its end). ``--block-fd`` holds
bwrap before it executes the job until the test writes to a pipe, so the stop lands
exactly in that window. And a stop recorded in the stop file before the monitor
starts keeps the job from ever running.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from tests.support.timing import scaled, wait_for
from trainee.launch.layout import ProjectLayout, RoundLayout
from trainee.monitor import stopfile
from trainee.monitor.process import (
    build_shim_argv,
    read_exit,
    read_state,
    spawn_round,
    wait_exit,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")

GRACE = 20.0
"""Long: a SIGTERM that never reached the job shows as a round ending after it."""

JOB = """\
import os, signal, sys, time
here = os.path.dirname(os.path.abspath(__file__))
def on_term(*_):
    open(os.path.join(here, "sigterm"), "w").close()
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(here, "started"), "w").close()
time.sleep(60)
open(os.path.join(here, "finished"), "w").close()
"""


@pytest.fixture
def rnd(tmp_path: Path) -> RoundLayout:
    return ProjectLayout.for_root(tmp_path / "proj", env={}).session(1).round(1)


def job(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "job.py").write_text(textwrap.dedent(JOB))
    return folder


def bwrap(*extra: str) -> list[str]:
    found = shutil.which("bwrap")
    assert found is not None
    return [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind",
            "/tmp", "/tmp", "--unshare-pid", "--die-with-parent", *extra]  # fmt: skip


def test_a_stop_while_bwrap_starts_reaches_the_job_once_it_exists(
    tmp_path: Path, rnd: RoundLayout
) -> None:
    folder = job(tmp_path)
    for d in (rnd.control, rnd.log.parent):
        d.mkdir(parents=True, exist_ok=True)
    gate_r, gate_w = os.pipe()
    argv = build_shim_argv(
        [*bwrap("--block-fd", str(gate_r), "--bind", str(folder), str(folder)),
         sys.executable, str(folder / "job.py")],
        rnd, cwd=str(folder), timeout_sec=None, grace_sec=GRACE,
    )  # fmt: skip
    shim = subprocess.Popen(argv, pass_fds=(gate_r,), stdin=subprocess.DEVNULL)
    os.close(gate_r)
    try:
        wait_for(
            lambda: read_state(rnd.monitor_file) is not None,
            "the monitor to run",
            timeout=15,
            interval=0.01,
        )
        # bwrap is held before it executes the job: nothing of the job exists yet
        asked = time.monotonic()
        os.kill(shim.pid, signal.SIGTERM)
        select.select([], [], [], 0.3)
        assert not (folder / "started").exists()
        os.write(gate_w, b"go")  # bwrap goes on and starts the job
        assert shim.wait(timeout=scaled(GRACE)) == 0
        took = time.monotonic() - asked
    finally:
        os.close(gate_w)
        if shim.poll() is None:
            shim.kill()
            shim.wait()
    info = read_exit(rnd.exit_file)
    assert info is not None and info.stopped, info
    log = rnd.log.read_text(errors="replace")
    assert "SIGKILL" not in log, log
    assert not (folder / "finished").exists(), "the job ran to its end"
    assert took < GRACE / 2, f"the round took {took:.1f} s to stop\n{log}"
    # the job got the SIGTERM: in its handler, or before it could install one
    assert (folder / "sigterm").exists() or info.returncode == 128 + signal.SIGTERM, (info, log)


def test_a_stop_recorded_before_the_monitor_starts_keeps_the_job_from_running(
    tmp_path: Path, rnd: RoundLayout
) -> None:
    folder = job(tmp_path)
    assert stopfile.record(rnd.stop_file, "user_stop")
    assert stopfile.recorded(rnd.stop_file) == "user_stop"

    async def go() -> None:
        handle = await spawn_round(
            [*bwrap("--bind", str(folder), str(folder)), sys.executable, str(folder / "job.py")],
            env=dict(os.environ),
            cwd=str(folder),
            rnd=rnd,
            timeout_sec=None,
            grace_sec=GRACE,
        )
        info = await wait_exit(handle)
        assert info.stopped and info.returncode is None and info.signal is None, info

    anyio.run(go)
    assert not (folder / "started").exists()
    assert "stop requested before the command started" in rnd.log.read_text()
    stopfile.clear(rnd.stop_file)
    assert stopfile.recorded(rnd.stop_file) is None
