"""Project setup through the real CLI and daemon: init, prepare, tunables, doctor, run --dry-run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.daemon import REPO, Daemon

pytestmark = pytest.mark.e2e


def _tree_hash(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _project(tmp_path: Path, *, tuning: str = "version: 1\nparams: []\n", **launch: object) -> Path:
    """A tiny project whose train.py prints its argv; launch fields given as YAML snippets."""
    root = tmp_path / "proj"
    (root / ".trainee").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "train.py").write_text(
        "import sys, json\nprint(json.dumps(sys.argv[1:]))\nprint('loss=0.5')\n"
    )
    (root / "configs").mkdir()
    (root / "configs" / "base.yaml").write_text(
        "# base\nout:\n  dir: outputs  # where\nopt:\n  lr: 0.01\n"
    )
    project = {
        "version": 1,
        "data": [{"path": "data", "flag": "--data-root"}],
        "launch": {
            "environment": "system",
            "command": ["python", "train.py"],
            "baseline_config": "configs/base.yaml",
            "args": [{"flag": "--seed", "value": 7}],
            **launch,
        },
        "run": {
            "max_rounds": 2,
            "timeout_minutes": 1,
            "fixed_args": [{"flag": "--max-iter", "value": 10}],
        },
        "output": {"config_path": "out.dir"},
        "advanced": {"security_mode": "unsafe"},
    }
    (root / ".trainee" / "project.yaml").write_text(json.dumps(project, indent=2))
    (root / ".trainee" / "tuning.yaml").write_text(tuning)
    return root


def _dry(daemon: Daemon, root: Path, *extra: str) -> dict[str, object]:
    result = daemon.cli("run", str(root), "--dry-run", "--json", *extra)
    assert result.returncode == 0, result.stderr + result.stdout
    return result.json()


def test_init_is_non_destructive_and_force_rewrites(daemon: Daemon, tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "train.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', type=float, default=0.1)\n"
        "p.add_argument('--epochs', type=int, default=3)\nargs = p.parse_args()\nprint('loss=1')\n"
    )
    first = daemon.cli("init", str(root), "--skip-provider-test")
    assert first.returncode == 0, first.stderr
    assert "created:" in first.stdout and ".trainee/project.yaml" in first.stdout
    for name in ("project.yaml", "tuning.yaml", "context.md", "README.md", ".gitignore"):
        assert (root / ".trainee" / name).is_file(), name
    for name in ("logs", "runs", "artifacts"):
        assert (root / ".trainee" / name).is_dir(), name
    before = _tree_hash(root)
    second = daemon.cli("init", str(root), "--skip-provider-test")
    assert second.returncode == 0
    assert "kept (use --force to rewrite)" in second.stdout
    assert _tree_hash(root) == before
    (root / ".trainee" / "context.md").write_text("my notes\n")
    forced = daemon.cli("init", str(root), "--skip-provider-test", "--force")
    assert forced.returncode == 0 and "rewritten:" in forced.stdout
    # --force never drops what the user wrote: the edited context.md is kept, and said so
    assert (root / ".trainee" / "context.md").read_text() == "my notes\n"
    assert "context.md was edited since init wrote it and was kept" in forced.stdout


def test_init_refuses_a_baseline_config_outside_the_project(daemon: Daemon, tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("a: 1\n")
    result = daemon.cli(
        "init", str(root), "--baseline-config", str(outside), "--skip-provider-test"
    )
    assert result.returncode == 3, result.stdout
    assert f"--baseline-config {outside}: must point to a file inside the project" in result.stderr
    assert not (root / ".trainee").exists()


def test_prepare_fills_tuning_and_never_lists_excluded_fields(
    daemon: Daemon, tmp_path: Path
) -> None:
    root = tmp_path / "yaml-config"
    shutil.copytree(REPO / "examples" / "yaml-config", root)
    (root / ".trainee" / "tuning.yaml").write_text("version: 1\nparams: []\n")
    result = daemon.cli("prepare", str(root), "--skip-provider-test", "--json")
    assert result.returncode == 0, result.stderr
    prep = result.json()["prepare"]
    assert prep["tuning"] == "filled" and prep["params_written"]
    tuning = (root / ".trainee" / "tuning.yaml").read_text()
    assert "optimizer.lr" in tuning
    assert "output.root" not in tuning  # output.config_path is never tunable
    again = daemon.cli("prepare", str(root), "--skip-provider-test", "--json").json()["prepare"]
    assert again["tuning"] == "kept"


def test_tunables_discover_suggests_then_applies(daemon: Daemon, tmp_path: Path) -> None:
    root = tmp_path / "mlp"
    shutil.copytree(REPO / "examples" / "mlp-flags", root)
    (root / ".trainee" / "tuning.yaml").write_text("version: 1\nparams: []\n")
    shown = daemon.cli("tunables", "discover", str(root), "--json")
    assert shown.returncode == 0, shown.stderr
    names = [s["name"] for s in shown.json()["suggestions"]]
    assert "lr" in names
    flags = {s.get("flag") for s in shown.json()["suggestions"]}
    assert "--epochs" not in flags and "--data-root" not in flags  # fixed_args and data flags
    assert (root / ".trainee" / "tuning.yaml").read_text() == "version: 1\nparams: []\n"
    applied = daemon.cli("tunables", "discover", str(root), "--apply", "--limit", "3")
    assert applied.returncode == 0, applied.stderr
    assert "written to tuning.yaml" in applied.stdout
    assert "--lr" in (root / ".trainee" / "tuning.yaml").read_text()


@pytest.mark.parametrize(
    ("breakage", "check", "fix"),
    [
        ("data", "data", "fix data[].path"),
        ("config", "config", ".trainee/project.yaml"),
        ("venv", "environment", "python -m venv .venv"),
        ("launcher", "launcher", "fix launch.command"),
        ("entrypoint", "entrypoint", "set launch.command"),
        ("metric", "metrics", "fix metrics.specs[].key_or_pattern"),
    ],
)
def test_doctor_names_the_fix_for_each_failure(
    daemon: Daemon, tmp_path: Path, breakage: str, check: str, fix: str
) -> None:
    root = _project(tmp_path)
    project_yaml = root / ".trainee" / "project.yaml"
    data = json.loads(project_yaml.read_text())
    if breakage == "data":
        shutil.rmtree(root / "data")
        data.pop("data")
        data["data"] = [{"path": "data", "flag": "--data-root"}]
    elif breakage == "config":
        data["run"]["max_rounds"] = 0
    elif breakage == "venv":
        data["launch"]["environment"] = "venv"
    elif breakage == "launcher":
        data["launch"]["command"] = ["no-such-launcher-xyz", "train.py"]
    elif breakage == "entrypoint":
        data["launch"]["command"] = ["python", "missing_train.py"]
    elif breakage == "metric":
        data["metrics"] = {
            "specs": [{"name": "acc", "source": "stdout_regex", "key_or_pattern": "acc=(\\d+)"}]
        }
        log = root / ".trainee" / "artifacts" / "session-0001" / "round-0001.log"
        log.parent.mkdir(parents=True)
        log.write_text("epoch=1 loss=0.3\n")
        # only a round that finished well is used (not a running or stopped one)
        done = root / ".trainee" / "control" / "session-0001" / "round-0001" / "exit.json"
        done.parent.mkdir(parents=True)
        done.write_text('{"returncode": 0, "stopped": false}')
        running = log.with_name("round-0002.log")
        running.write_text("epoch=1 acc=9\n")  # newer, but its round has no exit.json yet

    project_yaml.write_text(json.dumps(data))
    if breakage == "data":
        # a missing data folder is a config error at load time; doctor reports it as such
        check, fix = "config", ".trainee/project.yaml"
    result = daemon.cli("doctor", str(root), "--skip-provider-test", "--json")
    assert result.returncode == 1, result.stdout
    report = result.json()
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == [check], failed
    assert fix in failed[0]["fix"]


def test_doctor_passes_on_a_ready_project(daemon: Daemon, tmp_path: Path) -> None:
    root = _project(tmp_path)
    result = daemon.cli("doctor", str(root), "--skip-provider-test")
    assert result.returncode == 0, result.stdout
    assert "sandbox" in result.stdout


def test_dry_run_prints_the_command_in_order_and_creates_no_database(
    daemon: Daemon, tmp_path: Path
) -> None:
    tuning = textwrap.dedent(
        """\
        version: 1
        params:
          - name: lr
            flag: --lr
            type: float
            default: 0.001
            min_value: 0.00001
            max_value: 0.1
          - name: opt_lr
            config_path: opt.lr
            type: float
            min_value: 0.0001
            max_value: 1.0
        """
    )
    root = _project(tmp_path, tuning=tuning)
    out = _dry(daemon, root)
    argv = out["argv"]
    config = str(root / ".trainee" / "runs" / "session-0001" / "round-0001" / "config.yaml")
    assert argv == [
        "python", "train.py",
        "--config", config,                       # 1. per-round config
        "--seed", "7",                            # 2. launch.args
        "--data-root", str(root / "data"),        # 3. data flags
        "--max-iter", "10",                       # 4. run.fixed_args
        "--lr", "0.001",                          # 5. tunables with a flag
    ]  # fmt: skip
    assert "-  dir: outputs" in out["config_diff"]
    assert "opt" not in out["config_diff"].split("@@")[-1].replace(
        "opt:", ""
    )  # unchanged baseline lr
    assert out["env"]["PYTHONUNBUFFERED"] == "1"
    assert out["env"]["HOME"] == str(root / ".trainee" / "cache" / "home")
    assert not (root / ".trainee" / "runtime.sqlite3").exists()
    assert not (root / ".trainee" / "runs").exists()
    text = daemon.cli("run", str(root), "--dry-run")
    assert "nothing was started" in text.stdout


@pytest.mark.parametrize(
    ("environment", "extra", "prefix"),
    [
        ("system", {}, ["python", "train.py"]),
        ("uv", {}, ["uv", "run", "python", "train.py"]),
        (
            "conda",
            {"env_name": "trainer"},
            ["conda", "run", "--no-capture-output", "-n", "trainer", "python", "train.py"],
        ),
        ("venv", {}, ["{root}/.venv/bin/python", "train.py"]),
    ],
)
def test_each_environment_prefix(
    daemon: Daemon, tmp_path: Path, environment: str, extra: dict[str, str], prefix: list[str]
) -> None:
    root = _project(tmp_path, environment=environment, **extra)
    if environment == "venv":
        (root / ".venv" / "bin").mkdir(parents=True)
        os.symlink(sys.executable, root / ".venv" / "bin" / "python")
    argv = _dry(daemon, root)["argv"]
    assert argv[: len(prefix)] == [p.replace("{root}", str(root)) for p in prefix]


@pytest.mark.parametrize(
    ("style", "param", "expected"),
    [
        ("space", "flag: --lr", ["--lr", "0.5"]),
        ("equals", "flag: --lr", ["--lr=0.5"]),
        ("space", "override: optimizer.lr", ["optimizer.lr=0.5"]),
    ],
)
def test_each_argument_style(
    daemon: Daemon, tmp_path: Path, style: str, param: str, expected: list[str]
) -> None:
    tuning = f"version: 1\nparams:\n  - name: lr\n    {param}\n    type: float\n    default: 0.5\n"
    root = _project(tmp_path, tuning=tuning, arg_style=style)
    argv = _dry(daemon, root)["argv"]
    assert argv[-len(expected) :] == expected


def test_every_template_variable_of_shell_command(daemon: Daemon, tmp_path: Path) -> None:
    names = ["project_root", "working_dir", "trainee_dir", "extra_args", "session_id",
             "round_index", "session_dir", "round_dir", "config_path"]  # fmt: skip
    template = "python train.py " + " ".join(f"{n}={{{n}}}" for n in names)
    root = _project(tmp_path)
    data = json.loads((root / ".trainee" / "project.yaml").read_text())
    data["advanced"]["shell_command"] = template
    (root / ".trainee" / "project.yaml").write_text(json.dumps(data))
    command = _dry(daemon, root)["command"]
    trainee = root / ".trainee"
    assert f"project_root={root} " in command
    assert f"working_dir={root} " in command
    assert f"trainee_dir={trainee} " in command
    assert "extra_args=--config " in command and "--max-iter 10" in command
    assert "session_id=session-0001 " in command
    assert "round_index=1 " in command
    assert f"session_dir={trainee}/artifacts/session-0001 " in command
    assert f"round_dir={trainee}/runs/session-0001/round-0001 " in command
    assert f"config_path={trainee}/runs/session-0001/round-0001/config.yaml" in command
