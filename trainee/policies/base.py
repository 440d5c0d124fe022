"""Decision policies: who proposes the next parameter set.

Every policy returns the same structured plan (hypothesis, params, expected),
and every plan goes through the same validation before anything runs. A
policy never changes silently: a provider failure stops the session, it does
not fall back to another policy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from trainee.errors import TraineeError
from trainee.research.decision import DecisionPlan, effective_params, params_diff, validate_plan
from trainee.research.state import ResearchState, RoundSummary
from trainee.spec import ParamType, TunableSpec
from trainee.spec.constraints import Constraint
from trainee.states import RoundStatus

MAX_DRAWS = 200
"""Random draws per decision before the space counts as exhausted (untried points that
keep the constraints)."""


@dataclass
class Proposal:
    """A checked plan plus what it cost to get."""

    plan: DecisionPlan
    policy: str
    provider: str = ""
    model: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    raw_response: str | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)
    repaired: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    latency_sec: float = 0.0
    notes: list[str] = field(default_factory=list)
    source: str = ""
    """hybrid only: whose point this is: ``S2`` (the optimizer's 2nd suggestion, as is),
    ``S2 modified``, ``own`` (the LLM rejected the suggestions) or ``stop``."""
    suggestions: list[dict[str, Any]] = field(default_factory=list)
    """hybrid only: the optimizer's suggestions shown to the LLM, in order (S1, S2, ...)."""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """llm / hybrid: every request of this decision, in order (negotiation steps, failover,
    the repair): provider, model, url, response_format, ok, status, kind, error,
    latency_sec, tokens, and for an answer its ``answer`` text and ``problems``."""
    response_format: str | None = None
    """llm / hybrid: the response format the answer came in (json_schema, json_object, text)."""


class Policy(Protocol):
    name: str

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal: ...

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None: ...


def round_sig(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits: commands and reports stay readable."""
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits - 1}e}")


def seeded_rng(seed: int, *parts: object) -> random.Random:
    """A generator determined by ``seed`` and ``parts`` alone (e.g. the round count), so a
    decision depends only on the seed and the history, never on earlier draws."""
    return random.Random(":".join(str(p) for p in (seed, *parts)))


def sample_point(tunables: Sequence[TunableSpec], rng: random.Random) -> dict[str, Any]:
    """One point drawn from the search space (log-uniform where ``log: true``)."""
    out: dict[str, Any] = {}
    for t in tunables:
        if t.choices:
            out[t.name] = rng.choice(list(t.choices))
        elif t.type == ParamType.BOOL:
            out[t.name] = rng.random() < 0.5
        elif t.min_value is not None and t.max_value is not None:
            lo, hi = float(t.min_value), float(t.max_value)
            if t.log and lo > 0:
                value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            else:
                value = rng.uniform(lo, hi)
            if t.type == ParamType.INT:
                out[t.name] = min(int(hi), max(math.ceil(lo), round(value)))
            else:
                out[t.name] = min(hi, max(lo, round_sig(value)))
        elif t.baseline is not None:
            out[t.name] = t.baseline
    return out


class RandomPolicy:
    """Seeded random search over the whitelist: the classical baseline to compare against.

    Each decision draws from a generator seeded with the seed and the number of rounds so
    far, so a resumed session continues exactly where an uninterrupted one would be.
    """

    name = "random"

    def __init__(self, seed: int = 0, *, constraints: Sequence[Constraint] = ()) -> None:
        self.seed = seed
        self.constraints = tuple(constraints)

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        return (await self.propose_batch(state, tunables, baseline, 1))[0]

    async def propose_batch(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int,
    ) -> list[Proposal]:
        """``k`` distinct untried points (fewer when the space runs out; a stop plan when
        none is left)."""
        out: list[Proposal] = []
        for i in range(k):
            found = self._draw(state, tunables, baseline, i, [p.plan.params for p in out])
            if found is None:
                break
            out.append(found)
        if out:
            return out
        reason = f"random search found no untried point in {MAX_DRAWS} draws"
        if self.constraints:
            reason = (
                f"random search found no untried point that keeps the constraints in "
                f"{MAX_DRAWS} draws (" + "; ".join(c.text for c in self.constraints) + ")"
            )
        plan = DecisionPlan(
            hypothesis="",
            change_summary="",
            params={},
            expected="",
            stop=True,
            stop_reason=reason,
        )
        return [Proposal(plan=plan, policy=self.name)]

    def _draw(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        slot: int,
        pending: list[dict[str, Any]],
    ) -> Proposal | None:
        # slot 0 draws exactly what a one-at-a-time session would
        parts: tuple[object, ...] = (len(state.rounds),) if slot == 0 else (len(state.rounds), slot)
        rng = seeded_rng(self.seed, "random", *parts)
        tried = [r.params for r in state.rounds] + [
            effective_params(dict(baseline), p) for p in pending
        ]
        rejected = [r["params"] for r in state.rejected]
        broken = 0
        for _ in range(MAX_DRAWS):
            params = sample_point(tunables, rng)
            plan = DecisionPlan(
                hypothesis="random search suggestion",
                change_summary="a point drawn uniformly (log-uniform for log-scale params)",
                params=params,
                expected="unknown: random search explores the space",
            )
            problems = validate_plan(
                plan,
                tunables,
                baseline=dict(baseline),
                tried=tried,
                rejected=rejected,
                constraints=self.constraints,
            )
            if not problems:
                notes = (
                    [f"{broken} draw(s) broke a constraint and were drawn again"] if broken else []
                )
                return Proposal(plan=plan, policy=self.name, notes=notes)
            broken += any(p.field.startswith("constraints[") for p in problems)
        return None

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        return None


