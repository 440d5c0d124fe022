"""Exactly-once launches: a daemon SIGKILLed at any instant of a launch either re-adopts
what it started or knows it never started; no round's command ever runs twice.

The daemon kills itself deterministically at a named instant of round 2's launch
(``TRAINEE_TEST_CRASH_AT=<point>:2``, see trainee.testhooks): before the intent is
stored, after it, right after the monitor process started (before it is ready, so the
monitor races the next daemon for the launch), after the job started but before the
store knew, and after the store knew. A new daemon (without the hook) carries the
session to its end. Every round's command must have started exactly once.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tests.faults.helpers import Node, assert_no_orphans, job_env
from tests.security.sandbox_helpers import make_probe_project, starts
from tests.support.daemon import base_env, kill_leftover_daemons
from trainee.testhooks import CRASH_ENV, POINTS

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

ROUNDS = 2


@pytest.mark.parametrize(
    ("point", "mode"), [*((p, "unsafe") for p in POINTS), ("monitor.spawned", "guarded")]
)
def test_a_daemon_killed_at_any_instant_of_a_launch_runs_each_round_once(
    point: str, mode: str, tmp_path: Path
) -> None:
    project = make_probe_project(
        tmp_path / "proj", {"*": {"hold_sec": 0.3}}, mode=mode, max_rounds=ROUNDS
    )
    runtime = Path(tempfile.mkdtemp(prefix="tr-x-", dir="/tmp"))
    env = base_env(runtime)
    env[CRASH_ENV] = f"{point}:2"  # the second launch: round 2's
    n = Node(runtime, env)
    try:
        n.start()
        n.start_session(project, mode=mode, env=job_env(base_env(runtime)))
        proc = n.daemon.proc
        assert proc is not None
        assert proc.wait(timeout=60) == -signal.SIGKILL, n.log[-2000:]
        del env[CRASH_ENV]
        n.start()
        state = n.wait_finished(project, timeout=90)
    finally:
        n.kill(signal.SIGTERM)
        kill_leftover_daemons(n.daemon)
        shutil.rmtree(runtime, ignore_errors=True)
    rounds = state["rounds"]
    assert state["session"]["stop_reason"] == "max_rounds", state["session"]
    assert [r["status"] for r in rounds] == ["completed"] * ROUNDS, rounds
    assert [starts(project, r["index"]) for r in rounds] == [1] * ROUNDS, (point, rounds)
    assert all(r["attempt"] == 0 for r in rounds), rounds
    assert_no_orphans(project)


def test_a_monitor_that_starts_after_its_launch_was_revoked_runs_nothing(tmp_path: Path) -> None:
    """The race itself: the restarted daemon revokes a launch whose monitor had not yet
    claimed it; when that monitor does start, it finds the claim taken and starts
    nothing (exit status 3), so only the daemon's new launch runs the command."""
    import anyio

    from trainee.errors import LaunchError
    from trainee.launch.layout import ProjectLayout
    from trainee.monitor.process import revoke_launch, spawn_round

    rnd = ProjectLayout.for_root(tmp_path / "proj", env={}).session(1).round(1)
    marker = tmp_path / "ran"
    assert revoke_launch(rnd, "feedfacecafebeef") is None  # nobody had claimed it

    async def late_monitor() -> None:
        await spawn_round(
            ["/bin/sh", "-c", f"echo ran >> {marker}"],
            env={"PATH": "/usr/bin:/bin"},
            cwd=str(tmp_path),
            rnd=rnd,
            timeout_sec=None,
            grace_sec=1,
            token="feedfacecafebeef",
        )

    with pytest.raises(LaunchError, match="revoked before it started"):
        anyio.run(late_monitor)
    assert not marker.exists()
    # and a launch its monitor claimed first cannot be revoked: the claim names it
    claimed = revoke_launch(rnd, "feedfacecafebeef")
    assert claimed is not None and claimed.by == "daemon"


