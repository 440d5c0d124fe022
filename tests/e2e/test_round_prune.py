"""``round_prune`` end to end: an agent ends a running round early, through the real daemon.

tests/fixtures/projects/prunable is a stdlib trainer printing ``epoch N val_loss=X`` that
writes a checkpoint when it gets SIGTERM. An agent (the external policy, over the real
socket) runs a round that would last for hours and ends it early with a reason: the
round is stopped the way a prune rule stops one (SIGTERM, its grace to save), ends
``pruned`` with ``pruned: by the agent: <reason>`` where a user reads it (``runs_get``,
``round_result``, report.md), and uses up its place in ``max_rounds``. Bad requests are
refused with the field and the reason, and change nothing.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import REPO, Daemon, kill_leftover_daemons, run_cli, venv_env
from tests.support.extras import needs
from tests.support.loop import OK, artifacts, llm_env, plan, user_text, wait_finished
from tests.support.processes import assert_no_training_left
from tests.support.prune import FOREVER, checkpoint_of
from tests.support.timing import scaled
from trainee import errors
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e

FIXTURE = REPO / "tests" / "fixtures" / "projects" / "prunable"
REASON = "val_loss   crawls:\nlr 0.02 is far too small"
SAID = "val_loss crawls: lr 0.02 is far too small"
"""The reason as recorded: one line, whitespace runs made one space."""


def project_of(tmp_path: Path, *, baseline_epochs: int | None = None) -> Path:
    """The prunable project without ``run.prune`` (an agent's request needs no rule)."""
    project = tmp_path / "prunable"
    shutil.copytree(FIXTURE, project)
    path = project / ".trainee" / "project.yaml"
    doc = yaml.safe_load(path.read_text())
    del doc["run"]["prune"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    if baseline_epochs is not None:
        tuning = project / ".trainee" / "tuning.yaml"
        spec = yaml.safe_load(tuning.read_text())
        next(p for p in spec["params"] if p["name"] == "epochs")["default"] = baseline_epochs
        tuning.write_text(yaml.safe_dump(spec, sort_keys=False))
    return project


def wait_epochs(rpc: RpcClient, session: str, root: str, index: int, epochs: int) -> None:
    """Until round ``index`` has printed ``epochs`` values (it runs, and has work to save)."""
    deadline = time.monotonic() + scaled(60)
    points: list[Any] = []
    while len(points) < epochs:
        assert time.monotonic() < deadline, f"round {index} printed {len(points)} values"
        time.sleep(0.1)
        at = {"session": session, "round": index, "project_root": root}
        with contextlib.suppress(errors.NotFound):  # not recorded yet
            points = rpc.call("round_metrics", at)["points"]


def refused(rpc: RpcClient, kind: type[errors.TraineeError], params: dict[str, Any]) -> str:
    with pytest.raises(kind) as info:
        rpc.call("round_prune", params)
    return info.value.message


def test_an_agent_ends_a_running_round_early_with_its_reason(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    project = project_of(tmp_path)
    root = str(project)
    with RpcClient(module_venv_daemon.socket, timeout=scaled(120)) as rpc:
        start = {"project_root": root, "policy": "external", "security_mode": "unsafe"}
        session = rpc.call("loop_start", {**start, "max_rounds": 3})["session"]
        at = {"session": session, "project_root": root}
        first = rpc.call("round_result", {**at, "round": 1, "wait": True})
        assert first["status"] == "completed"
        plan = {"hypothesis": "a small lr", "change_summary": "lr", "expected": "worse"}
        slow = {"lr": 0.02, "epochs": FOREVER}
        handle = rpc.call("round_run", {**at, **plan, "params": slow, "wait": False})
        assert handle["round"] == 2
        wait_epochs(rpc, session, root, 2, 3)

        # refused, the field and the reason named; nothing changes
        message = refused(rpc, errors.InvalidState, {**at, "round": 1, "reason": "why not"})
        assert message == (
            f"round 1 of {session} is the baseline: every round is compared with it, so it "
            "cannot be ended early (loop_stop stops the whole session)"
        )
        message = refused(rpc, errors.NotFound, {**at, "round": 9, "reason": "no such"})
        assert message == f"{session} has no round 9 (2 rounds so far)"
        message = refused(rpc, errors.InvalidParams, {**at, "round": 2, "reason": ""})
        assert "reason" in message and "length >= 1" in message
        message = refused(rpc, errors.InvalidParams, {**at, "round": 2, "reason": " \n\t "})
        assert message == "round_prune: reason is blank: say in one line why the round ends early"
        message = refused(rpc, errors.InvalidParams, {**at, "round": 2, "reason": "x" * 501})
        assert "reason" in message and "length <= 500" in message
        message = refused(rpc, errors.InvalidParams, {**at, "round": 2})
        assert "reason" in message
        assert rpc.call("round_result", {**at, "round": 2})["status"] == "running"

        ended = rpc.call(
            "round_prune", {**at, "round": 2, "reason": REASON, "wait_sec": scaled(60)}
        )
        assert ended == {
            "session": session,
            "round": 2,
            "status": "pruned",
            "ended": True,
            "error": f"pruned: by the agent: {SAID}",
            "message": f"round 2 of {session} ended early: pruned: by the agent: {SAID}",
        }
        error = ended["error"]
        # a finished round cannot be ended again: its reason stays the first one
        message = refused(rpc, errors.InvalidState, {**at, "round": 2, "reason": "again"})
        assert message == f"round 2 of {session} is pruned: only a running round can be ended early"

        result = rpc.call("round_result", {**at, "round": 2})
        assert result["status"] == "pruned" and result["verdict"] == "rejected"
        assert result["verdict_reason"].startswith(error)
        third = rpc.call("round_run", {**at, **plan, "params": {"lr": 0.35}})
        assert third["status"] == "completed"

        # the pruned round used up its place: max_rounds 3 reached
        state = wait_finished(module_venv_daemon.env, project, timeout=scaled(60))
        assert state["session"]["stop_reason"] == "max_rounds", state["session"]
        assert [r["status"] for r in state["rounds"]] == ["completed", "pruned", "completed"]
        assert rpc.call("session_noise", at) == {"session": session, "noise": None}
        run = rpc.call("runs_get", {"project_root": root, "run_id": 2})["round"]
        assert run["status"] == "pruned"
        assert run["prune_reason"] == error and run["warnings"][0] == error
        # stopped through the usual stop: SIGTERM, and the job had its grace to save
        ckpt = checkpoint_of(run)
        assert ckpt["why"] == "sigterm" and 3 <= ckpt["epoch"] < FOREVER
        assert run["signal"] is None  # not SIGKILLed: it exited within its grace

    report = (artifacts(project) / "report.md").read_text()
    pruned = report.split("## Pruned rounds\n\n")[1].split("\n\n")[0].strip().splitlines()
    assert pruned == [f"- Round 2: {error}"]
    assert_no_training_left(project)


@needs("optuna")
def test_only_a_session_an_agent_steers_ends_rounds_on_request(
    module_venv_daemon: Daemon, tmp_path: Path
) -> None:
    """A ``tpe`` session decides alone: its running round is not ended on request."""
    project = project_of(tmp_path, baseline_epochs=FOREVER)
    root = str(project)
    with RpcClient(module_venv_daemon.socket, timeout=scaled(120)) as rpc:
        start = {"project_root": root, "policy": "tpe", "security_mode": "unsafe"}
        session = rpc.call("loop_start", {**start, "max_rounds": 2})["session"]
        at = {"session": session, "project_root": root}
        wait_epochs(rpc, session, root, 1, 2)
        message = refused(rpc, errors.InvalidState, {**at, "round": 1, "reason": "enough"})
        assert message == (
            f"{session} runs the 'tpe' policy, which decides alone: only sessions of "
            "external and hybrid end rounds on request (run.prune's rules end the others' "
            "rounds; loop_stop stops the session)"
        )
        # the same through the CLI: exit 5 (invalid state), the daemon's message
        cli = run_cli(
            "prune",
            session,
            "1",
            "--reason",
            "enough",
            "--project-root",
            root,
            env=module_venv_daemon.env,
        )
        assert cli.returncode == 5, cli
        assert message in cli.stderr
        assert rpc.call("round_result", {**at, "round": 1})["status"] == "running"
        rpc.call("loop_stop", {**at, "wait_sec": scaled(30)})
        # an ended session: nothing runs, so nothing can be ended early
        message = refused(rpc, errors.InvalidState, {**at, "round": 1, "reason": "enough"})
        assert message == (
            f"{session} is not running (stopped): only a running round can be ended early"
        )
    assert_no_training_left(project)


def test_a_hybrid_session_ends_a_round_early_and_the_next_decision_sees_why(
    tmp_path: Path,
) -> None:
    """``hybrid``: the LLM picks among TPE's suggestions; its agent (or user) may end a
    round it chose. The next decision's prompt shows the reason, in the research state
    and in what the optimizer was told (a pruned trial)."""
    project = project_of(tmp_path)
    root = str(project)
    script = [OK, plan({"lr": 0.02, "epochs": FOREVER}, "a small lr"), plan({"lr": 0.35})]
    runtime = Path(tempfile.mkdtemp(prefix="tr-rprune-h-", dir="/tmp"))
    with FakeLLM(script) as fake:
        d = Daemon(runtime=runtime, env=llm_env(venv_env(runtime), fake))
        line = d.start()
        assert line.startswith("READY"), f"daemon did not start: {line!r}\n{d.log}"
        try:
            with RpcClient(d.socket, timeout=scaled(120)) as rpc:
                start = {"project_root": root, "policy": "hybrid", "security_mode": "unsafe"}
                session = rpc.call("loop_start", {**start, "max_rounds": 3})["session"]
                at = {"session": session, "project_root": root}
                wait_epochs(rpc, session, root, 2, 2)
                ended = rpc.call(
                    "round_prune",
                    {**at, "round": 2, "reason": "too slow", "wait_sec": scaled(60)},
                )
                assert ended["status"] == "pruned", ended
            state = wait_finished(d.env, project, timeout=scaled(60))
            assert [r["status"] for r in state["rounds"]] == ["completed", "pruned", "completed"]
            decisions = [r for r in fake.requests if r.get("messages")][1:]
            assert len(decisions) == 2
            after = user_text(decisions[1])
            assert "pruned: by the agent: too slow" in after
            assert "pruned: by the agent: too slow" not in user_text(decisions[0])
            # the optimizer was told: one trial that did not complete (the pruned round)
            assert "1 completed, 1 failed" in after
        finally:
            d.stop()
            kill_leftover_daemons(d)
            shutil.rmtree(runtime, ignore_errors=True)
    assert_no_training_left(project)
