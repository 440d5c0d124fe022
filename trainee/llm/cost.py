"""What an LLM call cost, and the running totals budgets are checked against.

Prices: the user's (config.json ``prices``, USD per million tokens) first, else
litellm's bundled price table (imported lazily, never fetched), else unknown (None).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any

import msgspec

from trainee.llm.settings import ModelPrice

__all__ = ["LlmUsage", "budget_stop_reason", "completion_cost", "import_litellm"]


_ready = False


def _silence_foreign_warnings() -> None:
    """Ignore warnings raised inside litellm and pydantic (litellm's types): they are
    not ours to fix, and under ``-W error`` they would turn a good call into a failure.
    Re-applied on every use because test harnesses reset the filters per test."""
    warnings.filterwarnings("ignore", module=r"litellm(\.|$)")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"pydantic(\.|$)")


def import_litellm() -> Any:
    """Import litellm the only way trainee does: offline price table (no download),
    no banner, its own warnings silenced."""
    global _ready
    _silence_foreign_warnings()
    if _ready:
        return sys.modules["litellm"]
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import litellm

    litellm.suppress_debug_info = True
    _ready = True
    return litellm


def _name_variants(model: str) -> list[str]:
    """``"openai/gpt-4o-mini"`` -> ``["openai/gpt-4o-mini", "gpt-4o-mini"]``."""
    names = [model]
    while "/" in model:
        model = model.split("/", 1)[1]
        names.append(model)
    return names


def completion_cost(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    prices: Mapping[str, ModelPrice],
    *,
    use_price_table: bool = True,
) -> float | None:
    """USD for one call; None when no price is known.

    ``model`` may carry a litellm provider prefix; user prices match the full name or
    the name without its prefixes. ``use_price_table=False`` (a local server) trusts
    only user prices.
    """
    for name in _name_variants(model):
        price = prices.get(name)
        if price is not None:
            return (
                prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok
            ) / 1_000_000
    if not use_price_table:
        return None
    litellm = import_litellm()
    try:
        prompt_usd, completion_usd = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # litellm raises assorted types for unmapped models
        return None
    return float(prompt_usd) + float(completion_usd)


class LlmUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Running totals of a session's LLM calls (immutable; ``add`` returns a new one)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    unpriced_models: tuple[str, ...] = ()

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(
        self, *, model: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None
    ) -> LlmUsage:
        unpriced = cost_usd is None
        models = self.unpriced_models
        if unpriced and model not in models:
            models = (*models, model)
        return LlmUsage(
            calls=self.calls + 1,
            prompt_tokens=self.prompt_tokens + prompt_tokens,
            completion_tokens=self.completion_tokens + completion_tokens,
            cost_usd=self.cost_usd + (cost_usd or 0.0),
            unpriced_calls=self.unpriced_calls + int(unpriced),
            unpriced_models=models,
        )


def budget_stop_reason(
    usage: LlmUsage, *, max_tokens: int | None, max_usd: float | None
) -> str | None:
    """Why the LLM budget forbids another call, or None.

    ``llm.max_usd`` cannot be honoured for a model without a price: that is a stop
    reason too (add the model to ``prices`` in config.json).
    """
    if max_tokens is not None and usage.total_tokens >= max_tokens:
        return f"llm.max_tokens reached: {usage.total_tokens} of {max_tokens} tokens used"
    if max_usd is not None:
        if usage.unpriced_calls:
            models = ", ".join(usage.unpriced_models)
            return (
                f"llm.max_usd is set but the price of {models} is unknown; "
                "add it to prices in ~/.trainee/config.json"
            )
        if usage.cost_usd >= max_usd:
            return f"llm.max_usd reached: ${usage.cost_usd:.4f} of ${max_usd:.4f} spent"
    return None
