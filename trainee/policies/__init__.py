"""The decision policies: what proposes the next round's parameters.

This module is the table of their names and which of them need an LLM provider;
stdlib only, so the CLI lists the names in ``trainee run --help`` without importing a
policy. ``decision.policy`` in project.yaml (``trainee.spec.files.DecisionSpec``)
accepts exactly these. The policies themselves, one module each, are imported only
by the session manager: ``base`` (the ``Policy`` protocol, ``Proposal``, the
``random`` policy and the batch helpers), ``llm``, ``tpe`` (Optuna), ``hybrid`` (TPE
suggestions judged by an LLM) and ``external`` (an agent submits each plan).
"""

from __future__ import annotations

POLICIES = ("llm", "tpe", "random", "hybrid", "external")
"""``llm`` (the default) and ``hybrid`` ask a provider; ``tpe`` (Optuna) and ``random``
draw from the search space offline; ``external``: an agent submits each plan."""

OFFLINE_POLICIES = frozenset({"tpe", "random", "external"})

AGENT_POLICIES = frozenset({"external", "hybrid"})
"""Sessions an agent steers: it may end their running rounds early (``round_prune``).
The others decide alone: ``run.prune``'s rules end their rounds, ``loop_stop`` the session."""


def needs_provider(policy: str) -> bool:
    """Whether sessions of ``policy`` ask an LLM provider (unknown names: assume they do)."""
    return policy not in OFFLINE_POLICIES


__all__ = ["AGENT_POLICIES", "OFFLINE_POLICIES", "POLICIES", "needs_provider"]