def test_a_round_launched_with_the_old_layout_is_still_readopted(tmp_path: Path) -> None:
    """A round an earlier trainee launched keeps its control files in its workspace
    (store: control_layout 1, no token). A daemon of this version, started while that
    round runs, re-adopts it from there: its command runs once and its result counts."""
    import sqlite3
    import sys
    import time

    import anyio

    from trainee.launch.layout import ProjectLayout
    from trainee.monitor.process import spawn_round

    project = make_probe_project(tmp_path / "proj", {"*": {"hold_sec": 2}}, mode="unsafe")
    runtime = Path(tempfile.mkdtemp(prefix="tr-x-", dir="/tmp"))
    env = base_env(runtime)
    env[CRASH_ENV] = "launch.before_intent:1"  # the session exists; round 1 never launched
    n = Node(runtime, env)
    try:
        n.start()
        n.start_session(project, mode="unsafe", env=job_env(base_env(runtime)))
        proc = n.daemon.proc
        assert proc is not None and proc.wait(timeout=60) == -signal.SIGKILL
        # what the earlier trainee did: the monitor writes into the round's workspace
        rnd = ProjectLayout.for_root(project, env={}).session(1).round(1, legacy=True)
        assert rnd.exit_file == rnd.dir / "exit.json"
        round_env = {
            **job_env(base_env(runtime)),
            "TRAINEE_ROUND_DIR": str(rnd.dir),
            "TRAINEE_ROUND_INDEX": "1",
        }

        async def launch() -> tuple[int, int]:
            handle = await spawn_round(
                [sys.executable, str(project / "train.py")],
                env=round_env,
                cwd=str(project),
                rnd=rnd,
                timeout_sec=60,
                grace_sec=1,
            )
            return handle.pid, handle.start_time

        pid, start_time = anyio.run(launch)
        db = sqlite3.connect(project / ".trainee" / "runtime.sqlite3")
        with db:
            db.execute(
                "UPDATE rounds SET status = 'running', monitor_pid = ?, monitor_start_time = ?,"
                " started_at = ?, control_layout = 1, launch_token = NULL"
                ' WHERE session = 1 AND "index" = 1',
                (pid, start_time, time.time()),
            )
        db.close()
        del env[CRASH_ENV]
        n.start()
        state = n.wait_finished(project, timeout=60)
        log = n.log
    finally:
        n.kill(signal.SIGTERM)
        kill_leftover_daemons(n.daemon)
        shutil.rmtree(runtime, ignore_errors=True)
    round1 = state["rounds"][0]
    assert round1["status"] == "completed" and round1["monitor_pid"] == pid, round1
    assert "re-adopting its monitor" in log
    assert starts(project, 1) == 1
    assert_no_orphans(project)


def test_monitor_pids_names_the_running_round_monitors(tmp_path: Path) -> None:
    """What the daemon's socket uses to refuse peers that descend from a round."""
    import os
    import sys

    import anyio

    from trainee.launch.layout import ProjectLayout
    from trainee.monitor.process import (
        is_alive,
        monitor_pids,
        request_stop,
        spawn_round,
        wait_exit,
    )

    rnd = ProjectLayout.for_root(tmp_path / "proj", env={}).session(1).round(1)

    async def go() -> None:
        handle = await spawn_round(
            [sys.executable, "-c", "import time; time.sleep(30)"],
            env={"PATH": os.environ["PATH"]},
            cwd=str(tmp_path),
            rnd=rnd,
            timeout_sec=60,
            grace_sec=0,
        )
        found = monitor_pids()
        request_stop(handle)
        with anyio.fail_after(30):
            await wait_exit(handle)
        assert handle.pid in found and os.getpid() not in found
        with anyio.fail_after(30):
            while is_alive(handle):  # exit.json is written just before the monitor exits
                await anyio.sleep(0.02)
        assert handle.pid not in monitor_pids()

    anyio.run(go)
