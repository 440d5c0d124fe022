"""The screenable fixture's checks (tests/fixtures/projects/screenable, ``run.screen``
with rungs of 2 and 6 epochs and eta 2)."""

from __future__ import annotations

import json
import shlex
from typing import Any


def epochs_of(rnd: dict[str, Any]) -> int:
    argv = shlex.split(rnd["command"])
    return int(argv[argv.index("--epochs") + 1])


def check_ladder(state: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every round ran at its rung's budget; each promotion took a round of rung 1 that
    beat at least one other round of rung 1 finished before the promotion (eta 2: the
    best half goes on). The rounds of rung 1 and the promoted ones."""
    rounds = {r["index"]: r for r in state["rounds"]}
    baseline = rounds[1]
    assert (baseline["rung"], baseline["budget"], epochs_of(baseline)) == (2, 6, 6)
    low = [r for r in rounds.values() if r["index"] > 1 and r["rung"] == 1]
    promoted = [r for r in rounds.values() if r["promoted_from"] is not None]
    assert low and promoted, state["rounds"]
    assert len(low) + len(promoted) == len(rounds) - 1
    # each new candidate was decided seeing the rounds still running: none repeats one
    assert len({json.dumps(r["params"], sort_keys=True) for r in low}) == len(low), low
    for r in low:
        assert (r["budget"], epochs_of(r)) == (2, 2), r
        assert r["verdict"] == "neutral" and "screening rung 1 of 2" in r["verdict_reason"], r
    for p in promoted:
        source = rounds[p["promoted_from"]]
        assert (p["rung"], p["budget"], epochs_of(p)) == (2, 6, 6), p
        assert source["rung"] == 1 and source["params"] == p["params"]
        beaten = [
            r
            for r in low
            if r["index"] != source["index"]
            and r["ended_at"] <= p["started_at"]
            and r["primary_metric"] >= source["primary_metric"]
        ]
        assert beaten, f"round {p['index']} promoted {source['index']} without a rival beaten"
        assert f"round {source['index']} promoted from rung 1" in p["hypothesis"]
    assert len({p["promoted_from"] for p in promoted}) == len(promoted), "promoted twice"
    return low, promoted
