"""``run.screen`` end to end: the real daemon screens candidates at a low budget first.

tests/fixtures/projects/screenable is a stdlib trainer whose ``--epochs`` is the budget
(a run.fixed_args entry, 6 = the full budget); ``--lr`` decides how fast it converges,
and it writes a checkpoint at the end that ``--resume`` continues from. The random
policy proposes learning rates, two rounds run at once (``parallel: 2``), and each test
checks what a user reads: the store (``loop_get``), each round's command and log, the
report.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import REPO, Daemon
from tests.support.extras import needs
from tests.support.loop import (
    OK,
    artifacts,
    llm_env,
    loop_get,
    plan,
    read_ledgers,
    start,
    wait_finished,
    wait_until,
)
from tests.support.processes import assert_no_training_left
from tests.support.screen import check_ladder
from tests.support.timing import scaled
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e

FIXTURE = REPO / "tests" / "fixtures" / "projects" / "screenable"


def project_with(tmp_path: Path, **changes: Any) -> Path:
    """The fixture project with ``run.screen`` (and other ``run`` fields) changed."""
    project = tmp_path / "screenable"
    shutil.copytree(FIXTURE, project)
    path = project / ".trainee" / "project.yaml"
    doc = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if key == "fixed_args":
            doc["run"]["fixed_args"] = value
        elif value is None:
            doc["run"]["screen"].pop(key, None)
        else:
            doc["run"]["screen"][key] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return project


def run_session(
    module_venv_daemon: Daemon, project: Path, policy: str = "random", mode: str = "unsafe"
) -> dict[str, Any]:
    """A session of the project (random policy by default) to its end; its final state."""
    with RpcClient(module_venv_daemon.socket, timeout=scaled(60)) as rpc:
        rpc.call(
            "loop_start", {"project_root": str(project), "policy": policy, "security_mode": mode}
        )
    state = wait_finished(module_venv_daemon.env, project, timeout=scaled(120))
    assert state["session"]["stop_reason"] == "max_rounds", state["session"]
    assert_no_training_left(project)
    return state


def log_of(project: Path, rnd: dict[str, Any]) -> str:
    return (artifacts(project) / f"round-{rnd['index']:04d}.log").read_text()


def check_ledger(project: Path, state: dict[str, Any]) -> None:
    """result_ledger.csv gives each round's rung, budget and the round it came from."""
    rows = {int(r["round"]): r for r in read_ledgers(project)[0]}
    for r in state["rounds"]:
        row = rows[r["index"]]
        assert (row["rung"], row["budget"]) == (str(r["rung"]), repr(float(r["budget"]))), row
        assert row["promoted_from"] == (
            "" if r["promoted_from"] is None else str(r["promoted_from"])
        )


def test_candidates_are_promoted_across_two_rungs_with_two_at_once(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    """The acceptance test of issue 20 item 2; without a resume option a promoted round
    runs again from the start at the full budget."""
    project = project_with(tmp_path)
    state = run_session(module_venv_daemon, project)
    low, promoted = check_ladder(state)
    rounds = state["rounds"]
    # two rounds ran at once (parallel: 2), and rounds were decided while others ran
    spans = [(r["started_at"], r["ended_at"]) for r in rounds if r["index"] > 1]
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1 :]), (
        spans
    )
    for p in promoted:
        text = log_of(project, p)
        assert "resumed" not in text and "epoch 1 val_loss" in text and "epoch 6 " in text
    check_ledger(project, state)
    # the best is a full-budget round (the baseline or a promoted one)
    best = state["session"]["best_round"]
    assert best in {1} | {p["index"] for p in promoted}
    report = (artifacts(project) / "report.md").read_text()
    assert "## Screening (run.screen)" in report
    for r in low:
        assert f"- round {r['index']}: rung 1 of 2 (--epochs 2)" in report
    for p in promoted:
        line = f"- round {p['index']}: rung 2 of 2 (--epochs 6, full budget), promoted from round "
        assert line + str(p["promoted_from"]) in report


@pytest.mark.parametrize("mode", ["unsafe", "guarded"])
def test_a_promoted_round_resumes_from_its_checkpoint(
    module_venv_daemon: Daemon, tmp_path: Path, mode: str
) -> None:
    """Guarded too: the sandbox lets a round read the outputs of an earlier round."""
    if mode == "guarded" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    project = project_with(
        tmp_path, resume={"flag": "--resume", "value": "{from_outputs_dir}/checkpoint.json"}
    )
    state = run_session(module_venv_daemon, project, mode=mode)
    _, promoted = check_ladder(state)
    for p in promoted:
        argv = shlex.split(p["command"])
        source_outputs = (
            (project / ".trainee" / "runs" / state["session"]["id"])
            / f"round-{p['promoted_from']:04d}"
            / "outputs"
        )
        assert argv[argv.index("--resume") + 1] == str(source_outputs / "checkpoint.json")
        text = log_of(project, p)
        assert "resumed from epoch 2" in text and "epoch 3 val_loss" in text, text
        assert "epoch 1 val_loss" not in text and "epoch 6 " in text
        assert "resumed from its checkpoint (--resume)" in p["hypothesis"]
    for r in state["rounds"]:
        if r["promoted_from"] is None:
            assert "--resume" not in r["command"], r


