"""validate_plan: each rule, the repeats, and the one repair message."""

from __future__ import annotations

from typing import Any

import pytest

from trainee.research.decision import (
    DecisionPlan,
    Problem,
    effective_params,
    params_diff,
    repair_message,
    validate_plan,
    validate_plans,
)
from trainee.spec.constraints import parse_constraint

from .helpers import BASELINE, TUNABLES, tunable


def plan(params: dict[str, Any], **kw: Any) -> DecisionPlan:
    fields: dict[str, Any] = {
        "hypothesis": "h",
        "change_summary": "c",
        "expected": "val_loss < 0.2",
    }
    fields.update(kw)
    return DecisionPlan(params=params, **fields)


def check(
    p: DecisionPlan,
    tried: list[dict[str, Any]] | None = None,
    rejected: list[dict[str, Any]] | None = None,
) -> list[Problem]:
    return validate_plan(p, TUNABLES, baseline=BASELINE, tried=tried or [], rejected=rejected or [])


@pytest.mark.parametrize(
    "params",
    [
        {"lr": 0.003},
        {"lr": 1e-5},  # inclusive lower bound
        {"lr": 1.0},  # inclusive upper bound
        {"lr": 1},  # int for a float param
        {"batch_size": 64},
        {"batch_size": 8},
        {"batch_size": 256},
        {"optimizer": "sgd"},
        {"use_amp": True},
        {"dropout": 0.0},
        {"lr": 0.01, "batch_size": 64, "optimizer": "adamw", "use_amp": True, "dropout": 0.5},
    ],
)
def test_valid_plans_have_no_problems(params: dict[str, Any]) -> None:
    assert check(plan(params)) == []


@pytest.mark.parametrize(
    ("params", "field", "reason"),
    [
        ({"learning_rate": 0.01}, "params.learning_rate", "did you mean 'lr'?"),
        ({"data_path": "/etc"}, "params.data_path", "unknown parameter; the tunable parameters"),
        ({"lr": "0.01"}, "params.lr", 'must be a number (float), got "0.01"'),
        ({"lr": True}, "params.lr", "must be a number"),
        ({"lr": None}, "params.lr", "must be a number (float), got null"),
        ({"lr": float("nan")}, "params.lr", "finite"),
        ({"lr": float("inf")}, "params.lr", "finite"),
        ({"batch_size": True}, "params.batch_size", "must be a number"),
        ({"batch_size": 64.5}, "params.batch_size", "must be an integer, got 64.5"),
        # one rule for ints (as msgspec's strict mode): an integral float is no integer
        ({"batch_size": 64.0}, "params.batch_size", "got 64.0 (write it without a decimal"),
        ({"batch_size": 4}, "params.batch_size", "4 is below the minimum 8"),
        ({"batch_size": 512}, "params.batch_size", "512 is above the maximum 256"),
        ({"lr": 2.0}, "params.lr", "above the maximum 1.0"),
        ({"lr": 1e-6}, "params.lr", "below the minimum 1e-5"),
        ({"dropout": -0.1}, "params.dropout", "below the minimum 0.0"),
        ({"use_amp": 1}, "params.use_amp", "must be true or false, got 1"),
        ({"use_amp": "true"}, "params.use_amp", "must be true or false"),
        ({"optimizer": "rmsprop"}, "params.optimizer", "not one of the choices"),
        ({"optimizer": "Adam"}, "params.optimizer", 'did you mean "adam"?'),
        ({"optimizer": 1}, "params.optimizer", "not one of the choices"),
    ],
)
def test_each_rule_names_field_and_reason(params: dict[str, Any], field: str, reason: str) -> None:
    problems = check(plan(params))
    assert [p.field for p in problems] == [field]
    assert reason in problems[0].reason


