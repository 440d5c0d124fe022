"""Analysis of a session's rounds: parameter importance, the points the page and the report
plot (parallel coordinates, slice plots) and the side-by-side comparison of two rounds.

One implementation for every reader: the hybrid policy's prompt, the page's
``session_analysis`` method and the SVGs beside ``report.md`` all call
:func:`param_importances` and :func:`build_analysis`.

Optuna is an optional extra imported only when importance is computed. Without it
:func:`param_importances` answers ``available=False`` with the install hint and the rest
of the analysis (which is plain data) still works. Optuna calls hold one process-wide
lock (``warnings.catch_warnings`` is process-global and Optuna runs in worker threads).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from trainee.errors import NotAvailable
from trainee.research.decision import values_equal
from trainee.spec import ParamType, TunableSpec
from trainee.spec.wire import (
    AnalysisRound,
    AnalysisTunable,
    ComparedRound,
    Comparison,
    ParamDiff,
    ParamImportance,
    SessionAnalysis,
)
from trainee.states import RoundStatus

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

__all__ = [
    "EVALUATOR",
    "MAX_CURVE_POINTS",
    "NEEDS_TWO",
    "NO_SPACE",
    "OPTUNA_HINT",
    "Observation",
    "RoundLike",
    "build_analysis",
    "compare",
    "compared_round",
    "fit_value",
    "is_complete",
    "load_optuna",
    "optuna_available",
    "param_importances",
    "quiet_optuna",
    "search_space",
    "tunable_views",
]

OPTUNA_HINT = "Optuna is an optional extra: pip install 'trainee[optuna]'"
EVALUATOR = "fANOVA"
"""Optuna's ``FanovaImportanceEvaluator`` (its default and optuna-dashboard's; Optuna's
own random forest, no scikit-learn), seeded so an answer never changes. PED-ANOVA was
tried first: on a session's 5-20 rounds it spreads the shares almost evenly."""
SEED = 0
NEEDS_TWO = "not available yet: needs at least 2 completed results"
NO_SPACE = "not available: no searchable tunable (none has both bounds or choices)"

_OPTUNA_LOCK = threading.Lock()
_CACHE: dict[str, ParamImportance] = {}
"""Answers by their inputs: the page asks again after every round, most often unchanged
(fANOVA takes about half a second over 20 rounds)."""
_CACHE_SIZE = 64
_CACHE_LOCK = threading.Lock()

Observation = tuple[Mapping[str, Any], float | None, str]
"""One result: ``(full params, primary metric or None, round status)``."""

_SKIPPED = frozenset({RoundStatus.STOPPED, RoundStatus.PENDING, RoundStatus.RUNNING})
"""Rounds that say nothing about their params: left out of importance (as TPE does)."""


