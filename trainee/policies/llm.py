"""The LLM policy: compose the prompt, ask through litellm, parse, validate, repair once.

``propose_batch`` asks for k plans in one request when k rounds run at once: the same
prompt with an answer section asking for k different hypotheses, the same single repair
request for every problem of every plan, and one Proposal per plan. The request's cost
is carried by the first Proposal alone, so summing over Proposals gives the true total.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from trainee.errors import InvalidDecision, ProviderError
from trainee.llm.client import Completion, ProviderAttempt, complete_with_failover
from trainee.llm.settings import LlmSettings
from trainee.policies.base import Proposal
from trainee.research.decision import (
    DecisionPlan,
    PlansResult,
    Problem,
    parse_plan,
    parse_plans,
    plan_field,
    plan_json_schema,
    plans_json_schema,
    repair_message,
    resolve_stop,
    single_change_exclusions,
    validate_plan,
    validate_plans,
)
from trainee.research.prompt import PromptParts, ask_for_plans, build_messages
from trainee.research.state import ResearchState
from trainee.spec import TunableSpec
from trainee.spec.constraints import Constraint

log = logging.getLogger("trainee.decision")

MAX_BATCH_TOKENS = 8192
"""A k-plan request may use up to k times ``max_tokens`` for its answer, but no more than
this (many providers refuse a larger ``max_tokens``); never less than ``max_tokens``."""


ANSWER_CHARS = 8000
"""How much of each answer a decision's attempt record keeps (the full last answer is the
decision's raw_response)."""


class DecisionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a decision asks the provider, before the client shapes it for a response
    format (:func:`trainee.llm.client.planned_request`)."""

    messages: list[dict[str, Any]]
    schema: dict[str, Any]
    max_tokens: int
    plans: int
    """How many plans it asks for (candidates that run at once)."""


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

    def request(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int = 1,
    ) -> DecisionRequest:
        """The request of a decision for ``k`` candidates: one plan, or k plans in one
        request (``prompt_preview`` shows exactly this)."""
        messages = self.messages(state, tunables, baseline)
        tried = [e["params"] for e in (*state.tried, *state.rejected) if "params" in e]
        exclude = single_change_exclusions(tunables, baseline, tried)
        if k <= 1:
            schema = plan_json_schema(tunables, metric=state.primary_metric, exclude=exclude)
            return DecisionRequest(
                messages=messages, schema=schema, max_tokens=self.max_tokens, plans=1
            )
        return DecisionRequest(
            messages=ask_for_plans(messages, k, state, tunables),
            schema=plans_json_schema(tunables, k, metric=state.primary_metric, exclude=exclude),
            max_tokens=max(self.max_tokens, min(self.max_tokens * k, MAX_BATCH_TOKENS)),
            plans=k,
        )

    def _deadline(self) -> float:
        """One deadline for the whole decision: every attempt, the repair and the failover
        share ``llm_timeout_sec`` (a frozen server is abandoned within it)."""
        return time.monotonic() + self.settings.timeout_sec

    async def _ask(
        self,
        proposal: Proposal,
        conversation: list[dict[str, Any]],
        schema: dict[str, Any],
        max_tokens: int,
        deadline: float,
    ) -> Completion:
        tried: list[ProviderAttempt] = []
        try:
            completion = await complete_with_failover(
                conversation,
                settings=self.settings,
                schema=schema,
                max_tokens=max_tokens,
                deadline=deadline,
                attempts=tried,
            )
        except ProviderError:
            proposal.attempts.extend(msgspec.to_builtins(a) for a in tried)
            raise
        proposal.attempts.extend(msgspec.to_builtins(a) for a in tried)
        proposal.attempts[-1]["answer"] = completion.text[:ANSWER_CHARS]
        _account(proposal, completion)
        return completion

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        deadline = self._deadline()
        request = self.request(state, tunables, baseline)
        messages, schema = request.messages, request.schema
        self.last_messages = messages
        tried = [r.params for r in state.rounds]
        rejected = [r["params"] for r in state.rejected]
        stop_refused = state.budget.stop_refused() if state.budget is not None else None
        proposal = Proposal(plan=None, policy=self.name, messages=messages)  # type: ignore[arg-type]
        conversation = list(messages)
        for attempt in range(2):
            completion = await self._ask(
                proposal, conversation, schema, request.max_tokens, deadline
            )
            parsed = parse_plan(completion.text, tunables)
            proposal.notes.extend(parsed.notes)
            problems: list[Problem] = list(parsed.problems)
            plan = parsed.plan
            if plan is not None:
                plan, note = resolve_stop(plan)
                if note is not None:
                    proposal.notes.append(note)
                # Every problem goes into the one repair request, parse and validation alike.
                problems = _merged(
                    problems,
                    validate_plan(
                        plan,
                        tunables,
                        baseline=dict(baseline),
                        tried=tried,
                        rejected=rejected,
                        constraints=self.constraints,
                        stop_refused=stop_refused,
                    ),
                )
            proposal.attempts[-1]["problems"] = [
                {"field": p.field, "reason": p.reason} for p in problems
            ]
            if plan is not None and not problems:
                proposal.plan = plan
                proposal.repaired = attempt == 1
                _log_decision(self.name, proposal)
                return proposal
            proposal.problems = [{"field": p.field, "reason": p.reason} for p in problems]
            conversation = [
                *conversation,
                {"role": "assistant", "content": completion.text},
                {
                    "role": "user",
                    "content": repair_message(problems, stop_allowed=stop_refused is None),
                },
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

        k <= 1 is :meth:`propose`. Exactly k plans are asked for (the schema and the
        validation agree). A plan that says stop but changes parameters runs its change; a
        stop plan among changes is dropped (the changes run); the batch stops the session
        only when every plan says stop, and not before ``decision.min_rounds``. Every
        Proposal shares the messages and the raw response; the first carries the tokens,
        cost and latency of the request(s), the others zero. Raises InvalidDecision when
        the repaired answer still has problems; after the repair, fewer than k plans that
        are all valid are accepted (with a note).
        """
        if k <= 1:
            return [await self.propose(state, tunables, baseline)]
        deadline = self._deadline()
        base = dict(baseline)
        request = self.request(state, tunables, baseline, k)
        messages, schema, max_tokens = request.messages, request.schema, request.max_tokens
        self.last_messages = messages
        tried = [r.params for r in state.rounds]
        rejected = [r["params"] for r in state.rejected]
        stop_refused = state.budget.stop_refused() if state.budget is not None else None
        head = Proposal(plan=None, policy=self.name, messages=messages)  # type: ignore[arg-type]
        conversation = list(messages)
        for attempt in range(2):
            completion = await self._ask(head, conversation, schema, max_tokens, deadline)
            parsed = parse_plans(completion.text, tunables, k)
            head.notes.extend(parsed.notes)
            resolved, stops, mixed = _resolve_stops(parsed.plans, head.notes)
            checked = validate_plans(
                resolved,
                tunables,
                baseline=base,
                tried=tried,
                rejected=rejected,
                constraints=self.constraints,
                stop_refused=stop_refused,
            )
            per_plan, problems = _batch_problems(parsed, checked, stops, mixed=mixed)
            repaired = attempt == 1
            kept = [p for p in resolved if p is not None]
            head.attempts[-1]["problems"] = [
                {"field": p.field, "reason": p.reason} for p in problems
            ]
            if kept and all(p.stop for p in kept) and not problems:
                head.plan = kept[0]
                head.repaired = repaired
                _log_decision(self.name, head)
                return [head]
            if not problems and kept:
                return self._split(head, kept, repaired=repaired)
            if (
                repaired
                and kept
                and not any(per_plan)
                and all(p.field == "plans" for p in parsed.problems)
            ):
                # only the count is short, and a second repair is not on offer
                head.notes.append(
                    f"after the repair the answer still held {len(kept)} of {k} plans, "
                    "all valid; they were accepted"
                )
                return self._split(head, kept, repaired=True)
            head.problems = [{"field": p.field, "reason": p.reason} for p in problems]
            conversation = [
                *conversation,
                {"role": "assistant", "content": completion.text},
                {
                    "role": "user",
                    "content": repair_message(problems, plans=k, stop_allowed=stop_refused is None),
                },
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
                    response_format=head.response_format,
                    notes=[
                        f"plan {i} of {n} from one request; its tokens, cost and latency "
                        "are counted on plan 1"
                    ],
                )
            )
        _log_decision(self.name, head, plans=n)
        return out

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        return None


