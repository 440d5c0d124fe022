"""LlmPolicy.propose_batch: k plans from one real litellm request to the scripted fake server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.llm import prompt_parts, run
from tests.unit.research.helpers import BASELINE, TUNABLES, summary
from trainee.errors import InvalidDecision
from trainee.llm.settings import LlmSettings, load_settings
from trainee.policies.base import Proposal
from trainee.policies.llm import MAX_BATCH_TOKENS, LlmPolicy
from trainee.research.decision import effective_params, params_equal
from trainee.research.prompt import DEFAULT_SYSTEM_PROMPT
from trainee.research.state import ResearchState, new_state, record_round

pytestmark = pytest.mark.usefixtures("fresh_formats")

PARTS = prompt_parts("A small MLP on a toy data set.")


def settings_for(fake: FakeLLM, tmp_path: Path, wire: str = "openai") -> LlmSettings:
    if wire == "openai":
        env = {
            "TRAINEE_LLM_PROVIDER": "openai",
            "OPENAI_API_KEY": "sk-test-batch-0123456789",
            "OPENAI_MODEL": "gpt-4o-mini",
            "OPENAI_BASE_URL": fake.openai_base_url,
        }
    else:
        env = {
            "TRAINEE_LLM_PROVIDER": "anthropic",
            "ANTHROPIC_API_KEY": "sk-ant-test-batch-9876543210",
            "ANTHROPIC_MODEL": "claude-3-5-haiku-latest",
            "ANTHROPIC_BASE_URL": fake.url,
        }
    return load_settings(env, tmp_path / "config.json")


def state_after_baseline() -> ResearchState:
    state = new_state("val_loss", "min")
    state, _ = record_round(state, summary(1, "completed", 0.5))
    return state


def plan(params: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "hypothesis": f"changing {', '.join(params) or 'nothing'} lowers val_loss",
        "change_summary": json.dumps(params),
        "params": params,
        "expected": "val_loss < 0.45",
        "stop": False,
        "stop_reason": "",
    }
    data.update(overrides)
    return data


def reply(*plans: dict[str, Any], usage: tuple[int, int] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"content": json.dumps({"plans": list(plans)})}
    if usage is not None:
        item["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
    return item


GOOD = (plan({"lr": 0.003}), plan({"dropout": 0.2}), plan({"optimizer": "sgd", "lr": 0.01}))


def batch(settings: LlmSettings, k: int, state: ResearchState | None = None) -> list[Proposal]:
    policy = LlmPolicy(settings, PARTS)
    s = state if state is not None else state_after_baseline()
    return run(lambda: policy.propose_batch(s, TUNABLES, BASELINE, k))


def user_text(request: dict[str, Any]) -> str:
    return "\n".join(
        str(m.get("content")) for m in request["messages"] or [] if m.get("role") == "user"
    )


# -- k plans, one request ------------------------------------------------------------------


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_three_plans_from_one_request_and_the_cost_is_counted_once(
    fake: FakeLLM, tmp_path: Path, wire: str
) -> None:
    fake.push(reply(*GOOD, usage=(1000, 300)))
    proposals = batch(settings_for(fake, tmp_path, wire), 3)

    assert len(fake.requests) == 1
    assert [p.plan.params for p in proposals] == [
        {"lr": 0.003},
        {"dropout": 0.2},
        {"optimizer": "sgd", "lr": 0.01},
    ]
    full = [effective_params(BASELINE, p.plan.params) for p in proposals]
    assert not any(params_equal(a, b) for i, a in enumerate(full) for b in full[i + 1 :])
    first, *others = proposals
    assert (first.prompt_tokens, first.completion_tokens) == (1000, 300)
    if wire == "openai":  # litellm prices gpt-4o-mini; the Anthropic alias has no price
        assert first.cost_usd is not None and first.cost_usd > 0
    assert first.latency_sec > 0
    zero_cost = None if first.cost_usd is None else 0.0
    for i, p in enumerate(others, start=2):
        assert (p.prompt_tokens, p.completion_tokens, p.latency_sec) == (0, 0, 0)
        assert p.cost_usd == zero_cost
        assert f"plan {i} of 3 from one request" in " ".join(p.notes)
    assert sum(p.prompt_tokens + p.completion_tokens for p in proposals) == 1300
    assert sum(p.cost_usd or 0.0 for p in proposals) == (first.cost_usd or 0.0)
    for p in proposals:
        assert p.policy == "llm" and p.provider == wire and not p.repaired
        assert p.messages == first.messages and p.raw_response == first.raw_response
        assert p.problems == []
    assert json.loads(first.raw_response or "") == {"plans": list(GOOD)}


def test_the_request_carries_max_tokens_the_schema_and_the_instruction_for_k_plans(
    fake: FakeLLM, tmp_path: Path
) -> None:
    fake.push(reply(*GOOD))
    settings = settings_for(fake, tmp_path)
    policy = LlmPolicy(settings, PARTS, max_tokens=1200)
    state = state_after_baseline()
    run(lambda: policy.propose_batch(state, TUNABLES, BASELINE, 3))
    [req] = fake.requests
    assert req["max_tokens"] == 3600  # k times the single plan's budget
    text = user_text(req)
    assert "Propose exactly 3 plans with different hypotheses" in text
    assert '{"plans": [{"hypothesis"' in text
    assert text.count("## Your answer") == 1
    assert req["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    fmt = req["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "DecisionPlans"
    array = fmt["json_schema"]["schema"]["properties"]["plans"]
    assert (array["minItems"], array["maxItems"]) == (3, 3)
    assert req["messages"] == policy.last_messages

    # a large batch is capped; a single plan is the usual request
    fake.push(reply(*[plan({"batch_size": 40 + 8 * i}) for i in range(8)]))
    big = run(lambda: policy.propose_batch(state, TUNABLES, BASELINE, 8))
    assert len(big) == 8 and fake.requests[-1]["max_tokens"] == MAX_BATCH_TOKENS
    fake.push({"content": json.dumps(GOOD[0])})
    [one] = run(lambda: policy.propose_batch(state, TUNABLES, BASELINE, 1))
    assert one.plan.params == {"lr": 0.003} and one.notes == []
    single = fake.requests[-1]
    assert single["max_tokens"] == 1200
    assert single["response_format"]["json_schema"]["name"] == "DecisionPlan"
    assert "plans" not in user_text(single).split("## Your answer")[-1]


# -- one repair for every problem ----------------------------------------------------------


def test_a_duplicate_plan_is_repaired_once(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push(
        reply(GOOD[0], plan({"lr": 0.003}, hypothesis="again"), GOOD[2], usage=(900, 200)),
        reply(*GOOD, usage=(1200, 250)),
    )
    proposals = batch(settings_for(fake, tmp_path), 3)

    assert len(fake.requests) == 2
    repair = fake.requests[1]["messages"]
    assert repair[:-2] == fake.requests[0]["messages"]
    assert repair[-2]["role"] == "assistant" and "again" in repair[-2]["content"]
    assert repair[-1]["role"] == "user"
    assert "- plans[1].params: the same parameter set as plans[0]" in repair[-1]["content"]
    assert '{"plans": [...]} holding 3 plans' in repair[-1]["content"]
    assert [p.plan.params for p in proposals] == [g["params"] for g in GOOD]
    assert all(p.repaired for p in proposals)
    first = proposals[0]
    assert (first.prompt_tokens, first.completion_tokens) == (2100, 450)
    assert all(p.prompt_tokens == 0 for p in proposals[1:])
    assert first.problems and first.problems[0]["field"] == "plans[1].params"
    assert json.loads(first.raw_response or "") == {"plans": list(GOOD)}


def test_every_problem_of_every_plan_goes_into_the_one_repair(
    fake: FakeLLM, tmp_path: Path
) -> None:
    bad = reply(plan({"lr": 0.003}), plan({"lr": 5.0}), plan({"learning_rate": 0.01}))
    fake.push(bad, reply(*GOOD))
    batch(settings_for(fake, tmp_path), 4)
    text = fake.requests[1]["messages"][-1]["content"]
    assert "- plans: expected 4 plans, got 3" in text
    assert "- plans[1].params.lr: 5.0 is above the maximum" in text
    assert "- plans[2].params.learning_rate: unknown parameter; did you mean 'lr'?" in text


def test_two_bad_answers_raise_invalid_decision(fake: FakeLLM, tmp_path: Path) -> None:
    first = reply(GOOD[0], GOOD[0], usage=(500, 100))
    second = reply(GOOD[0], plan({"lr": 5.0}), usage=(700, 120))
    fake.push(first, second)
    with pytest.raises(InvalidDecision) as info:
        batch(settings_for(fake, tmp_path), 2)

    assert len(fake.requests) == 2
    data = info.value.data
    assert isinstance(data, dict)
    assert [p["field"] for p in data["problems"]] == ["plans[1].params.lr"]
    assert data["raw_response"] == second["content"]
    failed = data["proposal"]
    assert isinstance(failed, Proposal) and failed.plan is None
    assert (failed.prompt_tokens, failed.completion_tokens) == (1200, 220)
    assert "plans[1].params.lr" in info.value.message


def test_fewer_plans_after_the_repair_are_accepted_with_a_note(
    fake: FakeLLM, tmp_path: Path
) -> None:
    fake.push(reply(*GOOD[:2]), reply(*GOOD[:2]))
    proposals = batch(settings_for(fake, tmp_path), 3)
    assert len(fake.requests) == 2
    assert "- plans: expected 3 plans, got 2" in fake.requests[1]["messages"][-1]["content"]
    assert [p.plan.params for p in proposals] == [{"lr": 0.003}, {"dropout": 0.2}]
    assert all(p.repaired for p in proposals)
    assert any("2 of 3 plans, all valid; they were accepted" in n for n in proposals[0].notes)
    assert "plan 2 of 2 from one request" in proposals[1].notes[0]


def test_fewer_plans_with_another_problem_after_the_repair_fail(
    fake: FakeLLM, tmp_path: Path
) -> None:
    fake.push(reply(*GOOD[:2]), reply(GOOD[0], plan({"dropout": 2.0})))
    with pytest.raises(InvalidDecision) as info:
        batch(settings_for(fake, tmp_path), 3)
    fields = [p["field"] for p in info.value.data["problems"]]
    assert fields == ["plans", "plans[1].params.dropout"]


# -- stop ----------------------------------------------------------------------------------


def test_a_stop_plan_among_changes_is_dropped_and_the_changes_run(
    fake: FakeLLM, tmp_path: Path
) -> None:
    stop = plan({}, stop=True, stop_reason="val_loss has plateaued for five rounds")
    fake.push(reply(GOOD[0], stop, GOOD[1], usage=(800, 90)))
    proposals = batch(settings_for(fake, tmp_path), 3)
    assert len(fake.requests) == 1
    assert [p.plan.params for p in proposals] == [GOOD[0]["params"], GOOD[1]["params"]]
    assert not any(p.plan.stop for p in proposals)
    assert (proposals[0].prompt_tokens, proposals[0].completion_tokens) == (800, 90)
    assert any("plans[1] asked to stop" in n for n in proposals[0].notes)


def test_the_batch_stops_only_when_every_plan_says_stop(fake: FakeLLM, tmp_path: Path) -> None:
    stops = [plan({}, stop=True, stop_reason=f"plateau ({i})") for i in range(2)]
    fake.push(reply(*stops, usage=(800, 90)))
    [only] = batch(settings_for(fake, tmp_path), 2)
    assert len(fake.requests) == 1
    assert only.plan.stop and only.plan.stop_reason == "plateau (0)"
    assert (only.prompt_tokens, only.completion_tokens) == (800, 90)


def test_a_stop_with_a_change_runs_the_change(fake: FakeLLM, tmp_path: Path) -> None:
    stop = plan({"lr": 0.003}, stop=True, stop_reason="")
    fake.push(reply(stop, GOOD[1]))
    proposals = batch(settings_for(fake, tmp_path), 2)
    assert len(fake.requests) == 1
    assert [p.plan.params for p in proposals] == [{"lr": 0.003}, GOOD[1]["params"]]
    assert not proposals[0].plan.stop
    assert any("the change runs" in n for n in proposals[0].notes)


def test_a_stop_plan_without_a_reason_is_repaired(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push(
        {"content": json.dumps(plan({}, stop=True))},
        {"content": json.dumps(plan({}, stop=True, stop_reason="budget is better spent"))},
    )
    [only] = batch(settings_for(fake, tmp_path), 2)
    assert (
        "- plans[0].stop_reason: must not be empty (required when stop is true)"
        in (fake.requests[1]["messages"][-1]["content"])
    )
    assert only.plan.stop and only.repaired
    assert any("single plan object" in n for n in only.notes)
