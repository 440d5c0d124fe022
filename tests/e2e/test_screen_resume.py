"""``run.screen`` across a daemon killed with SIGKILL while a promoted round runs.

The screenable fixture's full-budget rounds (but the baseline) wait before their last
epoch while the file ``hold`` exists: the daemon is killed while a promoted round is
held, started again, and the session carries on where it was: the running rounds are
re-adopted (not run again), and the rounds decided after the restart still run at
their rung's budget, promoted as the store says.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tests.support.daemon import REPO, Daemon, kill_leftover_daemons, venv_env
from tests.support.loop import artifacts, wait_finished, wait_until
from tests.support.processes import assert_no_training_left
from tests.support.screen import check_ladder
from tests.support.timing import scaled
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e


def test_a_restarted_daemon_carries_on_screening(tmp_path: Path) -> None:
    project = tmp_path / "screenable"
    shutil.copytree(REPO / "tests" / "fixtures" / "projects" / "screenable", project)
    hold = project / "hold"
    hold.touch()
    runtime = Path(tempfile.mkdtemp(prefix="tr-screen-r-", dir="/tmp"))
    daemon = Daemon(runtime=runtime, env=venv_env(runtime))
    restarted = Daemon(runtime=runtime, env=daemon.env)
    try:
        assert daemon.start().startswith("READY"), daemon.log
        with RpcClient(daemon.socket, timeout=scaled(60)) as rpc:
            rpc.call(
                "loop_start",
                {"project_root": str(project), "policy": "random", "security_mode": "unsafe"},
            )

        def promoted_holding(state: dict) -> bool:  # type: ignore[type-arg]
            for r in state["rounds"]:
                log = artifacts(project) / f"round-{r['index']:04d}.log"
                running = r["promoted_from"] and r["status"] == "running"
                if running and log.exists() and "holding" in log.read_text():
                    return True
            return False

        state = wait_until(
            daemon.env, project, promoted_holding, timeout=scaled(120), what="a promotion held"
        )
        held = next(r for r in state["rounds"] if r["promoted_from"] and r["status"] == "running")
        daemon.stop(signal.SIGKILL)
        assert restarted.start().startswith("READY"), restarted.log
        wait_until(
            restarted.env,
            project,
            lambda s: "re-adopting its monitor" in restarted.log,
            timeout=scaled(60),
            what="the session to resume",
        )
        hold.unlink()
        state = wait_finished(restarted.env, project, timeout=scaled(120))
    finally:
        hold.unlink(missing_ok=True)
        restarted.stop()
        daemon.stop()
        kill_leftover_daemons(daemon)
        shutil.rmtree(runtime, ignore_errors=True)
    assert state["session"]["stop_reason"] == "max_rounds", state["session"]
    assert_no_training_left(project)
    rounds = {r["index"]: r for r in state["rounds"]}
    after = rounds[held["index"]]
    assert after["status"] == "completed" and after["attempt"] == 0, "re-adopted, not re-run"
    assert after["started_at"] == held["started_at"]
    text = (artifacts(project) / f"round-{held['index']:04d}.log").read_text()
    assert text.count("epoch 1 val_loss") == 1 and "epoch 6 val_loss" in text
    check_ladder(state)
    assert len(rounds) == 7
