"""The prunable fixture's helpers (tests/fixtures/projects/prunable): a stdlib trainer
printing ``epoch N val_loss=X`` that writes a checkpoint on SIGTERM, driven by an external
agent through the real socket."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from tests.support.daemon import REPO, Daemon
from tests.support.timing import scaled
from trainee.rpc.client import RpcClient

PRUNABLE = REPO / "tests" / "fixtures" / "projects" / "prunable"
FOREVER = 100_000
"""Epochs of a losing round (``--epochs``): it runs for more than an hour unless it is pruned."""


def drive(
    daemon: Daemon, project: Path, plans: list[dict[str, Any]], *, own: int = 1
) -> list[dict[str, Any]]:
    """Start an external session of ``own`` + len(plans) rounds, wait for the ``own``
    rounds the session runs by itself (the baseline...), then run the plans one by one;
    each round's result."""
    root = str(project)
    results = []
    with RpcClient(daemon.socket, timeout=scaled(120)) as rpc:
        start = {"project_root": root, "policy": "external", "security_mode": "unsafe"}
        session = rpc.call("loop_start", {**start, "max_rounds": own + len(plans)})["session"]
        for index in range(1, own + 1):
            first = {"session": session, "round": index, "project_root": root, "wait": True}
            results.append(rpc.call("round_result", first))
        for params in plans:
            plan = {
                "session": session,
                "project_root": root,
                "hypothesis": f"try {params}",
                "change_summary": "lr",
                "expected": "see",
                "params": params,
            }
            results.append(rpc.call("round_run", plan))
    return results


def checkpoint_of(rnd: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint the round's job wrote into its outputs folder (``--out``)."""
    argv = shlex.split(rnd["command"])
    out = Path(argv[argv.index("--out") + 1])
    data: dict[str, Any] = json.loads((out / "checkpoint.json").read_text())
    return data
