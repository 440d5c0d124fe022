"""``launch.gpus``: the real daemon shares this machine's GPUs among parallel rounds.

There is no GPU here, so NVML is a stand-in at its boundary: a ``pynvml`` module this
test writes (the calls trainee makes to nvidia-ml-py, answered from ``gpus.json``
beside it) put first on the daemon's PYTHONPATH. Everything else is real: the daemon,
the CLI, the round monitors and a tiny training script that records what it sees
(CUDA_VISIBLE_DEVICES, the thread variables, which other rounds run and on which GPU)
in a folder the test reads. Rounds meet at a barrier (each waits until the other
round of its step has started), so "at once" is shown, never assumed from timing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, base_env, kill_leftover_daemons, run_cli
from tests.support.loop import wait_finished, wait_until
from tests.support.processes import assert_no_training_left
from tests.support.timing import scaled

pytestmark = pytest.mark.e2e

FAKE_NVML = '''\
"""A stand-in for nvidia-ml-py (tests/e2e/test_gpus.py): NVML answered from gpus.json."""
import json
import pathlib

_FILE = pathlib.Path(__file__).with_name("gpus.json")
_free = []


class NVMLError(Exception):
    pass


class _Memory:
    def __init__(self, free):
        self.free = free
        self.total = free * 2
        self.used = free


def nvmlInit():
    global _free
    data = json.loads(_FILE.read_text())
    if data is None:
        raise NVMLError("NVML Shared Library Not Found")
    _free = [int(mib) << 20 for mib in data]


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return len(_free)


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetMemoryInfo(handle):
    return _Memory(_free[handle])
'''

TRAIN_PY = """\
import json, os, signal, subprocess, sys, time

shared = os.environ["GPU_TEST_DIR"]
me = os.environ["TRAINEE_ROUND_INDEX"]
mode = os.environ.get("GPU_TEST_MODE", "plain")
deadline = time.monotonic() + 90  # a safety net, never reached


def names(kind):
    return {n.split("-", 1)[1] for n in os.listdir(shared) if n.startswith(kind + "-")}


def devices_of(rounds):
    return {r: open(os.path.join(shared, "started-" + r)).read() for r in rounds}


def put(name, text):
    with open(os.path.join(shared, name + ".tmp"), "w") as f:
        f.write(text)
    os.replace(os.path.join(shared, name + ".tmp"), os.path.join(shared, name))


cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
ended_before = sorted(names("ended"))
running_at_start = devices_of(names("started") - names("ended"))
put("started-" + me, str(cuda))
if me != "1" and mode == "barrier":  # the step's first two rounds run at once
    while len(names("started") - {"1"}) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
peers = devices_of(names("started") - {"1", me})  # the rounds this one met
if me != "1" and mode == "hold":
    while os.path.exists(os.path.join(shared, "hold")) and time.monotonic() < deadline:
        time.sleep(0.02)
