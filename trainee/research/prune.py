"""Whether to stop a running round early (``run.prune``): pure rules on metric series.

Given the running round's series and the completed rounds' series, :func:`decide`
says whether a rule of :class:`~trainee.spec.files.PruneSpec` prunes the round, with
the rule, the step, the value and the comparison that decided it (its ``reason`` is
the one line the round's error text, the report and the LLM show). No I/O: the
session feeds the points as they arrive (trainee/session/pruning.py) and stops the
round through its usual stop path.

A series is a metric's ``(step, value)`` points in the order they were reported;
:func:`step_of` gives a point's step under ``run.prune.step``. Rules:

- ``threshold``: NaN or infinity at once (whatever ``min_steps``); the latest value
  above ``above`` / below ``below``.
- ``patience``: the best value not improved by more than ``min_delta`` for
  ``patience`` steps.
- ``median`` / ``percentile``: the round's best value so far against the completed
  rounds' best values up to the same step (Optuna's median and percentile pruners).
- ``halving``: at each rung step reached, kept only in the best ``keep`` fraction of the
  rounds that reached the rung (successive halving).

Comparative rules start once ``warmup_rounds`` completed rounds have a value at or
before the step; no rule prunes before ``min_steps`` (NaN excepted). Several metrics
at once: each rule names its metric, any rule may prune.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trainee.research.state import format_metric
from trainee.spec.files import (
    Goal,
    HalvingRule,
    MedianRule,
    PatienceRule,
    PercentileRule,
    PruneRule,
    PruneSpec,
    ThresholdRule,
)

__all__ = [
    "PRUNED_PREFIX",
    "Finished",
    "PruneDecision",
    "Series",
    "decide",
    "pruned_reason",
    "rule_name",
    "step_of",
]

PRUNED_PREFIX = "pruned: "
"""How a pruned round's error text starts (``pruned: median rule: ...``)."""

Series = Mapping[str, Sequence[tuple[int, float]]]
"""metric name -> its ``(step, value)`` points, in the order they were reported."""


