"""bench/compute.py's summarising functions on small hand-made tables (no daemon, no run).

The ratios the bench prints are computed here from rounds whose seconds, metrics and
reports are written out, so each figure can be checked by hand.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from trainee.spec import load_project

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_compute", REPO / "bench" / "compute.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_compute"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _load()
R = bench.Round


def session(arm: str, rounds: list[tuple[str, float, float | None, int]], seed: int = 0) -> object:
    return bench.Session(
        "tpe", seed, arm, [R(i, st, sec, m, rep) for i, (st, sec, m, rep) in enumerate(rounds, 1)]
    )


# full: every round to its end; round 2 diverged (no metric) after its 40 epochs
FULL = [
    ("completed", 10.0, 1.0, 40),
    ("completed", 10.0, None, 40),
    ("completed", 10.0, 0.8, 40),
    ("completed", 10.0, 0.9, 40),
]
# prune: the same first rounds, the diverged one stopped after 4 epochs, then more rounds
PRUNE = [
    ("completed", 10.0, 1.0, 40),
    ("pruned", 1.0, None, 4),
    ("completed", 10.0, 0.8, 40),
    ("pruned", 3.0, None, 12),
    ("completed", 10.0, 0.7, 40),
    ("completed", 10.0, 0.75, 40),
]


def test_curve_adds_up_compute_and_keeps_the_best_so_far() -> None:
    rounds = session("prune", PRUNE).rounds  # type: ignore[attr-defined]
    assert bench.curve(rounds, "min") == [
        (10.0, 1.0),
        (11.0, 1.0),
        (21.0, 0.8),
        (24.0, 0.8),
        (34.0, 0.7),
        (44.0, 0.7),
    ]
    assert bench.curve(rounds, "max")[-1] == (44.0, 1.0)
    assert bench.best_within(rounds, "min", 40.0) == (0.7, 34.0)
    assert bench.compute_to_reach(rounds, "min", 0.8, 0.05) == 21.0
    assert bench.compute_to_reach(rounds, "min", 0.5, 0.05) is None
    assert bench.reports_of(rounds[:4]) == 96


def test_compare_gives_the_ratios_against_the_full_session() -> None:
    c = bench.compare(session("full", FULL), session("prune", PRUNE), 4, "min", 0.05)
    assert (c.full_compute, c.full_best, c.compute, c.best) == (40.0, 0.8, 24.0, 0.8)
    assert c.compute_ratio == pytest.approx(0.6)  # 24 s of 40 for the same 4 rounds
    assert c.reports_ratio == pytest.approx(96 / 160)
    assert c.best_gap == 0.0  # the same best
    assert c.to_same_ratio == pytest.approx(21 / 40)  # within a floor of 0.8 at 21 s
    assert c.equal_best == 0.7  # within 40 s it also ran round 5
    assert c.equal_gain == pytest.approx(2.0)  # 0.1 better = two floors
    assert c.covered == 1.0  # it used 44 s, more than full's 40


def test_a_worse_best_is_a_positive_gap_whichever_the_goal() -> None:
    worse = [("completed", 10.0, 1.0, 40), ("pruned", 1.0, None, 4)]
    c = bench.compare(session("full", FULL), session("prune", worse), 4, "min", 0.05)
    assert c.best_gap == pytest.approx(4.0)  # 1.0 vs 0.8: four floors worse
    assert c.to_same_ratio is None  # never came within a floor
    assert c.covered == pytest.approx(11 / 40)
    assert c.equal_gain == pytest.approx(-4.0)
    # goal max: 0.9 is the best of full (1.0 is better still, and the arm has it)
    up = bench.compare(session("full", FULL[1:]), session("prune", worse), 3, "max", 0.05)
    assert up.full_best == 0.9 and up.best == 1.0
    assert up.best_gap == pytest.approx(-2.0)
    nothing = [("completed", 5.0, None, 40)]
    assert (
        bench.compare(session("full", FULL), session("p", nothing), 4, "min", 0.05).best_gap
        == math.inf
    )


def test_without_a_floor_only_the_sign_of_a_difference_is_left() -> None:
    c = bench.compare(session("full", FULL), session("prune", PRUNE), 6, "min", 0.0)
    assert c.best_gap == -math.inf and c.equal_gain == math.inf
    assert (
        bench.compare(session("full", FULL), session("prune", PRUNE), 4, "min", None).best_gap
        is None
    )


def test_summarize_takes_medians_over_seeds_and_counts_the_seeds_that_reached() -> None:
    worse = [("completed", 10.0, 1.0, 40), ("pruned", 1.0, None, 4)]
    comparisons = [
        bench.compare(session("full", FULL, s), session("prune", arm, s), 4, "min", 0.05)
        for s, arm in enumerate([PRUNE, PRUNE, worse])
    ]
    (row,) = bench.summarize(comparisons)
    assert (row.policy, row.arm, row.seeds, row.reached) == ("tpe", "prune", 3, 2)
    assert row.compute_ratio == pytest.approx(0.6)  # median of 0.6, 0.6, 11/40
    assert row.best_gap == 0.0
    assert row.to_same_ratio == pytest.approx(21 / 40)  # never counts as inf
    assert row.equal_gain == pytest.approx(2.0)
    text = bench.table([row])
    assert "2/3" in text and "0.6" in text


def test_noise_floor_is_the_sample_standard_deviation() -> None:
    assert bench.noise_floor([1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert bench.noise_floor([1.0, math.nan, 3.0]) == pytest.approx(math.sqrt(2))
    assert bench.noise_floor([1.0]) is None


def test_reports_are_counted_with_the_projects_own_pattern(tmp_path: Path) -> None:
    pattern = bench.report_pattern(load_project(REPO / "examples" / "lr-cliff"))
    log = tmp_path / "round-0002.log"
    log.write_text(
        "epoch 1 loss=0.5 val_loss=0.4\nepoch 2 loss=1e+30 val_loss=inf\n"
        "epoch 3 loss=nan val_loss=nan\ntraining...\nfinal val_loss=nan\n"
    )
    assert bench.count_reports(log, pattern) == 3
    assert bench.count_reports(tmp_path / "missing.log", pattern) is None
    assert bench.count_reports(log, None) is None


def test_parse_mapping_reads_yaml_json_and_files(tmp_path: Path) -> None:
    assert bench.parse_mapping("{rules: [{rule: median}]}", "--prune") == {
        "rules": [{"rule": "median"}]
    }
    path = tmp_path / "screen.json"
    path.write_text('{"budget": "epochs"}')
    assert bench.parse_mapping(f"@{path}", "--screen") == {"budget": "epochs"}
