"""What a decision is made from, rebuilt from the store: one place for the runner and
``prompt_preview``.

The research state comes from the session's finished rounds, the budget from the
session's limits and what it has used, the number of candidates from
``run.parallel``; a policy is told the results again on resume. The session runner
calls these before every decision; ``prompt_preview`` calls the same functions on the
same records, so the prompt it shows is the one the next decision sends.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from trainee.policies.base import Policy
from trainee.research.prune import pruned_reason
from trainee.research.screen import told_status
from trainee.research.state import (
    DecisionBudget,
    NoiseFloor,
    ResearchState,
    RoundSummary,
    new_state,
    record_round,
)
from trainee.spec import ProjectSpec, min_rounds_of
from trainee.states import ROUND_FINISHED, RoundStatus
from trainee.store.records import RoundRecord, SessionRecord

__all__ = [
    "Budgets",
    "budgets_of",
    "counted_rounds",
    "decision_budget",
    "decision_slots",
    "observe_history",
    "rebuild_state",
    "round_summary",
]


@dataclass
class Budgets:
    """A session's limits (None: unlimited)."""

    max_session_minutes: float | None = None
    max_tokens: int | None = None
    max_usd: float | None = None


def round_summary(r: RoundRecord, rungs: int = 0) -> RoundSummary:
    """A stored round as the research state records it (its verdict is judged again);
    ``rungs``: how many ``run.screen`` has."""
    return RoundSummary(
        index=r.index,
        status=r.status,
        params=r.params,
        diff=r.diff,
        metric=r.primary_metric,
        metrics=r.finals,
        hypothesis=r.hypothesis,
        expected=r.expected,
        verdict=None,
        verdict_reason="",
        duration_sec=(r.ended_at - r.started_at) if r.ended_at and r.started_at else None,
        failure_tail=r.failure_tail,
        error=pruned_reason(r.warnings) if r.status == RoundStatus.PRUNED else "",
        rung=r.rung if rungs else 0,
        rungs=rungs if r.rung else 0,
        budget=r.budget,
    )


def rebuild_state(spec: ProjectSpec, rounds: Iterable[RoundRecord]) -> ResearchState:
    """The research state after the finished ``rounds`` (in order), for ``spec``'s metric."""
    state = _empty_state(spec)
    rungs = _rungs(spec)
    for r in rounds:
        if r.status in ROUND_FINISHED:
            state, _ = record_round(state, round_summary(r, rungs))
    return state


def best_after_each(spec: ProjectSpec, rounds: Iterable[RoundRecord]) -> dict[int, int | None]:
    """Finished round index -> the session's best round once it was recorded: the
    best-so-far line the page draws, decided by the research state's rule (goal,
    tolerance, noise floor), never by a comparison of its own."""
    state = _empty_state(spec)
    best: dict[int, int | None] = {}
    for r in sorted(rounds, key=lambda r: r.index):
        if r.status in ROUND_FINISHED:
            state, _ = record_round(state, round_summary(r, _rungs(spec)))
            best[r.index] = state.best.index if state.best is not None else None
    return best


def _empty_state(spec: ProjectSpec) -> ResearchState:
    primary = spec.metrics.specs[0].name if spec.metrics.specs else None
    goal = str(spec.metrics.specs[0].goal) if spec.metrics.specs else "min"
    noise = spec.run.noise
    return new_state(
        primary,
        goal,
        noise=NoiseFloor(seed=noise.seed, margin=noise.margin) if noise is not None else None,
    )


def _rungs(spec: ProjectSpec) -> int:
    return len(spec.run.screen.rungs) if spec.run.screen is not None else 0


def observe_history(policy: Policy, rounds: Iterable[RoundRecord], rungs: int = 0) -> None:
    """Tell ``policy`` the results of the finished rounds after the baseline (resume); a
    round below ``run.screen``'s full budget (``rungs``) as a trial stopped at a rung."""
    for r in rounds:
        if r.status in ROUND_FINISHED and r.index > 1:
            policy.observe(r.params, r.primary_metric, told_status(r.status, r.rung, rungs))


def counted_rounds(done: Iterable[RoundRecord]) -> int:
    """Rounds that use up the budget of rounds: finished, and not stopped by the user."""
    return len([r for r in done if r.status in ROUND_FINISHED and r.status != RoundStatus.STOPPED])


def budgets_of(spec: ProjectSpec) -> Budgets:
    llm = spec.llm
    return Budgets(
        max_session_minutes=spec.run.max_session_minutes,
        max_tokens=llm.max_tokens,
        max_usd=llm.max_usd,
    )


def decision_slots(spec: ProjectSpec, record: SessionRecord, done: list[RoundRecord]) -> int:
    """How many candidates the next step runs: ``run.parallel``, never past max_rounds
    (budgets count rounds, not steps)."""
    left = max(1, record.max_rounds - counted_rounds(done))
    return max(1, min(spec.run.parallel, left))


def decision_budget(
    spec: ProjectSpec,
    record: SessionRecord,
    done: list[RoundRecord],
    index: int,
    now: float | None = None,
) -> DecisionBudget:
    """Round ``index`` of N, what is left of the budgets, and when a policy stop counts."""
    budgets = budgets_of(spec)
    seconds_left = None
    if budgets.max_session_minutes is not None:
        elapsed = (time.time() if now is None else now) - record.created_at
        seconds_left = budgets.max_session_minutes * 60 - elapsed
    return DecisionBudget(
        round=index,
        max_rounds=record.max_rounds,
        finished=counted_rounds(done),
        min_rounds=min_rounds_of(spec.decision.min_rounds, record.max_rounds),
        seconds_left=seconds_left,
        tokens_left=None if budgets.max_tokens is None else budgets.max_tokens - record.tokens,
        usd_left=None if budgets.max_usd is None else budgets.max_usd - record.cost_usd,
    )
