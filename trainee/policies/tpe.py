"""The ``tpe`` policy: Optuna's TPE sampler, seeded, through its ask/tell interface.

Optuna is an optional extra (``pip install 'trainee[optuna]'``) imported only when a
decision is made, so the daemon does not pay for it at start.

Every decision rebuilds the study from what is known (the baseline round first, then
every result the policy was told, in order) with a sampler seeded from the policy's
seed and the number of known results. A decision is therefore a pure function of the
seed and the history: a resumed session, told its finished rounds again, proposes
exactly what an uninterrupted one would. Failed, timed-out and metric-less rounds are
added as ``PRUNED`` trials without a value: Optuna's TPE ranks those below every
completed trial, so the optimizer steers away from the region instead of ignoring
the failure (TPE skips ``FAIL`` trials entirely). Stopped rounds say nothing about
their parameters and are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from trainee.policies.base import Proposal, round_sig, sample_point, seeded_rng
from trainee.research.analysis import fit_value as _fit
from trainee.research.analysis import (
    is_complete,
    load_optuna,
    optuna_available,
    param_importances,
    search_space,
)
from trainee.research.analysis import quiet_optuna as _quiet
from trainee.research.decision import (
    DecisionPlan,
    Problem,
    effective_params,
    params_diff,
    params_equal,
    validate_plan,
)
from trainee.research.prompt import format_diff
from trainee.research.state import ResearchState, format_metric
from trainee.spec import TunableSpec
from trainee.spec.constraints import Constraint
from trainee.states import RoundStatus

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

__all__ = [
    "DEFAULT_STARTUP_TRIALS",
    "KnownPoint",
    "OptimizerView",
    "Suggestion",
    "TpePolicy",
    "search_space",
]

DEFAULT_STARTUP_TRIALS = 4
"""Results (the baseline included) drawn at random before TPE models the space.
Optuna's default of 10 would leave the usual 5-20 round budgets almost all random."""

MAX_ASKS = 60
"""Asks per decision before the optimizer is considered to repeat itself."""

TOP_TRIALS = 3
"""How many of the best known results the optimizer's view lists."""


@dataclass(frozen=True)
class KnownPoint:
    """One result the optimizer knows: full params, the primary metric, the round status."""

    params: dict[str, Any]
    metric: float | None
    status: str
    round: int | None = None


@dataclass(frozen=True)
class Suggestion:
    """One point the optimizer asked for: the searched params (rounded) and its trial
    number (-1: a seeded random point, when TPE only repeated tried points)."""

    params: dict[str, Any]
    trial: int
    startup: bool


@dataclass
class OptimizerView:
    """What the optimizer knows and believes, for people and for the hybrid prompt."""

    completed: int
    failed: int
    startup_trials: int
    best: list[KnownPoint] = field(default_factory=list)
    importances: dict[str, float] = field(default_factory=dict)
    importance_note: str = ""

    @property
    def in_startup(self) -> bool:
        return self.completed + self.failed < self.startup_trials


def _optuna() -> Any:
    """The optuna module, quiet; NotAvailable when the extra is not installed."""
    return load_optuna(
        "the tpe and hybrid policies need Optuna, an optional extra: pip install 'trainee[optuna]'",
        {"field": "policy", "reason": "optuna is not installed"},
    )


def _rounded(params: Mapping[str, Any], space: Mapping[str, BaseDistribution]) -> dict[str, Any]:
    """Floats to 4 significant digits (inside the bounds): commands and reports stay readable."""
    from optuna.distributions import FloatDistribution

    out: dict[str, Any] = {}
    for name, value in params.items():
        d = space[name]
        if isinstance(d, FloatDistribution) and isinstance(value, float):
            value = min(d.high, max(d.low, round_sig(value)))
        out[name] = value
    return out


