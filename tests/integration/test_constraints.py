"""Constraints of tuning.yaml through the real policies: tpe (real Optuna) and random never
propose a point that breaks one, they stop with a clear reason when no untried point keeps
them, and an LLM plan that breaks one is repaired through the scripted server (tests/fakes)
with the constraint named in the repair request.

The project is a copy of examples/mlp-flags with a tuning.yaml whose ``hidden`` choices and
``batch_size`` range are tied by two constraints; the "training" is a fixed function of the
params, so the tests know what each round measures.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import REPO
from tests.support.extras import needs
from trainee.llm.client import close_clients
from trainee.llm.settings import load_settings
from trainee.policies.base import Policy, RandomPolicy, full_params
from trainee.policies.llm import LlmPolicy
from trainee.policies.tpe import TpePolicy
from trainee.research.decision import params_diff
from trainee.research.prompt import DEFAULT_SYSTEM_PROMPT, PromptParts
from trainee.research.state import ResearchState, RoundSummary, new_state, record_round
from trainee.spec import ProjectSpec, load_project

TUNING = """\
version: 1
params:
  - {name: lr, flag: --lr, type: float, default: 0.001, min_value: 0.0001, max_value: 0.3, log: true}
  - {name: batch_size, flag: --batch-size, type: int, default: 16, min_value: 8, max_value: 100}
  - {name: hidden, flag: --hidden, type: choice, default: 64, choices: [32, 48, 64, 96, 100, 128]}
constraints:
  - "hidden % 32 == 0"
  - "batch_size * hidden <= 4096 * epochs // 200"   # epochs: run.fixed_args (200)
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> ProjectSpec:
    root = tmp_path_factory.mktemp("constraints") / "mlp-flags"
    shutil.copytree(
        REPO / "examples" / "mlp-flags",
        root,
        ignore=shutil.ignore_patterns("runtime.sqlite3*", "artifacts", "runs", "cache", "logs"),
    )
    (root / ".trainee" / "tuning.yaml").write_text(TUNING)
    return load_project(str(root))


def baseline_of(spec: ProjectSpec) -> dict[str, Any]:
    return {t.name: t.baseline for t in spec.tunables}


def measured(
    state: ResearchState, index: int, params: dict[str, Any], base: dict[str, Any]
) -> tuple[ResearchState, float]:
    lr, batch = params.get("lr", 0.001), params.get("batch_size", 16)
    value = (
        (math.log10(lr) + 2) ** 2 + ((batch - 32) / 50) ** 2 + 0.2 + 0.1 * (params["hidden"] != 96)
    )
    summary = RoundSummary(
        index=index,
        status="completed",
        params=params,
        diff=params_diff(base, params),
        metric=value,
        metrics={"val_loss": value},
        hypothesis="",
        expected="",
        verdict=None,
        verdict_reason="",
        duration_sec=0.1,
        failure_tail=[],
    )
    return record_round(state, summary)[0], value