class RoundLike(Protocol):
    """What the analysis reads of a round (a store ``RoundRecord`` is one)."""

    @property
    def index(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def params(self) -> dict[str, Any]: ...
    @property
    def primary_metric(self) -> float | None: ...
    @property
    def verdict(self) -> str | None: ...
    @property
    def verdict_reason(self) -> str: ...
    @property
    def hypothesis(self) -> str: ...


# -- optuna -----------------------------------------------------------------------------


def optuna_available() -> bool:
    return importlib.util.find_spec("optuna") is not None


def load_optuna(message: str = OPTUNA_HINT, details: dict[str, Any] | None = None) -> Any:
    """The optuna module, quiet; NotAvailable (``message``) when the extra is missing."""
    try:
        import optuna
    except ImportError:
        raise NotAvailable(message, details or {"reason": "optuna is not installed"}) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Serialize Optuna calls and hide its ExperimentalWarning / FutureWarning noise."""
    optuna = load_optuna()
    with _OPTUNA_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def search_space(tunables: Sequence[TunableSpec]) -> dict[str, BaseDistribution]:
    """Optuna distributions of the searchable tunables (choices, bools, bounded numbers).

    A number without both bounds is not searched: it keeps its baseline value.
    """
    optuna = load_optuna()
    dist = optuna.distributions
    out: dict[str, BaseDistribution] = {}
    for t in tunables:
        if t.choices:
            out[t.name] = dist.CategoricalDistribution(list(t.choices))
        elif t.type == ParamType.BOOL:
            out[t.name] = dist.CategoricalDistribution([False, True])
        elif t.min_value is None or t.max_value is None:
            continue
        elif t.type == ParamType.INT:
            lo, hi = math.ceil(t.min_value), math.floor(t.max_value)
            if lo <= hi:
                out[t.name] = dist.IntDistribution(lo, hi, log=bool(t.log and lo >= 1))
        elif t.type == ParamType.FLOAT:
            lo_f, hi_f = float(t.min_value), float(t.max_value)
            if lo_f <= hi_f:
                out[t.name] = dist.FloatDistribution(lo_f, hi_f, log=bool(t.log and lo_f > 0))
    return out


def fit_value(value: Any, d: BaseDistribution) -> tuple[bool, Any]:
    """``(True, value as the distribution holds it)`` when ``value`` lies in ``d``."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if isinstance(d, CategoricalDistribution):
        for choice in d.choices:
            if values_equal(value, choice, rel_tol=0.0):
                return True, choice
        return False, None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False, None
    if isinstance(d, IntDistribution):
        if float(value).is_integer() and d.low <= value <= d.high:
            return True, int(value)
        return False, None
    if isinstance(d, FloatDistribution) and d.low <= value <= d.high:
        return True, float(value)
    return False, None


def is_complete(metric: float | None, status: str) -> bool:
    """A result optimizers and importance learn from: completed with a finite metric."""
    return status == RoundStatus.COMPLETED and metric is not None and math.isfinite(metric)


def param_importances(
    tunables: Sequence[TunableSpec], observations: Sequence[Observation], goal: str
) -> ParamImportance:
    """Optuna's fANOVA importance of each searchable tunable for the primary metric.

    ``observations`` are the finished rounds; completed ones with a finite metric are
    the study's COMPLETE trials, failed ones PRUNED trials (stopped, pending and running
    rounds are left out). Not available (and why) without Optuna, with fewer than 2
    completed results, or when Optuna cannot tell (a degenerate study).
    """
    if not optuna_available():
        return ParamImportance(available=False, evaluator=EVALUATOR, note=OPTUNA_HINT)
    kept = [o for o in observations if o[2] not in _SKIPPED]
    key = repr(
        (
            [(t.name, t.type, t.min_value, t.max_value, t.choices, t.log) for t in tunables],
            [(sorted(p.items()), m, s) for p, m, s in kept],
            goal,
        )
    )
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return cached
    result = _importances(tunables, kept, goal)
    with _CACHE_LOCK:
        _CACHE[key] = result
        while len(_CACHE) > _CACHE_SIZE:
            del _CACHE[next(iter(_CACHE))]
    return result


def _importances(
    tunables: Sequence[TunableSpec], kept: Sequence[Observation], goal: str
) -> ParamImportance:
    space = search_space(tunables)
    if not space:
        return ParamImportance(available=False, evaluator=EVALUATOR, note=NO_SPACE)
    if sum(is_complete(m, s) for _, m, s in kept) < 2:
        return ParamImportance(available=False, evaluator=EVALUATOR, note=NEEDS_TWO)
    with quiet_optuna():
        try:
            values = _evaluate(_study(space, kept, goal))
        except Exception as exc:  # tiny or degenerate studies: say so, carry on
            note = f"not available yet ({type(exc).__name__}: {exc})"
            return ParamImportance(available=False, evaluator=EVALUATOR, note=note)
    if not values:
        return ParamImportance(available=False, evaluator=EVALUATOR, note="not available yet")
    return ParamImportance(available=True, evaluator=EVALUATOR, values=values)


def _study(
    space: Mapping[str, BaseDistribution], observations: Sequence[Observation], goal: str
) -> optuna.Study:
    opt = load_optuna()
    study: optuna.Study = opt.create_study(direction="maximize" if goal == "max" else "minimize")
    for params, metric, status in observations:
        values: dict[str, Any] = {}
        dists: dict[str, BaseDistribution] = {}
        for name, d in space.items():
            ok, value = fit_value(params.get(name), d)
            if ok:
                values[name], dists[name] = value, d
        complete = is_complete(metric, status)
        study.add_trial(
            opt.trial.create_trial(
                params=values,
                distributions=dists,
                value=float(metric) if complete and metric is not None else None,
                state=opt.trial.TrialState.COMPLETE if complete else opt.trial.TrialState.PRUNED,
            )
        )
    return study


def _evaluate(study: optuna.Study) -> dict[str, float]:
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    result = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=SEED))
    return {str(k): float(v) for k, v in result.items()}


# -- the views' data ----------------------------------------------------------------------


