"""RoundPruning.start against a real store: which rounds it watches, what it compares with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import yaml  # type: ignore[import-untyped]

from tests.support.daemon import REPO
from trainee.session.pruning import RoundPruning
from trainee.spec import load_project
from trainee.store.db import Store
from trainee.store.records import RoundRecord, SessionRecord

FIXTURE = REPO / "tests" / "fixtures" / "projects" / "prunable"


def _project(tmp_path: Path, change: Callable[[dict[str, Any]], object]) -> Path:
    """The prunable fixture's trainer and tuning, its project.yaml changed by ``change``."""
    root = tmp_path / "proj"
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text((FIXTURE / "train.py").read_text())
    (root / ".trainee" / "tuning.yaml").write_text(
        (FIXTURE / ".trainee" / "tuning.yaml").read_text()
    )
    doc = yaml.safe_load((FIXTURE / ".trainee" / "project.yaml").read_text())
    change(doc)
    (root / ".trainee" / "project.yaml").write_text(yaml.safe_dump(doc))
    return root


def test_the_pruning_compares_with_completed_rounds_and_never_watches_the_baseline(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path, lambda doc: doc["run"].update(
        noise={"seed": "seed", "repeats": 2},
        prune={"step": "reports", "rules": [{"rule": "median"}]},
    ))  # fmt: skip
    spec = load_project(root)

    async def main() -> dict[str, Any]:
        store = await Store.open(root / ".trainee" / "runtime.sqlite3")
        try:
            await store.create_session(
                SessionRecord(index=1, project_root=str(root), policy="tpe",
                              security_mode="unsafe", max_rounds=9)
            )  # fmt: skip
            recs = {}
            for index, status, diff in [
                (1, "completed", {}),
                (2, "completed", {"seed": {"from": 0, "to": 1}}),
                (3, "failed", {"lr": {"from": 0.3, "to": 9}}),
                (4, "running", {"lr": {"from": 0.3, "to": 0.1}}),
            ]:
                rec = await store.upsert_round(RoundRecord(session=1, index=index, diff=diff))
                rec = await store.update_round(1, index, status="running")
                if status != "running":
                    rec = await store.update_round(1, index, status=status)
                await store.add_points(1, index, [("val_loss", 1.0 / index, 7, 0)])
                recs[index] = rec
            return {i: await RoundPruning.start(store, spec, 1, recs[i]) for i in (1, 2, 4)}
        finally:
            await store.close()

    got = anyio.run(main)
    assert got[1] is None  # the baseline: nothing to compare it with
    assert got[2] is None  # the baseline on another seed measures the noise floor
    watch = got[4]
    assert watch is not None and watch.primary == "val_loss"
    # completed rounds only (not the failed one, nor itself); steps as report counts
    assert [(f.index, dict(f.series)) for f in watch.finished] == [
        (1, {"val_loss": [(1, 1.0)]}),
        (2, {"val_loss": [(1, 0.5)]}),
    ]


def test_without_metric_specs_the_pruning_watches_the_builtin_loss_the_rounds_report(
    tmp_path: Path,
) -> None:
    """A project that prints only ``total_loss``: the rules watch ``total_loss``, as the
    research state and the reports judge it (not ``loss``, which no point ever has)."""

    def change(doc: dict[str, Any]) -> None:
        del doc["metrics"]
        doc["run"]["prune"] = {"rules": [{"rule": "median"}]}

    root = _project(tmp_path, change)
    spec = load_project(root)

    async def main() -> RoundPruning | None:
        store = await Store.open(root / ".trainee" / "runtime.sqlite3")
        try:
            await store.create_session(
                SessionRecord(index=1, project_root=str(root), policy="tpe",
                              security_mode="unsafe", max_rounds=9)
            )  # fmt: skip
            for index in (1, 2):
                diff = {} if index == 1 else {"lr": {"from": 0.3, "to": 0.1}}
                await store.upsert_round(RoundRecord(session=1, index=index, diff=diff))
                await store.update_round(1, index, status="running")
            await store.update_round(1, 1, status="completed", finals={"total_loss": 0.5})
            await store.add_points(1, 1, [("total_loss", 0.5, 3, 0)])
            return await RoundPruning.start(store, spec, 1, await store.get_round(1, 2))
        finally:
            await store.close()

    watch = anyio.run(main)
    assert watch is not None and watch.primary == "total_loss"
