"""A new user's first sessions on projects trainee did not write (issue 15), through the real
CLI and daemon, guarded rounds in real bwrap: the outputs folder handed to the project's own
option, ``{...}`` variables and ``${...}`` interpolations, ``launch.env``, a shell command
without ``launch.command``, a real ``@hydra.main`` app, a failed baseline that ends the
session with the fix, dry-run numbering after a real session, and doctor on a coloured log."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, run_cli
from tests.support.extras import needs

pytestmark = pytest.mark.e2e

# An argparse script that, like many, writes into ``-o out`` (relative to the project)
# unless told otherwise, and prints its metric in colour.
TRAIN = """\
import argparse, json, os, sys

p = argparse.ArgumentParser()
p.add_argument("-o", "--out", default="out")
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--ckpt", default=None)
p.add_argument("--note", default="")
args = p.parse_args()
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "metrics.json"), "w") as fh:
    json.dump({"lr": args.lr}, fh)
seen = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "NO_COLOR", "CKPT_DIR")}
print("RUN " + json.dumps({"argv": sys.argv[1:], "env": seen}))
print("step 1/2\\rstep 2/2")
print(f"\\x1b[1;32mval_loss\\x1b[0m={abs(args.lr - 0.03) + 0.5:.4f}")
"""

PROJECT = """\
version: 1
launch:
  command: [python, train.py]
run:
  max_rounds: 1
  timeout_minutes: 2
metrics:
  specs:
    - name: val_loss
      source: stdout_regex
      key_or_pattern: 'val_loss=(?P<value>[0-9.]+)'
"""

TUNING = """\
version: 1
params:
  - name: lr
    flag: --lr
    type: float
    default: 0.1
    min_value: 0.001
    max_value: 0.5
"""


def project(root: Path, project_yaml: str, files: dict[str, str], tuning: str = TUNING) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    (root / ".trainee").mkdir(parents=True)
    (root / ".trainee" / "project.yaml").write_text(textwrap.dedent(project_yaml))
    (root / ".trainee" / "tuning.yaml").write_text(tuning)
    return root


def run(daemon: Daemon, root: Path, *args: str) -> tuple[int, str]:
    result = run_cli("run", str(root), "--policy", "random", *args, env=daemon.env, timeout=120)
    return result.returncode, result.stdout + result.stderr


def session(daemon: Daemon, root: Path, sid: str) -> dict[str, Any]:
    got = daemon.cli("call", "loop_get", "--input", json.dumps({"project_root": str(root),
                     "session": sid}))  # fmt: skip
    assert got.returncode == 0, got.stderr
    state: dict[str, Any] = got.json()
    return state


def run_line(log: Path) -> dict[str, Any]:
    line = next(x for x in log.read_text().splitlines() if x.startswith("RUN "))
    seen: dict[str, Any] = json.loads(line[4:])
    return seen


def test_output_flag_failed_baseline_dry_run_numbering_and_doctor(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    no_scratch = PROJECT + "advanced:\n  scratch_cwd: false\n"
    root = project(tmp_path / "charnn", no_scratch, {"train.py": TRAIN})
    trainee = root / ".trainee"

    # 1. guarded in the project itself (no scratch folder), nothing redirects "-o out": the
    # baseline fails on the read-only project, the session is failed (exit 1) and says
    # what to set instead of tuning nothing
    code, out = run(module_venv_daemon, root, "--max-rounds", "3")
    assert code == 1, out
    assert "session-0001: failed (baseline_failed)" in out
    assert "Read-only file system: 'out'" in out  # the log's tail
    assert "output.flag" in out and "nothing to tune" in out
    first = session(module_venv_daemon, root, "session-0001")
    assert [r["status"] for r in first["rounds"]] == ["failed"]  # no decision after it
    assert first["session"]["status"] == "failed"

    # 2. the dry run shows what the next session really gets, and creates nothing
    before = sorted(p.name for p in (trainee / "runs").iterdir())
    dry = module_venv_daemon.cli("run", str(root), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    shown = dry.json()
    assert shown["session"] == "session-0002" and shown["round"] == 1
    assert shown["env"]["TRAINEE_SESSION_ID"] == "session-0002"
    assert shown["env"]["TRAINEE_ROUND_DIR"] == str(trainee / "runs/session-0002/round-0001")
    assert sorted(p.name for p in (trainee / "runs").iterdir()) == before
    text = module_venv_daemon.cli("run", str(root), "--dry-run").stdout
    assert "the next session would be session-0002" in text

    # 3. output.flag hands the round's outputs folder to -o: the same script now works
    yaml = trainee / "project.yaml"
    yaml.write_text(yaml.read_text() + "output:\n  flag: -o\n")
    code, out = run(module_venv_daemon, root)
    assert code == 0, out
    outputs = trainee / "runs/session-0002/round-0001/outputs"
    assert json.loads((outputs / "metrics.json").read_text()) == {"lr": 0.1}
    assert not (root / "out").exists()
    second = session(module_venv_daemon, root, "session-0002")
    assert second["session"]["status"] == "finished"
    assert second["rounds"][0]["primary_metric"] == pytest.approx(0.57)

    # the failed session, resumed after the fix, starts again from a baseline
    resumed = run_cli("run", str(root), "--resume", "session-0001", "--max-rounds", "2",
                      env=module_venv_daemon.env, timeout=120)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    rounds = session(module_venv_daemon, root, "session-0001")["rounds"]
    assert [(r["status"], r["verdict"], r["diff"]) for r in rounds] == [
        ("failed", "rejected", {}),
        ("completed", "baseline", {}),
    ]

    # 4. doctor reads that coloured, \r-rewritten log as the runtime did; --policy tpe
    # needs no provider (none is configured here)
    doctor = module_venv_daemon.cli("doctor", str(root), "--policy", "tpe", "--json")
    assert doctor.returncode == 0, doctor.stdout
    rows = {c["name"]: c for c in doctor.json()["checks"]}
    assert rows["metrics"]["status"] == "pass" and "matched val_loss" in rows["metrics"]["detail"]
    assert rows["provider"]["detail"] == "policy tpe needs no provider"
    default = module_venv_daemon.cli("doctor", str(root), "--json")  # decision.policy: llm
    assert {c["name"]: c for c in default.json()["checks"]}["provider"]["status"] == "fail"
    bad = module_venv_daemon.cli("doctor", str(root), "--policy", "tpee")
    assert bad.returncode == 2 and "did you mean 'tpe'" in bad.stderr


# A script that writes into its working folder with no option to say where (a callback's
# image, MLflow's ./mlruns, its own metric file), reads data at a relative path and
# imports a module beside it.
CWD_WRITER = """\
import json, os, sys
import helper
p = sys.argv[sys.argv.index("--lr") + 1] if "--lr" in sys.argv else "0.1"
text = open("data/words.txt").read()
os.makedirs("mlruns/0", exist_ok=True)
with open("mlruns/0/meta.yaml", "w") as fh:
    fh.write("name: run\\n")
