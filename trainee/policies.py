"""The decision policies by name, and which of them need an LLM provider.

Stdlib only: the CLI lists the names in ``trainee run --help``. ``decision.policy``
in project.yaml (``trainee.spec.files.DecisionSpec``) accepts exactly these.
"""

from __future__ import annotations

POLICIES = ("llm", "tpe", "random", "hybrid", "external")
"""``llm`` (the default) and ``hybrid`` ask a provider; ``tpe`` (Optuna) and ``random``
draw from the search space offline; ``external``: an agent submits each plan."""

OFFLINE_POLICIES = frozenset({"tpe", "random", "external"})


def needs_provider(policy: str) -> bool:
    """Whether sessions of ``policy`` ask an LLM provider (unknown names: assume they do)."""
    return policy not in OFFLINE_POLICIES


__all__ = ["OFFLINE_POLICIES", "POLICIES", "needs_provider"]
