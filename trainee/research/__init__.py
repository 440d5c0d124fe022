"""trainee.research: pure, synchronous logic of the research loop.

- :mod:`trainee.research.decision` — the plan schema, tolerant parsing, validation, repair.
- :mod:`trainee.research.state` — the research state and the judging of each round.
- :mod:`trainee.research.prompt` — composing the bounded, deterministic decision prompt.

Stdlib + msgspec + :mod:`trainee.spec` only.
"""

from __future__ import annotations

from trainee.research.decision import (
    DecisionPlan,
    ParseResult,
    Problem,
    effective_params,
    params_diff,
    parse_plan,
    plan_json_schema,
    repair_message,
    validate_plan,
)
from trainee.research.prompt import (
    DEFAULT_SYSTEM_PROMPT,
    PromptLimits,
    PromptParts,
    build_messages,
    journal_section,
)
from trainee.research.state import (
    ResearchState,
    RoundSummary,
    new_state,
    record_round,
    state_from_json,
    state_to_json,
)

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "DecisionPlan",
    "ParseResult",
    "Problem",
    "PromptLimits",
    "PromptParts",
    "ResearchState",
    "RoundSummary",
    "build_messages",
    "effective_params",
    "journal_section",
    "new_state",
    "params_diff",
    "parse_plan",
    "plan_json_schema",
    "record_round",
    "repair_message",
    "state_from_json",
    "state_to_json",
    "validate_plan",
]
