"""The one metric rule: which metric is primary, and when a value beats another."""

from __future__ import annotations

import math

from trainee.spec.files import Goal, MetricSpec
from trainee.spec.primary import PrimaryMetric, better, primary_metric


def _spec(name: str, goal: str) -> MetricSpec:
    return MetricSpec(name=name, source="stdout_regex", key_or_pattern=name + "=(.*)", goal=goal)


def test_better_needs_both_values_finite_and_a_gain_beyond_the_tolerance() -> None:
    assert better(0.1, 0.2, Goal.MIN)
    assert not better(0.2, 0.1, "min")
    assert better(0.9, 0.8, "max")
    assert not better(0.8, 0.8, Goal.MAX), "equal is not better"
    assert not better(0.1 + 0.2, 0.3, Goal.MIN), "the same value computed two ways"
    assert not better(0.3, 0.1 + 0.2, Goal.MAX)
    assert not better(math.nan, 0.8, Goal.MIN)
    assert not better(-math.inf, 0.8, Goal.MIN)
    assert not better(0.1, math.nan, Goal.MIN), "a non-finite best is never beaten either"


def test_the_primary_metric_is_the_first_spec_else_the_first_builtin_reported() -> None:
    assert primary_metric([_spec("acc", "max"), _spec("val_loss", "min")]) == PrimaryMetric(
        "acc", Goal.MAX
    )
    assert primary_metric([]) == PrimaryMetric("loss", Goal.MIN)
    assert primary_metric([], [{}, {"total_loss": 1.0}, {"loss": 2.0}]) == PrimaryMetric(
        "total_loss", Goal.MIN
    )