def drive(spec: ProjectSpec, policy: Policy, rounds: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Rounds as the runner runs them; every point the policy chose, and its notes."""
    base = baseline_of(spec)
    state, _ = measured(new_state("val_loss", "min"), 1, dict(base), base)
    points: list[dict[str, Any]] = []
    notes: list[str] = []

    async def main() -> None:
        nonlocal state
        for index in range(2, rounds + 1):
            proposal = await policy.propose(state, spec.tunables, base)
            assert not proposal.plan.stop, proposal.plan.stop_reason
            params = full_params(base, proposal.plan)
            points.append(params)
            notes.extend(proposal.notes)
            state, value = measured(state, index, params, base)
            policy.observe(params, value, "completed")

    anyio.run(main)
    return points, notes


@pytest.mark.parametrize("name", ["random", pytest.param("tpe", marks=needs("optuna"))])
def test_no_proposal_breaks_a_constraint(spec: ProjectSpec, name: str) -> None:
    assert len(spec.constraints) == 2 and spec.constraints[1].fixed == (("epochs", 200),)
    policy: Policy = (
        RandomPolicy(seed=5, constraints=spec.constraints)
        if name == "random"
        else TpePolicy(seed=5, constraints=spec.constraints)
    )
    points, notes = drive(spec, policy, 14)
    for params in points:
        for c in spec.constraints:
            assert c.holds(params), (c.text, params)
    # the constraints were binding: some draws broke one and were not proposed
    assert any("broke a constraint" in n for n in notes), notes
    # and the space is still explored inside them
    assert len({p["hidden"] for p in points}) >= 2


@pytest.mark.parametrize("name", ["random", pytest.param("tpe", marks=needs("optuna"))])
def test_when_no_untried_point_keeps_them_the_policy_stops_saying_why(
    tmp_path: Path, name: str
) -> None:
    root = tmp_path / "tiny"
    shutil.copytree(
        REPO / "examples" / "mlp-flags",
        root,
        ignore=shutil.ignore_patterns("runtime.sqlite3*", "artifacts", "runs", "cache", "logs"),
    )
    (root / ".trainee" / "tuning.yaml").write_text(
        "version: 1\n"
        "params:\n"
        "  - {name: hidden, flag: --hidden, type: choice, default: 64, choices: [16, 32, 64]}\n"
        "  - {name: deep, flag: --deep, type: bool, default: false}\n"
        "constraints:\n"
        "  - 'not deep or hidden >= 64'\n"
        "  - 'hidden != 16'\n"
    )
    spec = load_project(str(root))
    base = baseline_of(spec)
    policy: Policy = (
        RandomPolicy(seed=1, constraints=spec.constraints)
        if name == "random"
        else TpePolicy(seed=1, constraints=spec.constraints)
    )
    state, _ = measured(new_state("val_loss", "min"), 1, dict(base), base)
    seen = [dict(base)]

    async def main() -> str:
        nonlocal state
        for index in range(2, 8):
            proposal = await policy.propose(state, spec.tunables, base)
            if proposal.plan.stop:
                return proposal.plan.stop_reason
            params = full_params(base, proposal.plan)
            assert all(c.holds(params) for c in spec.constraints), params
            assert params not in seen
            seen.append(params)
            state, _ = measured(state, index, params, base)
        raise AssertionError("the policy never stopped")

    reason = anyio.run(main)
    # feasible points: (32, false), (64, false), (64, true); the baseline is (64, false)
    assert len(seen) == 3
    assert "keeps the constraints" in reason, reason


# -- an LLM plan that breaks a constraint is repaired ---------------------------------------


def _answer(params: dict[str, Any]) -> dict[str, Any]:
    body = {
        "hypothesis": "a wider hidden layer fits the noise better",
        "change_summary": f"hidden to {params['hidden']}",
        "params": params,
        "expected": "val_loss < 0.25",
        "stop": False,
        "stop_reason": "",
    }
    return {"content": json.dumps(body)}


def test_an_llm_plan_breaking_a_constraint_is_repaired_with_the_constraint_named(
    spec: ProjectSpec, tmp_path: Path
) -> None:
    base = baseline_of(spec)
    state, _ = measured(new_state("val_loss", "min"), 1, dict(base), base)
    with FakeLLM([_answer({"hidden": 48}), _answer({"hidden": 96})]) as fake:
        env = {
            "TRAINEE_LLM_PROVIDER": "openai_compatible",
            "TRAINEE_LLM_BASE_URL": fake.openai_base_url,
            "TRAINEE_LLM_MODEL": "fake-model",
            "TRAINEE_LLM_API_KEY": "sk-constraint-test-0000",
        }
        parts = PromptParts(
            system_prompt=DEFAULT_SYSTEM_PROMPT,
            trainee_context="",
            project_context="",
            constraints="",
            metrics_prompt="",
            tuning_prompt="",
        )
        policy = LlmPolicy(
            load_settings(env, tmp_path / "config.json"), parts, constraints=spec.constraints
        )

        async def decide() -> Any:
            try:
                return await policy.propose(state, spec.tunables, base)
            finally:
                await close_clients()  # litellm's HTTP clients belong to this loop

        proposal = anyio.run(decide)
        requests = fake.requests
    assert proposal.repaired and proposal.plan.params == {"hidden": 96}
    assert proposal.problems == [
        {
            "field": "constraints[0]",
            "reason": "`hidden % 32 == 0` does not hold for hidden=48; "
            "choose values that satisfy it",
        }
    ]
    first, repair = requests
    prompt = "\n".join(str(m["content"]) for m in first["messages"] if m["role"] == "user")
    assert "- `hidden % 32 == 0`" in prompt
    assert "- `batch_size * hidden <= 4096 * epochs // 200` (fixed: epochs = 200)" in prompt
    asked = str(repair["messages"][-1]["content"])
    assert "- constraints[0]: `hidden % 32 == 0` does not hold for hidden=48" in asked
