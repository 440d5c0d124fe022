"""An LLM server that hangs, resets connections, answers 500 or sends a huge body.

Each case runs the baseline round, then the decision for round 2 meets the fault: the
session must stop with ``provider_failed`` and an error naming what went wrong, no
second round may start, and the daemon must keep answering (also while the provider
hangs).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.faults.helpers import Node, assert_no_orphans, make_project
from tests.support.loop import OK, check_outputs, llm_env, plan

pytestmark = pytest.mark.e2e

TIMEOUT_SEC = 2
CASES: dict[str, tuple[list[dict[str, Any]], str]] = {
    "hangs": ([OK, {"delay": 30, "content": "late"}], f"no reply within {TIMEOUT_SEC} s"),
    "resets": ([OK, {"reset": True}], "connection failed"),
    "500": (
        [OK, {"status": 500, "body": {"error": {"message": "upstream exploded"}}}],
        "HTTP 500: upstream exploded",
    ),
    "huge body": ([OK, {"huge": 20_000_000}], "response too large: 20000000 characters"),
    "garbage body": (
        [OK, {"status": 200, "body": "\x00\xff<html>not json at all"}],
        "openai_compatible (fake-model at http://127.0.0.1:",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_misbehaving_provider_stops_the_session_with_a_clear_reason(
    module_node: Node, tmp_path: Path, case: str
) -> None:
    script, reason = CASES[case]
    project = make_project(tmp_path / "proj", max_rounds=3, behaviour={"steps": 1})
    with FakeLLM(script) as fake:
        env = llm_env(module_node.env, fake, TRAINEE_LLM_TIMEOUT_SEC=str(TIMEOUT_SEC))
        module_node.start_session(project, policy="llm", env=env)
        if case == "hangs":
            # while the decision waits on the provider, the daemon answers at once
            module_node.wait(
                project, lambda _: len(fake.requests) == 2, what="the decision request"
            )
            started = time.monotonic()
            assert module_node.rpc("daemon_hello")["name"] == "trainee"
            assert module_node.state(project)["session"]["status"] == "running"
            assert time.monotonic() - started < TIMEOUT_SEC
        state = module_node.wait_finished(project, timeout=60)
        asked = len(fake.requests)
    session = state["session"]
    assert session["status"] == "failed", session
    assert session["stop_reason"] == "provider_failed"
    assert "all providers failed" in session["error"] and reason in session["error"]
    assert [r["status"] for r in state["rounds"]] == ["completed"], "no round after the fault"
    assert asked == 2, "the live test and one decision request, no retry storm"
    check_outputs(project, state)
    assert module_node.alive()
    assert_no_orphans(project)


def _sockets(pid: int) -> int:
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


def test_decisions_do_not_leak_connections(module_node: Node, tmp_path: Path) -> None:
    """After the faults above the same daemon runs a healthy session, and each decision
    reuses the provider's HTTP client: no socket is left open per decision (found by the
    soak: litellm kept one client per distinct timeout value)."""
    rounds = 8
    project = make_project(tmp_path / "proj", max_rounds=rounds, behaviour={"steps": 1})
    script = [OK, *(plan({"lr": round(0.1 + i / 100, 3)}) for i in range(1, rounds))]
    pid = module_node.daemon.proc.pid if module_node.daemon.proc else 0
    with FakeLLM(script) as fake:
        module_node.start_session(project, policy="llm", env=llm_env(module_node.env, fake))
        module_node.wait(project, lambda s: len(s["rounds"]) >= 3, what="two decisions")
        after_two = _sockets(pid)
        state = module_node.wait_finished(project)
        assert len(fake.requests) == rounds
        at_end = _sockets(pid)
    assert state["session"]["stop_reason"] == "max_rounds", state["session"]
    assert [r["status"] for r in state["rounds"]] == ["completed"] * rounds
    assert at_end - after_two <= 1, f"{at_end - after_two} sockets more after 5 decisions"
    assert_no_orphans(project)
