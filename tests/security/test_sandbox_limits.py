"""Red team, resources: a job over ``run.limits`` is killed whole and its round fails with
the reason; under the limits it runs untouched.

The monitor is the real one (trainee.shim) around a real job, plain and inside real
bwrap; the last case runs a guarded session through the daemon. The attacks are
bounded: the memory hog stops at 600 MiB, the process bomb at 120 processes, and each
sleeps at most 60 s if nothing stops it.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from tests.faults.helpers import assert_no_orphans, node
from tests.security.sandbox_helpers import make_probe_project
from tests.unit.launch.projects import make_project, round_of
from trainee.launch.render import build_env
from trainee.launch.sandbox import bwrap_argv
from trainee.monitor.process import ExitInfo, Limits, spawn_round, wait_exit

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")

HOG = textwrap.dedent(
    """\
    import time
    chunks = []
    for _ in range(60):  # 600 MiB at most, touched page by page
        chunks.append(bytearray(10 << 20))
        time.sleep(0.02)
    print("survived", flush=True)
    time.sleep(60)
    """
)

BOMB = textwrap.dedent(
    """\
    import os, sys, time
    want = int(sys.argv[1])
    for _ in range(want):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        time.sleep(0.005)
    print("all forked", flush=True)
    time.sleep(60)
    """
)


CALM = textwrap.dedent(
    """\
    import os, time
    data = bytearray(20 << 20)  # 20 MiB, touched
    kids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            time.sleep(0.5)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
    """
)


def run_limited(
    tmp_path: Path, code: str, args: list[str], limits: Limits, *, guarded: bool
) -> ExitInfo:
    spec = make_project(tmp_path / "proj", "version: 1\nlaunch:\n  command: [python, train.py]\n")
    rnd = round_of(spec)
    argv = [sys.executable, "-c", code, *args]
    env = build_env(spec, rnd, os.environ)
    if guarded:
        argv = bwrap_argv(argv, layout=rnd, cwd=spec.working_dir, env=env)

    async def go() -> ExitInfo:
        handle = await spawn_round(
            argv,
            env=env,
            cwd=spec.working_dir,
            rnd=rnd,
            timeout_sec=120,
            grace_sec=1,
            token="0123456789abcdef",
            limits=limits,
        )
        with anyio.fail_after(60):
            return await wait_exit(handle)

    info = anyio.run(go)
    assert_no_orphans(spec.root_path)  # nothing of the round outlives it
    return info


@pytest.mark.parametrize("guarded", [False, True], ids=["unsafe", "guarded"])
def test_a_memory_hog_is_killed_at_the_limit(tmp_path: Path, guarded: bool) -> None:
    info = run_limited(tmp_path, HOG, [], Limits(memory_mb=150), guarded=guarded)
    assert info.signal == "SIGKILL" and info.returncode is None, info
    assert info.limit is not None and info.limit.startswith("memory limit 150 MiB reached")
    assert info.error == info.limit


@pytest.mark.parametrize("guarded", [False, True], ids=["unsafe", "guarded"])
def test_a_process_bomb_is_killed_whole_at_the_limit(tmp_path: Path, guarded: bool) -> None:
    info = run_limited(tmp_path, BOMB, ["120"], Limits(processes=20), guarded=guarded)
    assert info.limit is not None and info.limit.startswith("process limit 20 reached"), info
    assert info.signal == "SIGKILL"


@pytest.mark.parametrize("guarded", [False, True], ids=["unsafe", "guarded"])
def test_under_the_limits_the_job_runs_untouched(tmp_path: Path, guarded: bool) -> None:
    """Four processes under a limit of five (bwrap's own two are not counted), 20 MiB
    under 150 MiB: the job ends on its own."""
    info = run_limited(tmp_path, CALM, [], Limits(memory_mb=150, processes=5), guarded=guarded)
    assert (info.returncode, info.limit, info.signal) == (0, None, None), info


@pytest.mark.e2e
def test_a_round_over_its_memory_limit_fails_with_the_reason(tmp_path: Path) -> None:
    project = make_probe_project(
        tmp_path / "proj",
        {"*": {}},
        run_extra="  limits:\n    memory_mb: 100\n",
    )
    (project / "train.py").write_text(HOG)
    with node() as n:
        n.start_session(project, mode="guarded")
        state = n.wait_finished(project, timeout=60)
    rnd = state["rounds"][0]
    assert rnd["status"] == "failed", rnd
    assert any(w.startswith("memory limit 100 MiB reached") for w in rnd["warnings"]), rnd
    assert state["session"]["status"] != "running"
    assert_no_orphans(project)