class TpePolicy:
    """Seeded TPE over the whitelist. Its plans have the hypothesis ``TPE suggestion``."""

    name = "tpe"

    def __init__(
        self,
        seed: int = 0,
        *,
        startup_trials: int = DEFAULT_STARTUP_TRIALS,
        candidates: int = 24,
        constraints: Sequence[Constraint] = (),
    ) -> None:
        if not optuna_available():
            _optuna()  # raises NotAvailable with the install hint
        self.seed = seed
        self.constraints = tuple(constraints)
        self.startup_trials = max(1, startup_trials)
        self.candidates = max(1, candidates)
        self.told: list[KnownPoint] = []

    # -- the Policy protocol ---------------------------------------------------------

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        """Tell the optimizer a finished round's result, whoever chose its params."""
        self.told.append(KnownPoint(dict(params), metric, status))

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        return await anyio.to_thread.run_sync(self.propose_now, state, tunables, dict(baseline))

    async def propose_batch(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int,
    ) -> list[Proposal]:
        """``k`` distinct points from one study: TPE asks ``k`` times before any is told."""
        return await anyio.to_thread.run_sync(
            self.propose_many_now, state, tunables, dict(baseline), k
        )

    # -- synchronous work (runs in a worker thread) --------------------------------------

    def propose_now(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        """The next plan: TPE's first untried suggestion (a stop plan when there is none)."""
        return self.propose_many_now(state, tunables, baseline, 1)[0]

    def propose_many_now(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int,
    ) -> list[Proposal]:
        """Up to ``k`` plans of distinct untried points (one stop plan when there is none)."""
        suggestions, notes = self.suggest(state, tunables, baseline, k)
        known = self.known(state)
        if not suggestions:
            plan = DecisionPlan(
                hypothesis="",
                change_summary="",
                params={},
                expected="",
                stop=True,
                stop_reason="the search space looks exhausted: no untried point was found"
                + (" that keeps the constraints" if self.constraints else ""),
            )
            return [Proposal(plan=plan, policy=self.name, notes=notes)]
        return [
            self._proposal(state, baseline, s, list(notes) if i == 0 else [], len(known))
            for i, s in enumerate(suggestions)
        ]

    def _proposal(
        self,
        state: ResearchState,
        baseline: Mapping[str, Any],
        s: Suggestion,
        notes: list[str],
        n_known: int,
    ) -> Proposal:
        full = effective_params(dict(baseline), s.params)
        summary = format_diff(params_diff(dict(baseline), full))
        if s.trial < 0:
            summary += " (a random point: TPE only repeated tried points)"
        elif s.startup:
            summary += (
                f" (random start-up draw: TPE models the space after {self.startup_trials} results)"
            )
        plan = DecisionPlan(
            hypothesis="TPE suggestion",
            change_summary=summary,
            params=s.params,
            expected=_expected(state),
        )
        notes.append(
            f"tpe: trial {s.trial} of a study of {n_known} known result(s), "
            f"sampler seed {self._sampler_seed(n_known)}"
        )
        return Proposal(plan=plan, policy=self.name, notes=notes)

    def known(self, state: ResearchState) -> list[KnownPoint]:
        """What the optimizer knows, in a fixed order: the baseline round, then told results."""
        out: list[KnownPoint] = []
        first = next((r for r in state.rounds if r.index == 1), None)
        if first is not None:
            out.append(KnownPoint(dict(first.params), first.metric, first.status, 1))
        out.extend(self.told)
        return [k for k in out if k.status != RoundStatus.STOPPED]

    def suggest(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int,
    ) -> tuple[list[Suggestion], list[str]]:
        """Up to ``k`` distinct, valid, untried points TPE asks for next (and notes)."""
        space = search_space(tunables)
        notes: list[str] = []
        if not space:
            notes.append("no searchable parameter (every tunable lacks bounds or choices)")
            return [], notes
        known = self.known(state)
        tried = [r.params for r in state.rounds]
        rejected = [r["params"] for r in state.rejected]
        out: list[Suggestion] = []
        repeats = broken = 0
        with _quiet():
            study = self._study(state, space, known)
            completed = _finished_count(study)
            for _ in range(MAX_ASKS):
                if len(out) >= k:
                    break
                trial = study.ask(dict(space))
                params = _rounded(trial.params, space)
                plan = DecisionPlan(
                    hypothesis="TPE suggestion",
                    change_summary="the optimizer's next point",
                    params=params,
                    expected="unknown until it runs",
                )
                problems = validate_plan(
                    plan,
                    tunables,
                    baseline=dict(baseline),
                    tried=tried + [effective_params(dict(baseline), s.params) for s in out],
                    rejected=rejected,
                    constraints=self.constraints,
                )
                if any(p.field.startswith("constraints[") for p in problems):
                    # never run: told as infeasible, so TPE's next asks avoid the region
                    _tell_infeasible(study, trial, problems, len(self.constraints))
                    broken += 1
                    continue
                if problems:
                    repeats += 1
                    continue
                out.append(Suggestion(params, trial.number, completed < self.startup_trials))
        if repeats:
            notes.append(f"TPE repeated tried points {repeats} times; those asks were skipped")
        if broken:
            notes.append(
                f"{broken} TPE point(s) broke a constraint; told to TPE as infeasible, not run"
            )
        if len(out) < k:
            out.extend(self._random_fill(state, tunables, baseline, k - len(out), out, notes))
        return out, notes

    def view(self, state: ResearchState, tunables: Sequence[TunableSpec]) -> OptimizerView:
        """The optimizer's state: counts, best known results, parameter importances."""
        known = self.known(state)
        done = [k for k in known if _is_complete(k)]
        failed = len(known) - len(done)
        reverse = state.goal == "max"
        best = sorted(done, key=lambda k: float(k.metric or 0.0), reverse=reverse)[:TOP_TRIALS]
        best = [_with_round(k, state) for k in best]
        view = OptimizerView(
            completed=len(done), failed=failed, startup_trials=self.startup_trials, best=best
        )
        importance = param_importances(
            tunables, [(k.params, k.metric, k.status) for k in known], state.goal
        )
        view.importances = dict(importance.values)
        view.importance_note = importance.note
        return view

    # -- internals -----------------------------------------------------------------------

    def _sampler_seed(self, n_known: int) -> int:
        return (self.seed * 1_000_003 + n_known * 7_919) % (2**31 - 1)

    def _study(
        self, state: ResearchState, space: Mapping[str, BaseDistribution], known: list[KnownPoint]
    ) -> optuna.Study:
        opt = _optuna()
        sampler = opt.samplers.TPESampler(
            seed=self._sampler_seed(len(known)),
            n_startup_trials=self.startup_trials,
            n_ei_candidates=self.candidates,
            multivariate=True,
            constant_liar=True,
        )
        study: optuna.Study = opt.create_study(
            direction="maximize" if state.goal == "max" else "minimize", sampler=sampler
        )
        for point in known:
            params: dict[str, Any] = {}
            dists: dict[str, BaseDistribution] = {}
            for name, d in space.items():
                ok, value = _fit(point.params.get(name), d)
                if ok:
                    params[name], dists[name] = value, d
            complete = _is_complete(point)
            study.add_trial(
                opt.trial.create_trial(
                    params=params,
                    distributions=dists,
                    value=float(point.metric) if complete and point.metric is not None else None,
                    state=opt.trial.TrialState.COMPLETE
                    if complete
                    else opt.trial.TrialState.PRUNED,
                    # a round pruned by run.prune: its last value, as Optuna's own pruned
                    # trials carry (TPE ranks those above failures without a value)
                    intermediate_values=_pruned_value(point),
                    user_attrs={"status": point.status},
                )
            )
        return study

    def _random_fill(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int,
        taken: list[Suggestion],
        notes: list[str],
    ) -> list[Suggestion]:
        """Seeded random points when TPE keeps repeating itself (small discrete spaces)."""
        rng = seeded_rng(self.seed, "tpe-fill", len(state.rounds))
        names = set(search_space(tunables))
        tried = [r.params for r in state.rounds] + [
            effective_params(dict(baseline), s.params) for s in taken
        ]
        rejected = [r["params"] for r in state.rejected]
        out: list[Suggestion] = []
        for _ in range(200):
            if len(out) >= k:
                break
            params = {n: v for n, v in sample_point(tunables, rng).items() if n in names}
            plan = DecisionPlan(
                hypothesis="TPE suggestion",
                change_summary="the optimizer's next point",
                params=params,
                expected="unknown until it runs",
            )
            if not validate_plan(
                plan,
                tunables,
                baseline=dict(baseline),
                tried=tried,
                rejected=rejected,
                constraints=self.constraints,
            ):
                out.append(Suggestion(params, -1, True))
                tried.append(effective_params(dict(baseline), params))
        if out:
            notes.append(f"{len(out)} point(s) drawn at random: TPE only repeated tried points")
        return out


def _tell_infeasible(
    study: optuna.Study, trial: optuna.trial.Trial, problems: Sequence[Problem], n: int
) -> None:
    """End an asked trial whose point breaks constraints: one constraint value per
    tuning.yaml constraint (1.0 broken, 0.0 kept; Optuna's feasible is <= 0), state
    PRUNED without a value. TPE ranks infeasible trials below every feasible one."""
    from optuna.trial import TrialState

    broken = {p.field for p in problems}
    for i in range(n):
        trial.set_constraint(f"constraints[{i}]", 1.0 if f"constraints[{i}]" in broken else 0.0)
    study.tell(trial, state=TrialState.PRUNED)


def _pruned_value(point: KnownPoint) -> dict[int, float] | None:
    """``{0: its last value}`` for a round pruned by ``run.prune``; None otherwise."""
    if point.status != RoundStatus.PRUNED or point.metric is None:
        return None
    return {0: float(point.metric)} if math.isfinite(point.metric) else None


def _is_complete(point: KnownPoint) -> bool:
    return is_complete(point.metric, point.status)


def _finished_count(study: optuna.Study) -> int:
    from optuna.trial import TrialState

    return sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.trials)


def _with_round(point: KnownPoint, state: ResearchState) -> KnownPoint:
    if point.round is not None:
        return point
    for r in sorted(state.rounds, key=lambda r: -r.index):
        if params_equal(dict(r.params), point.params):
            return KnownPoint(point.params, point.metric, point.status, r.index)
    return point


def _expected(state: ResearchState) -> str:
    name = state.primary_metric or "metric"
    best = state.best.metric if state.best is not None else None
    if best is None:
        return f"{name}: unknown, no completed round yet"
    word = "above" if state.goal == "max" else "below"
    return f"{name} {word} {format_metric(best)}, the best so far"
