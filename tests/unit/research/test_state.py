"""record_round: the verdict table, failures as evidence, purity and JSON."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from trainee.research.state import (
    RECENT_ROUNDS,
    NoiseFloor,
    ResearchState,
    RoundSummary,
    failure_kind,
    new_state,
    noise_repeats,
    record_round,
    state_from_json,
    state_to_json,
)

from .helpers import BASELINE, summary


def changed(index: int, metric: float | None, status: str = "completed", **kw: Any) -> RoundSummary:
    """A round that changes lr to a value unique to it."""
    lr = 0.001 * (index + 1)
    return summary(
        index,
        status,
        metric,
        params={**BASELINE, "lr": lr},
        diff={"lr": {"from": 0.001, "to": lr}},
        **kw,
    )


def run(
    goal: str, rounds: list[RoundSummary], primary: str | None = "val_loss"
) -> tuple[ResearchState, list[RoundSummary]]:
    state = new_state(primary, goal)
    judged = []
    for r in rounds:
        state, j = record_round(state, r)
        judged.append(j)
    return state, judged


# (goal, [(status, metric)], expected verdicts, best index, baseline index)
TABLE = [
    ("min", [("completed", 0.30)], ["baseline"], 1, 1),
    ("min", [("completed", 0.30), ("completed", 0.25)], ["baseline", "kept"], 2, 1),
    (
        "min",
        [("completed", 0.30), ("completed", 0.25), ("completed", 0.27)],
        ["baseline", "kept", "neutral"],
        2,
        1,
    ),
    (
        "min",
        [("completed", 0.30), ("completed", 0.25), ("completed", 0.30)],
        ["baseline", "kept", "neutral"],
        2,
        1,
    ),  # equal to the baseline: neutral
    (
        "min",
        [("completed", 0.30), ("completed", 0.25), ("completed", 0.25)],
        ["baseline", "kept", "neutral"],
        2,
        1,
    ),  # equal to the best: not a new best
    ("min", [("completed", 0.30), ("completed", 0.31)], ["baseline", "rejected"], 1, 1),
    (
        "min",
        [("completed", 0.30), ("completed", 0.30 * (1 - 1e-12))],
        ["baseline", "neutral"],
        1,
        1,
    ),
    (
        "max",
        [("completed", 0.80), ("completed", 0.85), ("completed", 0.82), ("completed", 0.70)],
        ["baseline", "kept", "neutral", "rejected"],
        2,
        1,
    ),
    ("max", [("completed", 0.80), ("completed", 0.75)], ["baseline", "rejected"], 1, 1),
    (
        "min",
        [("failed", None), ("completed", 0.4), ("completed", 0.35)],
        ["rejected", "baseline", "kept"],
        3,
        2,
    ),
    (
        "min",
        [("timed_out", None), ("completed_without_metrics", None), ("completed", 0.4)],
        ["rejected", "rejected", "baseline"],
        3,
        3,
    ),
    ("min", [("completed", None), ("completed", 0.4)], ["rejected", "baseline"], 2, 2),
    (
        "min",
        [("stopped", None), ("completed", 0.4), ("stopped", None)],
        [None, "baseline", None],
        2,
        2,
    ),
    (
        "min",
        [("completed", 0.4), ("failed", None), ("completed", 0.3), ("completed", 0.35)],
        ["baseline", "rejected", "kept", "neutral"],
        3,
        1,
    ),
]


@pytest.mark.parametrize(("goal", "rows", "verdicts", "best", "baseline"), TABLE)
def test_verdict_table(
    goal: str,
    rows: list[tuple[str, float | None]],
    verdicts: list[str | None],
    best: int,
    baseline: int,
) -> None:
    state, judged = run(goal, [changed(i + 1, m, s) for i, (s, m) in enumerate(rows)])
    assert [j.verdict for j in judged] == verdicts
    assert state.best is not None and state.best.index == best
    assert state.baseline is not None and state.baseline.index == baseline
    rejected_rounds = [r["round"] for r in state.rejected]
    assert rejected_rounds == [j.index for j in judged if j.verdict == "rejected"]
    tried_rounds = [t["round"] for t in state.tried]
    assert tried_rounds == [j.index for j in judged if j.status != "stopped"]
    assert [h["round"] for h in state.hypotheses] == [j.index for j in judged]
    assert len(state.rounds) == len(rows)


def test_reasons_name_the_numbers_and_rounds() -> None:
    state, judged = run(
        "min", [changed(1, 0.31), changed(2, 0.22), changed(3, 0.25), changed(4, 0.5)]
    )
    assert judged[0].verdict_reason.startswith("baseline: first completed round, val_loss 0.31")
    assert judged[1].verdict_reason.startswith(
        "new best: val_loss 0.22 better than best 0.31 (round 1)"
    )
    assert judged[2].verdict_reason.startswith(
        "val_loss 0.25 not better than best 0.22 (round 2), not worse than baseline 0.31 (round 1)"
    )
    assert state.rejected[0]["reason"] == (
        "val_loss 0.5 worse than best 0.22 (round 2) and baseline 0.31 (round 1)"
    )
    assert state.rejected[0]["params"] == {**BASELINE, "lr": 0.005}
    assert state.rejected[0]["diff"] == {"lr": {"from": 0.001, "to": 0.005}}


@pytest.mark.parametrize(
    ("status", "tail", "reason"),
    [
        (
            "failed",
            ["Traceback...", "torch.cuda.OutOfMemoryError: CUDA out of memory."],
            "failed: out of memory",
        ),
        ("failed", ["step 10 loss nan"], "failed: nan/divergence"),
        ("failed", ["Loss is NaN, stopping"], "failed: nan/divergence"),
        ("failed", ["training diverged"], "failed: nan/divergence"),
        ("failed", ["ValueError: bad shape"], "failed"),
        ("failed", ["finance report", "nano-gpt"], "failed"),
        ("timed_out", [], "timed_out"),
        ("timed_out", ["RuntimeError: out of memory"], "timed_out: out of memory"),
        ("completed_without_metrics", [], "completed_without_metrics"),
        ("completed", [], "completed_without_metrics: no value for val_loss"),
    ],
)
def test_failures_are_rejected_and_named(status: str, tail: list[str], reason: str) -> None:
    state, judged = run("min", [changed(1, 0.3), changed(2, None, status, tail=tail)])
    assert judged[1].verdict == "rejected"
    assert state.rejected[-1]["reason"] == reason
    assert judged[1].verdict_reason.startswith(reason + ";")


def test_a_nan_metric_counts_as_divergence() -> None:
    state, judged = run("min", [changed(1, 0.3), changed(2, float("nan"))])
    assert judged[1].verdict == "rejected"
    assert "nan/divergence" in state.rejected[-1]["reason"]
    assert judged[1].metric is None


def test_stopped_round_is_recorded_but_not_judged_or_tried() -> None:
    state, judged = run("min", [changed(1, 0.3), changed(2, None, "stopped")])
    assert judged[1].verdict is None
    assert [t["round"] for t in state.tried] == [1]
    assert state.rejected == []
    assert [r.index for r in state.rounds] == [1, 2]


@pytest.mark.parametrize("name", ["loss", "total_loss"])
def test_without_a_primary_metric_the_training_loss_is_used(name: str) -> None:
    state, judged = run(
        "min",
        [
            changed(1, None, metrics={name: 2.0}),
            changed(2, None, metrics={name: 1.5}),
        ],
        primary=None,
    )
    assert state.primary_metric == name
    assert [j.verdict for j in judged] == ["baseline", "kept"]
    assert judged[1].metric == 1.5


def test_metric_is_read_from_metrics_when_the_summary_lacks_it() -> None:
    _, judged = run("min", [changed(1, None, metrics={"val_loss": 0.4})])
    assert judged[0].verdict == "baseline"
    assert judged[0].metric == 0.4


def test_record_round_is_pure() -> None:
    state, _ = run("min", [changed(1, 0.3)])
    before = copy.deepcopy(msgspec.to_builtins(state))
    incoming = changed(2, 0.2)
    incoming_before = msgspec.to_builtins(incoming)
    new, judged = record_round(state, incoming)
    assert msgspec.to_builtins(state) == before
    assert msgspec.to_builtins(incoming) == incoming_before
    assert new is not state and judged is not incoming
    assert incoming.verdict is None and judged.verdict == "kept"
    judged.params["lr"] = 99.0
    assert new.tried[-1]["params"]["lr"] == 0.003


def test_re_recording_a_round_replaces_it() -> None:
    state, _ = run("min", [changed(1, 0.3), changed(2, 0.5)])
    state, judged = record_round(state, changed(2, 0.2))
    assert judged.verdict == "kept"
    assert [r.index for r in state.rounds] == [1, 2]
    assert state.rejected == []
    assert state.best is not None and state.best.index == 2


def test_out_of_order_rounds_are_slotted_in_by_index() -> None:
    state, _ = run("min", [changed(2, 0.2)])
    state, judged = record_round(state, changed(1, 0.3))
    assert [r.index for r in state.rounds] == [1, 2]
    assert state.baseline is not None and state.baseline.index == 1
    assert judged.verdict == "baseline"
    assert state.best is not None and state.best.index == 2


def test_recent_rounds_are_the_last_ones_with_their_verdicts() -> None:
    n = RECENT_ROUNDS + 3
    state, judged = run("min", [changed(i, 1.0 / i) for i in range(1, n)] + [changed(n, None)])
    recent = state.recent_rounds
    assert [r.round for r in recent] == list(range(n - RECENT_ROUNDS + 1, n + 1))
    last = recent[-1]
    assert (last.status, last.metric, last.verdict) == ("completed", None, "rejected")
    assert recent[0].diff == judged[n - RECENT_ROUNDS].diff and recent[0].verdict == "kept"


def test_new_state_rejects_a_bad_goal() -> None:
    with pytest.raises(ValueError, match="goal must be 'min' or 'max'"):
        new_state("val_loss", "down")


def test_json_round_trip() -> None:
    state, _ = run(
        "max",
        [changed(1, 0.8, expected="x"), changed(2, None, "failed", tail=["nan"]), changed(3, 0.9)],
        primary="acc",
    )
    data = state_to_json(state)
    assert state_from_json(data) == state
    assert msgspec.json.decode(data)["best"]["index"] == 3


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"not json", "research state"),
        (b'{"goal": "min"}', "research state"),
        (
            msgspec.json.encode({**msgspec.to_builtins(new_state(None, "min")), "goal": "up"}),
            "goal must be",
        ),
    ],
)
def test_bad_json_is_a_clear_value_error(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        state_from_json(data)


@pytest.mark.parametrize(
    ("tail", "kind"),
    [
        ([], None),
        (["CUDA out of memory. Tried to allocate"], "out of memory"),
        (["MemoryError"], "out of memory"),
        (["loss: NaN"], "nan/divergence"),
        (["loss: nan"], "nan/divergence"),
        (["banana"], None),
    ],
)
def test_failure_kind(tail: list[str], kind: str | None) -> None:
    assert failure_kind(tail) == kind


def test_a_pruned_round_is_rejected_with_its_reason_and_never_the_best() -> None:
    reason = "pruned: median rule: val_loss 0.9 at step 2 worse than the median 0.6 of 3 rounds"
    pruned = msgspec.structs.replace(changed(2, 0.1, "pruned"), error=reason)
    state, judged = run("min", [changed(1, 0.3), pruned])
    assert judged[1].verdict == "rejected"
    assert judged[1].verdict_reason.startswith(reason)
    assert state.best is not None and state.best.index == 1  # its last value is not a result
    assert state.rejected[-1]["reason"] == reason
    assert [t["status"] for t in state.tried] == ["completed", "pruned"]


def seeded(index: int, metric: float, seed: int, **changes: Any) -> RoundSummary:
    params = {**BASELINE, "seed": seed, **changes}
    diff = {k: {"from": 0 if k == "seed" else BASELINE.get(k), "to": v} for k, v in
            {"seed": seed, **changes}.items() if not (k == "seed" and seed == 0)}  # fmt: skip
    return summary(index, "completed", metric, params=params, diff=diff)


def test_the_noise_floor_keeps_seed_wins_and_small_gains_from_becoming_the_best() -> None:
    state = new_state("val_loss", "min", noise=NoiseFloor(seed="seed", margin=1.0))
    judged = []
    for r in [
        seeded(1, 0.0638, 0),  # the baseline
        seeded(2, 0.0354, 1),  # the same configuration on seed 1: better, but only noise
        seeded(3, 0.0682, 2),
        seeded(4, 0.0538, 0, lr=0.002),  # better by 0.01, within the floor
        seeded(5, 0.0138, 0, lr=0.003),  # better by 0.05: a real gain
    ]:
        state, j = record_round(state, r)
        judged.append(j)
    assert [j.verdict for j in judged] == ["baseline", "neutral", "neutral", "neutral", "kept"]
    assert state.noise is not None and state.noise.rounds == [1, 2, 3]
    assert state.noise.floor == pytest.approx(0.0178034, rel=1e-5)
    assert judged[1].verdict_reason.startswith(
        "the baseline's configuration on another seed: val_loss 0.0354; val_loss 0.0496 ± "
        "0.0200818 over 2 seeds of the baseline (rounds 1, 2); noise floor 0.0200818"
    )
    assert "within the noise floor 0.0178034 (3 seeds of the baseline): not a new best" in (
        judged[3].verdict_reason
    )
    assert state.best is not None and state.best.index == 5
    # rebuilt from its rounds (a resumed session), the floor is measured again
    again, _ = record_round(state, judged[2])
    assert again.noise is not None and again.noise.values == state.noise.values
    assert state_from_json(state_to_json(state)).noise == state.noise


def test_noise_repeats_plans_the_missing_seeds_of_the_baseline() -> None:
    base = {"lr": 0.3, "seed": 5}
    done = [
        (base, "completed"),
        ({"lr": 0.3, "seed": 6}, "stopped"),
        ({"lr": 0.1, "seed": 7}, "completed"),
    ]
    assert noise_repeats("seed", 4, base, done) == [
        {"lr": 0.3, "seed": 6},  # stopped: run again
        {"lr": 0.3, "seed": 7},  # seed 7 ran with another lr: not a repeat
        {"lr": 0.3, "seed": 8},
    ]
    done.append(({"lr": 0.3, "seed": 6}, "failed"))
    assert noise_repeats("seed", 3, base, done) == [{"lr": 0.3, "seed": 7}]
