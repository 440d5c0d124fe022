"""First contact with a project, through the real CLI and daemon (issue 15, items 4-5):
init proposes the validation metric, prepare leaves mode switches out with their
reason and ties sizes by the code's own check, doctor warns about a training-loss
primary metric, and a guarded random session runs without a round crashed by a
suggested value."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.daemon import REPO, Daemon
from tests.support.loop import loop_get
from tests.support.processes import assert_no_training_left

pytestmark = pytest.mark.e2e

PROJECTS = REPO / "tests" / "projects"


def _copy(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(PROJECTS / name, root)
    return root.resolve()


def test_init_prepare_doctor_and_a_guarded_random_session(daemon: Daemon, tmp_path: Path) -> None:
    root = _copy("charlm", tmp_path)
    init = daemon.cli("init", str(root), "--skip-provider-test")
    assert init.returncode == 0, init.stderr
    assert "primary metric: val_loss (validation, min) from train.py:" in init.stdout

    prep = daemon.cli("prepare", str(root), "--skip-provider-test")
    assert prep.returncode == 0, prep.stderr
    out = prep.stdout
    assert "tuning.yaml: filled (lr, weight_decay, n_embd, n_head, context)" in out
    assert "constraint: n_embd % n_head == 0 (train.py:37 if args.n_embd % args.n_head != 0)" in out
    for flag, why in [
        ("--sample-only", "is a mode switch"),
        ("--eval-only", "is a mode switch"),
        ("--mode", "is a mode switch"),
        ("--resume", "checkpointing"),
        ("--device", "hardware placement"),
        ("--compile", "runtime numerics"),
        ("--seed", "a random seed"),
        ("--out-dir", "an output location"),
        ("--num-workers", "parallelism"),
    ]:
        assert (
            f"left out {flag}: " in out and why in out.split(f"left out {flag}: ")[1].split("\n")[0]
        )
    assert "metrics: val_loss (min, stdout_regex) (primary first)" in out
    tuning = (root / ".trainee" / "tuning.yaml").read_text()
    assert "constraints:\n  - n_embd % n_head == 0" in tuning

    shown = daemon.cli("tunables", "discover", str(root), "--json")
    got = {s["name"]: s for s in shown.json()["suggestions"]}
    heads, widths = got["n_head"]["choices"], got["n_embd"]["choices"]
    assert got["n_head"]["type"] == got["n_embd"]["type"] == "choice"
    assert all(w % h == 0 for w in widths for h in heads)  # no draw can break the check

    doctor = daemon.cli("doctor", str(root), "--skip-provider-test", "--json")
    metrics = next(c for c in doctor.json()["checks"] if c["name"] == "metrics")
    assert metrics["status"] == "pass", metrics

    run = daemon.cli(
        "run", str(root), "--policy", "random", "--guarded", "--max-rounds", "4", timeout=180
    )
    assert run.returncode == 0, run.stdout + run.stderr
    state = loop_get(daemon.env, root)
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed"] * 4, rounds
    assert all(r["primary_metric"] is not None for r in rounds)
    for r in rounds:
        assert r["params"]["n_embd"] % r["params"]["n_head"] == 0
    assert_no_training_left(root)


def test_doctor_warns_about_a_training_loss_and_names_the_validation_metric(
    daemon: Daemon, tmp_path: Path
) -> None:
    root = _copy("nanogpt_style", tmp_path)
    (root / ".trainee").mkdir()
    (root / ".trainee" / "project.yaml").write_text(
        "version: 1\nlaunch:\n  command: [python, train.py, config/train_tiny.py]\n"
        "  arg_style: equals\nrun:\n  fixed_args:\n    - {flag: --max_iters, value: 30}\n"
    )
    doctor = daemon.cli("doctor", str(root), "--skip-provider-test", "--json")
    metrics = next(c for c in doctor.json()["checks"] if c["name"] == "metrics")
    assert metrics["status"] == "warn"
    assert "the primary metric is the built-in training loss" in metrics["detail"]
    assert metrics["fix"].startswith("list val_loss first in metrics.specs (train.py:")
    assert "key_or_pattern: ',\\s*val\\s+loss\\s+(?P<value>" in metrics["fix"]

    prep = daemon.cli("prepare", str(root), "--skip-provider-test")
    assert prep.returncode == 0, prep.stderr
    assert "constraint: n_embd % n_head == 0 (model.py:" in prep.stdout
    for key in ("--eval_only", "--init_from", "--wandb_log", "--device", "--compile", "--dtype"):
        assert f"left out {key}: " in prep.stdout
    assert "note: the primary metric is the built-in training loss" in prep.stdout