with open("grid_0.png", "wb") as fh:
    fh.write(b"PNG")
with open("log.jsonl", "a") as fh:
    fh.write(json.dumps({"val_loss": helper.loss(float(p), len(text))}) + "\\n")
print("cwd", os.getcwd())
"""

CWD_PROJECT = """\
version: 1
launch:
  command: [python, train.py]
run:
  max_rounds: 2
  timeout_minutes: 2
metrics:
  specs:
    - name: val_loss
      source: jsonl
      key_or_pattern: val_loss
      path: log.jsonl
"""


def test_a_guarded_round_writes_its_working_folder_in_the_round_not_the_project(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    """advanced.scratch_cwd (on by default, guarded): the job runs in {round_dir}/cwd,
    links to the project's entries; what it writes there stays with the round, the
    project is unchanged, and a relative metric file is read from there."""
    files = {
        "train.py": CWD_WRITER,
        "helper.py": "def loss(lr, n):\n    return round(abs(lr - 0.03) + n / 1000, 4)\n",
        "data/words.txt": "abcde\n",
    }
    root = project(tmp_path / "cwdw", CWD_PROJECT, files)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".trainee" not in p.parts)
    code, out = run(module_venv_daemon, root)
    assert code == 0, out
    state = session(module_venv_daemon, root, "session-0001")
    assert [r["status"] for r in state["rounds"]] == ["completed", "completed"], out
    assert state["rounds"][0]["primary_metric"] == pytest.approx(0.076)
    for index in (1, 2):
        cwd = root / ".trainee" / f"runs/session-0001/round-000{index}" / "cwd"
        assert (cwd / "grid_0.png").read_bytes() == b"PNG"
        assert (cwd / "mlruns/0/meta.yaml").is_file()
        assert len((cwd / "log.jsonl").read_text().splitlines()) == 1  # each round its own
        assert (cwd / "train.py").is_symlink() and not (cwd / ".trainee").exists()
        log = root / ".trainee" / f"artifacts/session-0001/round-000{index}.log"
        assert f"cwd {cwd}" in log.read_text()
    after = sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".trainee" not in p.parts)
    assert after == before  # the project is as it was

    # without the scratch folder the same script fails on the read-only project
    pfile = root / ".trainee" / "project.yaml"
    text = pfile.read_text().replace("path: log.jsonl", "path: '{round_dir}/log.jsonl'")
    pfile.write_text(text + "advanced:\n  scratch_cwd: false\n")
    code, out = run(module_venv_daemon, root)
    assert code == 1 and "Read-only file system" in out, out


VALUES = """\
version: 1
launch:
  {command}
  env:
    OMP_NUM_THREADS: 1
    NO_COLOR: 1
    CKPT_DIR: "{{outputs_dir}}/ckpt"
