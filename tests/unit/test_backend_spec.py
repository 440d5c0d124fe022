"""``advanced.backend`` and ``run.parallel`` through the real loader: bad inputs are
reported with file, line, field and reason and change nothing; good inputs compile,
and saving the spec keeps the backend block (comments and all).

Each project is a real folder under tmp_path, loaded with :func:`load_project`. A bad
case's expected line is the line of its ``#<`` marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from tests.unit.spec.conftest import make_project, marked_line, tree_hash, write
from trainee.errors import ConfigError
from trainee.launch.backends import make_backend
from trainee.launch.backends.local import LocalBackend
from trainee.launch.backends.slurm import SlurmBackend
from trainee.spec import load_project, load_project_file, save_project_files
from trainee.spec.files import BackendSpec

MIN = """\
version: 1
launch:
  command: [python, train.py]
"""

PFILE = ".trainee/project.yaml"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj")


@dataclass(frozen=True)
class Bad:
    id: str
    field: str
    reason: str
    """A part of the reason the error must carry."""
    text: str
    """What follows ``MIN`` in project.yaml; the ``#<`` line is the reported one."""


def backend(body: str) -> str:
    return "advanced:\n  backend:\n" + body


CASES: list[Bad] = [
    # -- Ray needs a Jobs API URL ------------------------------------------------------
    Bad(
        "ray-without-address",
        "advanced.backend.address",
        "the Ray backend needs the address of the cluster's Jobs API",
        "advanced:\n  backend:  #<\n    type: ray\n",
    ),
    Bad(
        "ray-with-cpus-but-no-address",
        "advanced.backend.address",
        "needs the address",
        "advanced:\n  backend:  #<\n    type: ray\n    cpus: 2\n",
    ),
    Bad(
        "ray-address-without-scheme",
        "advanced.backend.address",
        "must be the Jobs API URL (http://host:8265), got 'head-node:8265'",
        backend("    type: ray\n    address: head-node:8265  #<\n"),
    ),
    Bad(
        "ray-address-other-scheme",
        "advanced.backend.address",
        "must be the Jobs API URL",
        backend("    type: ray\n    address: ray://head-node:10001  #<\n"),
    ),
    Bad(
        "ray-address-empty",
        "advanced.backend.address",
        "length >= 1",
        backend("    type: ray\n    address: ''  #<\n"),
    ),
    # -- options of another backend type -----------------------------------------------
    Bad(
        "address-with-slurm",
        "advanced.backend.address",
        "is a Ray option; backend type is slurm",
        backend("    type: slurm\n    address: http://head:8265  #<\n"),
    ),
    Bad(
        "address-with-local",
        "advanced.backend.address",
        "is a Ray option; backend type is local",
        backend("    address: http://head:8265  #<\n"),
    ),
    *[
        Bad(
            f"{name}-with-{kind}",
            f"advanced.backend.{name}",
            f"is a Slurm option; backend type is {kind}",
            backend(
                ("    type: ray\n    address: http://127.0.0.1:8265\n" if kind == "ray" else "")
                + f"    {name}: {value}  #<\n"
            ),
        )
        for kind in ("local", "ray")
        for name, value in (
            ("partition", "gpu"),
            ("time", "'01:00:00'"),
            ("mem", "8G"),
            ("account", "proj"),
            ("qos", "normal"),
            ("sbatch_args", "['--constraint=a100']"),
        )
    ],
    Bad(
        "explicit-local-with-partition",
        "advanced.backend.partition",
        "is a Slurm option; backend type is local",
        backend("    type: local\n    partition: gpu  #<\n"),
    ),
    Bad(
        "cpus-with-local",
        "advanced.backend.cpus",
        "is a cluster option (slurm, ray); local rounds use this machine",
        backend("    type: local\n    cpus: 4  #<\n"),
    ),
    Bad(
        "gpus-with-local",
        "advanced.backend.gpus",
        "is a cluster option (slurm, ray)",
        backend("    gpus: 1  #<\n"),
    ),
    # -- numbers -----------------------------------------------------------------------
    Bad(
        "fractional-cpus-with-slurm",
        "advanced.backend.cpus",
        "Slurm needs a whole number",
        backend("    type: slurm\n    cpus: 1.5  #<\n"),
    ),
    Bad(
        "fractional-gpus-with-slurm",
        "advanced.backend.gpus",
        "Slurm needs a whole number",
        backend("    type: slurm\n    gpus: 0.5  #<\n"),
    ),
    Bad(
        "zero-cpus",
        "advanced.backend.cpus",
        "> 0",
        backend("    type: slurm\n    cpus: 0  #<\n"),
    ),
    Bad(
        "negative-gpus",
        "advanced.backend.gpus",
        ">= 0",
        backend("    type: ray\n    address: http://h:8265\n    gpus: -1  #<\n"),
    ),
    Bad(
        "cpus-not-a-number",
        "advanced.backend.cpus",
        "got `str` ('many')",
        backend("    type: slurm\n    cpus: many  #<\n"),
    ),
    Bad(
        "poll-interval-zero",
        "advanced.backend.poll_interval_sec",
        "> 0",
        backend("    poll_interval_sec: 0  #<\n"),
    ),
    Bad(
        "poll-interval-negative",
        "advanced.backend.poll_interval_sec",
        "> 0",
        backend("    type: slurm\n    poll_interval_sec: -0.5  #<\n"),
    ),
    Bad(
        "poll-interval-too-long",
        "advanced.backend.poll_interval_sec",
        "<= 600",
        backend("    poll_interval_sec: 601  #<\n"),
    ),
    Bad(
        "command-timeout-zero",
        "advanced.backend.command_timeout_sec",
        "> 0",
        backend("    type: slurm\n    command_timeout_sec: 0  #<\n"),
    ),
    # -- unknown type, unknown key, wrong shape ----------------------------------------
    Bad(
        "type-typo-gets-did-you-mean",
        "advanced.backend.type",
        "invalid value 'slurn'; expected one of: local, ray, slurm (did you mean 'slurm'?)",
        backend("    type: slurn  #<\n"),
    ),
    Bad(
        "type-unknown",
        "advanced.backend.type",
        "invalid value 'kubernetes'; expected one of: local, ray, slurm",
        backend("    type: kubernetes  #<\n"),
    ),
    Bad(
        "unknown-key-gets-did-you-mean",
        "advanced.backend.partiton",
        "unknown key 'partiton'; did you mean 'partition'?",
        backend("    type: slurm\n    partiton: gpu  #<\n"),
    ),
    Bad(
        "unknown-key-lists-the-keys",
        "advanced.backend.zzz",
        "unknown key 'zzz'; expected one of: type, partition, time, cpus",
        backend("    zzz: 1  #<\n"),
    ),
    Bad(
        "backend-as-a-string",
        "advanced.backend",
        "expected `object`, got `str` ('slurm')",
        "advanced:\n  backend: slurm  #<\n",
    ),
    Bad(
        "sbatch-args-not-a-list",
        "advanced.backend.sbatch_args",
        "expected `array`",
        backend("    type: slurm\n    sbatch_args: --constraint=a100  #<\n"),
    ),
    # -- run.parallel ------------------------------------------------------------------
    Bad("parallel-zero", "run.parallel", "expected `int` >= 1, got 0", "run:\n  parallel: 0  #<\n"),
    Bad(
        "parallel-65", "run.parallel", "expected `int` <= 64, got 65", "run:\n  parallel: 65  #<\n"
    ),
    Bad(
        "parallel-negative",
        "run.parallel",
        "expected `int` >= 1, got -2",
        "run:\n  parallel: -2  #<\n",
    ),
    Bad(
        "parallel-two",
        "run.parallel",
        "expected `int`, got `str` ('two')",
        "run:\n  parallel: two  #<\n",
    ),
    Bad(
        "parallel-float",
        "run.parallel",
        "expected `int`, got `float`",
        "run:\n  parallel: 2.5  #<\n",
    ),
    Bad(
        "parallel-bool",
        "run.parallel",
        "expected `int`, got `bool`",
        "run:\n  parallel: true  #<\n",
    ),
    # -- candidates of one step must not read each other's files -----------------------
    Bad(
        "parallel-shared-metric-file",
        "metrics.specs[0].path",
        "would be shared by them; make it per round with {outputs_dir}",
        "run:\n  parallel: 2\nmetrics:\n  specs:\n    - name: val_loss\n      source: jsonl\n"
        "      key_or_pattern: val_loss\n      path: .trainee/logs/metrics.jsonl  #<\n",
    ),
    Bad(
        "parallel-shared-log-path",
        "advanced.log_paths[0]",
        "with run.parallel 3 rounds run at once",
        "run:\n  parallel: 3\nadvanced:\n  log_paths:\n    - .trainee/logs/train.log  #<\n",
    ),
    Bad(
        "parallel-shared-heartbeat",
        "advanced.signal_sources[0].paths[0]",
        "would be shared by them",
        "run:\n  parallel: 2\nadvanced:\n  signal_sources:\n    - type: heartbeat_file\n"
        "      paths:\n        - .trainee/logs/hb.json  #<\n",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_backend_or_parallel_is_reported_precisely_and_changes_nothing(
    project: Path, case: Bad
) -> None:
    pfile = write(project / PFILE, MIN + case.text)
    before = tree_hash(project.parent)
    raw_before = pfile.read_bytes()

    with pytest.raises(ConfigError) as info:
        load_project(project)

    err = info.value
    line = marked_line(MIN + case.text)
    assert err.file == str(pfile)
    assert err.field == case.field
    assert err.line == line
    assert err.reason is not None and case.reason in err.reason, err.reason
    assert str(err) == f"{pfile}:{line}: {case.field}: {err.reason}"
    details = err.to_wire()["data"]["details"]
    assert (details["file"], details["field"], details["line"]) == (str(pfile), case.field, line)
    assert pfile.read_bytes() == raw_before
    assert tree_hash(project.parent) == before


def test_the_table_covers_each_rule() -> None:
    assert len({c.id for c in CASES}) == len(CASES)
    fields = {c.field for c in CASES}
    for name in (
        "address",
        "partition",
        "time",
        "mem",
        "account",
        "qos",
        "sbatch_args",
        "cpus",
        "gpus",
        "type",
        "poll_interval_sec",
        "command_timeout_sec",
    ):
        assert f"advanced.backend.{name}" in fields, name
    assert "run.parallel" in fields


# -- good inputs -------------------------------------------------------------------------


def test_absent_backend_and_parallel_mean_local_and_one(project: Path) -> None:
    write(project / PFILE, MIN)
    spec = load_project(project)
    assert spec.advanced.backend == BackendSpec()
    assert spec.advanced.backend.type == "local"
    assert spec.advanced.backend.poll_interval_sec == 1.0
    assert spec.advanced.backend.command_timeout_sec == 30.0
    assert spec.run.parallel == 1
    assert isinstance(make_backend(spec.advanced.backend, {}), LocalBackend)


def test_an_empty_backend_mapping_is_local(project: Path) -> None:
    write(project / PFILE, MIN + "advanced:\n  backend: {}\n")
    assert load_project(project).advanced.backend == BackendSpec()


def test_slurm_backend_with_partition_and_cpus(project: Path) -> None:
    write(
        project / PFILE,
        MIN + "run:\n  parallel: 4\nadvanced:\n  backend: {type: slurm, partition: x, cpus: 4}\n",
    )
    spec = load_project(project)
    b = spec.advanced.backend
    assert (b.type, b.partition, b.cpus, b.gpus, b.address) == ("slurm", "x", 4, None, None)
    assert spec.run.parallel == 4
    made = make_backend(b, {"PATH": "/nowhere"})
    assert isinstance(made, SlurmBackend)
    # the whole-number float from YAML reaches sbatch as an integer
    assert made.options.cpus == 4 and isinstance(made.options.cpus, int)
    assert made.options.partition == "x"


def test_every_slurm_option_is_accepted(project: Path) -> None:
    write(
        project / PFILE,
        MIN
        + backend(
            "    type: slurm\n    partition: gpu\n    time: '02:00:00'\n    cpus: 8\n"
            "    gpus: 1\n    mem: 32G\n    account: my-project\n    qos: normal\n"
            "    sbatch_args: ['--constraint=a100', '--exclusive']\n"
            "    poll_interval_sec: 0.25\n    command_timeout_sec: 5\n"
        ),
    )
    b = load_project(project).advanced.backend
    assert b == BackendSpec(
        type="slurm",
        partition="gpu",
        time="02:00:00",
        cpus=8,
        gpus=1,
        mem="32G",
        account="my-project",
        qos="normal",
        sbatch_args=("--constraint=a100", "--exclusive"),
        poll_interval_sec=0.25,
        command_timeout_sec=5,
    )


def test_ray_backend_with_fractional_cpus(project: Path) -> None:
    write(
        project / PFILE,
        MIN + "advanced:\n  backend: {type: ray, address: 'http://127.0.0.1:8265', cpus: 0.5}\n",
    )
    b = load_project(project).advanced.backend
    assert (b.type, b.address, b.cpus) == ("ray", "http://127.0.0.1:8265", 0.5)


@pytest.mark.parametrize("address", ["http://head-node:8265", "https://ray.example.org/api"])
def test_ray_accepts_http_and_https(project: Path, address: str) -> None:
    write(project / PFILE, MIN + backend(f"    type: ray\n    address: '{address}'\n    gpus: 0\n"))
    assert load_project(project).advanced.backend.address == address


@pytest.mark.parametrize("parallel", [1, 2, 64])
def test_parallel_bounds_are_inclusive(project: Path, parallel: int) -> None:
    write(project / PFILE, MIN + f"run:\n  parallel: {parallel}\n")
    assert load_project(project).run.parallel == parallel


def test_empty_sbatch_args_are_fine_with_local(project: Path) -> None:
    write(project / PFILE, MIN + backend("    type: local\n    sbatch_args: []\n"))
    assert load_project(project).advanced.backend == BackendSpec()


# -- saving keeps the block ----------------------------------------------------------------

COMMENTED = (
    MIN
    + """\
run:
  max_rounds: 6
  parallel: 2          # two candidates per step
advanced:
  security_mode: unsafe
  backend:
    type: slurm        # the site's cluster
    partition: gpu
    cpus: 4
    gpus: 1
    sbatch_args: ['--constraint=a100']
"""
)


def test_saving_an_unchanged_spec_keeps_the_file_byte_for_byte(project: Path) -> None:
    pfile = write(project / PFILE, COMMENTED)
    spec = load_project(project)
    save_project_files(project, spec.to_project_file(), spec.to_tuning_file())
    assert pfile.read_text() == COMMENTED
    assert load_project(project).advanced.backend == spec.advanced.backend


def test_saving_another_field_keeps_the_backend_block_and_its_comments(project: Path) -> None:
    pfile = write(project / PFILE, COMMENTED)
    spec = load_project(project)
    prj = spec.to_project_file()
    bumped = msgspec.structs.replace(prj, run=msgspec.structs.replace(prj.run, parallel=3))

    save_project_files(project, bumped, spec.to_tuning_file())

    after = pfile.read_text()
    assert after == COMMENTED.replace("parallel: 2 ", "parallel: 3 ")
    reloaded = load_project(project)
    assert reloaded.run.parallel == 3
    assert reloaded.advanced.backend == spec.advanced.backend


def test_a_backend_written_by_save_reads_back_the_same(project: Path) -> None:
    pfile = write(project / PFILE, MIN)
    spec = load_project(project)
    prj = spec.to_project_file()
    ray = BackendSpec(type="ray", address="http://127.0.0.1:8265", cpus=0.5, gpus=1)
    new = msgspec.structs.replace(
        prj,
        run=msgspec.structs.replace(prj.run, parallel=4),
        advanced=msgspec.structs.replace(prj.advanced, backend=ray),
    )

    save_project_files(project, new, spec.to_tuning_file())

    assert load_project_file(pfile) == new
    reloaded = load_project(project)
    assert reloaded.advanced.backend == ray
    assert reloaded.run.parallel == 4
    assert reloaded.to_project_file() == new


def test_switching_back_to_local_drops_the_slurm_options(project: Path) -> None:
    pfile = write(project / PFILE, COMMENTED)
    spec = load_project(project)
    prj = spec.to_project_file()
    local = msgspec.structs.replace(
        prj, advanced=msgspec.structs.replace(prj.advanced, backend=BackendSpec())
    )

    save_project_files(project, local, spec.to_tuning_file())

    text = pfile.read_text()
    for option in ("partition", "cpus", "gpus", "constraint"):
        assert option not in text
    assert "type: local" in text
    assert load_project(project).advanced.backend == BackendSpec()


def test_saving_an_invalid_backend_changes_nothing(project: Path) -> None:
    pfile = write(project / PFILE, COMMENTED)
    spec = load_project(project)
    prj = spec.to_project_file()
    before = tree_hash(project.parent)
    bad = msgspec.structs.replace(
        prj, advanced=msgspec.structs.replace(prj.advanced, backend=BackendSpec(type="ray"))
    )

    with pytest.raises(ConfigError) as info:
        save_project_files(project, bad, spec.to_tuning_file())

    assert info.value.file == str(pfile)
    assert info.value.field == "advanced.backend.address"
    assert "needs the address" in (info.value.reason or "")
    assert tree_hash(project.parent) == before
