"""The prune rules on metric series: each rule prunes what it should, at the step it
should, with the comparison in its reason, and leaves everything else running."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from trainee.research.prune import (
    PRUNED_PREFIX,
    Finished,
    PruneDecision,
    decide,
    pruned_reason,
    step_of,
)
from trainee.spec.files import PruneSpec


def spec(*rules: dict[str, Any], **kw: Any) -> PruneSpec:
    return msgspec.convert({"rules": list(rules), **kw}, PruneSpec)


def series(*values: float, start: int = 1) -> list[tuple[int, float]]:
    return [(start + i, v) for i, v in enumerate(values)]


def run(
    s: PruneSpec,
    running: Sequence[tuple[int, float]] | dict[str, Any],
    finished: Sequence[Sequence[tuple[int, float]]] = (),
    *,
    goal: str = "min",
    nonfinite: dict[str, str] | None = None,
) -> PruneDecision | None:
    run_series = running if isinstance(running, dict) else {"val_loss": running}
    return decide(
        s,
        primary="val_loss",
        goals={"val_loss": goal, "acc": "max"},
        running=run_series,
        finished=[Finished(i + 2, {"val_loss": f}) for i, f in enumerate(finished)],
        nonfinite=nonfinite,
    )


# -- threshold ---------------------------------------------------------------------------


def test_threshold_prunes_a_divergence_above_the_bound_at_its_step() -> None:
    s = spec({"rule": "threshold", "above": 10.0})
    assert run(s, series(2.0, 3.0, 9.9)) is None
    got = run(s, series(2.0, 3.0, 50.0))
    assert got is not None and got.rule == "threshold" and got.step == 3 and got.value == 50.0
    assert got.reason == "threshold rule: val_loss 50 at step 3 above the bound 10"
    assert got.error == PRUNED_PREFIX + got.reason


def test_threshold_prunes_nan_at_once_even_before_min_steps() -> None:
    s = spec({"rule": "threshold"}, min_steps=100)
    got = run(s, series(2.0), nonfinite={"val_loss": "'nan' at step 2"})
    assert got is not None
    assert got.reason == "threshold rule: val_loss is not a number ('nan' at step 2)"
    # nan of another metric is not this rule's business
    assert run(s, series(2.0), nonfinite={"acc": "'nan'"}) is None


def test_threshold_below_for_a_collapsing_accuracy() -> None:
    s = spec({"rule": "threshold", "metric": "acc", "below": 0.05})
    got = run(s, {"acc": series(0.3, 0.01)})
    assert got is not None and "acc 0.01 at step 2 below the bound 0.05" in got.reason


# -- patience ----------------------------------------------------------------------------


def test_patience_prunes_a_plateau_after_patience_steps_without_gain() -> None:
    s = spec({"rule": "patience", "patience": 3, "min_delta": 0.01})
    # improves until step 3 (0.5), then moves by less than min_delta
    values = [1.0, 0.7, 0.5, 0.495, 0.499]
    assert run(s, series(*values)) is None  # 2 steps since the best
    got = run(s, series(*values, 0.497))
    assert got is not None and got.rule == "patience" and got.step == 6
    assert got.against == 0.5
    assert "not improved by more than 0.01 for 3 steps (best 0.5 at step 3" in got.reason


def test_patience_counts_steps_not_reports_and_follows_the_goal() -> None:
    s = spec({"rule": "patience", "patience": 10})
    # logged every 5 steps: two reports without a gain are 10 steps
    points = [(5, 0.2), (10, 0.4), (15, 0.3)]
    got = decide(s, primary="acc", goals={"acc": "max"}, running={"acc": points})
    assert got is None  # 15 - 10 = 5 steps since the best (0.4 at 10)
    got = decide(s, primary="acc", goals={"acc": "max"}, running={"acc": [*points, (20, 0.35)]})
    assert got is not None and got.step == 20 and "best 0.4 at step 10" in got.reason


# -- median / percentile -----------------------------------------------------------------


DONE = [series(1.0, 0.5, 0.3), series(1.0, 0.6, 0.4), series(1.0, 0.7, 0.5)]


def test_median_waits_for_the_warmup_rounds_then_compares_at_the_same_step() -> None:
    s = spec({"rule": "median"}, warmup_rounds=3)
    bad = series(1.2, 0.9)
    assert run(s, bad, DONE[:2]) is None  # 2 completed rounds < warmup 3
    got = run(s, bad, DONE)
    assert got is not None and got.rule == "median" and got.step == 2
    # the completed rounds' best up to step 2: 0.5, 0.6, 0.7 -> median 0.6
    assert got.against == pytest.approx(0.6) and got.rounds == (2, 3, 4)
    assert got.reason == (
        "median rule: val_loss 0.9 at step 2 worse than the median 0.6 of 3 rounds (2, 3, 4)"
    )
    assert run(s, series(1.2, 0.55), DONE) is None  # better than the median


def test_median_uses_the_best_so_far_and_respects_min_steps() -> None:
    s = spec({"rule": "median"}, warmup_rounds=2, min_steps=2)
    assert run(s, series(5.0), DONE) is None  # step 1 < min_steps
    # a bad step after a good one: the best so far (0.4) is compared
    assert run(s, series(0.4, 0.9), DONE) is None


def test_percentile_keeps_only_the_top_quarter_for_max_goals() -> None:
    s = spec({"rule": "percentile", "percentile": 25, "metric": "acc"}, warmup_rounds=2)
    done = [Finished(i, {"acc": series(v)}) for i, v in [(2, 0.1), (3, 0.2), (4, 0.3), (5, 0.4)]]
    # for max, the cut is the 75th percentile of 0.1..0.4 = 0.325
    got = decide(
        s, primary="acc", goals={"acc": "max"}, running={"acc": series(0.3)}, finished=done
    )
    assert got is not None and got.against == pytest.approx(0.325)
    assert "not in the best 25% of 4 rounds" in got.reason
    keep = decide(
        s, primary="acc", goals={"acc": "max"}, running={"acc": series(0.35)}, finished=done
    )
    assert keep is None


# -- halving -----------------------------------------------------------------------------


def test_halving_prunes_at_a_rung_outside_the_kept_fraction() -> None:
    s = spec({"rule": "halving", "rungs": [1, 3], "keep": 0.5}, warmup_rounds=2)
    # at rung 1 every round is at 1.0: a tie ranks first, it goes on
    assert run(s, series(1.0), DONE[:2]) is None
    # at rung 3: the others 0.3 and 0.4; kept floor(3 * 0.5) = 1
    got = run(s, series(1.0, 0.5, 0.35), DONE[:2])
    assert got is not None and got.rule == "halving" and got.step == 3
    assert "ranks 2 of 3 rounds (with 2, 3); only the best 1 go on (cut 0.3)" in got.reason
    assert run(s, series(1.0, 0.5, 0.25), DONE[:2]) is None  # the best at rung 3


def test_halving_counts_only_rounds_that_reached_the_rung() -> None:
    s = spec({"rule": "halving", "rungs": [5]}, warmup_rounds=2)
    short = [series(0.1, 0.1), series(0.1, 0.1)]  # ended before step 5
    assert run(s, series(*[1.0] * 5), short) is None


# -- several rules, several metrics, steps -----------------------------------------------


def test_the_first_rule_that_prunes_decides_across_metrics() -> None:
    s = spec(
        {"rule": "threshold", "metric": "acc", "below": 0.0},
        {"rule": "patience", "patience": 2},
    )
    running = {"acc": series(0.5, 0.6, 0.7), "val_loss": series(1.0, 1.0, 1.0)}
    got = run(s, running)
    assert got is not None and got.rule == "patience" and got.metric == "val_loss"
    assert run(s, {"acc": series(0.5)}) is None  # no val_loss yet: nothing to judge


def test_step_of_and_the_pruned_reason_of_error_texts() -> None:
    assert step_of(40, 3, "logged") == 40
    assert step_of(None, 3, "logged") == 4
    assert step_of(40, 3, "reports") == 4
    assert pruned_reason(["other", "pruned: median rule: x"]) == "pruned: median rule: x"
    assert pruned_reason(["exit code 1"]) == ""


def test_a_finished_rounds_best_up_to_a_step_ignores_report_order_and_nan() -> None:
    done = Finished(2, {"val_loss": [(3, 0.5), (1, 0.9), (2, float("nan")), (4, 0.7)]})
    assert done.best_until("val_loss", 0, "min") is None
    assert done.best_until("val_loss", 2, "min") == 0.9
    assert done.best_until("val_loss", 3, "min") == 0.5
    assert done.best_until("val_loss", 99, "max") == 0.9
    assert done.last_step("val_loss") == 4 and done.last_step("acc") is None


def test_the_round_pruning_feeds_only_the_ruled_metrics_and_decides_once() -> None:
    from trainee.metrics.extract import MetricPoint
    from trainee.session.pruning import RoundPruning

    watch = RoundPruning(
        spec({"rule": "threshold", "above": 5.0}, min_steps=1),
        primary="val_loss",
        goals={"val_loss": "min"},
        finished=[],
    )
    assert watch.feed([MetricPoint("lr", 99.0, 1, 0, "stdout_regex")], {}) is None
    assert "lr" not in watch.running  # not a ruled metric: never held
    assert watch.feed([MetricPoint("val_loss", 1.0, 1, 0, "stdout_regex")], {}) is None
    got = watch.feed([MetricPoint("val_loss", 9.0, 2, 1, "stdout_regex")], {})
    assert got is not None and got.step == 2 and watch.requested.is_set()
    assert watch.decision is got
    assert watch.feed([MetricPoint("val_loss", 99.0, 3, 2, "stdout_regex")], {}) is None
