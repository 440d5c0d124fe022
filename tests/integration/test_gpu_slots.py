"""The parts of :mod:`trainee.launch.gpus` that meet the machine: a slot given back only
once every process of the round is gone (real processes, one in a session of its own),
the slot of a running round read from its monitor's environment, NVML through the real
nvidia-ml-py (no GPU here: it says so), and the GPU device nodes inside a real bwrap
sandbox (skipped without /dev/nvidia*)."""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.support.timing import pause, scaled
from tests.unit.launch.projects import make_project, round_of
from trainee.launch.gpus import (
    TREE_GIVE_UP_SEC,
    TREE_POLL_SEC,
    SlotPool,
    probe_gpus,
    slot_of_monitor,
)
from trainee.launch.render import build_env
from trainee.launch.sandbox import bwrap_argv, gpu_devices
from trainee.monitor.process import processes_with_env
from trainee.session.doctor import check_gpus
from trainee.shim import proc_start_time

SLEEPER = "import os, sys, time; os.setsid(); print('ready', flush=True); time.sleep(600)"


@pytest.fixture
def leftover(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process started with a round's TRAINEE_ROUND_DIR, in a session of its own."""
    env = {**os.environ, "TRAINEE_ROUND_DIR": str(tmp_path / "round-0001"), "TRAINEE_GPUS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_slot_is_given_back_only_once_the_rounds_processes_are_gone(
    tmp_path: Path, leftover: subprocess.Popen[str]
) -> None:
    key = str(tmp_path / "round-0001")

    async def main() -> list[str]:
        pool = SlotPool()
        pool.adopt(key, (1,))
        steps: list[str] = []
        async with anyio.create_task_group() as tg:

            async def release() -> None:
                await pool.release(key, key)
                steps.append("released")

            tg.start_soon(release)
            # the release looked for the round's processes at least twice: still held
            await anyio.sleep(0.5)
            steps.append("held" if key in pool.held and pool.load() == {1: 1} else "freed")
            leftover.send_signal(signal.SIGKILL)
            leftover.wait()
            with anyio.fail_after(scaled(30)):
                while key in pool.held:
                    await anyio.sleep(0.05)
        assert pool.load() == {}
        return steps

    assert anyio.run(main) == ["held", "released"]


def test_what_outlives_an_ended_round_is_killed_before_its_slot_is_given_back(
    tmp_path: Path, leftover: subprocess.Popen[str]
) -> None:
    key = str(tmp_path / "round-0001")

    async def main() -> None:
        pool = SlotPool()
        pool.adopt(key, (1,))
        with anyio.fail_after(scaled(30)):
            await pool.release(key, key, kill_after=0.3)
        assert pool.load() == {}

    anyio.run(main)
    assert leftover.wait(timeout=scaled(10)) == -signal.SIGKILL


CHAIN = """
import os, sys, time
print('ready', flush=True)
while True:  # a leftover that is a new pid every generation: fork, the parent exits
    if os.fork():
        os._exit(0)
    time.sleep(float(sys.argv[1]))
"""


def _chain(key: str, pause: float) -> None:
    env = {**os.environ, "TRAINEE_ROUND_DIR": key}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHAIN, str(pause)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.stdout.close()
    proc.wait()  # the first generation's parent exits at once


def _kill_chain(key: str) -> list[int]:
    for _ in range(500):
        pids = processes_with_env("TRAINEE_ROUND_DIR", key)
        if not pids:
            return []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pause(0.01)
    return processes_with_env("TRAINEE_ROUND_DIR", key)


@pytest.mark.parametrize("pause_sec", [0.3, 0.003])
def test_a_leftover_that_forks_anew_is_killed_at_every_look_and_never_holds_the_slot(
    tmp_path: Path, pause_sec: float, caplog: pytest.LogCaptureFixture
) -> None:
    """A new pid every generation: one SIGKILL at the first look misses the next one, an
    empty look between parent and child is not "gone", and the wait has an end."""
    key = str(tmp_path / "round-0001")
    _chain(key, pause_sec)
    try:

        async def main() -> None:
            pool = SlotPool()
            pool.adopt(key, (0,))
            with anyio.fail_after(scaled(0.3 + TREE_GIVE_UP_SEC + 15)):
                await pool.release(key, key, kill_after=0.3)
            assert pool.load() == {}

        with caplog.at_level(logging.WARNING, logger="trainee"):
            anyio.run(main)
        left = processes_with_env("TRAINEE_ROUND_DIR", key)
        if pause_sec >= TREE_POLL_SEC:  # slower than the looks: killed for sure
            assert left == []
        else:  # gone, or the slot was given back saying what outlived the kills
            assert left == [] or "given back anyway" in caplog.text, left
    finally:
        assert _kill_chain(key) == []


def test_a_daemon_shutting_down_kills_nothing_of_a_running_round(
    tmp_path: Path, leftover: subprocess.Popen[str]
) -> None:
    key = str(tmp_path / "round-0001")

    async def main() -> None:
        pool = SlotPool()
        pool.adopt(key, (1,))
        with anyio.CancelScope() as scope:
            scope.cancel()  # the round runs on; the next daemon re-adopts it
            await pool.release(key, key, kill_after=0.0)
        assert pool.load() == {}

    anyio.run(main)
    assert leftover.poll() is None


def test_a_waiting_round_gets_the_slot_given_back() -> None:
    async def main() -> tuple[int, ...]:
        pool = SlotPool(probe=lambda: probe_gpus())
        pool.adopt("/a", (0,))
        got: list[tuple[int, ...]] = []
        async with anyio.create_task_group() as tg:

            async def wait() -> None:
                got.append(await pool.acquire("/b", [0], 1, on_wait=lambda _: got.append(())))

            tg.start_soon(wait)
            with anyio.fail_after(scaled(30)):
                while not got:  # told it waits
                    await anyio.sleep(0.01)
            await pool.release("/a", "/nonexistent-round")
        return got[-1]

    assert anyio.run(main) == (0,)


def test_the_slot_of_a_running_round_comes_from_its_monitors_environment(
    leftover: subprocess.Popen[str],
) -> None:
    start = proc_start_time(leftover.pid)
    assert start is not None
    assert slot_of_monitor(leftover.pid, start) == (1,)
    assert slot_of_monitor(leftover.pid, start + 1) is None  # another process by that pid
    assert slot_of_monitor(os.getpid(), proc_start_time(os.getpid()) or 0) is None  # no GPU


def test_nvml_through_the_real_bindings() -> None:
    pytest.importorskip("pynvml", reason="the gpu extra (nvidia-ml-py) is not installed")
    probe = probe_gpus()
    if glob.glob("/dev/nvidia[0-9]*"):
        assert probe.free_mib, probe.note  # a GPU machine: NVML lists its GPUs
        assert all(mib >= 0 for mib in probe.free_mib.values())
    else:
        assert probe.free_mib is None and probe.note.startswith("NVML is not available here")


@pytest.mark.skipif(not glob.glob("/dev/nvidia*"), reason="no NVIDIA device node on this machine")
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")
def test_the_gpu_device_nodes_are_reachable_in_the_sandbox(tmp_path: Path) -> None:
    spec = make_project(tmp_path / "proj", "version: 1\nlaunch:\n  command: [python, x.py]\n")
    rnd = round_of(spec)
    code = "import glob, json; print(json.dumps(sorted(glob.glob('/dev/nvidia*'))))"
    argv = bwrap_argv([sys.executable, "-c", code], layout=rnd, cwd=spec.working_dir)
    out = subprocess.run(
        argv, env=build_env(spec, rnd, os.environ), capture_output=True, text=True, check=True
    )
    inside = json.loads(out.stdout)
    assert inside == [d for d in gpu_devices() if d.startswith("/dev/nvidia")]


def test_doctor_says_what_the_rounds_will_get(tmp_path: Path) -> None:
    head = "version: 1\nlaunch:\n  command: [python, x.py]\n"
    auto = make_project(tmp_path / "auto", head + "  gpus: auto\n")
    if glob.glob("/dev/nvidia[0-9]*"):
        pytest.skip("this machine has a GPU: the checks below are those of a machine without")
    check = check_gpus(auto)
    assert check.status == "warn" and check.detail.startswith("launch.gpus auto: ")
    assert "rounds run on the CPU" in check.detail and "trainee[gpu]" in check.fix
    listed = make_project(
        tmp_path / "listed", head + "  gpus: [0, 1]\n  rounds_per_gpu: 2\nrun:\n  parallel: 6\n"
    )
    check = check_gpus(listed)
    assert check.status == "pass", check
    assert check.detail.startswith("4 round slot(s) on GPUs 0, 1, 2 round(s) each; ")
    assert (
        "used as listed" in check.detail and "rounds beyond 4 wait for a free slot" in check.detail
    )
    own = make_project(
        tmp_path / "own", head + "  gpus: [0]\n  env:\n    CUDA_VISIBLE_DEVICES: '0'\n"
    )
    check = check_gpus(own)
    assert check.status == "warn" and "launch.env sets CUDA_VISIBLE_DEVICES" in check.detail
