"""A daemon killed with SIGKILL in the middle of round 2 and started again.

The project is a tiny one written here: ``train.py --lr X`` prints progress and a
final ``val_loss``; the first time it runs with ``lr 0.2`` (round 2) it keeps
printing progress while the file ``hold`` exists, so round 2 is mid-run for as
long as the test needs, without any timing guess (``lr 0.3`` holds the same way and
then ends without its metric). ``starts.txt`` records each
start, so a re-run is told from a re-adoption.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sqlite3
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import Daemon
from tests.support.loop import (
    OK,
    SESSION,
    artifacts,
    check_outputs,
    llm_env,
    plan,
    read_ledgers,
    start,
    wait_finished,
    wait_until,
)
from tests.support.processes import assert_no_training_left
from tests.support.projects import HOLD_PROJECT_YAML, LR_TUNING_YAML

pytestmark = pytest.mark.e2e

HOLD_LR = 0.2
NO_METRIC_LR = 0.3
"""train.py holds with this lr too, and then ends without printing its metric."""
HOLD_LIMIT_SEC = 90
"""train.py stops holding after this long whatever happens (a safety net, never reached)."""

TRAIN_PY = f"""\
import argparse, os, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--data-root", required=True)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
root = os.path.dirname(os.path.abspath(args.data_root))
starts = os.path.join(root, "starts.txt")
before = open(starts).read().split() if os.path.exists(starts) else []
with open(starts, "a") as fh:
    fh.write(f"{{args.lr}}\\n")
hold = os.path.join(root, "hold")
step = 0
if args.lr in ({HOLD_LR}, {NO_METRIC_LR}) and str(args.lr) not in before:
    deadline = time.monotonic() + {HOLD_LIMIT_SEC}
    while os.path.exists(hold) and time.monotonic() < deadline:
        print(f"step {{step}} loss={{1.0 / (step + 1):.4f}}", flush=True)
        step += 1
        time.sleep(0.05)
print(f"step {{step}} done", flush=True)
if args.lr != {NO_METRIC_LR}:
    print(f"final val_loss={{(args.lr - 0.05) ** 2 + 0.1:.6f}}", flush=True)
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "holdproj"
    (root / ".trainee").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "train.py").write_text(TRAIN_PY)
    (root / ".trainee" / "project.yaml").write_text(textwrap.dedent(HOLD_PROJECT_YAML))
    (root / ".trainee" / "tuning.yaml").write_text(LR_TUNING_YAML)
    (root / "hold").touch()
    try:
        yield root
    finally:
        (root / "hold").unlink(missing_ok=True)  # releases a holding round, if any is left
        assert_no_training_left(root)


def _starts(project: Path) -> list[float]:
    return [float(x) for x in (project / "starts.txt").read_text().split()]


def _round2_mid_run(state: dict[str, Any], project: Path) -> bool:
    current = state["current_round"]
    if not current or current["index"] != 2 or current["status"] != "running":
        return False
    log = artifacts(project) / "round-0002.log"
    return log.exists() and "step 3 " in log.read_text()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} is still alive"
        select.select([], [], [], 0.05)


