"""Property tests: parse_plan never raises; in-space untried plans validate; prompts are bounded."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainee.research.decision import (
    DecisionPlan,
    effective_params,
    parse_plan,
    validate_plan,
    values_equal,
)
from trainee.research.prompt import PromptLimits, PromptParts, build_messages, truncate
from trainee.research.state import new_state, record_round
from trainee.spec import ParamType, TunableSpec

from .helpers import BASELINE, TUNABLES, summary

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(st.text(max_size=2000))
def test_parse_plan_never_raises_on_arbitrary_text(text: str) -> None:
    result = parse_plan(text, TUNABLES)
    assert result.plan is not None or result.problems


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(
            ["hypothesis", "change_summary", "params", "expected", "stop", "stop_reason", "other"]
        ),
        json_values,
    ),
    st.text(max_size=200),
    st.text(max_size=200),
)
def test_parse_plan_never_raises_on_plan_like_json(
    data: dict[str, Any], before: str, after: str
) -> None:
    text = before + json.dumps(data) + after
    result = parse_plan(text, TUNABLES)
    if result.plan is not None:
        validate_plan(result.plan, TUNABLES, baseline=BASELINE, tried=[], rejected=[])


def value_in_space(t: TunableSpec) -> st.SearchStrategy[Any]:
    if t.choices:
        return st.sampled_from(list(t.choices))
    if t.type == ParamType.BOOL:
        return st.booleans()
    lo = t.min_value if t.min_value is not None else -1e6
    hi = t.max_value if t.max_value is not None else 1e6
    if t.type == ParamType.INT:
        return st.integers(math.ceil(lo), math.floor(hi))
    return st.floats(float(lo), float(hi), allow_nan=False, allow_infinity=False)


changes_strategy = st.fixed_dictionaries(
    {}, optional={t.name: value_in_space(t) for t in TUNABLES}
).filter(bool)

full_sets = st.fixed_dictionaries({t.name: value_in_space(t) for t in TUNABLES})


@SETTINGS
@given(changes_strategy, st.lists(full_sets, max_size=5), st.lists(full_sets, max_size=5))
def test_plans_inside_the_space_and_untried_are_valid(
    changes: dict[str, Any], tried: list[dict[str, Any]], rejected: list[dict[str, Any]]
) -> None:
    candidate = effective_params(BASELINE, changes)
    seen = tried + rejected

    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return all(values_equal(a[k], b[k]) for k in a)

    plan = DecisionPlan(hypothesis="h", change_summary="c", params=changes, expected="e")
    problems = validate_plan(plan, TUNABLES, baseline=BASELINE, tried=tried, rejected=rejected)
    if any(same(candidate, s) for s in seen):
        assert [p.field for p in problems] == ["params"]
    else:
        assert problems == []
    # and the same set, once tried, is refused
    again = validate_plan(plan, TUNABLES, baseline=BASELINE, tried=[candidate], rejected=[])
    assert [p.field for p in again] == ["params"]


@SETTINGS
@given(changes_strategy)
def test_a_valid_plan_survives_json_and_parse(changes: dict[str, Any]) -> None:
    data = {
        "hypothesis": "h",
        "change_summary": "c",
        "params": changes,
        "expected": "e",
        "stop": False,
        "stop_reason": "",
    }
    result = parse_plan("```json\n" + json.dumps(data) + "\n```", TUNABLES)
    assert result.problems == []
    assert result.plan is not None
    assert validate_plan(result.plan, TUNABLES, baseline=BASELINE, tried=[], rejected=[]) == []


rounds_strategy = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "completed",
                "completed",
                "failed",
                "timed_out",
                "stopped",
                "completed_without_metrics",
            ]
        ),
        st.none() | st.floats(0.0, 10.0),
        st.lists(st.text(max_size=200), max_size=60),
        st.text(max_size=300),
    ),
    max_size=40,
)


@SETTINGS
@given(rounds_strategy, st.text(max_size=3000), st.integers(1200, 20000), st.integers(100, 3000))
def test_prompt_is_bounded_and_deterministic(
    rows: list[tuple[str, float | None, list[str], str]],
    context: str,
    total: int,
    section: int,
) -> None:
    state = new_state("val_loss", "min")
    for i, (status, metric, tail, expected) in enumerate(rows, start=1):
        params = {**BASELINE, "lr": 0.001 + i / 1000}
        state, judged = record_round(
            state, summary(i, status, metric, params=params, tail=tail, expected=expected)
        )
        assert judged.verdict in {"baseline", "kept", "neutral", "rejected", None}
    parts = PromptParts(
        system_prompt="",
        trainee_context=context,
        project_context=context,
        constraints=context,
        metrics_prompt="",
        tuning_prompt="",
        journal=context,
    )
    limits = PromptLimits(section_chars=section, total_chars=total)
    a = build_messages(parts, state, TUNABLES, baseline_params=BASELINE, limits=limits)
    b = build_messages(parts, state, TUNABLES, baseline_params=BASELINE, limits=limits)
    assert a == b
    assert len(a[1]["content"]) <= total
    assert "## Your answer" in a[1]["content"]


@SETTINGS
@given(st.text(max_size=500), st.integers(0, 600), st.sampled_from(["head", "tail"]))
def test_truncate_is_bounded_and_marked(text: str, limit: int, keep: str) -> None:
    out = truncate(text, limit, keep=keep)
    if len(text) <= limit:
        assert out == text
    else:
        assert "[... truncated " in out
        assert len(out) <= limit + len(f"\n[... truncated {len(text)} chars]")