@dataclass(frozen=True)
class Finished:
    """A completed round's series, compared with by the median, percentile and halving
    rules. Its best value up to a step is looked up in O(log n) (indexed once per metric),
    so comparing with many long rounds at every batch of points stays cheap."""

    index: int
    series: Series
    _index: dict[tuple[str, str], tuple[list[int], list[float]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def best_until(self, metric: str, step: int, goal: str) -> float | None:
        """Its best finite value of ``metric`` at a step <= ``step``; None when none."""
        steps, best = self._indexed(metric, goal)
        i = bisect.bisect_right(steps, step)
        return best[i - 1] if i else None

    def last_step(self, metric: str) -> int | None:
        """The largest step it reported ``metric`` at."""
        steps = [s for s, _ in self.series.get(metric, ())]
        return max(steps) if steps else None

    def _indexed(self, metric: str, goal: str) -> tuple[list[int], list[float]]:
        key = (metric, goal)
        found = self._index.get(key)
        if found is None:
            points = sorted((s, v) for s, v in self.series.get(metric, ()) if math.isfinite(v))
            best: list[float] = []
            for _, v in points:
                best.append(v if not best or _worse(best[-1], v, goal) else best[-1])
            found = ([s for s, _ in points], best)
            self._index[key] = found
        return found


@dataclass(frozen=True)
class PruneDecision:
    """Why a round is pruned: the rule, the metric, the step and value that decided,
    what it was compared with (``against``: the median, cut or bound; ``rounds``: the
    completed rounds compared), and the one-line ``reason``."""

    rule: str
    metric: str
    step: int | None
    value: float | None
    reason: str
    against: float | None = None
    rounds: tuple[int, ...] = field(default=())

    @property
    def error(self) -> str:
        """The round's error text: ``pruned: <reason>``."""
        return PRUNED_PREFIX + self.reason


def rule_name(rule: PruneRule) -> str:
    """``median``, ``threshold``... (the ``rule`` key of the rule in project.yaml)."""
    return str(type(rule).__struct_config__.tag)


def pruned_reason(texts: Sequence[str]) -> str:
    """The prune reason among a round's error texts (its warnings), ``""`` when none."""
    return next((t for t in texts if t.startswith(PRUNED_PREFIX)), "")


def step_of(step: int | None, seq: int, mode: str) -> int:
    """A point's step: ``logged``, the step its line or record names, else its report
    count; ``reports``, its report count (``seq`` counts a metric's values from 0)."""
    if mode == "logged" and step is not None:
        return step
    return seq + 1


def decide(
    spec: PruneSpec,
    *,
    primary: str,
    goals: Mapping[str, Goal | str],
    running: Series,
    finished: Sequence[Finished] = (),
    nonfinite: Mapping[str, str] | None = None,
) -> PruneDecision | None:
    """The first rule of ``spec`` that prunes the running round, or None.

    ``primary``: the metric of a rule without one; ``goals``: each metric's goal (min
    when absent); ``nonfinite``: metrics that printed NaN/inf (name -> the first, as
    printed), which are never points."""
    bad = nonfinite or {}
    for rule in spec.rules:
        metric = rule.metric or primary
        goal = str(goals.get(metric, Goal.MIN))
        points = list(running.get(metric, ()))
        if isinstance(rule, ThresholdRule) and metric in bad:
            return PruneDecision(
                "threshold",
                metric,
                points[-1][0] if points else None,
                None,
                f"threshold rule: {metric} is not a number ({bad[metric]})",
            )
        if not points or points[-1][0] < spec.min_steps:
            continue
        found = _apply(rule, spec, metric, goal, points, finished)
        if found is not None:
            return found
    return None


def _apply(
    rule: PruneRule,
    spec: PruneSpec,
    metric: str,
    goal: str,
    points: list[tuple[int, float]],
    finished: Sequence[Finished],
) -> PruneDecision | None:
    if isinstance(rule, ThresholdRule):
        return _threshold(rule, metric, points)
    if isinstance(rule, PatienceRule):
        return _patience(rule, metric, goal, points)
    if isinstance(rule, MedianRule | PercentileRule):
        return _percentile(rule, spec, metric, goal, points, finished)
    if isinstance(rule, HalvingRule):
        return _halving(rule, spec, metric, goal, points, finished)
    raise AssertionError(f"unknown prune rule {rule!r}")  # pragma: no cover


def _threshold(
    rule: ThresholdRule, metric: str, points: list[tuple[int, float]]
) -> PruneDecision | None:
    step, value = points[-1]
    if rule.above is not None and value > rule.above:
        bound, side = rule.above, "above"
    elif rule.below is not None and value < rule.below:
        bound, side = rule.below, "below"
    else:
        return None
    return PruneDecision(
        "threshold",
        metric,
        step,
        value,
        f"threshold rule: {metric} {format_metric(value)} at step {step} {side} the bound "
        f"{format_metric(bound)}",
        against=bound,
    )


def _patience(
    rule: PatienceRule, metric: str, goal: str, points: list[tuple[int, float]]
) -> PruneDecision | None:
    best_step, best = points[0]
    for step, value in points[1:]:
        gain = best - value if goal == Goal.MIN else value - best
        if gain > rule.min_delta:
            best_step, best = step, value
    step, value = points[-1]
    if step - best_step < rule.patience:
        return None
    by = f" by more than {format_metric(rule.min_delta)}" if rule.min_delta else ""
    return PruneDecision(
        "patience",
        metric,
        step,
        value,
        f"patience rule: {metric} not improved{by} for {step - best_step} steps (best "
        f"{format_metric(best)} at step {best_step}, {format_metric(value)} at step {step}; "
        f"patience {rule.patience})",
        against=best,
    )


def _percentile(
    rule: MedianRule | PercentileRule,
    spec: PruneSpec,
    metric: str,
    goal: str,
    points: list[tuple[int, float]],
    finished: Sequence[Finished],
) -> PruneDecision | None:
    step = points[-1][0]
    own = _best_until(points, step, goal)
    assert own is not None
    others = _others_at(finished, metric, step, goal, reached=False)
    if len(others) < spec.warmup_rounds:
        return None
    values = [v for _, v in others]
    q = 50.0 if isinstance(rule, MedianRule) else rule.percentile
    cut = _quantile(values, q if goal == Goal.MIN else 100.0 - q)
    if not _worse(own, cut, goal):
        return None
    rounds = tuple(i for i, _ in others)
    if isinstance(rule, MedianRule):
        reason = (
            f"median rule: {metric} {format_metric(own)} at step {step} worse than the median "
            f"{format_metric(cut)} of {len(others)} rounds ({_list(rounds)})"
        )
    else:
        reason = (
            f"percentile rule: {metric} {format_metric(own)} at step {step} not in the best "
            f"{q:g}% of {len(others)} rounds ({_list(rounds)}; cut {format_metric(cut)})"
        )
    return PruneDecision(rule_name(rule), metric, step, own, reason, against=cut, rounds=rounds)


def _halving(
    rule: HalvingRule,
    spec: PruneSpec,
    metric: str,
    goal: str,
    points: list[tuple[int, float]],
    finished: Sequence[Finished],
) -> PruneDecision | None:
    latest = points[-1][0]
    for rung in rule.rungs:
        if rung > latest:
            break
        own = _best_until(points, rung, goal)
        if own is None:
            continue
        others = _others_at(finished, metric, rung, goal, reached=True)
        if len(others) < spec.warmup_rounds:
            continue
        kept = max(1, math.floor((len(others) + 1) * rule.keep))
        rank = 1 + sum(_worse(own, v, goal) for _, v in others)
        if rank <= kept:
            continue
        ranked = sorted((v for _, v in others), reverse=goal != Goal.MIN)
        cut = ranked[kept - 1]
        rounds = tuple(i for i, _ in others)
        return PruneDecision(
            "halving",
            metric,
            rung,
            own,
            f"halving rule: {metric} {format_metric(own)} at rung step {rung} ranks {rank} of "
            f"{len(others) + 1} rounds (with {_list(rounds)}); only the best {kept} go on "
            f"(cut {format_metric(cut)})",
            against=cut,
            rounds=rounds,
        )
    return None


# -- helpers ---------------------------------------------------------------------------


def _worse(a: float, b: float, goal: str) -> bool:
    """``a`` strictly worse than ``b`` under ``goal``."""
    return a > b if goal == Goal.MIN else a < b


def _best_until(points: Sequence[tuple[int, float]], step: int, goal: str) -> float | None:
    values = [v for s, v in points if s <= step and math.isfinite(v)]
    if not values:
        return None
    return min(values) if goal == Goal.MIN else max(values)


def _others_at(
    finished: Sequence[Finished], metric: str, step: int, goal: str, *, reached: bool
) -> list[tuple[int, float]]:
    """``(round, best value up to step)`` of the completed rounds with a value by then
    (``reached``: only those whose series got to ``step``)."""
    out: list[tuple[int, float]] = []
    for f in finished:
        if reached:
            last = f.last_step(metric)
            if last is None or last < step:
                continue
        best = f.best_until(metric, step, goal)
        if best is not None:
            out.append((f.index, best))
    return out


def _quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linear between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _list(rounds: Sequence[int]) -> str:
    return ", ".join(str(i) for i in rounds)
