"""``run.prune`` end to end: the real daemon stops losing rounds while they run.

tests/fixtures/projects/prunable is a stdlib trainer printing ``epoch N val_loss=X``
whose learning rate makes it converge, crawl, plateau or diverge, and which writes a
checkpoint when it gets SIGTERM. An agent (the external policy, through the real
socket) submits each round's plan; a losing round is given so many epochs that only a
prune ends it. Each test checks the round's status and reason where a user reads
them: the store (``loop_get``), the ledger, the report, and the job's own checkpoint.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from tests.support.daemon import Daemon
from tests.support.loop import artifacts, loop_get, read_ledgers, wait_finished
from tests.support.processes import assert_no_training_left
from tests.support.prune import FOREVER, PRUNABLE, checkpoint_of, drive
from tests.support.timing import scaled

pytestmark = pytest.mark.e2e


def project_with(tmp_path: Path, prune: dict[str, Any]) -> Path:
    project = tmp_path / "prunable"
    shutil.copytree(PRUNABLE, project)
    path = project / ".trainee" / "project.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["run"]["prune"] = prune
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return project


def rounds_of(daemon: Daemon, project: Path) -> dict[int, dict[str, Any]]:
    state = wait_finished(daemon.env, project, timeout=scaled(60))
    assert state["session"]["stop_reason"] == "max_rounds", state["session"]
    return {r["index"]: r for r in state["rounds"]}


def reason_of(rnd: dict[str, Any]) -> str:
    """The round's error text (first of its warnings), which starts ``pruned: ``."""
    assert rnd["status"] == "pruned", rnd
    reason = str(rnd["warnings"][0])
    assert reason.startswith("pruned: ")
    return reason


