"""Judging a round's own prediction (``expected``) against baseline and best."""

from __future__ import annotations

import pytest

from trainee.research.state import judge_expected, new_state, record_round

from .helpers import BASELINE, summary

# expected text, goal, metric of the round, baseline, best before the round -> outcome
TABLE: list[tuple[str, str, float | None, float | None, float | None, str]] = [
    ("val_loss < 0.25", "min", 0.24, 0.3, 0.28, "held"),
    ("val_loss < 0.25", "min", 0.26, 0.3, 0.28, "failed"),
    ("val_loss < 0.25", "min", 0.25, 0.3, 0.28, "failed"),
    ("val_loss <= 0.25", "min", 0.25, 0.3, 0.28, "held"),
    ("val_loss ≤ 0.25", "min", 0.25, 0.3, 0.28, "held"),
    ("val_loss below 0.25", "min", 0.2, 0.3, 0.28, "held"),
    ("val_loss at most 0.25", "min", 0.3, 0.3, 0.28, "failed"),
    ("accuracy > 0.9", "min", 0.2, 0.3, 0.28, "not checkable"),  # another metric
    ("val_loss > 0.1", "min", 0.2, 0.3, 0.3, "held"),
    ("val_loss decreases by 5%", "min", 0.26, 0.3, 0.28, "held"),  # 0.28 * 0.95 = 0.266
    ("val_loss decreases by 5%", "min", 0.27, 0.3, 0.28, "failed"),
    ("val_loss decreases by 5% vs baseline", "min", 0.28, 0.3, 0.25, "held"),  # 0.285
    ("val_loss drops by 0.02", "min", 0.26, 0.3, 0.28, "held"),
    ("val_loss drops by about 0.02", "min", 0.27, 0.3, 0.28, "failed"),
    ("val_loss drops to 0.2", "min", 0.19, 0.3, 0.28, "held"),
    ("val_loss drops to 0.2", "min", 0.21, 0.3, 0.28, "failed"),
    ("lower val_loss", "min", 0.27, 0.3, 0.28, "held"),
    ("lower val_loss", "min", 0.29, 0.3, 0.28, "failed"),
    ("lower val_loss than the baseline", "min", 0.29, 0.3, 0.28, "held"),
    ("val_loss improves", "min", 0.27, 0.3, 0.28, "held"),
    ("improves", "min", 0.29, 0.3, 0.28, "failed"),
    ("improves", "max", 0.9, 0.8, 0.85, "held"),
    ("acc improves by 2%", "max", 0.87, 0.8, 0.85, "held"),  # 0.867
    ("acc increases", "max", 0.84, 0.8, 0.85, "failed"),
    ("higher lr lowers val_loss", "min", 0.27, 0.3, 0.28, "held"),
    ("with a higher lr, val_loss should decrease", "min", 0.27, 0.3, 0.28, "held"),
    ("val_loss does not increase", "min", 0.27, 0.3, 0.28, "not checkable"),
    ("val_loss about the same", "min", 0.27, 0.3, 0.28, "not checkable"),
    ("val_loss between 0.2 and 0.25", "min", 0.22, 0.3, 0.28, "not checkable"),
    ("val_loss < 90%", "min", 0.2, 0.3, 0.28, "not checkable"),
    ("faster training", "min", 0.2, 0.3, 0.28, "not checkable"),
    ("", "min", 0.2, 0.3, 0.28, "not checkable"),
    ("val_loss improves over 10 epochs", "min", 0.27, 0.3, 0.28, "held"),
    ("lower val_loss", "min", 0.2, None, None, "not checkable"),  # no reference yet
    ("val_loss < 0.25", "min", 0.2, None, None, "held"),  # a threshold needs none
    ("lower val_loss", "min", None, 0.3, 0.28, "failed"),  # the round gave no metric
    ("val loss < 0.25", "min", 0.2, 0.3, 0.28, "held"),  # name with a space
]


@pytest.mark.parametrize(("text", "goal", "metric", "baseline", "best", "outcome"), TABLE)
def test_expected_outcome_table(
    text: str,
    goal: str,
    metric: float | None,
    baseline: float | None,
    best: float | None,
    outcome: str,
) -> None:
    primary = "acc" if goal == "max" else "val_loss"
    others = ["accuracy"] if primary == "val_loss" else ["val_loss"]
    got, detail = judge_expected(
        text,
        primary=primary,
        goal=goal,
        metric=metric,
        baseline=baseline,
        best=best,
        other_metrics=others,
    )
    assert got == outcome, detail
    assert bool(detail) is (outcome != "not checkable")


def test_no_primary_metric_means_not_checkable() -> None:
    got, _ = judge_expected(
        "lower loss", primary=None, goal="min", metric=0.1, baseline=0.2, best=0.2
    )
    assert got == "not checkable"


@pytest.mark.parametrize(
    ("expected", "metric", "suffix"),
    [
        ("val_loss < 0.25", 0.2, "; prediction held (expected val_loss < 0.25, got 0.2)"),
        ("val_loss < 0.25", 0.27, "; prediction failed (expected val_loss < 0.25, got 0.27)"),
        ("bigger batches are more stable", 0.2, "; prediction not checkable"),
    ],
)
def test_the_verdict_reason_carries_the_prediction_outcome(
    expected: str, metric: float, suffix: str
) -> None:
    state = new_state("val_loss", "min")
    state, _ = record_round(state, summary(1, metric=0.3))
    params = {**BASELINE, "batch_size": 64}
    state, judged = record_round(
        state, summary(2, metric=metric, params=params, expected=expected, hypothesis="h")
    )
    assert judged.verdict_reason.endswith(suffix)
    outcome = suffix.split("prediction ")[1].split(" (")[0]
    assert state.hypotheses[-1] == {
        "round": 2,
        "hypothesis": "h",
        "expected": expected,
        "verdict": judged.verdict,
        "prediction": outcome,
    }


def test_a_failed_round_fails_a_checkable_prediction() -> None:
    state = new_state("val_loss", "min")
    state, _ = record_round(state, summary(1, metric=0.3))
    params = {**BASELINE, "batch_size": 256}
    state, judged = record_round(
        state,
        summary(2, "failed", params=params, expected="val_loss < 0.25", tail=["out of memory"]),
    )
    assert judged.verdict_reason == (
        "failed: out of memory; prediction failed (expected val_loss < 0.25, got no value)"
    )