run:
  max_rounds: 1
  fixed_args:
    - flag: --ckpt
      value: "{{round_dir}}/ckpt"
    - flag: --note
      value: "${{oc.env:HOME}} {{{{outputs_dir}}}}"
output:
  flag: --out
metrics:
  specs:
    - name: val_loss
      source: stdout_regex
      key_or_pattern: 'val_loss=(?P<value>[0-9.]+)'
advanced:
  security_mode: {mode}
  {shell}
"""


@pytest.mark.parametrize(
    ("mode", "shell"),
    [("guarded", False), ("unsafe", False), ("guarded", True)],
    ids=["guarded", "unsafe", "shell-command-guarded"],
)
def test_values_placeholders_and_launch_env_reach_the_job(
    module_venv_daemon: Daemon, tmp_path: Path, mode: str, shell: bool
) -> None:
    text = VALUES.format(
        mode=mode,
        command="" if shell else "command: [python, train.py]",
        shell='shell_command: "OMP=$OMP_NUM_THREADS; exec python train.py {extra_args}"'
        if shell
        else "",
    )
    root = project(tmp_path / "p", text, {"train.py": TRAIN})
    code, out = run(module_venv_daemon, root)
    assert code == 0, out
    rnd = root / ".trainee/runs/session-0001/round-0001"
    seen = run_line(root / ".trainee/artifacts/session-0001/round-0001.log")
    assert seen["argv"] == [
        "--ckpt",
        f"{rnd}/ckpt",
        "--note",
        "${oc.env:HOME} {outputs_dir}",  # an interpolation and the literal: as written
        "--out",
        str(rnd / "outputs"),
        "--lr",
        "0.1",
    ]
    assert seen["env"] == {
        "OMP_NUM_THREADS": "1",
        "NO_COLOR": "1",
        "CKPT_DIR": f"{rnd}/outputs/ckpt",
    }
    assert (rnd / "outputs" / "metrics.json").is_file()


HYDRA_APP = """\
import os

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    out = HydraConfig.get().runtime.output_dir
    with open(os.path.join(out, "note.txt"), "w") as fh:
        fh.write(cfg.trainer.note)
    print(f"width={cfg.model.width} steps={cfg.trainer.steps}")
    print(f"val_loss={abs(cfg.optimizer.lr - 0.03) + 1.0 / cfg.model.width:.5f}")


if __name__ == "__main__":
    main()
"""

HYDRA_PROJECT = """\
version: 1
launch:
  command: [python, app.py]
  baseline_config: conf/config.yaml
  config_style: hydra
  args:
    - flag: model
      value: wide
run:
  max_rounds: 2
  fixed_args:
    - flag: +trainer.note
      value: ${oc.env:TRAINEE_SESSION_ID}
metrics:
  specs:
    - name: val_loss
      source: stdout_regex
      key_or_pattern: 'val_loss=(?P<value>[0-9.]+)'
"""

HYDRA_TUNING = """\
version: 1
params:
  - name: lr
    override: optimizer.lr
    type: float
    default: 0.1
    min_value: 0.001
    max_value: 0.5
  - name: steps
    config_path: trainer.steps
    type: int
    min_value: 1
    max_value: 9
"""


@needs("hydra")
def test_a_real_hydra_app_runs_guarded_with_its_groups_and_outputs(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    files = {
        "app.py": HYDRA_APP,
        "conf/config.yaml": "defaults:\n  - model: small\n  - _self_\n"
        "optimizer:\n  lr: 0.1\ntrainer:\n  steps: 3\n",
        "conf/model/small.yaml": "width: 4\n",
        "conf/model/wide.yaml": "width: 16\n",
    }
    root = project(tmp_path / "hy", HYDRA_PROJECT, files, HYDRA_TUNING)
    code, out = run(module_venv_daemon, root)
    assert code == 0, out
    state = session(module_venv_daemon, root, "session-0001")
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed", "completed"]
    # the group choice of launch.args (model=wide) resolved from the project's conf/
    assert rounds[0]["primary_metric"] == pytest.approx(0.07 + 1 / 16)
    runs = root / ".trainee/runs/session-0001"
    log = (root / ".trainee/artifacts/session-0001/round-0001.log").read_text()
    assert "width=16 steps=3" in log
    outputs = runs / "round-0001/outputs"
    assert (outputs / "note.txt").read_text() == "session-0001"  # ${oc.env:...} untouched
    assert (outputs / ".hydra" / "config.yaml").is_file()  # hydra.run.dir = outputs/
    command = rounds[0]["command"]
    assert f"--config-path {runs / 'round-0001'} --config-name config" in command
    assert "--config " not in command and not (root / "outputs").exists()
    second = rounds[1]["params"]
    assert (
        f"width=16 steps={second['steps']}"
        in (root / ".trainee/artifacts/session-0001/round-0002.log").read_text()
    )