def tunable_views(
    tunables: Sequence[TunableSpec], rounds: Sequence[RoundLike] = ()
) -> list[AnalysisTunable]:
    """The plotted axes: every tunable (its bounds, choices, log scale), else, when the
    spec is not known, every param the rounds carry (numbers linear, the rest categories)."""
    if tunables:
        out = []
        for t in tunables:
            choices = list(t.choices) if t.choices else None
            if choices is None and t.type == ParamType.BOOL:
                choices = [False, True]
            out.append(
                AnalysisTunable(
                    name=t.name,
                    type=str(t.type),
                    log=bool(t.log),
                    min_value=None if t.min_value is None else float(t.min_value),
                    max_value=None if t.max_value is None else float(t.max_value),
                    choices=choices,
                )
            )
        return out
    names: dict[str, list[Any]] = {}
    for r in rounds:
        for k, v in r.params.items():
            names.setdefault(k, []).append(v)
    views = []
    for name, seen in names.items():
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in seen)
        choices = None if numeric else sorted({_label(v) for v in seen})
        views.append(
            AnalysisTunable(name=name, type="float" if numeric else "str", choices=choices)
        )
    return views


def _label(value: Any) -> str:
    return str(value)


def build_analysis(
    session: str,
    rounds: Sequence[RoundLike],
    tunables: Sequence[TunableSpec],
    *,
    metric: str,
    goal: str,
    baseline_round: int | None,
    best_round: int | None,
    comparison: Comparison | None = None,
) -> SessionAnalysis:
    """Everything the analysis views draw, from a session's rounds (ordered by index)."""
    ordered = sorted(rounds, key=lambda r: r.index)
    observations = [(r.params, r.primary_metric, r.status) for r in ordered]
    return SessionAnalysis(
        session=session,
        metric=metric,
        goal=goal,
        baseline_round=baseline_round,
        best_round=best_round,
        tunables=tunable_views(tunables, ordered),
        rounds=[
            AnalysisRound(
                index=r.index,
                status=r.status,
                params=dict(r.params),
                metric=r.primary_metric
                if r.primary_metric is not None and math.isfinite(r.primary_metric)
                else None,
                verdict=r.verdict,
                hypothesis=r.hypothesis,
            )
            for r in ordered
        ],
        importance=param_importances(tunables, observations, goal),
        comparison=comparison,
    )


MAX_CURVE_POINTS = 400
"""Points per metric curve in a comparison: longer curves are thinned evenly (last kept)."""


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_CURVE_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_CURVE_POINTS)
    kept = points[::stride]
    return kept if kept[-1] == points[-1] else [*kept, points[-1]]


def compared_round(
    session: str, r: RoundLike, points: Sequence[tuple[str, float, int | None, int]] = ()
) -> ComparedRound:
    """One side of a comparison: a round's params, metric, verdict and metric curves from
    its ``(name, value, step, seq)`` points (non-finite values are not drawn)."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for name, value, step, seq in points:
        if math.isfinite(value):
            curves.setdefault(name, []).append((float(step if step is not None else seq), value))
    return ComparedRound(
        session=session,
        round=r.index,
        status=r.status,
        metric=r.primary_metric,
        verdict=r.verdict,
        verdict_reason=r.verdict_reason,
        hypothesis=r.hypothesis,
        params=dict(r.params),
        curves={name: _thin(c) for name, c in curves.items()},
    )


def compare(left: ComparedRound, right: ComparedRound, metric: str) -> Comparison:
    """Two rounds side by side: every param of either, changed ones flagged."""
    names = list(left.params) + [n for n in right.params if n not in left.params]
    diffs = []
    for name in names:
        a, b = left.params.get(name), right.params.get(name)
        missing = (name in left.params) != (name in right.params)
        changed = missing or not values_equal(a, b)
        diffs.append(ParamDiff(name=name, left=a, right=b, changed=changed))
    return Comparison(
        metric=metric,
        left=left,
        right=right,
        params=diffs,
        curve_metric=_curve_metric(left, right, metric),
    )


def _curve_metric(left: ComparedRound, right: ComparedRound, metric: str) -> str:
    def length(name: str) -> int:
        return max(len(left.curves.get(name, ())), len(right.curves.get(name, ())))

    if length(metric) > 1:
        return metric
    names = [*left.curves, *(n for n in right.curves if n not in left.curves)]
    best = max(names, key=lambda n: (length(n), n in left.curves and n in right.curves), default="")
    return best if best and length(best) > 1 else metric