def full_params(baseline: Mapping[str, Any], plan: DecisionPlan) -> dict[str, Any]:
    return effective_params(dict(baseline), plan.params)


async def propose_batch(
    policy: Policy,
    state: ResearchState,
    tunables: Sequence[TunableSpec],
    baseline: Mapping[str, Any],
    k: int,
) -> list[Proposal]:
    """Up to ``k`` distinct plans for one step of parallel candidates.

    A policy with its own ``propose_batch`` answers at once (the LLM in one request,
    TPE with ``k`` asks); any other is asked ``k`` times, each time seeing the plans
    already chosen as running rounds, so it neither repeats them nor needs to know
    about batches. A stop plan ends the list (alone when it comes first).
    """
    if k <= 1:
        return [await policy.propose(state, tunables, baseline)]
    batch = getattr(policy, "propose_batch", None)
    if batch is not None:
        proposals: list[Proposal] = await batch(state, tunables, baseline, k)
        return proposals
    return await propose_one_by_one(policy, state, tunables, baseline, k)


async def propose_one_by_one(
    policy: Policy,
    state: ResearchState,
    tunables: Sequence[TunableSpec],
    baseline: Mapping[str, Any],
    k: int,
) -> list[Proposal]:
    """``k`` separate decisions, each seeing the plans chosen before it as running rounds.

    When one fails (the session then stops), the ones made before it are handed over
    with the error (``data["earlier"]``), so what they cost is still recorded."""
    out: list[Proposal] = []
    for _ in range(k):
        try:
            proposal = await policy.propose(with_pending(state, baseline, out), tunables, baseline)
        except TraineeError as exc:
            if out:
                data = exc.data if isinstance(exc.data, dict) else {}
                exc.data = {**data, "earlier": out}
            raise
        if proposal.plan.stop:
            if not out:
                return [proposal]
            # the plans already decided still run; the stop is asked again next step, and
            # what this decision cost is counted with the last plan
            last = out[-1]
            last.prompt_tokens += proposal.prompt_tokens
            last.completion_tokens += proposal.completion_tokens
            if proposal.cost_usd is not None:
                last.cost_usd = (last.cost_usd or 0.0) + proposal.cost_usd
            last.latency_sec += proposal.latency_sec
            last.notes.append(
                f"a further decision of this step asked to stop: {proposal.plan.stop_reason}"
            )
            return out
        out.append(proposal)
    return out


def with_pending(
    state: ResearchState, baseline: Mapping[str, Any], pending: Sequence[Proposal]
) -> ResearchState:
    """``state`` plus the chosen but not yet run plans as running rounds (no result)."""
    if not pending:
        return state
    first = max((r.index for r in state.rounds), default=0) + 1
    extra = []
    for i, p in enumerate(pending):
        params = full_params(baseline, p.plan)
        extra.append(
            RoundSummary(
                index=first + i,
                status=RoundStatus.RUNNING,
                params=params,
                diff=params_diff(dict(baseline), params),
                metric=None,
                metrics={},
                hypothesis=p.plan.hypothesis,
                expected=p.plan.expected,
                verdict=None,
                verdict_reason="",
                duration_sec=None,
                failure_tail=[],
            )
        )
    return msgspec.structs.replace(state, rounds=[*state.rounds, *extra])