def test_a_diverging_round_is_pruned_by_the_threshold_rule_and_saves_its_checkpoint(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    project = project_with(
        tmp_path, {"min_steps": 2, "rules": [{"rule": "threshold", "above": 100}]}
    )
    results = drive(
        module_venv_daemon,
        project,
        [{"lr": 1.2, "epochs": FOREVER}, {"lr": 1e200, "epochs": FOREVER}],
    )
    assert [r["status"] for r in results] == ["completed", "pruned", "pruned"]
    rounds = rounds_of(module_venv_daemon, project)
    assert rounds[1]["status"] == "completed"  # the baseline is never pruned

    diverged = reason_of(rounds[2])
    found = re.fullmatch(
        r"pruned: threshold rule: val_loss (\S+) at step (\d+) above the bound 100", diverged
    )
    assert found, diverged
    assert float(found.group(1)) > 100 and int(found.group(2)) >= 2
    # stopped through the usual stop: SIGTERM, and the job had its grace to save its state
    ckpt = checkpoint_of(rounds[2])
    assert ckpt["why"] == "sigterm" and ckpt["epoch"] >= int(found.group(2))
    assert ckpt["epoch"] < FOREVER

    # inf on the first epoch: pruned at once, min_steps or not
    overflow = reason_of(rounds[3])
    assert overflow == "pruned: threshold rule: val_loss is not a number ('inf' at step 1)"
    assert results[2]["verdict"] == "rejected"
    assert results[2]["verdict_reason"].startswith(overflow)

    rows_csv, _ = read_ledgers(project)
    assert [r["status"] for r in rows_csv] == ["completed", "pruned", "pruned"]
    report = (artifacts(project) / "report.md").read_text()
    pruned = report.split("## Pruned rounds\n\n")[1].split("\n\n")[0].strip().splitlines()
    assert pruned == [f"- Round 2: {diverged}", f"- Round 3: {overflow}"]
    assert_no_training_left(project)


def test_a_plateau_is_pruned_by_patience(module_venv_daemon: Daemon, tmp_path: Path) -> None:
    project = project_with(
        tmp_path,
        {"min_steps": 2, "rules": [{"rule": "patience", "patience": 3, "min_delta": 0.01}]},
    )
    results = drive(module_venv_daemon, project, [{"lr": 0.0, "epochs": FOREVER}])
    assert [r["status"] for r in results] == ["completed", "pruned"]
    rounds = rounds_of(module_venv_daemon, project)
    reason = reason_of(rounds[2])
    # lr 0: val_loss stays 9.05 from the first epoch on
    found = re.fullmatch(
        r"pruned: patience rule: val_loss not improved by more than 0.01 for (\d+) steps "
        r"\(best 9.05 at step 1, 9.05 at step (\d+); patience 3\)",
        reason,
    )
    assert found, reason
    assert int(found.group(1)) >= 3 and int(found.group(2)) == int(found.group(1)) + 1
    assert checkpoint_of(rounds[2])["why"] == "sigterm"
    assert_no_training_left(project)


def test_a_median_prune_after_warm_up_rounds(module_venv_daemon: Daemon, tmp_path: Path) -> None:
    project = project_with(
        tmp_path, {"min_steps": 2, "warmup_rounds": 2, "rules": [{"rule": "median"}]}
    )
    results = drive(
        module_venv_daemon,
        project,
        [
            {"lr": 0.02, "epochs": 12},  # crawls, but only the baseline has completed
            {"lr": 0.02, "epochs": FOREVER},  # crawls after two completed rounds: pruned
            {"lr": 0.35},  # better than the median: runs to its end
        ],
    )
    assert [r["status"] for r in results] == ["completed", "completed", "pruned", "completed"]
    rounds = rounds_of(module_venv_daemon, project)
    reason = reason_of(rounds[3])
    found = re.fullmatch(
        r"pruned: median rule: val_loss (\S+) at step (\d+) worse than the median (\S+) "
        r"of 2 rounds \(1, 2\)",
        reason,
    )
    assert found, reason
    assert float(found.group(1)) > float(found.group(3))
    assert rounds[4]["warnings"] == [] or not rounds[4]["warnings"][0].startswith("pruned")
    # the pruned round used up the budget (max_rounds 4 reached), unlike a user stop
    assert len(rounds) == 4
    assert_no_training_left(project)


def test_a_noisy_win_does_not_become_the_best(module_venv_daemon: Daemon, tmp_path: Path) -> None:
    """run.noise: the baseline on three seeds measures the floor (the seed moves the
    final loss by up to 0.02 here); a lucky seed and a gain within the floor stay
    neutral, a gain well above it is the new best."""
    project = tmp_path / "prunable"
    shutil.copytree(PRUNABLE, project)
    path = project / ".trainee" / "project.yaml"
    doc = yaml.safe_load(path.read_text())
    del doc["run"]["prune"]
    doc["run"]["noise"] = {"seed": "seed", "repeats": 3}
    doc["launch"]["args"] = [{"flag": "--noise", "value": 0.02}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    # the seed alone: seeds 0, 1, 2 end at 0.0638, 0.0354, 0.0682 (floor 0.0178)
    results = drive(
        module_venv_daemon,
        project,
        [
            {"seed": 3},  # ends at 0.0395: better than the baseline, but only the seed changed
            {"floor": 0.04},  # 0.0538: better by 0.01, within the floor
            {"floor": 0.0},  # 0.0138: better by 0.05, a real gain
        ],
        own=3,
    )
    # rounds 2 and 3 were the baseline on seeds 1 and 2, run before any plan
    rounds = {
        r["index"]: r
        for r in wait_finished(module_venv_daemon.env, project, timeout=scaled(60))["rounds"]
    }
    assert [rounds[i]["params"]["seed"] for i in (1, 2, 3)] == [0, 1, 2]
    # seed 1 is better than the baseline: noise, not a new best
    verdicts = ["baseline", "neutral", "neutral", "neutral", "neutral", "kept"]
    assert [r["verdict"] for r in results] == verdicts
    state = loop_get(module_venv_daemon.env, project)
    assert state["session"]["best_round"] == 6
    assert results[3]["verdict_reason"].startswith(
        "the baseline's configuration on another seed: val_loss 0.0395186; "
        "val_loss 0.0517279 ± 0.016677 over 4 seeds of the baseline (rounds 1, 2, 3, 4)"
    )
    assert (
        "within the noise floor 0.016677 (4 seeds of the baseline): not a new best"
        in (results[4]["verdict_reason"])
    )
    report = (artifacts(project) / "report.md").read_text()
    assert "- **Seed noise:** val_loss 0.0517279 ± 0.016677 over 4 seeds" in report
    research = json.loads((artifacts(project) / "research_state.json").read_text())
    assert research["noise"]["rounds"] == [1, 2, 3, 4]
    assert_no_training_left(project)
