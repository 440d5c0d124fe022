"""K candidates per decision step (``run.parallel``): every policy proposes K distinct,
valid plans; random search's first slot is what a one-at-a-time session would draw; a
policy without its own batch is asked K times and sees the earlier plans as running
rounds; a stop plan ends the batch.

The search space is a real project's tuning.yaml, loaded with :func:`load_project`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.extras import needs
from tests.unit.spec.conftest import make_project, write
from trainee.policies.base import (
    Proposal,
    RandomPolicy,
    full_params,
    propose_batch,
    propose_one_by_one,
    with_pending,
)
from trainee.policies.tpe import TpePolicy
from trainee.research.decision import DecisionPlan, params_diff, params_equal, validate_plan
from trainee.research.state import ResearchState, RoundSummary, new_state, record_round
from trainee.spec import ProjectSpec, TunableSpec, load_project

PROJECT = """\
version: 1
launch:
  command: [python, train.py]
run:
  max_rounds: 12
  parallel: 3
"""

TUNING = """\
version: 1
params:
  - {name: lr, flag: --lr, type: float, default: 0.01, min_value: 0.0001, max_value: 0.3, log: true}
  - {name: batch_size, flag: --batch-size, type: int, default: 16, min_value: 8, max_value: 128}
  - {name: optimizer, flag: --optimizer, type: choice, default: adam, choices: [sgd, adam, adamw]}
  - {name: shuffle, flag: --shuffle, type: bool, default: true}
"""

SMALL = """\
version: 1
params:
  - {name: optimizer, flag: --optimizer, type: choice, default: adam, choices: [sgd, adam, adamw]}
