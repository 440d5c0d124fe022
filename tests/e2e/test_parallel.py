"""Parallel candidates (``run.parallel``) on the local backend, end to end.

The real CLI and daemon run mlp-flags with K=2: after the baseline alone, each
decision step proposes two distinct plans (random/TPE with two asks; the LLM in
one request) and runs both rounds at once; budgets count rounds, not steps.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import Daemon, copy_example, run_cli
from tests.support.loop import (
    OK,
    artifacts,
    check_outputs,
    llm_env,
    read_ledgers,
    user_text,
    wait_finished,
)
from tests.support.processes import assert_no_training_left

pytestmark = pytest.mark.e2e


def with_parallel(project: Path, k: int, max_rounds: int) -> None:
    spec = project / ".trainee" / "project.yaml"
    text = spec.read_text().replace("max_rounds: 6", f"max_rounds: {max_rounds}\n  parallel: {k}")
    spec.write_text(text)


def overlapped(a: dict[str, object], b: dict[str, object]) -> bool:
    a0, a1, b0, b1 = a["started_at"], a["ended_at"], b["started_at"], b["ended_at"]
    assert all(isinstance(v, float) for v in (a0, a1, b0, b1))
    return a0 < b1 and b0 < a1  # type: ignore[operator]


def events_of(env: dict[str, str], kind: str) -> list[dict[str, object]]:
    got = run_cli("call", "events_list", "--input", json.dumps({"limit": 1000}), env=env)
    assert got.returncode == 0, got.stderr
    return [e for e in got.json()["events"] if e["kind"] == kind]


def test_k2_random_runs_steps_of_two_rounds_at_once(module_daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    with_parallel(project, 2, max_rounds=6)
    env = dict(module_daemon.env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    started = run_cli(
        "run", str(project), "--policy", "random", "--unsafe", "--detach", env=env
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    state = wait_finished(env, project, timeout=120)
    rounds = state["rounds"]
    assert state["session"]["stop_reason"] == "max_rounds"
    # max_rounds counts rounds: the baseline, then steps of 2, 2 and the last 1
    assert [r["index"] for r in rounds] == [1, 2, 3, 4, 5, 6]
    assert [r["batch"] for r in rounds] == [0, 1, 1, 2, 2, 3]
    assert all(r["status"] == "completed" for r in rounds)
    by = {r["index"]: r for r in rounds}
    assert overlapped(by[2], by[3]) and overlapped(by[4], by[5])
    # the rounds of a step are distinct points, and the next step started after both ended
    assert by[2]["params"] != by[3]["params"] and by[4]["params"] != by[5]["params"]
    assert by[4]["started_at"] >= max(by[2]["ended_at"], by[3]["ended_at"])
    check_outputs(project, state)
    rows_csv, rows_jsonl = read_ledgers(project)
    assert [r["step"] for r in rows_csv] == ["0", "1", "1", "2", "2", "3"]
    assert {r["backend"] for r in rows_jsonl} == {"local"}
    report = (artifacts(project) / "report.md").read_text()
    assert "up to 2 candidates at once per decision step" in report
    assert "| Step | Round |" in report
    batches = [e for e in events_of(env, "batch.started") if e["data"]["project"] == str(project)]
    assert [b["data"]["rounds"] for b in batches][-2:] == [[2, 3], [4, 5]]
    assert_no_training_left(project)


def plans(*params: dict[str, object]) -> dict[str, str]:
    body = {
        "plans": [
            {
                "hypothesis": f"try {p}",
                "change_summary": "change " + ", ".join(p),
                "params": p,
                "expected": "val_loss decreases",
                "stop": False,
                "stop_reason": "",
            }
            for p in params
        ]
    }
    return {"content": json.dumps(body)}


def test_k2_llm_asks_once_per_step_for_two_plans(module_daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    with_parallel(project, 2, max_rounds=5)
    script = [
        OK,
        plans({"lr": 0.01}, {"weight_decay": 0.003}),
        plans({"lr": 0.02}, {"lr": 0.01, "batch_size": 32}),
    ]
    with FakeLLM(script) as fake:
        env = llm_env(module_daemon.env, fake)
        live = run_cli(
            "run", str(project), "--policy", "llm", "--unsafe", env=env, timeout=120
        )  # fmt: skip
        assert live.returncode == 0, live.stdout + live.stderr
        state = wait_finished(env, project)
        requests = list(fake.requests)
    assert len(requests) == 3  # the live test, then one request per step of two
    assert '"plans"' in user_text(requests[1]) or "2 plans" in user_text(requests[1])
    rounds = state["rounds"]
    assert [r["batch"] for r in rounds] == [0, 1, 1, 2, 2]
    assert rounds[1]["params"]["lr"] == 0.01 and rounds[2]["params"]["weight_decay"] == 0.003
    assert rounds[3]["params"]["lr"] == 0.02 and rounds[4]["params"]["batch_size"] == 32
    # the live view shows the steps
    assert "step 1" in live.stdout and "step 2" in live.stdout
    # tokens counted once per request, not once per plan
    decisions = state["session"]["tokens"]
    assert decisions > 0
    check_outputs(project, state)
    assert_no_training_left(project)
