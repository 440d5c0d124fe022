"""k plans in one answer: parse_plans, validate_plans, the schema, the prompt and the repair."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from tests.unit.research.helpers import BASELINE, TUNABLES, summary
from trainee.research.decision import (
    DecisionPlan,
    Problem,
    parse_plan,
    parse_plans,
    plan_json_schema,
    plans_json_schema,
    repair_message,
    validate_plans,
)
from trainee.research.prompt import PromptParts, ask_for_plans, build_messages
from trainee.research.state import ResearchState, new_state, record_round


def plan(params: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "hypothesis": f"changing {', '.join(params) or 'nothing'} helps",
        "change_summary": json.dumps(params),
        "params": params,
        "expected": "val_loss < 0.25",
        "stop": False,
        "stop_reason": "",
    }
    data.update(overrides)
    return data


THREE = [plan({"lr": 0.003}), plan({"dropout": 0.2}), plan({"optimizer": "sgd"})]
WRAPPED = json.dumps({"plans": THREE})
BARE = json.dumps(THREE)


def params_of(result: Any) -> list[dict[str, Any] | None]:
    return [None if p is None else p.params for p in result.plans]


# -- parse_plans: the wrapping is tolerated ------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        WRAPPED,
        f"```json\n{WRAPPED}\n```",
        f"Here are my three plans:\n\n{WRAPPED}\n\nGood luck {{with}} them.",
        BARE,
        f"```json\n{BARE}\n```",
        f"Plans follow.\n{BARE}\nThat is all.",
        "Plan A: "
        + json.dumps(THREE[0])
        + "\nPlan B: "
        + json.dumps(THREE[1])
        + "\nPlan C: "
        # plan objects one after another, in prose
        + json.dumps(THREE[2]),
    ],
    ids=["object", "fenced-object", "prose-object", "list", "fenced-list", "prose-list", "loose"],
)
def test_three_plans_are_found_however_they_are_wrapped(text: str) -> None:
    result = parse_plans(text, TUNABLES, 3)
    assert result.all_problems() == []
    assert params_of(result) == [{"lr": 0.003}, {"dropout": 0.2}, {"optimizer": "sgd"}]
    assert all(p is not None and p.expected == "val_loss < 0.25" for p in result.plans)


def test_a_single_plan_object_is_a_list_of_one_with_a_note() -> None:
    text = "```json\n" + json.dumps(THREE[0]) + "\n```"
    result = parse_plans(text, TUNABLES, 3)
    assert params_of(result) == [{"lr": 0.003}]
    assert any("single plan object" in n for n in result.notes)
    assert result.problems == [Problem("plans", "expected 3 plans, got 1")]
    # asked for one plan, a single object is exactly right
    one = parse_plans(json.dumps(THREE[0]), TUNABLES, 1)
    assert one.all_problems() == [] and params_of(one) == [{"lr": 0.003}]


def test_plans_under_another_field_are_read_with_a_note() -> None:
    result = parse_plans(json.dumps({"proposals": THREE}), TUNABLES, 3)
    assert result.all_problems() == []
    assert len(result.plans) == 3
    assert any("'proposals'" in n for n in result.notes)


def test_plans_holding_one_plan_object_is_read_as_one_plan() -> None:
    result = parse_plans(json.dumps({"plans": THREE[1]}), TUNABLES, 2)
    assert params_of(result) == [{"dropout": 0.2}]
    assert result.problems == [Problem("plans", "expected 2 plans, got 1")]


def test_more_than_k_plans_keep_the_first_k_with_a_note() -> None:
    result = parse_plans(WRAPPED, TUNABLES, 2)
    assert result.all_problems() == []
    assert params_of(result) == [{"lr": 0.003}, {"dropout": 0.2}]
    assert any("held 3 plans; the first 2 were kept" in n for n in result.notes)


def test_too_few_plans_is_a_problem() -> None:
    result = parse_plans(json.dumps({"plans": THREE[:2]}), TUNABLES, 3)
    assert len(result.plans) == 2
    assert result.problems == [Problem("plans", "expected 3 plans, got 2")]
    assert result.all_problems() == [Problem("plans", "expected 3 plans, got 2")]


def test_each_plan_is_read_like_a_single_plan_and_its_problems_are_named() -> None:
    second = plan({"learning_rate": 0.01, "batch_size": "64"})
    text = json.dumps({"plans": [THREE[0], second, "a plan", {"note": "x"}]})
    result = parse_plans(text, TUNABLES, 4)
    # plan 2 is read exactly as parse_plan reads it alone
    alone = parse_plan(json.dumps(second), TUNABLES)
    assert result.results[1] == alone
    assert result.plans[1] is not None and result.plans[1].params["batch_size"] == 64
    assert any(n.startswith("plans[1]: params.batch_size") for n in result.notes)
    fields = [p.field for p in result.all_problems()]
    assert fields == ["plans[1].params.learning_rate", "plans[2]", "plans[3]"]
    assert "did you mean 'lr'?" in result.all_problems()[0].reason
    assert result.plans[2] is None and result.plans[3] is None


@pytest.mark.parametrize(
    "text",
    ["", "   ", "no json here", '{"plans": 5}', '{"tokens": 12}', "[1, 2, 3]", "{" * 5000],
)
def test_nothing_usable_is_a_response_problem_never_an_exception(text: str) -> None:
    result = parse_plans(text, TUNABLES, 3)
    assert result.plans == []
    assert [p.field for p in result.all_problems()] in (["response"], ["plans"])


def test_the_plans_field_must_be_a_list() -> None:
    result = parse_plans('{"plans": 5}', TUNABLES, 3)
    assert result.problems == [Problem("response", "'plans' must be a list of plan objects, got 5")]


def test_an_empty_list_is_zero_plans() -> None:
    result = parse_plans('{"plans": []}', TUNABLES, 2)
    assert result.problems == [Problem("plans", "expected 2 plans, got 0")]


# -- validate_plans ------------------------------------------------------------------------


def plans_of(*params: dict[str, Any]) -> list[DecisionPlan | None]:
    return [DecisionPlan(**plan(p)) for p in params]


def test_a_duplicate_inside_the_batch_names_the_earlier_plan() -> None:
    # 0.003 and 0.0030000000001 are the same value; the baseline's dropout counts as unchanged
    batch = plans_of(
        {"lr": 0.003}, {"lr": 0.0030000000001, "dropout": 0.1}, {"dropout": 0.2}, {"lr": 0.003}
    )
    problems = validate_plans(batch, TUNABLES, baseline=BASELINE, tried=[], rejected=[])
    assert problems[0] == [] and problems[2] == []
    assert [p.field for p in problems[1]] == ["params"]
    assert "same parameter set as plans[0]" in problems[1][0].reason
    assert "same parameter set as plans[0]" in problems[3][0].reason


def test_out_of_bounds_in_the_second_plan() -> None:
    batch = plans_of({"lr": 0.003}, {"lr": 5.0}, {"batch_size": 64})
    problems = validate_plans(batch, TUNABLES, baseline=BASELINE, tried=[], rejected=[])
    assert problems[0] == [] and problems[2] == []
    assert [p.field for p in problems[1]] == ["params.lr"]
    assert "above the maximum" in problems[1][0].reason


def test_history_still_counts_and_is_reported_once() -> None:
    tried = [{**BASELINE, "lr": 0.003}]
    rejected = [{**BASELINE, "dropout": 0.2}]
    batch = plans_of({"lr": 0.003}, {"lr": 0.003}, {"dropout": 0.2})
    problems = validate_plans(batch, TUNABLES, baseline=BASELINE, tried=tried, rejected=rejected)
    assert [[p.reason for p in pp] for pp in problems] == [
        ["this exact parameter set was already tried; propose a different change"],
        ["this exact parameter set was already tried; propose a different change"],
        ["this exact parameter set was already tried and rejected; propose a different change"],
    ]


def test_missing_plans_and_stop_plans_are_not_compared() -> None:
    stop = DecisionPlan(
        hypothesis="", change_summary="", params={}, expected="", stop=True, stop_reason="done"
    )
    batch: list[DecisionPlan | None] = [None, stop, *plans_of({"lr": 0.01})]
    problems = validate_plans(batch, TUNABLES, baseline=BASELINE, tried=[], rejected=[])
    assert problems == [[], [], []]


# -- the schema ----------------------------------------------------------------------------


def test_the_schema_is_a_valid_json_schema_with_the_plan_as_items() -> None:
    schema = plans_json_schema(TUNABLES, 3)
    jsonschema.Draft202012Validator.check_schema(schema)
    array = schema["properties"]["plans"]
    assert array["items"] == plan_json_schema(TUNABLES)
    assert (array["minItems"], array["maxItems"]) == (3, 3)  # exactly k, as validated
    assert schema["required"] == ["plans"] and schema["additionalProperties"] is False
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"plans": THREE})
    assert not validator.is_valid({"plans": THREE[:1]})  # exactly k plans
    assert not validator.is_valid({"plans": []})
    assert not validator.is_valid({"plans": [*THREE, THREE[0]]})
    assert not validator.is_valid({"plans": [plan({"lr": 5.0})]})
    assert not validator.is_valid(THREE)


# -- the prompt and the repair -------------------------------------------------------------

PARTS = PromptParts(
    system_prompt="SYSTEM PROMPT",
    trainee_context="",
    project_context="PROJECT CONTEXT",
    constraints="",
    metrics_prompt="",
    tuning_prompt="",
)


def state_with_rounds() -> ResearchState:
    state = new_state("val_loss", "min")
    state, _ = record_round(state, summary(1, "completed", 0.5))
    params = {**BASELINE, "lr": 0.003}
    diff = {"lr": {"from": BASELINE["lr"], "to": 0.003}}
    state, _ = record_round(state, summary(2, "completed", 0.4, params=params, diff=diff))
    return state


def test_the_prompt_asks_for_k_different_plans_in_one_object() -> None:
    state = state_with_rounds()
    single = build_messages(PARTS, state, TUNABLES, baseline_params=BASELINE)
    batch = build_messages(PARTS, state, TUNABLES, baseline_params=BASELINE, plans=3)
    assert batch[0] == single[0]
    user, one = batch[1]["content"], single[1]["content"]
    head = one[: one.index("## Your answer")]
    assert user.startswith(head)  # the same prompt up to the answer section
    answer = user[len(head) :]
    assert answer.count("## ") == 1
    assert "Propose exactly 3 plans with different hypotheses" in answer
    assert '{"plans": [{"hypothesis": "<why>",' in answer
    assert "No two plans may have the same parameter set" in answer
    assert "Reply with exactly one JSON object, no prose" not in answer
    # the same answer section on messages built without it
    assert ask_for_plans(single, 3, state, TUNABLES) == batch
    assert ask_for_plans(single, 1, state, TUNABLES) == single
    assert build_messages(PARTS, state, TUNABLES, baseline_params=BASELINE, plans=1) == single


def test_ask_for_plans_keeps_sections_a_policy_added_before_the_answer() -> None:
    state = new_state("val_loss", "min")
    built = build_messages(PARTS, state, TUNABLES, baseline_params=BASELINE)
    content = built[1]["content"]
    cut = content.rfind("\n\n## Your answer")
    extra = content[:cut] + "\n\n## Optimizer suggestions\n\nS1: lr 0.01" + content[cut:]
    out = ask_for_plans([built[0], {"role": "user", "content": extra}], 4, state, TUNABLES)
    text = out[1]["content"]
    assert "## Optimizer suggestions\n\nS1: lr 0.01\n\n## Your answer\n\n" in text
    assert "Propose exactly 4 plans" in text and text.count("## Your answer") == 1
    assert built[1]["content"] == content  # the input is not changed


def test_the_batch_repair_message_names_the_plans_and_the_shape() -> None:
    problems = [Problem("plans[1].params", "the same parameter set as plans[0]")]
    text = repair_message(problems, plans=3)
    assert "- plans[1].params: the same parameter set as plans[0]" in text
    assert "plans[0] is the first plan" in text
    assert '{"plans": [...]} holding 3 plans' in text
    assert "Reply with the corrected JSON object only." in text
    single = repair_message(problems)
    assert single.startswith("Your plan was not accepted.")
    assert "plans" not in single.replace("plans[1]", "").replace("plans[0]", "")
