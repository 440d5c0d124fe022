"""A tpe session through the real CLI and daemon on a project with constraints, whose
primary metric comes from TensorBoard event files and a second one from summary.csv.

fit.py (tests/integration/sources_project.py) crashes on ``n_embd % n_head != 0``, and
two thirds of its n_embd x n_head grid break that constraint: no round may crash, every
round's values keep both constraints, and each round's finals are the values the
script logged to TensorBoard (float32) and to the last row of its summary.csv. Rounds
run guarded (bwrap), writing only into their own round folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.integration.sources_project import expected_val_loss, write_project
from tests.support.daemon import Daemon, run_cli
from tests.support.extras import require
from tests.support.loop import call, wait_finished
from tests.support.processes import assert_no_training_left
from trainee.spec import load_project

pytestmark = pytest.mark.e2e

require("tensorboard")
require("optuna")


def test_a_tpe_session_keeps_the_constraints_and_reads_tensorboard_and_csv(
    venv_daemon: Daemon, tmp_path: Path
) -> None:
    project = write_project(tmp_path / "proj")
    constraints = load_project(project).constraints
    env = dict(venv_daemon.env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    started = run_cli("run", str(project), "--policy", "tpe", "--detach", env=env)
    assert started.returncode == 0, started.stderr + venv_daemon.log
    state = wait_finished(env, project, timeout=180)
    assert_no_training_left(project)
    assert state["session"]["status"] == "finished", state["session"]
    rounds = state["rounds"]
    assert len(rounds) == 4
    for r in rounds:
        params = r["params"]
        assert r["status"] == "completed", (r["index"], r["status"], params)
        assert all(c.holds(params) for c in constraints), params
        last = expected_val_loss({**params, "grad_accum": 4}, 2)
        got = call(env, "runs_get", {"project_root": str(project), "run_id": r["index"]})
        finals = got["round"]["finals"]
        assert finals["val_loss"] == float(np.float32(last)), (r["index"], finals)
        assert finals["eval_top1"] == round(100 - 50 * last, 4)
        assert finals["printed_val_loss"] == last
    assert len({(r["params"]["n_embd"], r["params"]["n_head"]) for r in rounds}) >= 2