@needs("optuna")
def test_tpe_screens_too(module_venv_daemon: Daemon, tmp_path: Path) -> None:
    """TPE decides beside running rounds and is told the low-budget ones as pruned
    trials with their value: the ladder holds as with random draws."""
    project = project_with(tmp_path)
    state = run_session(module_venv_daemon, project, "tpe")
    check_ladder(state)


def test_a_low_budget_result_never_becomes_the_best(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    """With overfitting, 2 epochs look better than 6: the rounds of rung 1 beat the
    baseline on the metric, yet only a full-budget round is ever the best."""
    project = project_with(
        tmp_path,
        fixed_args=[{"flag": "--epochs", "value": 6}, {"flag": "--overfit", "value": 3}],
    )
    state = run_session(module_venv_daemon, project)
    rounds = {r["index"]: r for r in state["rounds"]}
    low, _ = check_ladder(state)
    assert all(r["primary_metric"] < rounds[1]["primary_metric"] for r in low)
    best = state["session"]["best_round"]
    assert rounds[best]["rung"] == 2, rounds[best]
    assert all(r["verdict"] != "kept" for r in low)
    assert min(r["primary_metric"] for r in low) < rounds[best]["primary_metric"]


def test_a_failed_decision_lets_the_running_rounds_end_first(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    """The LLM's plan for round 4 is out of bounds twice while round 3 (held) still runs:
    nothing more is launched, round 3 ends as it would, then the session ends with
    invalid_decision; no round is left running unwatched."""
    project = project_with(tmp_path)
    hold = project / "hold-lr-0.3"
    hold.touch()
    script = [OK, plan({"lr": 0.2}), plan({"lr": 0.3}), plan({"lr": 5.0}), plan({"lr": 9.0})]
    try:
        with FakeLLM(script) as fake:
            env = llm_env(module_venv_daemon.env, fake)
            start(project, env, "--unsafe")
            state = wait_until(
                env,
                project,
                lambda s: (
                    len(fake.requests) == len(script)
                    and any(r["index"] == 3 and r["status"] == "running" for r in s["rounds"])
                ),
                timeout=scaled(60),
                what="the failed decision beside round 3",
            )
            assert state["session"]["status"] == "running", state["session"]
            hold.unlink()
            state = wait_finished(env, project, timeout=scaled(60))
    finally:
        hold.unlink(missing_ok=True)
    assert state["session"]["stop_reason"] == "invalid_decision", state["session"]
    assert "lr" in state["session"]["error"]
    rounds = {r["index"]: r for r in state["rounds"]}
    assert sorted(rounds) == [1, 2, 3]
    assert rounds[3]["status"] == "completed" and rounds[3]["rung"] == 1
    assert loop_get(env, project)["running"] is False
    assert_no_training_left(project)


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        ({"budget": "--lr"}, "run.screen.budget", "tuning.yaml param 'lr'"),
        ({"budget": "--steps"}, "run.screen.budget", "not the flag of a run.fixed_args"),
        ({"rungs": [2, 4]}, "run.screen.rungs", "must equal the value of --epochs (6)"),
        ({"rungs": [6, 2, 6]}, "run.screen.rungs", "must be increasing"),
        ({"rungs": [1.5, 6]}, "run.screen.rungs", "must be whole numbers"),
        ({"eta": 1}, "run.screen.eta", "1"),
        (
            {"resume": {"flag": "--resume", "value": "{from_output}/c.json"}},
            "run.screen.resume.value",
            "unknown variable {from_output}",
        ),
        ({"resume": {"flag": "--epochs"}}, "run.screen.resume.flag", "already passed"),
    ],
)
def test_bad_screen_config_is_refused_naming_the_field(
    module_venv_daemon: Daemon, tmp_path: Path, changes: dict[str, Any], field: str, reason: str
) -> None:
    project = project_with(tmp_path, **changes)
    start = {"project_root": str(project), "policy": "random", "security_mode": "unsafe"}
    with (
        RpcClient(module_venv_daemon.socket, timeout=scaled(60)) as rpc,
        pytest.raises(Exception) as caught,
    ):
        rpc.call("loop_start", start)
    text = str(caught.value)
    assert field in text and reason in text, text
    assert not (project / ".trainee" / "artifacts").exists()
