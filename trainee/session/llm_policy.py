"""The LLM policy: compose the prompt, ask through litellm, parse, validate, repair once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainee.errors import InvalidDecision
from trainee.llm.client import complete_with_failover
from trainee.llm.settings import LlmSettings
from trainee.research.decision import (
    Problem,
    parse_plan,
    plan_json_schema,
    repair_message,
    validate_plan,
)
from trainee.research.prompt import PromptParts, build_messages
from trainee.research.state import ResearchState
from trainee.session.policy import Proposal
from trainee.spec import TunableSpec


class LlmPolicy:
    name = "llm"

    def __init__(
        self, settings: LlmSettings, parts: PromptParts, *, max_tokens: int = 2048
    ) -> None:
        self.settings = settings
        self.parts = parts
        self.max_tokens = max_tokens
        self.last_messages: list[dict[str, Any]] = []

    def messages(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        return build_messages(self.parts, state, tunables, baseline_params=dict(baseline))

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
            proposal.provider = completion.provider
            proposal.model = completion.model
            proposal.raw_response = completion.text
            proposal.prompt_tokens += completion.prompt_tokens
            proposal.completion_tokens += completion.completion_tokens
            if completion.cost_usd is not None:
                proposal.cost_usd = (proposal.cost_usd or 0.0) + completion.cost_usd
            proposal.latency_sec += completion.latency_sec
            parsed = parse_plan(completion.text, tunables)
            proposal.notes.extend(parsed.notes)
            problems: list[Problem] = list(parsed.problems)
            if parsed.plan is not None:
                # Every problem goes into the one repair request, parse and validation alike.
                seen = {p.field for p in problems}
                problems += [
                    p
                    for p in validate_plan(
                        parsed.plan,
                        tunables,
                        baseline=dict(baseline),
                        tried=tried,
                        rejected=rejected,
                    )
                    if p.field not in seen
                ]
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
        raise InvalidDecision(
            "the decision failed validation twice: "
            + "; ".join(f"{p['field']}: {p['reason']}" for p in proposal.problems),
            {
                "problems": proposal.problems,
                "raw_response": proposal.raw_response,
                "proposal": proposal,
            },
        )

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        return None
