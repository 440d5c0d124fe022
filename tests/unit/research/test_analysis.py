"""The analysis computations on a real store: importance (Optuna's fANOVA), the
plotted rounds and axes, the comparison of two rounds, and the report's SVG views.

Rounds are written to a real SQLite store with the mlp-flags example's tunables; their
metric depends strongly on ``lr`` and hardly on ``batch_size``, so the importance must
say so.
"""

from __future__ import annotations

import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest

from tests.support.daemon import REPO
from tests.support.extras import needs
from trainee.launch.layout import ProjectLayout
from trainee.research import analysis
from trainee.spec import ProjectSpec, load_project
from trainee.states import RoundStatus
from trainee.store.db import Store
from trainee.store.export import write_report
from trainee.store.records import RoundRecord, SessionRecord
from trainee.store.report_views import IMPORTANCE_NAME, PARALLEL_NAME, SLICES_NAME

SVG = "{http://www.w3.org/2000/svg}"

POINTS = [  # lr, weight_decay, batch_size
    (0.001, 1e-5, 16),
    (0.003, 1e-5, 16),
    (0.01, 1e-4, 32),
    (0.0003, 1e-3, 64),
    (0.03, 1e-6, 8),
    (0.1, 1e-5, 100),
    (0.002, 3e-4, 24),
    (0.005, 1e-2, 48),
]


def val_loss(lr: float, wd: float, bs: int) -> float:
    """A bowl in log(lr) with its floor at 0.003; weight decay and batch size barely matter."""
    return 0.3 + (math.log10(lr) - math.log10(0.003)) ** 2 + 0.001 * bs / 100 + wd


@pytest.fixture(scope="module")
def spec() -> ProjectSpec:
    return load_project(REPO / "examples" / "mlp-flags")


def store_rounds(
    tmp_path: Path, failed: int | None = None
) -> tuple[SessionRecord, list[RoundRecord]]:
    layout = ProjectLayout.for_root(tmp_path / "proj", env={})

    async def main() -> tuple[SessionRecord, list[RoundRecord]]:
        async with await Store.open(layout.database) as store:
            await store.create_session(
                SessionRecord(
                    index=1,
                    project_root=str(tmp_path / "proj"),
                    policy="tpe",
                    security_mode="unsafe",
                    max_rounds=len(POINTS),
                )
            )
            for i, (lr, wd, bs) in enumerate(POINTS, start=1):
                bad = i == failed
                await store.upsert_round(
                    RoundRecord(
                        session=1,
                        index=i,
                        status=RoundStatus.FAILED if bad else RoundStatus.COMPLETED,
                        params={"lr": lr, "weight_decay": wd, "batch_size": bs},
                        primary_metric=None if bad else val_loss(lr, wd, bs),
                        verdict=None if i == 1 or bad else "kept",
                        hypothesis="" if i == 1 else f"try lr {lr}",
                    )
                )
                await store.add_points(
                    1, i, [("val_loss", val_loss(lr, wd, bs) + 1 / s, s, s) for s in range(1, 4)]
                )
            await store.update_session(1, baseline_round=1, best_round=2)
            return await store.get_session(1), await store.list_rounds(1)

    return anyio.run(main)


@needs("optuna")
def test_importance_ranks_the_parameter_the_metric_depends_on(
    tmp_path: Path, spec: ProjectSpec
) -> None:
    _, rounds = store_rounds(tmp_path)
    obs = [(r.params, r.primary_metric, r.status) for r in rounds]
    imp = analysis.param_importances(spec.tunables, obs, "min")
    assert imp.available and imp.evaluator == "fANOVA" and imp.note == ""
    assert set(imp.values) == {"lr", "weight_decay", "batch_size"}
    assert abs(sum(imp.values.values()) - 1.0) < 1e-6
    assert max(imp.values, key=lambda k: imp.values[k]) == "lr"
    assert imp.values["lr"] > imp.values["batch_size"]
    # asking again gives the same answer (nothing random in it)
    assert analysis.param_importances(spec.tunables, obs, "min") == imp


@needs("optuna")
def test_importance_says_why_it_is_not_available(tmp_path: Path, spec: ProjectSpec) -> None:
    _, rounds = store_rounds(tmp_path)
    one = [(rounds[0].params, rounds[0].primary_metric, rounds[0].status)]
    stopped = [(r.params, r.primary_metric, RoundStatus.STOPPED) for r in rounds]
    for obs in (one, stopped):
        imp = analysis.param_importances(spec.tunables, obs, "min")
        assert not imp.available and imp.note == analysis.NEEDS_TWO and imp.values == {}
    imp = analysis.param_importances(
        (), [(r.params, r.primary_metric, r.status) for r in rounds], "min"
    )
    assert not imp.available and imp.note == analysis.NO_SPACE


