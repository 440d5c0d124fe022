"""The pure promotion logic of ``run.screen`` (trainee/research/screen.py): which round of
which rung goes on, asynchronously, ranked by the research state's comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainee.research.screen import (
    RungResult,
    next_promotion,
    promoted_count,
    rank,
    rung_label,
    told_status,
)
from trainee.research.state import RoundSummary, new_state, record_round
from trainee.states import RoundStatus

REPO = Path(__file__).resolve().parents[3]
RUNGS = (2, 6, 18)


def r(index: int, rung: int, metric: float | None, promoted: bool = False) -> RungResult:
    return RungResult(round=index, rung=rung, metric=metric, promoted=promoted)


def test_a_rung_promotes_nothing_before_it_has_eta_results() -> None:
    assert next_promotion(RUNGS, 3, [r(2, 1, 0.5), r(3, 1, 0.4)], "min") is None
    found = next_promotion(RUNGS, 3, [r(2, 1, 0.5), r(3, 1, 0.4), r(4, 1, 0.9)], "min")
    assert found is not None
    assert (found.round, found.rung, found.budget) == (3, 2, 6)
    assert "ranks 1 of 3" in found.reason and "the best 1 go on" in found.reason


def test_the_best_not_yet_promoted_goes_next_as_the_rung_grows() -> None:
    results = [r(2, 1, 0.5), r(3, 1, 0.4, promoted=True), r(4, 1, 0.9)]
    assert next_promotion(RUNGS, 3, results, "min") is None  # the best 1 of 3 went on
    results += [r(5, 1, 0.45), r(6, 1, 0.7), r(7, 1, 0.8)]  # 6 results: the best 2 go on
    found = next_promotion(RUNGS, 3, results, "min")
    assert found is not None and found.round == 5


def test_higher_rungs_are_promoted_first() -> None:
    results = [r(i, 1, 0.1 * i) for i in range(2, 5)] + [
        r(10, 2, 0.3),
        r(11, 2, 0.2),
        r(12, 2, 0.25),
    ]
    found = next_promotion(RUNGS, 3, results, "min")
    assert found is not None and (found.round, found.rung, found.budget) == (11, 3, 18)


def test_the_goal_decides_the_order_and_rounds_without_a_value_never_go_on() -> None:
    results = [r(2, 1, 0.5), r(3, 1, 0.4), r(4, 1, None), r(5, 1, None)]
    found = next_promotion(RUNGS, 2, results, "max")
    assert found is not None and found.round == 2
    # two of four failed: the best half is 0.5 and 0.4 (min), failures rank last
    assert [x.round for x in rank(results, "min")] == [3, 2, 4, 5]
    assert next_promotion(RUNGS, 2, [r(4, 1, None), r(5, 1, None)], "min") is None


def test_equal_values_rank_by_round_and_counts_floor() -> None:
    assert [x.round for x in rank([r(5, 1, 0.3), r(2, 1, 0.3)], "min")] == [2, 5]
    assert [promoted_count(n, 3) for n in (0, 2, 3, 5, 6, 9)] == [0, 0, 1, 1, 2, 3]
    assert promoted_count(3, 1.5) == 2


def test_labels_and_what_a_policy_is_told() -> None:
    assert rung_label(1, RUNGS, "--epochs") == "rung 1 of 3 (--epochs 2)"
    assert rung_label(3, RUNGS, "--epochs") == "rung 3 of 3 (--epochs 18, full budget)"
    assert told_status(RoundStatus.COMPLETED, 1, 3) == RoundStatus.PRUNED
    assert told_status(RoundStatus.COMPLETED, 3, 3) == RoundStatus.COMPLETED
    assert told_status(RoundStatus.FAILED, 1, 3) == RoundStatus.FAILED
    assert told_status(RoundStatus.COMPLETED, 0, 0) == RoundStatus.COMPLETED


def summary(index: int, metric: float, rung: int = 0, rungs: int = 0) -> RoundSummary:
    return RoundSummary(
        index=index,
        status=RoundStatus.COMPLETED,
        params={"lr": index},
        diff={} if index == 1 else {"lr": {"from": 1, "to": index}},
        metric=metric,
        metrics={"val_loss": metric},
        hypothesis="h",
        expected="",
        verdict=None,
        verdict_reason="",
        duration_sec=1.0,
        failure_tail=[],
        rung=rung,
        rungs=rungs,
        budget=None if not rung else float(RUNGS[rung - 1]),
    )


def test_a_low_budget_result_is_never_the_best_however_good() -> None:
    state = new_state("val_loss", "min")
    state, _ = record_round(state, summary(1, 1.0, rung=3, rungs=3))
    state, judged = record_round(state, summary(2, 0.1, rung=1, rungs=3))
    assert judged.verdict == "neutral" and state.best is not None and state.best.index == 1
    assert "screening rung 1 of 3 (budget 2)" in judged.verdict_reason
    assert not state.rejected
    state, judged = record_round(state, summary(3, 0.5, rung=3, rungs=3))
    assert judged.verdict == "kept" and state.best is not None and state.best.index == 3


def test_the_run_screen_worked_example_loads(tmp_path: Path) -> None:
    import yaml  # type: ignore[import-untyped]

    from trainee.spec import load_project

    text = (REPO / "docs" / "configuration.md").read_text()
    block = text.split("Worked example: a trainer with `--epochs`")[1].split("```yaml")[1]
    doc = yaml.safe_load(block.split("```")[0])
    doc.update(version=1, launch={"command": ["python", "train.py"]})
    (tmp_path / ".trainee").mkdir()
    (tmp_path / "train.py").write_text("")
    (tmp_path / ".trainee" / "project.yaml").write_text(yaml.safe_dump(doc))
    screen = load_project(tmp_path).run.screen
    assert screen is not None
    assert (screen.budget, screen.rungs, screen.eta) == ("--epochs", (3, 9, 27), 3)
    assert screen.resume is not None and screen.resume.flag == "--resume-from"


@pytest.mark.parametrize("goal", ["min", "max"])
def test_a_promotion_is_always_of_a_round_in_the_best_fraction(goal: str) -> None:
    import random

    rng = random.Random(7)
    for _ in range(200):
        results = [
            r(i, 1, rng.random(), promoted=rng.random() < 0.3) for i in range(rng.randint(0, 9))
        ]
        found = next_promotion(RUNGS, 2, results, goal)
        keep = promoted_count(len(results), 2)
        best = rank(results, goal)[:keep]
        if found is None:
            assert all(x.promoted for x in best)
        else:
            assert found.round in {x.round for x in best if not x.promoted}


def test_the_llm_sees_each_round_s_rung_and_budget() -> None:
    from trainee.research.prompt import PromptParts, build_messages

    from .helpers import BASELINE, TUNABLES

    state = new_state("val_loss", "min")
    state, _ = record_round(state, summary(1, 1.0, rung=3, rungs=3))
    state, _ = record_round(state, summary(2, 0.1, rung=1, rungs=3))
    parts = PromptParts(
        system_prompt="S",
        trainee_context="",
        project_context="",
        constraints="",
        metrics_prompt="",
        tuning_prompt="",
    )
    user = build_messages(parts, state, TUNABLES, baseline_params=BASELINE)[1]["content"]
    assert "completed (rung 1 of 3, budget 2)" in user
    assert "completed (rung 3 of 3, budget 18, full budget)" in user
    assert "never compared with the best" in user