def _kill_daemon_mid_round_2(
    daemon: Daemon, project: Path, env: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start the session, wait for round 2 to be mid-run, SIGKILL the daemon.

    Returns round 2 as the store had it and the monitor's ``monitor.json``.
    """
    start(project, env, "--max-rounds", "3")
    state = wait_until(env, project, lambda s: _round2_mid_run(s, project), what="round 2 mid-run")
    round2 = state["current_round"]
    monitor = json.loads(
        (project / ".trainee" / "control" / SESSION / "round-0002" / "monitor.json").read_text()
    )
    assert monitor["pid"] == round2["monitor_pid"]
    daemon.stop(signal.SIGKILL)
    assert _alive(monitor["pid"]) and _alive(monitor["child_pid"]), "the round must outlive it"
    return round2, monitor


def _check_three_rounds(project: Path, state: dict[str, Any]) -> None:
    session = state["session"]
    assert session["status"] == "finished", session
    assert session["stop_reason"] == "max_rounds"
    rounds = state["rounds"]
    assert [r["index"] for r in rounds] == [1, 2, 3]
    assert [r["status"] for r in rounds] == ["completed"] * 3
    assert [r["params"]["lr"] for r in rounds] == [0.1, HOLD_LR, 0.05]
    assert rounds[1]["primary_metric"] == pytest.approx((HOLD_LR - 0.05) ** 2 + 0.1)
    check_outputs(project, state)
    rows_csv, rows_jsonl = read_ledgers(project)
    assert [r["round"] for r in rows_csv] == ["1", "2", "3"]
    assert [r["index"] for r in rows_jsonl] == [1, 2, 3]


SCRIPT = [OK, plan({"lr": HOLD_LR}, "hold"), plan({"lr": 0.05}, "after the restart")]


def test_sigkill_mid_round_2_readopts_the_live_round(daemon: Daemon, project: Path) -> None:
    with FakeLLM(SCRIPT) as fake:
        env = llm_env(daemon.env, fake)
        round2, monitor = _kill_daemon_mid_round_2(daemon, project, env)

        restarted = Daemon(runtime=daemon.runtime, env=daemon.env)
        try:
            assert restarted.start().startswith("READY"), restarted.log
            state = wait_until(
                env,
                project,
                lambda s: s["running"] and "re-adopting its monitor" in restarted.log,
                what="the session to resume",
            )
            assert state["current_round"]["index"] == 2
            (project / "hold").unlink()
            state = wait_finished(env, project)
            asked = len(fake.requests)
        finally:
            restarted.stop()

    _check_three_rounds(project, state)
    round2_after = state["rounds"][1]
    assert round2_after["attempt"] == 0, "re-adopted, not re-run"
    assert round2_after["monitor_pid"] == monitor["pid"]
    assert round2_after["started_at"] == round2["started_at"]
    assert _starts(project) == [0.1, HOLD_LR, 0.05]  # round 2's command started once
    log = (artifacts(project) / "round-0002.log").read_text()
    assert log.count("step 0 ") == 1 and log.count("final val_loss=") == 1
    assert asked == 3  # live test + the decisions for rounds 2 and 3, none asked twice
    assert not _alive(monitor["pid"]) and not _alive(monitor["child_pid"])
    assert_no_training_left(project)


@pytest.mark.parametrize("kill_job", [True, False], ids=["monitor-and-job", "monitor-only"])
def test_sigkill_mid_round_2_with_its_monitor_dead_reruns_the_round(
    daemon: Daemon, project: Path, kill_job: bool
) -> None:
    with FakeLLM(SCRIPT) as fake:
        env = llm_env(daemon.env, fake)
        _, monitor = _kill_daemon_mid_round_2(daemon, project, env)
        os.kill(monitor["pid"], signal.SIGKILL)
        _wait_gone(monitor["pid"])
        if kill_job:
            os.killpg(monitor["child_pid"], signal.SIGKILL)
            _wait_gone(monitor["child_pid"])
        else:
            assert _alive(monitor["child_pid"]), "the job outlives its monitor, orphaned"

        # ``hold`` stays: the re-run is train.py's second start with lr 0.2, which does
        # not hold, while an orphan of the first attempt would hold until killed.
        restarted = Daemon(runtime=daemon.runtime, env=daemon.env)
        try:
            assert restarted.start().startswith("READY"), restarted.log
            state = wait_finished(env, project)
            asked = len(fake.requests)
        finally:
            restarted.stop()

    assert "re-running it" in restarted.log
    _check_three_rounds(project, state)
    round2 = state["rounds"][1]
    assert round2["attempt"] == 1
    assert round2["monitor_pid"] != monitor["pid"]
    assert _starts(project) == [0.1, HOLD_LR, HOLD_LR, 0.05]
    assert asked == 3  # the recorded decision is re-used, not asked for again
    assert not _alive(monitor["child_pid"]), "the first attempt's job must not survive"
    assert_no_training_left(project)


def test_a_readopted_round_without_its_required_metric_fails_the_session(
    daemon: Daemon, project: Path
) -> None:
    with FakeLLM([OK, plan({"lr": NO_METRIC_LR}, "no metric")]) as fake:
        env = llm_env(daemon.env, fake)
        _, monitor = _kill_daemon_mid_round_2(daemon, project, env)
        restarted = Daemon(runtime=daemon.runtime, env=daemon.env)
        try:
            assert restarted.start().startswith("READY"), restarted.log
            wait_until(
                env,
                project,
                lambda s: s["running"] and "re-adopting its monitor" in restarted.log,
                what="the session to resume",
            )
            (project / "hold").unlink()
            state = wait_finished(env, project)
            asked = len(fake.requests)
        finally:
            restarted.stop()
    session = state["session"]
    assert session["status"] == "failed"
    assert session["stop_reason"] == "required_metric_missing"
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed", "completed_without_metrics"]
    assert rounds[1]["attempt"] == 0 and rounds[1]["monitor_pid"] == monitor["pid"]
    assert asked == 2, "no decision after a round that lost the required metric"
    check_outputs(project, state)
    assert_no_training_left(project)


def _forget_round_2_launch(project: Path, *, token: bool) -> None:
    """Make the store look as if the daemon died between starting round 2 and recording
    it as running: pending, no monitor; ``token``: the launch intent was stored (as every
    launch stores it before starting), else not (a row of a trainee before launch tokens)."""
    database = project / ".trainee" / "runtime.sqlite3"
    with sqlite3.connect(database) as db:
        db.execute(
            "UPDATE rounds SET status = 'pending', monitor_pid = NULL,"
            " monitor_start_time = NULL, started_at = NULL, command = ''"
            + ("" if token else ", launch_token = NULL")
            + ' WHERE session = 1 AND "index" = 2'
        )
    db.close()


def test_a_launch_recorded_only_as_an_intent_is_readopted_not_run_twice(
    daemon: Daemon, project: Path
) -> None:
    """The daemon died after starting round 2's monitor but before recording it as
    running: the store has the launch's token only. The next daemon finds the monitor that
    claimed that token and re-adopts it: round 2's command runs once."""
    with FakeLLM(SCRIPT) as fake:
        env = llm_env(daemon.env, fake)
        _, monitor = _kill_daemon_mid_round_2(daemon, project, env)
        _forget_round_2_launch(project, token=True)
        restarted = Daemon(runtime=daemon.runtime, env=daemon.env)
        try:
            assert restarted.start().startswith("READY"), restarted.log
            wait_until(
                env,
                project,
                lambda s: s["running"] and "re-adopting its monitor" in restarted.log,
                what="the session to resume",
            )
            (project / "hold").unlink()
            state = wait_finished(env, project)
            asked = len(fake.requests)
        finally:
            restarted.stop()

    _check_three_rounds(project, state)
    round2 = state["rounds"][1]
    assert (round2["attempt"], round2["monitor_pid"]) == (0, monitor["pid"])
    assert _starts(project) == [0.1, HOLD_LR, 0.05]  # round 2's command started once
    assert asked == 3
    assert_no_training_left(project)


def test_a_launch_the_store_never_recorded_is_ended_and_the_round_rerun(
    daemon: Daemon, project: Path
) -> None:
    """A store row without a launch token (written by a trainee before launch tokens):
    the daemon died after starting round 2's monitor but before recording it. The next
    daemon ends that launch (no second copy of the job runs beside it) and runs round 2
    again."""
    with FakeLLM(SCRIPT) as fake:
        env = llm_env(daemon.env, fake)
        _, monitor = _kill_daemon_mid_round_2(daemon, project, env)
        _forget_round_2_launch(project, token=False)
        restarted = Daemon(runtime=daemon.runtime, env=daemon.env)
        try:
            assert restarted.start().startswith("READY"), restarted.log
            state = wait_finished(env, project)
            asked = len(fake.requests)
        finally:
            restarted.stop()

    _check_three_rounds(project, state)
    assert "ending a launch that was never recorded" in restarted.log
    assert state["rounds"][1]["attempt"] == 1
    assert _starts(project) == [0.1, HOLD_LR, HOLD_LR, 0.05]
    assert asked == 3
    assert not _alive(monitor["pid"]) and not _alive(monitor["child_pid"])
    log = (artifacts(project) / "round-0002.log").read_text()
    assert "step 0 " in log and log.count("final val_loss=") == 1
    assert_no_training_left(project)
