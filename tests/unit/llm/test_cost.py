"""Cost of a call (user prices, litellm's bundled table) and budget totals."""

from __future__ import annotations

import pytest

from trainee.llm.cost import LlmUsage, budget_stop_reason, completion_cost
from trainee.llm.settings import ModelPrice

PRICES = {"my-model": ModelPrice(input_per_mtok=2.0, output_per_mtok=10.0)}


def test_user_price_matches_with_or_without_prefix() -> None:
    assert completion_cost("my-model", 1_000_000, 100_000, PRICES) == pytest.approx(3.0)
    assert completion_cost("openai/my-model", 500_000, 0, PRICES) == pytest.approx(1.0)


def test_user_price_wins_over_the_table() -> None:
    prices = {"gpt-4o-mini": ModelPrice(input_per_mtok=1.0, output_per_mtok=1.0)}
    assert completion_cost("openai/gpt-4o-mini", 1_000_000, 0, prices) == pytest.approx(1.0)


def test_litellm_table_for_a_known_model() -> None:
    # gpt-4o-mini in litellm's bundled map: $0.15 in / $0.60 out per million tokens
    got = completion_cost("openai/gpt-4o-mini", 1_000_000, 1_000_000, {})
    assert got == pytest.approx(0.75)
    assert completion_cost("gpt-4o-mini", 2_000, 1_000, {}) == pytest.approx(0.0009)


@pytest.mark.parametrize(
    "model", ["openai/no-such-model-xyz", "no-such-model-xyz", "anthropic/zzz"]
)
def test_unknown_model_has_no_cost(model: str) -> None:
    assert completion_cost(model, 1000, 1000, {}) is None


def test_local_server_trusts_only_user_prices() -> None:
    assert completion_cost("openai/gpt-4o-mini", 1000, 1000, {}, use_price_table=False) is None
    assert completion_cost("openai/my-model", 1_000_000, 0, PRICES, use_price_table=False) == 2.0


def test_usage_totals_and_budgets() -> None:
    usage = LlmUsage()
    usage = usage.add(model="a", prompt_tokens=100, completion_tokens=50, cost_usd=0.25)
    usage = usage.add(model="a", prompt_tokens=10, completion_tokens=5, cost_usd=0.5)
    assert (usage.calls, usage.total_tokens, usage.cost_usd) == (2, 165, 0.75)
    assert budget_stop_reason(usage, max_tokens=None, max_usd=None) is None
    assert budget_stop_reason(usage, max_tokens=1000, max_usd=1.0) is None
    reason = budget_stop_reason(usage, max_tokens=165, max_usd=None)
    assert reason is not None and "llm.max_tokens" in reason
    reason = budget_stop_reason(usage, max_tokens=None, max_usd=0.75)
    assert reason is not None and "llm.max_usd" in reason


def test_usd_budget_with_an_unpriced_model_stops() -> None:
    usage = LlmUsage().add(model="local/x", prompt_tokens=1, completion_tokens=1, cost_usd=None)
    usage = usage.add(model="local/x", prompt_tokens=1, completion_tokens=1, cost_usd=None)
    assert usage.unpriced_calls == 2 and usage.unpriced_models == ("local/x",)
    assert budget_stop_reason(usage, max_tokens=100, max_usd=None) is None
    reason = budget_stop_reason(usage, max_tokens=None, max_usd=5.0)
    assert reason is not None and "local/x" in reason and "prices" in reason
