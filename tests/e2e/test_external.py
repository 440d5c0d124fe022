"""An agent drives a session itself: plan_submit / round_run / round_result / journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon import Daemon, copy_example
from tests.support.loop import wait_finished
from tests.support.processes import assert_no_training_left
from trainee import errors
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e


def test_an_external_session_runs_the_agents_plans(daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    root = str(project)
    with RpcClient(daemon.socket, timeout=120) as rpc:
        started = rpc.call(
            "loop_start",
            {
                "project_root": root,
                "policy": "external",
                "security_mode": "unsafe",
                "max_rounds": 3,
            },
        )
        session = started["session"]
        baseline = rpc.call(
            "round_result", {"session": session, "round": 1, "project_root": root, "wait": True}
        )
        assert baseline["status"] == "completed" and baseline["verdict"] == "baseline"

        # an invalid plan is refused with every problem, and the session keeps waiting
        with pytest.raises(errors.InvalidParams) as bad:
            rpc.call(
                "plan_submit",
                {"session": session, "project_root": root, "hypothesis": "h", "change_summary": "c",
                 "expected": "e", "params": {"lr": 5.0, "momentum": 0.9}},
            )  # fmt: skip
        assert "params.lr" in bad.value.message and "params.momentum" in bad.value.message

        two = rpc.call(
            "round_run",
            {"session": session, "project_root": root, "hypothesis": "a larger step helps",
             "change_summary": "lr up 3x", "expected": "val_loss < 0.26", "params": {"lr": 0.003}, "agent": "test-agent"},
        )  # fmt: skip
        assert two["round"] == 2 and two["finished"] and two["params"]["lr"] == 0.003
        assert "prediction" in two["verdict_reason"]

        accepted = rpc.call(
            "plan_submit",
            {"session": session, "project_root": root, "hypothesis": "more decay",
             "change_summary": "lr 0.01, decay 0.003", "expected": "lower val_loss", "params": {"lr": 0.01, "weight_decay": 0.003}},
        )  # fmt: skip
        assert accepted == {"session": session, "round": 3, "accepted": True}
        three = rpc.call(
            "round_result", {"session": session, "round": 3, "project_root": root, "wait": True}
        )
        assert three["status"] == "completed"
        assert three["session_status"] in ("running", "finished")

        rpc.call(
            "journal_append", {"project_root": root, "text": "lr 0.01 with decay 0.003 looks good"}
        )
        state = wait_finished(daemon.env, project)
        journal = rpc.call("journal_get", {"project_root": root})

    assert [r["index"] for r in state["rounds"]] == [1, 2, 3]
    assert state["session"]["stop_reason"] == "max_rounds"
    assert "--lr 0.01 --weight-decay 0.003" in state["rounds"][2]["command"]
    assert "looks good" in journal["notes"]
    assert journal["sessions"] and journal["sessions"][0]["best"] is not None
    assert (project / ".trainee" / "artifacts" / session / "report.md").exists()
    assert_no_training_left(project)


def test_plans_go_only_to_external_sessions(daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    with RpcClient(daemon.socket, timeout=60) as rpc:
        rpc.call("loop_start", {"project_root": str(project), "policy": "random",
                                "security_mode": "unsafe", "max_rounds": 3})  # fmt: skip
        with pytest.raises(errors.TraineeError) as refused:
            rpc.call(
                "plan_submit",
                {"session": "session-0001", "project_root": str(project), "hypothesis": "h",
                 "change_summary": "c", "expected": "e", "params": {"lr": 0.003}},
            )  # fmt: skip
        assert isinstance(refused.value, errors.InvalidState | errors.NotFound)
        rpc.call("round_result", {"session": "session-0001", "round": 3, "project_root": str(project),
                                  "wait": True})  # fmt: skip
    assert_no_training_left(project)