def test_without_optuna_importance_says_so_and_the_rest_works() -> None:
    """A Python that cannot import optuna (``sys.modules['optuna'] = None`` is how Python
    spells an absent module): importance names the extra, the plotted data is complete."""
    code = f"""
import sys
sys.modules["optuna"] = None
sys.path.insert(0, {str(REPO)!r})
from trainee.research import analysis
from trainee.spec import load_project
from trainee.store.records import RoundRecord
spec = load_project({str(REPO / "examples" / "mlp-flags")!r})
rounds = [RoundRecord(session=1, index=i, status="completed", params={{"lr": 0.001 * i}},
          primary_metric=1.0 / i) for i in (1, 2, 3)]
a = analysis.build_analysis("session-0001", rounds, spec.tunables, metric="val_loss",
    goal="min", baseline_round=1, best_round=3)
print(a.importance.available, a.importance.note)
print(len(a.rounds), [t.name for t in a.tunables])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.splitlines()
    assert first == f"False {analysis.OPTUNA_HINT}"
    assert second == "3 ['lr', 'weight_decay', 'batch_size']"


def test_the_plotted_rounds_axes_and_failed_rounds(tmp_path: Path, spec: ProjectSpec) -> None:
    session, rounds = store_rounds(tmp_path, failed=5)
    a = analysis.build_analysis(
        session.id,
        rounds,
        spec.tunables,
        metric="val_loss",
        goal="min",
        baseline_round=session.baseline_round,
        best_round=session.best_round,
    )
    assert a.session == "session-0001" and (a.baseline_round, a.best_round) == (1, 2)
    axes = {t.name: t for t in a.tunables}
    assert axes["lr"].log and axes["weight_decay"].log and not axes["batch_size"].log
    assert (axes["batch_size"].min_value, axes["batch_size"].max_value) == (8.0, 100.0)
    assert [r.index for r in a.rounds] == list(range(1, len(POINTS) + 1))
    failed = a.rounds[4]
    assert failed.status == RoundStatus.FAILED and failed.metric is None
    assert a.rounds[1].metric == pytest.approx(val_loss(0.003, 1e-5, 16))
    # no spec: the axes are the params the rounds carry
    plain = analysis.tunable_views((), rounds)
    assert [t.name for t in plain] == ["lr", "weight_decay", "batch_size"]
    assert not any(t.log for t in plain)


def test_comparing_two_rounds_diffs_params_and_overlays_curves(tmp_path: Path) -> None:
    session, rounds = store_rounds(tmp_path)
    by = {r.index: r for r in rounds}
    points = [("val_loss", 2.0, 1, 1), ("val_loss", float("nan"), 2, 2), ("val_loss", 1.5, None, 3)]
    points += [("loss", 3.0 - i / 1000, i, 10 + i) for i in range(1000)]
    left = analysis.compared_round(session.id, by[2], points)
    right = analysis.compared_round(session.id, by[1], [("val_loss", 2.5, None, 7)])
    c = analysis.compare(left, right, "val_loss")
    assert left.curves["val_loss"] == [(1.0, 2.0), (3.0, 1.5)], "a non-finite point is not drawn"
    loss = left.curves["loss"]
    assert len(loss) <= analysis.MAX_CURVE_POINTS + 1 and loss[-1] == (999.0, 3.0 - 0.999)
    assert c.curve_metric == "val_loss"  # a side has more than its final value
    only_final = analysis.compare(
        analysis.compared_round(session.id, by[2], [("val_loss", 1.5, None, 9), *points[3:]]),
        right,
        "val_loss",
    )
    assert only_final.curve_metric == "loss"
    changed = {d.name: (d.left, d.right) for d in c.params if d.changed}
    assert changed == {"lr": (0.003, 0.001)}
    assert [d.name for d in c.params] == ["lr", "weight_decay", "batch_size"]
    assert (c.left.verdict, c.right.verdict) == ("kept", None)
    assert c.left.hypothesis == "try lr 0.003"


def _texts(root: ET.Element) -> str:
    return " ".join(t.text or "" for t in root.iter(f"{SVG}text"))


def test_the_report_writes_the_views_as_svg_naming_the_tunables(
    tmp_path: Path, spec: ProjectSpec
) -> None:
    session, rounds = store_rounds(tmp_path, failed=5)
    layout = ProjectLayout.for_root(tmp_path / "proj", env={}).session(1)
    report = write_report(
        layout, session, rounds, metric_name="val_loss", goal="min", tunables=spec.tunables
    )
    text = report.read_text()
    names = [PARALLEL_NAME, SLICES_NAME]
    if analysis.optuna_available():
        names.insert(0, IMPORTANCE_NAME)
        assert "Parameter importance (fANOVA, Optuna): `lr`" in text
    else:
        assert f"Parameter importance: {analysis.OPTUNA_HINT}" in text
    for name in names:
        assert f"]({name})" in text, name
        root = ET.parse(layout.artifacts / name).getroot()  # well-formed XML
        assert root.tag == f"{SVG}svg"
        words = _texts(root)
        for tunable in ("lr", "weight_decay", "batch_size"):
            assert tunable in words, (name, tunable)
    parallel = ET.parse(layout.artifacts / PARALLEL_NAME).getroot()
    lines = {p.get("data-round"): p for p in parallel.iter(f"{SVG}polyline")}
    assert len(lines) == len(POINTS)  # a failed round is drawn over its params, in grey
    assert "best" in (lines["2"].get("class") or "")
    assert "baseline" in (lines["1"].get("class") or "")
    assert "lr (log)" in _texts(parallel) and "batch_size (log)" not in _texts(parallel)
    slices = ET.parse(layout.artifacts / SLICES_NAME).getroot()
    groups = [g for g in slices.iter(f"{SVG}g") if g.get("class") == "slice"]
    assert [g.get("data-param") for g in groups] == ["lr", "weight_decay", "batch_size"]
    for g in groups:  # one point per round with a metric
        assert len(list(g.iter(f"{SVG}circle"))) == len(POINTS) - 1
