"""What the primary metric is and when one of its values beats another: one rule for the
research state, the pruning rules, the reports and the page (which gets the results served).

- :func:`primary_metric`: the first ``metrics.specs`` entry's name and goal; without
  specs, the first of :data:`~trainee.spec.files.BUILTIN_METRICS` a round reported
  (``loss`` when none did), minimised.
- :func:`better`: ``a`` beats ``b`` when both are finite and ``a`` is on the goal's side
  of ``b`` by more than a relative tolerance of :data:`REL_TOL` (equal floats computed two
  ways never count as a gain).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from trainee.spec.files import BUILTIN_METRICS, Goal, MetricSpec

__all__ = ["REL_TOL", "PrimaryMetric", "better", "primary_metric"]

REL_TOL = 1e-9
"""Relative tolerance under which two metric values are the same result."""


class PrimaryMetric(NamedTuple):
    name: str
    goal: Goal


def primary_metric(
    specs: Sequence[MetricSpec], finals: Iterable[Mapping[str, float]] = ()
) -> PrimaryMetric:
    """The primary metric under ``specs``; without specs, the first built-in metric found in
    ``finals`` (the rounds' final values, in round order), else ``loss``."""
    if specs:
        return PrimaryMetric(specs[0].name, Goal(specs[0].goal))
    for values in finals:
        for name in BUILTIN_METRICS:
            if name in values:
                return PrimaryMetric(name, Goal.MIN)
    return PrimaryMetric(BUILTIN_METRICS[0], Goal.MIN)


def better(a: float, b: float, goal: Goal | str) -> bool:
    """Whether ``a`` beats ``b`` under ``goal``: both finite, by more than :data:`REL_TOL`."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    if math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0):
        return False
    return a < b if Goal(goal) == Goal.MIN else a > b