leftover_alive = None
if me != "1" and mode == "leftover":
    pidfile = os.path.join(shared, "leftover.pid")
    try:
        os.close(os.open(os.path.join(shared, "owner"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        owner = True
    except FileExistsError:
        owner = False
    if owner:  # leave a child behind that ignores SIGTERM, in a session of its own
        code = (
            "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
            "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)"
        )
        subprocess.Popen([sys.executable, "-c", code, pidfile], start_new_session=True)
        while not os.path.exists(pidfile) and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        pid = int(open(pidfile).read())
        try:
            with open(f"/proc/{pid}/stat") as f:
                leftover_alive = f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            leftover_alive = False
record = {
    "cuda": cuda,
    "order": os.environ.get("CUDA_DEVICE_ORDER"),
    "slot": os.environ.get("TRAINEE_GPUS"),
    "threads": {v: os.environ.get(v) for v in
                ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
    "ended_before": ended_before,
    "running_at_start": running_at_start,
    "peers": peers if mode == "barrier" else {},
    "leftover_alive": leftover_alive,
}
put("record-" + me, json.dumps(record))
put("ended-" + me, str(cuda))
print(f"final val_loss={float(sys.argv[2]) ** 2 + 0.1:.6f}", flush=True)
"""

PROJECT_YAML = """\
version: 1
launch:
  command: [python, train.py]
{launch}
run:
  max_rounds: {max_rounds}
  parallel: {parallel}
  timeout_minutes: 5
metrics:
  specs:
    - name: val_loss
      source: stdout_regex
      key_or_pattern: 'final val_loss=(?P<value>-?\\d+(?:\\.\\d+)?)'
      goal: min
      required: true
advanced:
  security_mode: unsafe
  stop_grace_sec: 1
"""

TUNING_YAML = """\
version: 1
params:
  - name: lr
    flag: --lr
    type: float
    default: 0.1
    min_value: 0.001
    max_value: 1.0
"""

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def daemon_env(runtime: Path, nvml: Path) -> dict[str, str]:
    env = base_env(runtime)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(nvml), env.get("PYTHONPATH")) if p)
    for var in (*THREAD_VARS, "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        env.pop(var, None)  # what the rounds see is trainee's doing
    return env


@pytest.fixture(scope="module")
def nvml() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="tr-nvml-", dir="/tmp"))
    (folder / "pynvml.py").write_text(FAKE_NVML)
    (folder / "gpus.json").write_text("[]")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start_daemon(runtime: Path, nvml: Path) -> Daemon:
    d = Daemon(runtime=runtime, env=daemon_env(runtime, nvml))
    line = d.start()
    assert line.startswith("READY"), f"daemon did not start: {line!r}\n{d.log}"
    return d


@pytest.fixture(scope="module")
def daemon(nvml: Path) -> Iterator[Daemon]:
    runtime = Path(tempfile.mkdtemp(prefix="tr-gpu-", dir="/tmp"))
    d = start_daemon(runtime, nvml)
    try:
        yield d
    finally:
        d.stop()
        kill_leftover_daemons(d)
        shutil.rmtree(runtime, ignore_errors=True)


def set_gpus(nvml: Path, free_mib: list[int] | None) -> None:
    """The stand-in's GPUs (free MiB of GPU 0, 1, ...); None: NVML is not there."""
    (nvml / "gpus.json").write_text(json.dumps(free_mib))


def make_project(
    tmp_path: Path,
    *,
    launch: str,
    parallel: int,
    max_rounds: int,
    mode: str,
    env: dict[str, str] | None = None,
) -> tuple[Path, Path]:
    """The project (``launch``: more of its launch section) and the folder its rounds
    record what they saw in."""
    root = tmp_path / "gpuproj"
    shared = tmp_path / "shared"
    (root / ".trainee").mkdir(parents=True)
    shared.mkdir()
    (root / "train.py").write_text(TRAIN_PY)
    variables = {"GPU_TEST_DIR": str(shared), "GPU_TEST_MODE": mode, **(env or {})}
    env_lines = "  env:\n" + "".join(f"    {k}: {v}\n" for k, v in variables.items())
    text = PROJECT_YAML.format(
        launch=textwrap.indent(launch, "  ") + env_lines,
        parallel=parallel,
        max_rounds=max_rounds,
    )
    (root / ".trainee" / "project.yaml").write_text(text)
    (root / ".trainee" / "tuning.yaml").write_text(TUNING_YAML)
    return root, shared


def run_session(env: dict[str, str], project: Path) -> None:
    started = run_cli("run", str(project), "--policy", "random", "--unsafe", "--detach", env=env)
    assert started.returncode == 0, started.stderr


def finish(env: dict[str, str], project: Path, rounds: int) -> dict[str, Any]:
    state = wait_finished(env, project, timeout=scaled(120))
    assert [r["status"] for r in state["rounds"]] == ["completed"] * rounds, state["rounds"]
    return state


def records(shared: Path) -> dict[int, dict[str, Any]]:
    return {
        int(p.name.split("-", 1)[1]): json.loads(p.read_text()) for p in shared.glob("record-*")
    }


def round_states(env: dict[str, str], project: Path) -> list[dict[str, Any]]:
    got = run_cli("call", "events_list", "--input", json.dumps({"limit": 5000}), env=env)
    assert got.returncode == 0, got.stderr
    return [
        e["data"]
        for e in got.json()["events"]
        if e["kind"] == "round.state" and e["data"].get("project") == str(project)
    ]


def test_parallel_rounds_get_their_own_gpu_and_a_third_waits_for_a_freed_one(
    daemon: Daemon, nvml: Path, tmp_path: Path
) -> None:
    set_gpus(nvml, [8000, 24000])
    project, shared = make_project(
        tmp_path, launch="gpus: [0, 1]\n", parallel=3, max_rounds=4, mode="barrier"
    )
    run_session(daemon.env, project)
    finish(daemon.env, project, 4)
    got = records(shared)
    # the baseline runs alone: the GPU with the most free memory
    assert got[1]["cuda"] == "1" and got[1]["slot"] == "1" and got[1]["order"] == "PCI_BUS_ID"
    step = {i: got[i] for i in (2, 3, 4)}
    waited = [i for i, r in step.items() if set(r["ended_before"]) - {"1"}]
    assert len(waited) == 1, step  # two slots: one round of the three waited
    third = waited[0]
    first = [i for i in step if i != third]
    # the two that ran at once (the barrier) saw each other, on the other GPU
    assert {step[i]["cuda"] for i in first} == {"0", "1"}, step
    for i, j in (first, first[::-1]):
        assert str(j) in step[i]["peers"], step
        assert step[i]["cuda"] not in step[i]["peers"].values(), step
    # the third got the GPU of a round that had ended, never one in use
    freed = {got[int(r)]["cuda"] for r in step[third]["ended_before"] if r != "1"}
    assert step[third]["cuda"] in freed, step
    assert step[third]["cuda"] not in step[third]["running_at_start"].values(), step
    # trainee said why it waited; GPU rounds keep the thread variables as they were
    waits = [s for s in round_states(daemon.env, project) if s["state"] == "queued"]
    assert [s["round"] for s in waits] == [third]
    assert "waiting for a free GPU slot" in waits[0]["detail"]
    assert all(r["threads"] == dict.fromkeys(THREAD_VARS) for r in got.values())
    assert_no_training_left(project)


def test_the_gpu_with_most_free_memory_comes_first(
    daemon: Daemon, nvml: Path, tmp_path: Path
) -> None:
    set_gpus(nvml, [24000, 2000, 30000])
    project, shared = make_project(
        tmp_path, launch="gpus: auto\nrounds_per_gpu: 2\n", parallel=2, max_rounds=3, mode="barrier"
    )
    run_session(daemon.env, project)
    finish(daemon.env, project, 3)
    got = records(shared)
    assert got[1]["cuda"] == "2"  # alone: 30000 MiB free
    # two at once: the least loaded GPUs first, by free memory (GPU 2, then GPU 0);
    # the second round never doubles up on GPU 2 while GPU 0 is idle
    assert {got[2]["cuda"], got[3]["cuda"]} == {"2", "0"}
    assert_no_training_left(project)


def test_a_slot_is_not_freed_while_a_child_the_round_left_behind_runs(
    daemon: Daemon, nvml: Path, tmp_path: Path
) -> None:
    set_gpus(nvml, [16000])
    project, shared = make_project(
        tmp_path, launch="gpus: [0]\n", parallel=2, max_rounds=3, mode="leftover"
    )
    run_session(daemon.env, project)
    finish(daemon.env, project, 3)
    got = records(shared)
    # one GPU, two rounds: the second one started once the first one's whole tree was
    # gone, the child it left behind (SIGTERM ignored, its own session) included
    second = [i for i in (2, 3) if got[i]["leftover_alive"] is not None]
    assert len(second) == 1, got
    assert got[second[0]]["leftover_alive"] is False
    assert got[second[0]]["cuda"] == "0" and got[second[0]]["running_at_start"] == {}
    assert_no_training_left(project)


def test_cpu_rounds_share_the_cores_unless_the_project_sets_the_threads(
    daemon: Daemon, nvml: Path, tmp_path: Path
) -> None:
    set_gpus(nvml, None)  # gpus: auto without NVML: no GPU, a one-line note
    project, shared = make_project(
        tmp_path,
        launch="gpus: auto\n",
        parallel=2,
        max_rounds=3,
        mode="plain",
        env={"MKL_NUM_THREADS": "3"},
    )
    run_session(daemon.env, project)
    finish(daemon.env, project, 3)
    share = str(max(1, len(os.sched_getaffinity(0)) // 2))
    for rec in records(shared).values():
        assert rec["cuda"] is None and rec["slot"] is None
        assert rec["threads"] == {
            "OMP_NUM_THREADS": share,
            "MKL_NUM_THREADS": "3",
            "OPENBLAS_NUM_THREADS": share,
        }
    assert "launch.gpus auto: NVML is not available here" in daemon.log
    assert_no_training_left(project)


def test_slots_of_rounds_still_running_are_counted_after_a_daemon_restart(
    nvml: Path, tmp_path: Path
) -> None:
    set_gpus(nvml, [8000, 8000])
    runtime = Path(tempfile.mkdtemp(prefix="tr-gpur-", dir="/tmp"))
    project, shared = make_project(
        tmp_path, launch="gpus: [0, 1]\n", parallel=3, max_rounds=4, mode="hold"
    )
    (shared / "hold").touch()
    first = start_daemon(runtime, nvml)
    second: Daemon | None = None
    try:
        env = first.env
        run_session(env, project)

        def two_running_one_waiting(_state: dict[str, Any]) -> bool:
            started = {p.name for p in shared.glob("started-*")} - {"started-1"}
            queued = [s for s in round_states(env, project) if s["state"] == "queued"]
            return len(started) == 2 and len(queued) == 1

        wait_until(env, project, two_running_one_waiting, what="two rounds on the two GPUs")
        first.stop(signal.SIGKILL)
        second = start_daemon(runtime, nvml)

        def waiting_again(_state: dict[str, Any]) -> bool:
            log = second.log
            return (
                log.count("re-adopting its monitor") == 2
                and log.count("waiting for a free GPU") >= 2
            )

        state = wait_until(env, project, waiting_again, what="the resumed rounds")
        # still held by the re-adopted rounds: the third has not started
        assert len([r for r in state["rounds"] if r["status"] == "running"]) == 2
        (shared / "hold").unlink()
        finish(env, project, 4)
        got = records(shared)
        third = next(i for i in (2, 3, 4) if set(got[i]["ended_before"]) - {"1"})
        assert got[third]["cuda"] not in got[third]["running_at_start"].values()
        assert {got[i]["cuda"] for i in (2, 3, 4) if i != third} == {"0", "1"}
    finally:
        (shared / "hold").unlink(missing_ok=True)
        for d in (first, second):
            if d is not None:
                d.stop()
                kill_leftover_daemons(d)
        assert_no_training_left(project)
        shutil.rmtree(runtime, ignore_errors=True)
