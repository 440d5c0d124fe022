"""Cheap screening (``run.screen``): which round to promote to the next rung. Pure.

Asynchronous successive halving (ASHA, Li et al. 2018): a candidate first runs at the
lowest budget (rung 1); whenever a slot is free, the rungs are looked at from the top
down, and the best round of a rung that ranks in the best ``1/eta`` of the results of
that rung so far, and was not promoted yet, is promoted to the next rung. Nothing waits
for a rung to fill: a promotion happens as soon as a rung has enough results (``eta``
of them for the first one). When nothing can be promoted, a new candidate starts at
rung 1.

Rounds are ranked with the one metric comparison (:func:`trainee.spec.primary.better`);
a round of a rung without a value (failed, timed out, pruned without a metric) counts as a
result of that rung, ranks last and is never promoted. Rungs are numbered from 1; the
last rung is the full budget, the only one whose results are compared with the best.
No I/O: the session (trainee/session/screening.py) builds the results from the store.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainee.research.state import format_metric
from trainee.spec.primary import better
from trainee.states import RoundStatus

__all__ = [
    "Promotion",
    "RungResult",
    "next_promotion",
    "promoted_count",
    "rank",
    "rung_label",
    "told_status",
]


@dataclass(frozen=True)
class RungResult:
    """A finished round of a rung below the top: its primary metric (None when it has
    none) and whether a round was already promoted from it."""

    round: int
    rung: int
    metric: float | None
    promoted: bool = False


@dataclass(frozen=True)
class Promotion:
    """Promote ``round`` to ``rung`` (its budget ``budget``), and why (one line)."""

    round: int
    rung: int
    budget: float
    reason: str


def promoted_count(results: int, eta: float) -> int:
    """How many of ``results`` finished rounds of a rung go on: ``floor(results / eta)``."""
    return math.floor(results / eta + 1e-9)


def rank(results: Sequence[RungResult], goal: str) -> list[RungResult]:
    """Best first: by the metric under ``goal`` (ties and rounds without a value by
    round index, those without a value last)."""

    def cmp(a: RungResult, b: RungResult) -> int:
        if a.metric is not None and b.metric is not None:
            if better(a.metric, b.metric, goal):
                return -1
            if better(b.metric, a.metric, goal):
                return 1
        elif a.metric is not None:
            return -1
        elif b.metric is not None:
            return 1
        return a.round - b.round

    return sorted(results, key=functools.cmp_to_key(cmp))


def rung_label(rung: int, rungs: Sequence[float], flag: str) -> str:
    """``rung 1 of 3 (--epochs 2)``; the top one ``rung 3 of 3 (--epochs 20, full budget)``."""
    full = ", full budget" if rung == len(rungs) else ""
    return f"rung {rung} of {len(rungs)} ({flag} {rungs[rung - 1]:g}{full})"


def next_promotion(
    rungs: Sequence[float],
    eta: float,
    results: Sequence[RungResult],
    goal: str,
    *,
    metric_name: str = "metric",
) -> Promotion | None:
    """The promotion to make now, or None (then a new candidate starts at rung 1).

    ``rungs``: the budgets, increasing, the last the full budget; ``results``: the
    finished rounds of the rungs below the top (stopped ones left out by the caller)."""
    for rung in range(len(rungs) - 1, 0, -1):
        at = [r for r in results if r.rung == rung]
        keep = promoted_count(len(at), eta)
        if keep == 0:
            continue
        ranked = rank(at, goal)
        for place, r in enumerate(ranked[:keep], start=1):
            if r.metric is None:
                break
            if r.promoted:
                continue
            cut = ranked[keep - 1].metric
            return Promotion(
                round=r.round,
                rung=rung + 1,
                budget=rungs[rung],
                reason=(
                    f"promoted from rung {rung} (budget {rungs[rung - 1]:g}): {metric_name} "
                    f"{format_metric(r.metric)} ranks {place} of {len(at)} there; the best "
                    f"{keep} go on (cut {format_metric(cut)})"
                ),
            )
    return None


def told_status(status: str, rung: int, rungs: int) -> str:
    """The status a policy is told: a completed round below the full budget is, to the
    optimizer, a trial stopped at a rung (Optuna's ASHA marks those ``PRUNED``, with
    their last value), so TPE ranks it by its intermediate value, never as a result."""
    if status == RoundStatus.COMPLETED and 0 < rung < rungs:
        return str(RoundStatus.PRUNED)
    return status
