"""The external policy: an agent drives the loop itself through structured stage calls.

The session waits at each decision for a ``plan_submit`` (or ``round_run``)
call instead of asking an LLM. The plan is validated exactly like an LLM's
(names, types, bounds, choices, constraints, repeats); an invalid one is refused with the
precise problems and the session keeps waiting. Budgets, records and reports
are the session's, as for every policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from trainee.errors import InvalidParams, InvalidState
from trainee.policies.base import Proposal
from trainee.research.decision import DecisionPlan, validate_plan
from trainee.research.state import ResearchState
from trainee.spec import TunableSpec
from trainee.spec.constraints import Constraint


class ExternalPolicy:
    name = "external"

    def __init__(self, *, constraints: Sequence[Constraint] = ()) -> None:
        self.constraints = tuple(constraints)
        self._context: tuple[ResearchState, Sequence[TunableSpec], dict[str, Any]] | None = None
        self._submitted: anyio.Event | None = None
        self._plan: DecisionPlan | None = None
        self._agent = ""

    @property
    def waiting(self) -> bool:
        """True while the session waits for the next plan."""
        return self._context is not None

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        self._plan = None
        self._submitted = anyio.Event()
        self._context = (state, tunables, dict(baseline))
        try:
            await self._submitted.wait()
        finally:
            self._context = None
        assert self._plan is not None
        return Proposal(plan=self._plan, policy=self.name, provider=self._agent)

    def submit(self, plan: DecisionPlan, *, agent: str = "") -> None:
        """Hand a plan to the waiting session, or raise with every problem found."""
        if self._context is None or self._submitted is None:
            raise InvalidState(
                "the session is not waiting for a plan: a round is running or it is finishing",
                {"hint": "wait for round_result, then submit the next plan"},
            )
        state, tunables, baseline = self._context
        problems = validate_plan(
            plan,
            tunables,
            baseline=baseline,
            tried=[r.params for r in state.rounds],
            rejected=[r["params"] for r in state.rejected],
            constraints=self.constraints,
        )
        if problems:
            raise InvalidParams(
                "invalid plan: " + "; ".join(f"{p.field}: {p.reason}" for p in problems),
                {"problems": [{"field": p.field, "reason": p.reason} for p in problems]},
            )
        self._plan = plan
        self._agent = agent
        self._submitted.set()

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        return None
