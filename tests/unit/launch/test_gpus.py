"""``launch.gpus`` / ``launch.rounds_per_gpu``: the spec's rules through the real loader,
and the pure parts of :mod:`trainee.launch.gpus` (which GPU a round gets, its job's
environment, the bwrap device binds for a stand-in list of device nodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.spec.conftest import make_project, marked_line, tree_hash, write
from trainee.errors import ConfigError
from trainee.launch.gpus import (
    GpuProbe,
    SlotPool,
    cpu_threads,
    parse_slot,
    slot_env,
    wanted_gpus,
)
from trainee.launch.sandbox import GPU_DEVICES, bwrap_argv, gpu_devices
from trainee.spec import load_project

from .projects import make_project as make_launch_project
from .projects import round_of

MIN = "version: 1\nlaunch:\n  command: [python, train.py]\n"
PFILE = ".trainee/project.yaml"

BAD = [
    ("gpus: [0, 1, 0]  #<\n", "launch.gpus", "names GPU 0 twice; use launch.rounds_per_gpu"),
    ("gpus: []  #<\n", "launch.gpus", "is an empty list; write none for no GPU"),
    ("gpus: all  #<\n", "launch.gpus", "'all'"),
    ("gpus: [-1]  #<\n", "launch.gpus[0]", ">= 0"),
    ("gpus: 2  #<\n", "launch.gpus", "expected one of: auto, none"),
    ("rounds_per_gpu: 2  #<\n", "launch.rounds_per_gpu", "needs launch.gpus (auto or a list"),
    ("gpus: auto\n  rounds_per_gpu: 0  #<\n", "launch.rounds_per_gpu", ">= 1"),
]


@pytest.mark.parametrize(("text", "field", "reason"), BAD, ids=[b[0] for b in BAD])
def test_bad_gpu_settings_name_the_field_and_change_nothing(
    tmp_path: Path, text: str, field: str, reason: str
) -> None:
    project = make_project(tmp_path / "proj")
    body = MIN + "  " + text
    pfile = write(project / PFILE, body)
    before = tree_hash(project.parent)
    with pytest.raises(ConfigError) as info:
        load_project(project)
    err = info.value
    assert err.field == field and err.line == marked_line(body)
    assert err.reason is not None and reason in err.reason, err.reason
    assert tree_hash(project.parent) == before and pfile.read_text() == body


def test_gpus_are_for_the_local_backend(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    body = MIN + "  gpus: auto  #<\nadvanced:\n  backend:\n    type: slurm\n"
    write(project / PFILE, body)
    with pytest.raises(ConfigError) as info:
        load_project(project)
    assert info.value.field == "launch.gpus" and info.value.line == marked_line(body)
    assert "a slurm job gets its GPUs from advanced.backend.gpus" in str(info.value.reason)


def test_good_gpu_settings_load(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    write(project / PFILE, MIN + "  gpus: [1, 0]\n  rounds_per_gpu: 2\n")
    spec = load_project(project)
    assert spec.launch.gpus == (1, 0) and spec.launch.rounds_per_gpu == 2
    write(project / PFILE, MIN)
    assert load_project(project).launch.gpus == "none"


# -- which GPU ---------------------------------------------------------------------------


def test_the_least_loaded_gpu_with_the_most_free_memory_comes_first() -> None:
    pool = SlotPool()
    free = {0: 8000, 1: 24000, 2: 16000}
    assert pool.choose([0, 1, 2], 2, free) == 1
    pool.adopt("/r1", (1,))
    assert pool.choose([0, 1, 2], 2, free) == 2  # an idle GPU before a second round on 1
    pool.adopt("/r2", (2,))
    pool.adopt("/r3", (0,))
    assert pool.choose([0, 1, 2], 2, free) == 1
    for key, gpu in (("/r4", 1), ("/r5", 2), ("/r6", 0)):
        pool.adopt(key, (gpu,))
    assert pool.choose([0, 1, 2], 2, free) is None  # all full: the round waits
    assert pool.choose([0, 1, 2, 3], 2, free) == 3  # a GPU NVML does not know: last, but used


def test_without_nvml_the_lowest_index_comes_first() -> None:
    assert SlotPool().choose([3, 1, 2], 1, None) == 1


def test_auto_without_nvml_means_cpu_rounds_with_a_note(tmp_path: Path) -> None:
    spec = make_launch_project(tmp_path / "p", MIN + "  gpus: auto\n")
    devices, note = wanted_gpus(spec, GpuProbe(None, "NVML is not available here (x)"))
    assert devices == [] and note == (
        "launch.gpus auto: NVML is not available here (x); rounds run on the CPU"
    )
    assert wanted_gpus(spec, GpuProbe({0: 1, 1: 2}, "")) == ([0, 1], "")
    listed = make_launch_project(tmp_path / "q", MIN + "  gpus: [2, 5]\n")
    assert wanted_gpus(listed, GpuProbe(None, "no NVML")) == ([2, 5], "")  # used as given


# -- the job's environment -----------------------------------------------------------------


def test_a_gpu_round_gets_its_device_unless_the_project_sets_it() -> None:
    base = {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}  # the caller's
    env = slot_env(base, (2,), project_env={}, parallel=4)
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["TRAINEE_GPUS"] == "2"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and "OMP_NUM_THREADS" not in env
    own = {**base, "CUDA_VISIBLE_DEVICES": "7"}
    env = slot_env(own, (2,), project_env={"CUDA_VISIBLE_DEVICES": "7"}, parallel=4)
    assert env["CUDA_VISIBLE_DEVICES"] == "7" and env["TRAINEE_GPUS"] == "2"


def test_a_cpu_round_shares_the_cores_unless_its_environment_sets_the_threads() -> None:
    env = slot_env({"MKL_NUM_THREADS": "3"}, None, project_env={}, parallel=3, cores=8)
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"], env["OPENBLAS_NUM_THREADS"]) == (
        "2",
        "3",
        "2",
    )
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert cpu_threads(8, cores=2) == 1 and cpu_threads(1, cores=2) == 2
    # alone on the machine: the libraries' own default
    assert slot_env({"PATH": "/bin"}, None, project_env={}, parallel=1) == {"PATH": "/bin"}


def test_a_recorded_slot_is_read_only_when_it_is_one() -> None:
    assert parse_slot("0") == (0,) and parse_slot("1,3") == (1, 3)
    for bad in ("", "a", "0,", "-1", "1 2", "99999"):
        assert parse_slot(bad) is None, bad


# -- device nodes in the sandbox -----------------------------------------------------------


def test_the_nvidia_device_nodes_that_exist_are_bound_into_the_sandbox(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (dev / name).touch()
    patterns = [p.replace("/dev/", f"{dev}/", 1) for p in GPU_DEVICES]
    found = gpu_devices(patterns)
    # the nodes there, and only those (no nvidia-modeset, kfd or nvidia-caps here)
    assert found == sorted(
        str(dev / n)
        for n in ("dri", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidiactl")
    )
    for node in ("nvidia-modeset", "nvidia-caps"):
        (dev / node).touch()
    assert {str(dev / "nvidia-modeset"), str(dev / "nvidia-caps")} <= set(gpu_devices(patterns))
    spec = make_launch_project(tmp_path / "proj", MIN)
    exe = tmp_path / "bwrap"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    argv = bwrap_argv(
        ["python", "train.py"], layout=round_of(spec), cwd="/", bwrap=str(exe), devices=found
    )
    binds = [argv[i + 1 : i + 3] for i, a in enumerate(argv) if a == "--dev-bind"]
    assert binds == [[d, d] for d in found]
    assert argv.index("--dev") < argv.index("--dev-bind") < argv.index("--proc")


def test_the_worked_example_of_the_docs_loads(tmp_path: Path) -> None:
    import yaml  # type: ignore[import-untyped]

    text = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    block = text.split("Worked example: a machine with four GPUs")[1].split("```yaml")[1]
    doc = yaml.safe_load(block.split("```")[0])
    project = make_project(tmp_path / "proj")
    write(project / PFILE, yaml.safe_dump({"version": 1, **doc}))
    spec = load_project(project)
    assert (spec.launch.gpus, spec.launch.rounds_per_gpu, spec.run.parallel) == ((0, 1), 2, 6)
    pool, free = SlotPool(), {0: 23512, 1: 23740}
    order = []
    for i in range(4):
        gpu = pool.choose([0, 1], 2, free)
        assert gpu is not None
        pool.adopt(f"/r{i}", (gpu,))
        order.append(gpu)
    assert order == [1, 0, 1, 0] and pool.choose([0, 1], 2, free) is None