"""
"""A space of three points: the baseline and two untried ones."""


def load(tmp_path: Path, tuning: str) -> ProjectSpec:
    root = make_project(tmp_path / "proj")
    write(root / ".trainee" / "project.yaml", PROJECT)
    write(root / ".trainee" / "tuning.yaml", tuning)
    return load_project(root)


@pytest.fixture
def spec(tmp_path: Path) -> ProjectSpec:
    return load(tmp_path, TUNING)


@pytest.fixture
def small(tmp_path: Path) -> ProjectSpec:
    return load(tmp_path, SMALL)


def baseline_of(spec: ProjectSpec) -> dict[str, Any]:
    return {t.name: t.baseline for t in spec.tunables}


def summary(index: int, params: dict[str, Any], baseline: dict[str, Any], metric: float) -> Any:
    return RoundSummary(
        index=index,
        status="completed",
        params=params,
        diff=params_diff(baseline, params),
        metric=metric,
        metrics={"val_loss": metric},
        hypothesis="baseline" if index == 1 else "a try",
        expected="",
        verdict=None,
        verdict_reason="",
        duration_sec=1.0,
        failure_tail=[],
    )


def after_baseline(spec: ProjectSpec) -> ResearchState:
    baseline = baseline_of(spec)
    state, _ = record_round(new_state("val_loss", "min"), summary(1, dict(baseline), baseline, 0.5))
    return state


def distinct(params: Sequence[dict[str, Any]]) -> bool:
    return all(
        not params_equal(params[i], params[j])
        for i in range(len(params))
        for j in range(i + 1, len(params))
    )


def assert_valid_batch(
    proposals: list[Proposal], spec: ProjectSpec, state: ResearchState, k: int
) -> list[dict[str, Any]]:
    """``k`` runnable plans, none a tried point nor a repeat of another: returns their
    full params."""
    baseline = baseline_of(spec)
    assert len(proposals) == k
    tried = [r.params for r in state.rounds]
    full: list[dict[str, Any]] = []
    for p in proposals:
        assert not p.plan.stop
        problems = validate_plan(
            p.plan, spec.tunables, baseline=baseline, tried=tried + full, rejected=[]
        )
        assert problems == [], problems
        full.append(full_params(baseline, p.plan))
    assert distinct(full)
    return full


# -- random search ---------------------------------------------------------------------------


def test_random_batch_is_k_distinct_valid_points(spec: ProjectSpec) -> None:
    state = after_baseline(spec)
    proposals = anyio.run(
        lambda: RandomPolicy(seed=7).propose_batch(state, spec.tunables, baseline_of(spec), 3)
    )
    assert_valid_batch(proposals, spec, state, 3)
    assert all(p.policy == "random" for p in proposals)


def test_random_slot_zero_is_what_a_one_at_a_time_session_draws(spec: ProjectSpec) -> None:
    baseline = baseline_of(spec)
    state = after_baseline(spec)
    for seed in range(10):

        async def main(seed: int = seed) -> tuple[list[Proposal], Proposal]:
            batch = await RandomPolicy(seed=seed).propose_batch(state, spec.tunables, baseline, 3)
            one = await RandomPolicy(seed=seed).propose(state, spec.tunables, baseline)
            return batch, one

        batch, one = anyio.run(main)
        assert batch[0].plan.params == one.plan.params, seed
        assert batch[0].plan == one.plan


def test_random_batch_is_repeatable(spec: ProjectSpec) -> None:
    baseline = baseline_of(spec)
    state = after_baseline(spec)

    async def draw() -> list[dict[str, Any]]:
        batch = await RandomPolicy(seed=11).propose_batch(state, spec.tunables, baseline, 4)
        return [p.plan.params for p in batch]

    assert anyio.run(draw) == anyio.run(draw)


def test_the_runner_entry_point_uses_the_random_policys_own_batch(spec: ProjectSpec) -> None:
    baseline = baseline_of(spec)
    state = after_baseline(spec)

    async def main() -> tuple[list[Proposal], list[Proposal]]:
        policy = RandomPolicy(seed=5)
        via_runner = await propose_batch(policy, state, spec.tunables, baseline, 3)
        own = await policy.propose_batch(state, spec.tunables, baseline, 3)
        return via_runner, own

    via_runner, own = anyio.run(main)
    assert [p.plan for p in via_runner] == [p.plan for p in own]


def test_random_batch_shrinks_to_what_is_left_then_stops(small: ProjectSpec) -> None:
    baseline = baseline_of(small)
    state = after_baseline(small)
    proposals = anyio.run(
        lambda: RandomPolicy(seed=1).propose_batch(state, small.tunables, baseline, 5)
    )
    got = sorted(p.plan.params["optimizer"] for p in proposals)
    assert got == ["adamw", "sgd"]

    # every point tried: one stop plan, alone
    for i, value in enumerate(got, start=2):
        state, _ = record_round(state, summary(i, {"optimizer": value}, baseline, 0.4))
    done = anyio.run(lambda: RandomPolicy(seed=1).propose_batch(state, small.tunables, baseline, 3))
    assert len(done) == 1 and done[0].plan.stop
    assert "no untried point" in done[0].plan.stop_reason


# -- TPE -------------------------------------------------------------------------------------


@needs("optuna")
@pytest.mark.parametrize("k", [2, 4])
def test_tpe_batch_is_k_distinct_valid_points(spec: ProjectSpec, k: int) -> None:
    state = after_baseline(spec)
    proposals = anyio.run(
        lambda: TpePolicy(seed=3).propose_batch(state, spec.tunables, baseline_of(spec), k)
    )
    assert_valid_batch(proposals, spec, state, k)
    assert all(p.plan.hypothesis == "TPE suggestion" for p in proposals)


@needs("optuna")
def test_tpe_batch_stays_distinct_once_it_models_the_space(spec: ProjectSpec) -> None:
    """Past the random start-up phase (results told), K asks before any tell still give
    K different points (the study's constant liar keeps them apart)."""
    baseline = baseline_of(spec)
    state = after_baseline(spec)
    policy = TpePolicy(seed=9)
    index = 1
    for step in range(3):
        proposals = anyio.run(policy.propose_batch, state, spec.tunables, baseline, 3)
        full = assert_valid_batch(proposals, spec, state, 3)
        for params in full:
            index += 1
            metric = 0.5 - 0.01 * index + (0.2 if params["optimizer"] == "sgd" else 0.0)
            state, _ = record_round(state, summary(index, params, baseline, metric))
            policy.observe(params, metric, "completed")
        assert len(state.rounds) == 1 + 3 * (step + 1)


@needs("optuna")
def test_tpe_batch_in_a_tiny_space_gives_only_the_untried_points(small: ProjectSpec) -> None:
    baseline = baseline_of(small)
    state = after_baseline(small)
    proposals = anyio.run(
        lambda: TpePolicy(seed=2).propose_batch(state, small.tunables, baseline, 4)
    )
    assert sorted(p.plan.params["optimizer"] for p in proposals) == ["adamw", "sgd"]


# -- a policy without its own batch ----------------------------------------------------------


class FirstUntried:
    """Proposes the first value of the ``optimizer`` choices no round has used yet, and
    checks its plan against the rounds it is shown (so a repeat would be caught here)."""

    name = "first-untried"

    def __init__(self) -> None:
        self.seen: list[ResearchState] = []

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        self.seen.append(state)
        used = {r.params.get("optimizer") for r in state.rounds}
        choices = next(t for t in tunables if t.name == "optimizer").choices or ()
        for value in choices:
            if value in used:
                continue
            plan = DecisionPlan(
                hypothesis=f"try {value}",
                change_summary=f"optimizer -> {value}",
                params={"optimizer": value},
                expected="unknown",
            )
            problems = validate_plan(
                plan,
                tunables,
                baseline=dict(baseline),
                tried=[r.params for r in state.rounds],
                rejected=[],
            )
            assert problems == [], problems
            return Proposal(plan=plan, policy=self.name)
        return Proposal(plan=_stop("every optimizer was tried"), policy=self.name)

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        return None


class AlwaysStop(FirstUntried):
    name = "always-stop"

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        self.seen.append(state)
        return Proposal(plan=_stop("nothing left to learn"), policy=self.name)


def _stop(reason: str) -> DecisionPlan:
    return DecisionPlan(
        hypothesis="", change_summary="", params={}, expected="", stop=True, stop_reason=reason
    )


def test_a_policy_without_a_batch_gets_distinct_plans_through_pending_rounds(
    small: ProjectSpec,
) -> None:
    baseline = baseline_of(small)
    state = after_baseline(small)
    policy = FirstUntried()
    assert not hasattr(policy, "propose_batch")

    proposals = anyio.run(lambda: propose_batch(policy, state, small.tunables, baseline, 2))

    assert [p.plan.params for p in proposals] == [{"optimizer": "sgd"}, {"optimizer": "adamw"}]
    assert_valid_batch(proposals, small, state, 2)
    # the first decision saw the real state; the second saw the first plan as running
    first, second = policy.seen
    assert first is state
    assert [r.index for r in second.rounds] == [1, 2]
    pending = second.rounds[1]
    assert pending.status == "running"
    assert pending.metric is None and pending.verdict is None
    assert pending.params == {"optimizer": "sgd"}
    assert pending.diff == {"optimizer": {"from": "adam", "to": "sgd"}}
    assert pending.hypothesis == "try sgd"
    # the caller's state is left as it was
    assert [r.index for r in state.rounds] == [1]


def test_a_stop_after_some_plans_ends_the_batch_without_it(small: ProjectSpec) -> None:
    baseline = baseline_of(small)
    state = after_baseline(small)
    proposals = anyio.run(
        lambda: propose_one_by_one(FirstUntried(), state, small.tunables, baseline, 3)
    )
    assert [p.plan.params["optimizer"] for p in proposals] == ["sgd", "adamw"]
    assert not any(p.plan.stop for p in proposals)


def test_a_stop_plan_first_returns_just_the_stop(small: ProjectSpec) -> None:
    baseline = baseline_of(small)
    state = after_baseline(small)
    policy = AlwaysStop()
    proposals = anyio.run(lambda: propose_batch(policy, state, small.tunables, baseline, 4))
    assert len(proposals) == 1
    assert proposals[0].plan.stop
    assert proposals[0].plan.stop_reason == "nothing left to learn"
    assert len(policy.seen) == 1  # not asked again after the stop


def test_one_candidate_asks_propose_once(small: ProjectSpec) -> None:
    baseline = baseline_of(small)
    state = after_baseline(small)
    policy = FirstUntried()
    proposals = anyio.run(lambda: propose_batch(policy, state, small.tunables, baseline, 1))
    assert [p.plan.params for p in proposals] == [{"optimizer": "sgd"}]
    assert len(policy.seen) == 1


def test_with_pending_numbers_the_pending_rounds_after_the_last(spec: ProjectSpec) -> None:
    baseline = baseline_of(spec)
    state = after_baseline(spec)
    state, _ = record_round(state, summary(4, {**baseline, "lr": 0.001}, baseline, 0.45))
    assert with_pending(state, baseline, []) is state

    plans = [
        Proposal(
            plan=DecisionPlan(
                hypothesis=f"h{i}", change_summary="-", params={"batch_size": b}, expected="e"
            ),
            policy="x",
        )
        for i, b in enumerate((32, 64))
    ]
    shown = with_pending(state, baseline, plans)

    assert [r.index for r in shown.rounds] == [1, 4, 5, 6]
    assert [r.status for r in shown.rounds[2:]] == ["running", "running"]
    assert [r.params["batch_size"] for r in shown.rounds[2:]] == [32, 64]
    assert shown.rounds[3].params == {**baseline, "batch_size": 64}
    assert shown.rounds[2].diff == {"batch_size": {"from": 16, "to": 32}}
    # research conclusions are those of the finished rounds only
    assert shown.best == state.best and shown.baseline == state.baseline
    assert len(state.rounds) == 2


def test_one_by_one_hands_earlier_proposals_over_with_a_failure() -> None:
    """A provider failure on the 2nd decision of a step: the 1st (and its cost) travels
    with the error, so the runner records what was spent."""
    import anyio

    from trainee.errors import ProviderError
    from trainee.policies.base import Proposal, propose_one_by_one
    from trainee.research.decision import DecisionPlan
    from trainee.research.state import new_state

    class FailsSecond:
        name = "flaky"

        def __init__(self) -> None:
            self.calls = 0

        async def propose(self, state, tunables, baseline):  # type: ignore[no-untyped-def]
            self.calls += 1
            if self.calls == 2:
                raise ProviderError("the provider went away")
            plan = DecisionPlan(hypothesis="h", change_summary="c", params={}, expected="e")
            return Proposal(plan=plan, policy=self.name, prompt_tokens=7, cost_usd=0.5)

        def observe(self, params, metric, status):  # type: ignore[no-untyped-def]
            return None

    async def main() -> None:
        with pytest.raises(ProviderError) as info:
            await propose_one_by_one(FailsSecond(), new_state("m", "min"), [], {}, 3)
        earlier = info.value.data["earlier"]
        assert [p.prompt_tokens for p in earlier] == [7]
        assert earlier[0].cost_usd == 0.5

    anyio.run(main)


def test_a_stop_after_some_plans_keeps_them_and_counts_its_cost() -> None:
    import anyio

    from trainee.policies.base import Proposal, propose_one_by_one
    from trainee.research.decision import DecisionPlan
    from trainee.research.state import new_state

    class StopsSecond:
        name = "stopper"

        def __init__(self) -> None:
            self.calls = 0

        async def propose(self, state, tunables, baseline):  # type: ignore[no-untyped-def]
            self.calls += 1
            stop = self.calls == 2
            plan = DecisionPlan(
                hypothesis="h",
                change_summary="c",
                params={},
                expected="e",
                stop=stop,
                stop_reason="enough" if stop else "",
            )
            return Proposal(plan=plan, policy=self.name, prompt_tokens=10, cost_usd=0.25)

        def observe(self, params, metric, status):  # type: ignore[no-untyped-def]
            return None

    async def main() -> None:
        out = await propose_one_by_one(StopsSecond(), new_state("m", "min"), [], {}, 3)
        assert len(out) == 1 and not out[0].plan.stop
        assert out[0].prompt_tokens == 20 and out[0].cost_usd == 0.5
        assert any("asked to stop: enough" in n for n in out[0].notes)

    anyio.run(main)