def _log_decision(policy: str, p: Proposal, *, plans: int = 1) -> None:
    """One line per decision in daemon.log: who answered, how, and what it cost."""
    failed = [a for a in p.attempts if not a.get("ok")]
    what = "stop" if p.plan is not None and p.plan.stop else f"{plans} plan(s)"
    log.info(
        "%s decision: %s from %s (%s, %s) in %.1f s, %d request(s)%s%s, %d tokens",
        policy,
        what,
        p.provider,
        p.model,
        p.response_format or "-",
        p.latency_sec,
        len(p.attempts),
        f", {len(failed)} failed" if failed else "",
        ", repaired" if p.repaired else "",
        p.prompt_tokens + p.completion_tokens,
    )


def _account(proposal: Proposal, completion: Completion) -> None:
    """Add one completion's usage to ``proposal``; the raw response is the latest one."""
    proposal.provider = completion.provider
    proposal.model = completion.model
    proposal.raw_response = completion.text
    proposal.response_format = completion.response_format
    proposal.prompt_tokens += completion.prompt_tokens
    proposal.completion_tokens += completion.completion_tokens
    if completion.cost_usd is not None:
        proposal.cost_usd = (proposal.cost_usd or 0.0) + completion.cost_usd
    proposal.latency_sec += completion.latency_sec


def _resolve_stops(
    plans: Sequence[DecisionPlan | None], notes: list[str]
) -> tuple[list[DecisionPlan | None], list[int], bool]:
    """A batch's plans with :func:`resolve_stop` applied, the indexes of those that say
    stop, and whether they are mixed with changes (then the stops are dropped: the
    changes run, the stop is asked again later). Notes go to ``notes``."""
    resolved: list[DecisionPlan | None] = []
    for i, plan in enumerate(plans):
        if plan is not None:
            plan, note = resolve_stop(plan)
            if note is not None:
                notes.append(f"{plan_field(i, '')}: {note}")
        resolved.append(plan)
    stops = [i for i, p in enumerate(resolved) if p is not None and p.stop]
    changes = [i for i, p in enumerate(resolved) if p is not None and not p.stop]
    mixed = bool(stops and changes)
    if mixed:
        notes.append(
            f"{', '.join(plan_field(i, '') for i in stops)} asked to stop while the "
            "others proposed changes: the changes run"
        )
        resolved = [None if i in stops else p for i, p in enumerate(resolved)]
    return resolved, stops, mixed


def _batch_problems(
    parsed: PlansResult, checked: Sequence[list[Problem]], stops: list[int], *, mixed: bool
) -> tuple[list[list[Problem]], list[Problem]]:
    """Each plan's problems (its parse problems, then validation's on other fields; none
    for a dropped stop) and all of the batch's, named by plan."""
    per_plan = [
        [] if i in stops and mixed else _merged(r.problems, v)
        for i, (r, v) in enumerate(zip(parsed.results, checked, strict=True))
    ]
    count_problems = [p for p in parsed.problems if not mixed]
    problems = count_problems + [
        Problem(plan_field(i, p.field), p.reason) for i, own in enumerate(per_plan) for p in own
    ]
    return per_plan, problems


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