def test_log_param_without_lower_bound_must_be_positive() -> None:
    t = tunable("wd", "float", baseline=0.01, log=True)
    for value, ok in ((1e-9, True), (0.0, False), (-1.0, False)):
        problems = validate_plan(
            plan({"wd": value}), [t], baseline={"wd": 0.01}, tried=[], rejected=[]
        )
        assert (problems == []) is ok, (value, problems)
        if not ok:
            assert "log-scale" in problems[0].reason


def test_choice_of_numbers_and_bools_keeps_kinds_apart() -> None:
    t = tunable("k", "choice", baseline=1, choices=(1, 2, True))

    def v(x: Any) -> list[Problem]:
        return validate_plan(plan({"k": x}), [t], baseline={"k": 1}, tried=[], rejected=[])

    assert v(2) == []
    assert v(2.0) == []
    assert v(True) == []
    assert v(3) != []
    assert v(False) != []


def test_every_problem_is_reported_at_once() -> None:
    problems = check(plan({"lr": 5.0, "bs": 64, "optimizer": "x"}, hypothesis=" ", expected=""))
    fields = [p.field for p in problems]
    assert fields == ["hypothesis", "expected", "params.lr", "params.bs", "params.optimizer"]


@pytest.mark.parametrize(
    ("p", "field", "reason"),
    [
        (plan({}, stop=True, stop_reason=""), "stop_reason", "required when stop is true"),
        (plan({}, stop=True, stop_reason="   "), "stop_reason", "required when stop is true"),
        (plan({}), "params", "empty"),
        (plan({"lr": 0.1}, hypothesis=""), "hypothesis", "must not be empty"),
        (plan({"lr": 0.1}, change_summary=""), "change_summary", "must not be empty"),
        (plan({"lr": 0.1}, expected=" "), "expected", "must not be empty"),
    ],
)
def test_stop_and_empty_rules(p: DecisionPlan, field: str, reason: str) -> None:
    problems = check(p)
    assert [x.field for x in problems] == [field]
    assert reason in problems[0].reason


def test_a_stop_plan_with_a_reason_and_no_params_is_valid() -> None:
    p = DecisionPlan(
        hypothesis="",
        change_summary="",
        params={},
        expected="",
        stop=True,
        stop_reason="no further gains expected",
    )
    assert check(p, tried=[dict(BASELINE)]) == []


def test_a_stop_plan_still_may_not_name_unknown_params() -> None:
    p = plan({"nope": 1}, stop=True, stop_reason="done")
    assert [x.field for x in check(p)] == ["params.nope"]


def test_a_stop_plan_is_not_a_repeat() -> None:
    p = plan({"lr": 0.01}, stop=True, stop_reason="done")
    assert check(p, tried=[effective_params(BASELINE, {"lr": 0.01})]) == []


@pytest.mark.parametrize(
    ("changes", "tried", "rejected", "reason"),
    [
        ({"lr": 0.01}, [{"lr": 0.01}], [], "already tried;"),
        ({"lr": 0.01}, [], [{"lr": 0.01}], "already tried and rejected"),
        ({"lr": 0.01 * (1 + 1e-12)}, [{"lr": 0.01}], [], "already tried"),
        ({"batch_size": 64}, [{"batch_size": 64.0}], [], "already tried"),
        ({"lr": 0.001}, [{}], [], "already tried"),  # the baseline itself
        ({"lr": 0.003, "dropout": 0.1}, [{"lr": 0.003}], [], "already tried"),
    ],
)
def test_a_repeat_of_a_tried_or_rejected_set_is_refused(
    changes: dict[str, Any],
    tried: list[dict[str, Any]],
    rejected: list[dict[str, Any]],
    reason: str,
) -> None:
    full_tried = [effective_params(BASELINE, t) for t in tried]
    full_rejected = [effective_params(BASELINE, r) for r in rejected]
    problems = check(plan(changes), tried=full_tried, rejected=full_rejected)
    assert [p.field for p in problems] == ["params"]
    assert "this exact parameter set was already tried" in problems[0].reason
    assert reason in problems[0].reason


