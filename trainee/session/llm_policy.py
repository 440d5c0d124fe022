"""The LLM policy: compose the prompt, ask through litellm, parse, validate, repair once.

``propose_batch`` asks for k plans in one request when k rounds run at once: the same
prompt with an answer section asking for k different hypotheses, the same single repair
request for every problem of every plan, and one Proposal per plan. The request's cost
is carried by the first Proposal alone, so summing over Proposals gives the true total.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainee.errors import InvalidDecision
from trainee.llm.client import Completion, complete_with_failover
from trainee.llm.settings import LlmSettings
from trainee.research.decision import (
    DecisionPlan,
    Problem,
    parse_plan,
    parse_plans,
    plan_field,
    plan_json_schema,
    plans_json_schema,
    repair_message,
    validate_plan,
    validate_plans,
)
from trainee.research.prompt import PromptParts, ask_for_plans, build_messages
from trainee.research.state import ResearchState
from trainee.session.policy import Proposal
from trainee.spec import TunableSpec
from trainee.spec.constraints import Constraint

MAX_BATCH_TOKENS = 8192
"""A k-plan request may use up to k times ``max_tokens`` for its answer, but no more than
this (many providers refuse a larger ``max_tokens``); never less than ``max_tokens``."""


class LlmPolicy:
    name = "llm"

    def __init__(
        self,
        settings: LlmSettings,
        parts: PromptParts,
        *,
        max_tokens: int = 2048,
        constraints: Sequence[Constraint] = (),
    ) -> None:
        self.settings = settings
        self.parts = parts
        self.max_tokens = max_tokens
        self.constraints = tuple(constraints)
        self.last_messages: list[dict[str, Any]] = []

    def messages(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        return build_messages(
            self.parts,
            state,
            tunables,
            baseline_params=dict(baseline),
            constraints=self.constraints,
        )

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        messages = self.messages(state, tunables, baseline)
        self.last_messages = messages
        schema = plan_json_schema(tunables)
        tried = [r.params for r in state.rounds]
        rejected = [r["params"] for r in state.rejected]
        proposal = Proposal(plan=None, policy=self.name, messages=messages)  # type: ignore[arg-type]
        conversation = list(messages)
        for attempt in range(2):
            completion, _attempts = await complete_with_failover(
                conversation, settings=self.settings, schema=schema, max_tokens=self.max_tokens
            )
            _account(proposal, completion)
            parsed = parse_plan(completion.text, tunables)
            proposal.notes.extend(parsed.notes)
            problems: list[Problem] = list(parsed.problems)
            if parsed.plan is not None:
                # Every problem goes into the one repair request, parse and validation alike.
                problems = _merged(
                    problems,
                    validate_plan(
                        parsed.plan,
                        tunables,
                        baseline=dict(baseline),
                        tried=tried,
                        rejected=rejected,
                        constraints=self.constraints,
                    ),
                )
            if parsed.plan is not None and not problems:
                proposal.plan = parsed.plan
                proposal.repaired = attempt == 1
                return proposal
            proposal.problems = [{"field": p.field, "reason": p.reason} for p in problems]
            conversation = [
                *conversation,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": repair_message(problems)},
            ]
        raise _invalid(proposal)

    async def propose_batch(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int,
    ) -> list[Proposal]:
        """``k`` proposals with different hypotheses from ONE request (and at most one repair).

        k <= 1 is :meth:`propose`. A plan with ``stop: true`` ends the batch: the answer is
        that one stop Proposal. Every Proposal shares the messages and the raw response;
        the first carries the tokens, cost and latency of the request(s), the others zero.
        Raises InvalidDecision when the repaired answer still has problems; after the repair,
        fewer than k plans that are all valid are accepted (with a note).
        """
        if k <= 1:
            return [await self.propose(state, tunables, baseline)]
        base = dict(baseline)
        messages = ask_for_plans(self.messages(state, tunables, baseline), k, state, tunables)
        self.last_messages = messages
        schema = plans_json_schema(tunables, k)
        max_tokens = max(self.max_tokens, min(self.max_tokens * k, MAX_BATCH_TOKENS))
        tried = [r.params for r in state.rounds]
        rejected = [r["params"] for r in state.rejected]
        head = Proposal(plan=None, policy=self.name, messages=messages)  # type: ignore[arg-type]
        conversation = list(messages)
        for attempt in range(2):
            completion, _attempts = await complete_with_failover(
                conversation, settings=self.settings, schema=schema, max_tokens=max_tokens
            )
            _account(head, completion)
            parsed = parse_plans(completion.text, tunables, k)
            head.notes.extend(parsed.notes)
            checked = validate_plans(
                parsed.plans,
                tunables,
                baseline=base,
                tried=tried,
                rejected=rejected,
                constraints=self.constraints,
            )
            # each plan's problems: its parse problems, then validation's on other fields
            per_plan = [
                _merged(r.problems, v) for r, v in zip(parsed.results, checked, strict=True)
            ]
            repaired = attempt == 1
            for i, (plan, own) in enumerate(zip(parsed.plans, per_plan, strict=True)):
                if plan is not None and plan.stop and not own:
                    head.plan = plan
                    head.repaired = repaired
                    if len(parsed.results) > 1:
                        head.notes.append(
                            f"{plan_field(i, '')} asked to stop; the other "
                            f"{len(parsed.results) - 1} plans were dropped"
                        )
                    return [head]
            problems = parsed.problems + [
                Problem(plan_field(i, p.field), p.reason)
                for i, own in enumerate(per_plan)
                for p in own
            ]
            plans = [p for p in parsed.plans if p is not None]
            if not problems:
                return self._split(head, plans, repaired=repaired)
            if (
                repaired
                and plans
                and not any(per_plan)
                and all(p.field == "plans" for p in parsed.problems)
            ):
                # only the count is short, and a second repair is not on offer
                head.notes.append(
                    f"after the repair the answer still held {len(plans)} of {k} plans, "
                    "all valid; they were accepted"
                )
                return self._split(head, plans, repaired=True)
            head.problems = [{"field": p.field, "reason": p.reason} for p in problems]
            conversation = [
                *conversation,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": repair_message(problems, plans=k)},
            ]
        raise _invalid(head)

    def _split(
        self, head: Proposal, plans: list[DecisionPlan], *, repaired: bool
    ) -> list[Proposal]:
        """One Proposal per plan; ``head`` (the first) keeps the cost of the request(s)."""
        n = len(plans)
        head.plan = plans[0]
        head.repaired = repaired
        out = [head]
        if n > 1:
            head.notes.append(
                f"plan 1 of {n} from one request; it carries the request's tokens, cost and latency"
            )
        for i, plan in enumerate(plans[1:], start=2):
            out.append(
                Proposal(
                    plan=plan,
                    policy=self.name,
                    provider=head.provider,
                    model=head.model,
                    messages=head.messages,
                    raw_response=head.raw_response,
                    problems=list(head.problems),
                    repaired=repaired,
                    cost_usd=None if head.cost_usd is None else 0.0,
                    notes=[
                        f"plan {i} of {n} from one request; its tokens, cost and latency "
                        "are counted on plan 1"
                    ],
                )
            )
        return out

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        return None


def _account(proposal: Proposal, completion: Completion) -> None:
    """Add one completion's usage to ``proposal``; the raw response is the latest one."""
    proposal.provider = completion.provider
    proposal.model = completion.model
    proposal.raw_response = completion.text
    proposal.prompt_tokens += completion.prompt_tokens
    proposal.completion_tokens += completion.completion_tokens
    if completion.cost_usd is not None:
        proposal.cost_usd = (proposal.cost_usd or 0.0) + completion.cost_usd
    proposal.latency_sec += completion.latency_sec


def _merged(parsed: list[Problem], checked: list[Problem]) -> list[Problem]:
    """Parse problems, then validation problems about fields parsing did not report."""
    seen = {p.field for p in parsed}
    return [*parsed, *(p for p in checked if p.field not in seen)]


def _invalid(proposal: Proposal) -> InvalidDecision:
    return InvalidDecision(
        "the decision failed validation twice: "
        + "; ".join(f"{p['field']}: {p['reason']}" for p in proposal.problems),
        {
            "problems": proposal.problems,
            "raw_response": proposal.raw_response,
            "proposal": proposal,
        },
    )
