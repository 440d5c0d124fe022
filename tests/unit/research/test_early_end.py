"""EarlyEnd: the first decision to end a running round early wins (a rule or an agent)."""

from __future__ import annotations

import msgspec

from trainee.metrics.extract import MetricPoint
from trainee.research.prune import PRUNED_PREFIX
from trainee.session.pruning import AGENT_RULE, EarlyEnd, RoundPruning, agent_decision
from trainee.spec.files import PruneSpec


def test_an_agents_decision_reads_as_a_prune_and_the_first_request_wins() -> None:
    early = EarlyEnd()
    asked = agent_decision("lr 0.02 crawls")
    assert asked.rule == AGENT_RULE
    assert asked.error == PRUNED_PREFIX + "by the agent: lr 0.02 crawls"
    assert early.request(asked) and early.requested.is_set()
    assert not early.request(agent_decision("again"))
    assert early.decision is asked


def test_a_rule_never_overrides_an_agents_request_nor_the_other_way_round() -> None:
    spec = msgspec.convert({"rules": [{"rule": "threshold", "above": 5.0}]}, PruneSpec)
    early = EarlyEnd()
    watch = RoundPruning(spec, primary="val_loss", goals={}, finished=[], early=early)
    early.request(agent_decision("enough"))
    # a point the rule would prune on: the round is already ending for the agent
    assert watch.feed([MetricPoint("val_loss", 9.0, 2, 1, "stdout_regex")], {}) is None
    assert watch.decision is None and early.decision is not None
    assert early.decision.rule == AGENT_RULE

    ruled = RoundPruning(spec, primary="val_loss", goals={}, finished=[])
    got = ruled.feed([MetricPoint("val_loss", 9.0, 2, 1, "stdout_regex")], {})
    assert got is not None and ruled.early.decision is got and ruled.requested.is_set()
    assert not ruled.early.request(agent_decision("late"))
    assert ruled.early.decision is got