@pytest.mark.parametrize(
    ("changes", "tried"),
    [
        ({"lr": 0.01}, {"lr": 0.0100001}),
        ({"use_amp": True}, {"use_amp": 1}),
        ({"lr": 0.01}, {"lr": 0.01, "batch_size": 64}),
    ],
)
def test_near_but_different_sets_are_not_repeats(
    changes: dict[str, Any], tried: dict[str, Any]
) -> None:
    assert check(plan(changes), tried=[effective_params(BASELINE, tried)]) == []


def test_no_repeat_check_when_values_are_already_wrong() -> None:
    problems = check(plan({"lr": 9.0}), tried=[effective_params(BASELINE, {"lr": 9.0})])
    assert [p.field for p in problems] == ["params.lr"]


def test_effective_params_and_diff() -> None:
    eff = effective_params(BASELINE, {"lr": 0.01, "use_amp": False})
    assert eff == {**BASELINE, "lr": 0.01}
    assert BASELINE["lr"] == 0.001, "the baseline dict is not modified"
    assert params_diff(BASELINE, eff) == {"lr": {"from": 0.001, "to": 0.01}}
    assert params_diff(BASELINE, BASELINE) == {}
    assert params_diff({"a": 1}, {"a": True}) == {"a": {"from": 1, "to": True}}
    assert params_diff({"a": 1}, {"a": 1.0}) == {}
    assert params_diff({}, {"new": 3}) == {"new": {"from": None, "to": 3}}


def test_repair_message_lists_every_problem_and_the_rules() -> None:
    problems = [
        Problem("params.learning_rate", "unknown parameter; did you mean 'lr'?"),
        Problem("params.batch_size", "512 is above the maximum 256"),
    ]
    text = repair_message(problems)
    assert "- params.learning_rate: unknown parameter; did you mean 'lr'?" in text
    assert "- params.batch_size: 512 is above the maximum 256" in text
    assert "exact names" in text
    assert "already tried or rejected" in text
    assert "stop_reason" in text
    assert text.rstrip().endswith("Reply with the corrected JSON object only.")
    assert repair_message(problems) == text


def test_a_plan_breaking_a_constraint_names_it_and_the_values() -> None:
    constraints = (
        parse_constraint("batch_size * 4 <= 512"),
        parse_constraint("optimizer != 'sgd' or lr <= 0.1"),
    )
    p = plan({"batch_size": 256, "optimizer": "sgd", "lr": 0.5})
    problems = validate_plan(
        p, TUNABLES, baseline=BASELINE, tried=[], rejected=[], constraints=constraints
    )
    assert problems == [
        Problem(
            "constraints[0]",
            "`batch_size * 4 <= 512` does not hold for batch_size=256; "
            "choose values that satisfy it",
        ),
        Problem(
            "constraints[1]",
            "`optimizer != 'sgd' or lr <= 0.1` does not hold for optimizer=\"sgd\", lr=0.5; "
            "choose values that satisfy it",
        ),
    ]
    # the baseline values count: a plan changing only lr is checked with optimizer=adam
    ok = plan({"lr": 0.5})
    assert (
        validate_plan(
            ok, TUNABLES, baseline=BASELINE, tried=[], rejected=[], constraints=constraints
        )
        == []
    )
    # a value outside its bounds is reported alone; constraints are checked on valid values
    bad = plan({"batch_size": 1000})
    assert [
        p.field
        for p in validate_plan(
            bad, TUNABLES, baseline=BASELINE, tried=[], rejected=[], constraints=constraints
        )
    ] == ["params.batch_size"]


def test_batch_plans_are_checked_against_the_constraints_each() -> None:
    constraints = (parse_constraint("batch_size <= 128"),)
    checked = validate_plans(
        [plan({"batch_size": 64}), plan({"batch_size": 200}), plan({"batch_size": 64})],
        TUNABLES,
        baseline=BASELINE,
        tried=[],
        rejected=[],
        constraints=constraints,
    )
    assert [[p.field for p in ps] for ps in checked] == [[], ["constraints[0]"], ["params"]]
