"""The best-so-far line and the primary metric are served, decided by the daemon's one
rule (goal, tolerance, noise floor): the page draws them and compares nothing itself.

A ``run.noise`` session (the prunable fixture, driven by an external agent) has a
candidate better than the baseline by less than the seed noise: a raw comparison would
call it the best, the research state does not, and ``loop_get`` says so per round.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from tests.support.daemon import Daemon
from tests.support.loop import loop_get, wait_finished
from tests.support.prune import PRUNABLE, drive
from tests.support.timing import scaled

pytestmark = pytest.mark.e2e


def test_each_round_carries_the_best_after_it_and_the_session_its_primary_metric(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    project = tmp_path / "prunable"
    shutil.copytree(PRUNABLE, project)
    path = project / ".trainee" / "project.yaml"
    doc = yaml.safe_load(path.read_text())
    del doc["run"]["prune"]
    doc["run"]["noise"] = {"seed": "seed", "repeats": 2}
    doc["launch"]["args"] = [{"flag": "--noise", "value": 0.02}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    # seeds 0 and 1 end at 0.0638 and 0.0354; floor 0.04 ends at 0.0538 (better than the
    # baseline by 0.01, within the noise), floor 0 at 0.0138 (a real gain)
    drive(module_venv_daemon, project, [{"floor": 0.04}, {"floor": 0.0}], own=2)
    wait_finished(module_venv_daemon.env, project, timeout=scaled(60))
    state = loop_get(module_venv_daemon.env, project)
    assert state["metric"] == {"name": "val_loss", "goal": "min"}
    rounds = {r["index"]: r for r in state["rounds"]}
    assert rounds[3]["primary_metric"] < rounds[1]["primary_metric"]
    assert [rounds[i]["best_after"] for i in (1, 2, 3, 4)] == [1, 1, 1, 4]
    assert state["session"]["best_round"] == 4
