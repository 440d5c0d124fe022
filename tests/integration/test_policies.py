"""Decision policies: valid proposals, seeded repeatability, resume, and the hybrid prompt.

The policies are driven the way the session runner drives them: round 1 runs the
baseline, then each round the policy proposes from the research state, the result is
recorded and told back with ``observe`` (rounds after the baseline). A resume builds a
new policy and tells it every finished round before its first proposal. The search
space is a real project's (a copy of examples/mlp-flags with a tuning.yaml holding
every parameter kind); the "training" is a fixed function of the params, so a test
knows what each round measures. The hybrid policy talks to FakeLLM (a real HTTP
server on 127.0.0.1) through litellm. The last tests run whole sessions in a real
daemon.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import (
    REPO,
    Daemon,
    copy_example,
    kill_leftover_daemons,
    run_cli,
    venv_env,
)
from tests.support.extras import needs
from tests.support.timing import wait_for
from trainee.llm import client
from trainee.llm.settings import load_settings
from trainee.policies.base import Policy, Proposal, RandomPolicy, full_params
from trainee.policies.hybrid import HybridPolicy
from trainee.policies.tpe import TpePolicy
from trainee.research.analysis import param_importances
from trainee.research.decision import DecisionPlan, params_diff, validate_plan
from trainee.research.prompt import DEFAULT_SYSTEM_PROMPT, PromptParts
from trainee.research.state import ResearchState, RoundSummary, new_state, record_round
from trainee.spec import ParamType, ProjectSpec, TunableSpec, load_project

TUNING = """\
version: 1
params:
  - {name: lr, flag: --lr, type: float, default: 0.001, min_value: 0.0001, max_value: 0.3, log: true}
  - {name: momentum, flag: --momentum, type: float, default: 0.9, min_value: 0.0, max_value: 0.99}
  - {name: batch_size, flag: --batch-size, type: int, default: 16, min_value: 8, max_value: 100}
  - {name: hidden, flag: --hidden, type: int, default: 64, min_value: 4, max_value: 1024, log: true}
  - {name: shuffle, flag: --shuffle, type: bool, default: true}
  - {name: optimizer, flag: --optimizer, type: choice, default: adam, choices: [sgd, adam, adamw]}
  - {name: width, flag: --width, type: choice, default: 32, choices: [16, 32, 64]}
  - {name: warmup, flag: --warmup, type: float, default: 0.1}
"""
"""Every kind of parameter; ``warmup`` has no bounds, so no policy may change it."""

FAIL_ABOVE_LR = 0.05
"""Rounds with a larger lr "diverge": they fail without a metric (a fifth of the log range)."""

OFFLINE = ["random", pytest.param("tpe", marks=needs("optuna"))]


def make(name: str, seed: int) -> Policy:
    return RandomPolicy(seed=seed) if name == "random" else TpePolicy(seed=seed)


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> ProjectSpec:
    root = tmp_path_factory.mktemp("policies") / "mlp-flags"
    shutil.copytree(
        REPO / "examples" / "mlp-flags",
        root,
        ignore=shutil.ignore_patterns("runtime.sqlite3*", "artifacts", "runs", "cache", "logs"),
    )
    (root / ".trainee" / "tuning.yaml").write_text(TUNING)
    return load_project(str(root))


def baseline_of(spec: ProjectSpec) -> dict[str, Any]:
    return {t.name: t.baseline for t in spec.tunables}


def measure(params: Mapping[str, Any]) -> tuple[str, float | None]:
    """The round's status and val_loss: a bowl around lr 0.01, momentum 0.5, batch 32."""
    if params["lr"] > FAIL_ABOVE_LR:
        return "failed", None
    value = (
        (math.log10(params["lr"]) + 2) ** 2
        + (params["momentum"] - 0.5) ** 2
        + ((params["batch_size"] - 32) / 50) ** 2
        + 0.05 * (params["optimizer"] != "adamw")
        + 0.2
    )
    return "completed", value


def record(
    state: ResearchState,
    index: int,
    params: dict[str, Any],
    baseline: dict[str, Any],
    plan: DecisionPlan | None = None,
) -> tuple[ResearchState, str, float | None]:
    status, metric = measure(params)
    summary = RoundSummary(
        index=index,
        status=status,
        params=params,
        diff=params_diff(baseline, params),
        metric=metric,
        metrics={} if metric is None else {"val_loss": metric},
        hypothesis=plan.hypothesis if plan else "baseline",
        expected=plan.expected if plan else "",
        verdict=None,
        verdict_reason="",
        duration_sec=0.1,
        failure_tail=["RuntimeError: loss is nan"] if metric is None else [],
    )
    state, _ = record_round(state, summary)
    return state, status, metric


def drive(
    spec: ProjectSpec,
    policy: Policy,
    rounds: int,
    *,
    resume_at: int | None = None,
    rebuild: Callable[[], Policy] | None = None,
) -> tuple[list[dict[str, Any]], list[Proposal], ResearchState]:
    """Run ``rounds`` rounds as the runner does; at ``resume_at`` the policy is rebuilt and
    told every finished round first. Returns every round's full params, the proposals
    and the final state."""
    baseline = baseline_of(spec)
    state = new_state("val_loss", "min")
    state, _, _ = record(state, 1, dict(baseline), baseline)
    history: list[tuple[dict[str, Any], float | None, str]] = []
    ran = [dict(baseline)]
    proposals: list[Proposal] = []

    async def main() -> None:
        nonlocal state, policy
        for index in range(2, rounds + 1):
            if index == resume_at:
                assert rebuild is not None
                policy = rebuild()
                for params, metric, status in history:
                    policy.observe(params, metric, status)
            proposal = await policy.propose(state, spec.tunables, baseline)
            assert not proposal.plan.stop, proposal.plan.stop_reason
            proposals.append(proposal)
            params = full_params(baseline, proposal.plan)
            state, status, metric = record(state, index, params, baseline, proposal.plan)
            policy.observe(params, metric, status)
            history.append((params, metric, status))
            ran.append(params)

    anyio.run(main)
    return ran, proposals, state


def check_value(t: TunableSpec, value: Any) -> None:
    """``value`` has ``t``'s type and lies in its bounds or choices."""
    if t.type == ParamType.BOOL:
        assert isinstance(value, bool), (t.name, value)
    elif t.choices:
        assert any(value == c and type(value) is type(c) for c in t.choices), (t.name, value)
    elif t.type == ParamType.INT:
        assert isinstance(value, int) and not isinstance(value, bool), (t.name, value)
    else:
        assert isinstance(value, float), (t.name, value)
    if t.min_value is not None and t.max_value is not None:
        assert t.min_value <= value <= t.max_value, (t.name, value)


# -- every policy proposes only valid points ---------------------------------------------


@pytest.mark.parametrize("name", OFFLINE)
def test_every_proposal_is_valid_typed_in_bounds_and_untried(spec: ProjectSpec, name: str) -> None:
    baseline = baseline_of(spec)
    ran, proposals, state = drive(spec, make(name, 3), 30)
    by_name = {t.name: t for t in spec.tunables}
    seen: list[dict[str, Any]] = [ran[0]]
    for params, proposal in zip(ran[1:], proposals, strict=True):
        plan = proposal.plan
        assert proposal.policy == name
        assert proposal.provider == "" and proposal.messages == []
        assert plan.hypothesis and plan.change_summary and plan.expected
        # a parameter without bounds is never searched: it keeps its baseline value
        assert params["warmup"] == baseline["warmup"] == 0.1
        assert validate_plan(plan, spec.tunables, baseline=baseline, tried=seen, rejected=[]) == []
        for key, value in plan.params.items():
            check_value(by_name[key], value)
        seen.append(params)
    assert len(state.rounds) == 30


@needs("optuna")
def test_tpe_plans_read_as_tpe_suggestions_with_a_checkable_prediction(spec: ProjectSpec) -> None:
    _ran, proposals, state = drive(spec, TpePolicy(seed=5), 8)
    for proposal in proposals:
        assert proposal.plan.hypothesis == "TPE suggestion"
        assert proposal.plan.expected.startswith("val_loss below ")
        assert proposal.plan.expected.endswith(", the best so far")
        assert "->" in proposal.plan.change_summary  # the diff vs the baseline, in words
    # the predictions are judged like any policy's (held or failed, never "not checkable")
    judged = {h["prediction"] for h in state.hypotheses if h["round"] > 1}
    assert judged <= {"held", "failed"} and judged


@pytest.mark.parametrize("name", OFFLINE)
def test_log_scale_params_are_drawn_log_uniformly(spec: ProjectSpec, name: str) -> None:
    """The first decision of many seeds (TPE's is in its random start-up phase): half of
    the draws fall below the geometric middle of the range (uniform draws would put
    2 % of lr and 6 % of hidden there)."""
    baseline = baseline_of(spec)
    state = new_state("val_loss", "min")
    state, _, _ = record(state, 1, dict(baseline), baseline)
    lrs: list[float] = []
    hiddens: list[int] = []

    async def main() -> None:
        for seed in range(80):
            proposal = await make(name, seed).propose(state, spec.tunables, baseline)
            lrs.append(proposal.plan.params["lr"])
            hiddens.append(proposal.plan.params["hidden"])

    anyio.run(main)
    lr_mid = math.sqrt(0.0001 * 0.3)
    hidden_mid = math.sqrt(4 * 1024)
    assert 0.3 <= sum(v < lr_mid for v in lrs) / len(lrs) <= 0.7
    assert 0.3 <= sum(v < hidden_mid for v in hiddens) / len(hiddens) <= 0.7
    assert min(lrs) < 0.0005 and max(lrs) > 0.05  # the whole range is reached


# -- the same seed gives the same proposals -----------------------------------------------


@pytest.mark.parametrize("name", OFFLINE)
def test_the_same_seed_gives_the_same_proposals(spec: ProjectSpec, name: str) -> None:
    first, _, _ = drive(spec, make(name, 11), 12)
    again, _, _ = drive(spec, make(name, 11), 12)
    other, _, _ = drive(spec, make(name, 12), 12)
    assert first == again
    assert first[1:] != other[1:]


# -- a resumed session continues the optimizer ---------------------------------------------


@pytest.mark.parametrize("name", OFFLINE)
@pytest.mark.parametrize("resume_at", [2, 6, 11])
def test_a_rebuilt_policy_told_the_history_proposes_what_the_uninterrupted_one_would(
    spec: ProjectSpec, name: str, resume_at: int
) -> None:
    straight, _, _ = drive(spec, make(name, 4), 14)
    resumed, _, _ = drive(
        spec, make(name, 4), 14, resume_at=resume_at, rebuild=lambda: make(name, 4)
    )
    assert resumed == straight


@needs("optuna")
def test_tpe_without_its_history_would_restart_from_scratch(spec: ProjectSpec) -> None:
    """The counter-test of the one above: forgetting the told results changes the proposals,
    so the equality there comes from continuing the study, not from the seed alone."""
    straight, _, _ = drive(spec, TpePolicy(seed=4), 12)
    baseline = baseline_of(spec)

    class Forgetful(TpePolicy):
        def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
            return None

    amnesic, _, _ = drive(spec, Forgetful(seed=4), 12)
    assert amnesic[1] == straight[1]  # nothing was told yet at the first decision
    assert amnesic[2:] != straight[2:]
    assert baseline == straight[0]


@needs("optuna")
def test_tpe_knows_the_baseline_and_every_result_failed_ones_included(spec: ProjectSpec) -> None:
    ran, _, state = drive(spec, TpePolicy(seed=9), 16)
    policy = TpePolicy(seed=9)
    for r in state.rounds[1:]:
        policy.observe(r.params, r.metric, r.status)
    known = policy.known(state)
    assert [k.params for k in known] == ran
    failed = sum(r.status == "failed" for r in state.rounds)
    view = policy.view(state, spec.tunables)
    assert view.failed == failed and view.completed == len(ran) - failed
    assert failed > 0, "the bowl's failing region should have been tried at least once"
    best = min(r.metric for r in state.rounds if r.metric is not None)
    assert view.best[0].metric == best
    assert state.best is not None and view.best[0].round == state.best.index
    assert set(view.importances) <= {t.name for t in spec.tunables}
    assert view.importances and abs(sum(view.importances.values()) - 1.0) < 1e-6
    # one implementation: the page's and the report's importance is the prompt's
    shared = param_importances(
        spec.tunables, [(k.params, k.metric, k.status) for k in known], state.goal
    )
    assert shared.available and shared.values == view.importances


SMALL_TUNING = """\
version: 1
params:
  - {name: shuffle, flag: --shuffle, type: bool, default: true}
  - {name: optimizer, flag: --optimizer, type: choice, default: adam, choices: [sgd, adam, adamw]}
"""


@pytest.mark.parametrize("name", OFFLINE)
def test_a_small_discrete_space_is_covered_once_then_the_policy_stops(
    tmp_path: Path, name: str
) -> None:
    """Six points: the baseline and five distinct proposals, then a stop plan (TPE keeps
    asking past its repeats, then fills with seeded random points, then gives up)."""
    root = tmp_path / "mlp-flags"
    shutil.copytree(
        REPO / "examples" / "mlp-flags", root, ignore=shutil.ignore_patterns(".trainee")
    )
    (root / ".trainee").mkdir()
    shutil.copy(REPO / "examples" / "mlp-flags" / ".trainee" / "project.yaml", root / ".trainee")
    (root / ".trainee" / "tuning.yaml").write_text(SMALL_TUNING)
    small = load_project(str(root))
    baseline = baseline_of(small)
    policy = make(name, 1)
    state = new_state("val_loss", "min")
    seen = [dict(baseline)]

    async def main() -> Proposal:
        nonlocal state
        for index in range(1, 8):
            params = dict(baseline)
            if index > 1:
                proposal = await policy.propose(state, small.tunables, baseline)
                if proposal.plan.stop:
                    return proposal
                params = full_params(baseline, proposal.plan)
                seen.append(params)
            value = 0.3 + 0.1 * params["shuffle"] + 0.01 * len(params["optimizer"])
            state, _ = record_round(
                state,
                RoundSummary(
                    index=index,
                    status="completed",
                    params=params,
                    diff={},
                    metric=value,
                    metrics={},
                    hypothesis="",
                    expected="",
                    verdict=None,
                    verdict_reason="",
                    duration_sec=0.1,
                    failure_tail=[],
                ),
            )
            if index > 1:
                policy.observe(params, value, "completed")
        pytest.fail("no stop plan after the six points were tried")

    stop = anyio.run(main)
    assert len(seen) == 6
    assert {(p["shuffle"], p["optimizer"]) for p in seen} == {
        (b, o) for b in (False, True) for o in ("sgd", "adam", "adamw")
    }
    assert stop.plan.stop_reason


# -- hybrid against the fake LLM server ----------------------------------------------------


def llm_settings(fake: FakeLLM, tmp_path: Path) -> Any:
    env = {
        "TRAINEE_LLM_PROVIDER": "openai_compatible",
        "TRAINEE_LLM_BASE_URL": fake.openai_base_url,
        "TRAINEE_LLM_MODEL": "fake-model",
        "TRAINEE_LLM_API_KEY": "sk-policy-test-0000",
    }
    return load_settings(env, tmp_path / "config.json")


def parts() -> PromptParts:
    return PromptParts(
        system_prompt=DEFAULT_SYSTEM_PROMPT,
        trainee_context="",
        project_context="",
        constraints="",
        metrics_prompt="",
        tuning_prompt="",
    )


def answer(params: dict[str, Any], summary: str, hypothesis: str = "h") -> dict[str, Any]:
    body = {
        "hypothesis": hypothesis,
        "change_summary": summary,
        "params": params,
        "expected": "val_loss < 0.5",
        "stop": False,
        "stop_reason": "",
    }
    return {"content": json.dumps(body)}


def user_prompt(request: dict[str, Any]) -> str:
    return "\n".join(
        str(m.get("content")) for m in request["messages"] or [] if m.get("role") == "user"
    )


@needs("optuna")
def test_hybrid_shows_the_suggestions_records_the_choice_and_tells_every_result(
    spec: ProjectSpec, tmp_path: Path
) -> None:
    baseline = baseline_of(spec)
    with FakeLLM() as fake:
        policy = HybridPolicy(llm_settings(fake, tmp_path), parts(), seed=2)
        state = new_state("val_loss", "min")
        state, _, _ = record(state, 1, dict(baseline), baseline)
        seen: list[Proposal] = []
        prompts: list[str] = []

        async def decide(item: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> Proposal:
            nonlocal state
            # the suggestions are a pure function of the seed and the history: ask for them
            # first, script the LLM's reply from them, then let the policy ask again
            suggestions, _view = policy.advise(state, spec.tunables, baseline)
            fake.push(item([dict(s.params) for s in suggestions]))
            before = len(fake.requests)
            proposal = await policy.propose(state, spec.tunables, baseline)
            assert len(fake.requests) == before + 1
            prompts.append(user_prompt(fake.requests[-1]))
            assert proposal.suggestions == [dict(s.params) for s in suggestions]
            params = full_params(baseline, proposal.plan)
            state, status, metric = record(state, len(state.rounds) + 1, params, baseline)
            policy.observe(params, metric, status)
            seen.append(proposal)
            return proposal

        async def main() -> None:
            try:
                # round 2: take S2 as it is
                p2 = await decide(lambda s: answer(s[1], "[S2] the optimizer's second pick"))
                # round 3: its own point, rejecting the suggestions
                own = {"lr": 0.01, "momentum": 0.5, "optimizer": "adamw"}
                p3 = await decide(lambda s: answer(own, "[own] aim at the bowl's centre"))
                # round 4: says [S1] but changes a value: recorded as modified
                p4 = await decide(lambda s: answer({**s[0], "batch_size": 33}, "[S1] close to it"))
                # round 5: no token at all, but the params equal S3
                p5 = await decide(lambda s: answer(s[2], "a plain change"))
            finally:
                await client.close_clients()
            assert p2.source == "S2" and p2.plan.change_summary.startswith("[S2] ")
            assert "hybrid: took S2 as suggested" in p2.notes
            assert p3.source == "own" and p3.plan.change_summary.startswith("[own] ")
            assert "hybrid: rejected S1-S3 for its own point" in p3.notes
            assert p4.source == "S1 modified"
            assert p4.plan.change_summary.startswith("[S1 modified] ")
            assert any("batch_size" in n and "changed values" in n for n in p4.notes)
            assert p5.source == "S3" and p5.plan.change_summary.startswith("[S3] a plain change")
            assert p2.policy == "hybrid" and p2.provider == "openai_compatible"
            assert p2.model and p2.raw_response

        anyio.run(main)

    # the prompt carries the suggestions (with ids and values) and the optimizer's state
    for prompt, proposal in zip(prompts, seen, strict=True):
        assert "## Optimizer suggestions (TPE)" in prompt
        assert prompt.index("## Optimizer suggestions (TPE)") < prompt.index("## Your answer")
        for i, s in enumerate(proposal.suggestions, 1):
            row = next(line for line in prompt.splitlines() if line.startswith(f"| S{i} |"))
            assert f"| {s['lr']!r} |" in row and f"| {s['batch_size']} |" in row
        assert "[S2]" in prompt and "[own]" in prompt
    assert "1 completed, 0 failed" in prompts[0]
    assert "Parameter importances: not available yet" in prompts[0]
    assert "Parameter importances (share of the variation in val_loss): " in prompts[2]
    assert "random start-up phase" in prompts[0]
    # every result was told to the optimizer, LLM-chosen points included
    told = [k.params for k in policy.optimizer.told]
    assert told == [r.params for r in state.rounds[1:]]
    assert told[1]["lr"] == 0.01 and told[1]["optimizer"] == "adamw"
    completed = sum(r.status == "completed" for r in state.rounds[:4])
    assert f"{completed} completed, " in prompts[3]
    # the best round of the optimizer's view is listed in the last prompt
    best = min(state.rounds[:4], key=lambda r: r.metric if r.metric is not None else math.inf)
    assert f"- round {best.index}: val_loss " in prompts[3]


# -- whole sessions in a real daemon -----------------------------------------------------


@pytest.fixture
def runtime() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tr-pol-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def loop_get(env: dict[str, str], project: Path) -> dict[str, Any]:
    result = run_cli(
        "call", "loop_get", "--input", json.dumps({"project_root": str(project)}), env=env
    )
    assert result.returncode == 0, result.stderr
    state: dict[str, Any] = result.json()
    return state


def wait_state(
    env: dict[str, str], project: Path, done: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """``loop_get`` of the project's latest session once ``done`` holds for it."""
    last: list[dict[str, Any]] = []

    def check() -> dict[str, Any] | None:
        last[:] = [loop_get(env, project)]
        return last[0] if done(last[0]) else None

    return wait_for(check, what, timeout=90, detail=lambda: json.dumps(last[0])[-2000:])


def finished(state: dict[str, Any]) -> bool:
    return state["session"]["status"] != "running" and not state["running"]


def start_daemon(runtime: Path) -> Daemon:
    d = Daemon(runtime=runtime, env=venv_env(runtime))
    line = d.start()
    assert line.startswith("READY"), f"daemon did not start: {line!r}\n{d.log}"
    return d


@needs("optuna")
@pytest.mark.e2e
def test_a_tpe_session_killed_and_resumed_continues_its_study(
    runtime: Path, tmp_path: Path
) -> None:
    """SIGKILL the daemon after round 3; the next daemon resumes the session and every
    round's params equal those of an uninterrupted session with the same seed."""
    rounds = 9
    straight, interrupted = (
        copy_example("mlp-flags", tmp_path / "a"),
        copy_example("mlp-flags", tmp_path / "b"),
    )
    d = start_daemon(runtime)
    env = d.env
    try:
        for project in (straight, interrupted):
            result = run_cli(
                "run",
                str(project),
                "--policy",
                "tpe",
                "--max-rounds",
                str(rounds),
                "--unsafe",
                "--detach",
                env=env,
            )
            assert result.returncode == 0, result.stderr
            if project == straight:
                reference = wait_state(env, project, finished, "the uninterrupted session")
        state = wait_state(
            env,
            interrupted,
            lambda s: sum(r["status"] == "completed" for r in s["rounds"]) >= 3,
            "round 3 to finish",
        )
        assert state["session"]["status"] == "running" and len(state["rounds"]) < rounds
        assert d.stop(signal.SIGKILL) == -signal.SIGKILL
        d = start_daemon(runtime)  # resumes the running session
        resumed = wait_state(env, interrupted, finished, "the resumed session")
    finally:
        d.stop()
        kill_leftover_daemons(d)
    assert reference["session"]["status"] == resumed["session"]["status"] == "finished"
    assert [r["params"] for r in resumed["rounds"]] == [r["params"] for r in reference["rounds"]]
    assert len(resumed["rounds"]) == rounds
    assert "resuming session-0001" in d.log


@needs("optuna")
@pytest.mark.e2e
def test_a_hybrid_session_in_the_daemon_records_the_suggestion_it_took(
    runtime: Path, tmp_path: Path
) -> None:
    """Round 2 of a hybrid session: the prompt the daemon sends holds TPE's suggestions
    and the stored decision says the LLM took S2. In TPE's start-up phase the
    suggestions depend only on the seed (1: with no decision.seed, the session's number) and the number of
    known results, so the test can compute them before the session runs."""
    project = copy_example("mlp-flags", tmp_path)
    real = load_project(str(project))
    baseline = baseline_of(real)
    state = new_state("val_loss", "min")
    state, _ = record_round(
        state,
        RoundSummary(
            index=1,
            status="completed",
            params=dict(baseline),
            diff={},
            metric=0.26,
            metrics={},
            hypothesis="baseline",
            expected="",
            verdict=None,
            verdict_reason="",
            duration_sec=0.3,
            failure_tail=[],
        ),
    )
    suggestions, _ = TpePolicy(seed=1).suggest(state, real.tunables, baseline, 3)
    s2 = suggestions[1].params
    with FakeLLM([{"content": "OK"}, answer(s2, "[S2] take the second suggestion")]) as fake:
        env = venv_env(runtime)
        env.update(
            TRAINEE_LLM_PROVIDER="openai_compatible",
            TRAINEE_LLM_BASE_URL=fake.openai_base_url,
            TRAINEE_LLM_MODEL="fake-model",
            TRAINEE_LLM_API_KEY="sk-policy-test-0000",
        )
        d = Daemon(runtime=runtime, env=env)
        assert d.start().startswith("READY"), d.log
        try:
            result = run_cli(
                "run",
                str(project),
                "--policy",
                "hybrid",
                "--max-rounds",
                "2",
                "--unsafe",
                "--detach",
                env=env,
            )
            assert result.returncode == 0, result.stderr
            final = wait_state(env, project, finished, "the hybrid session")
            got = run_cli(
                "call",
                "runs_get",
                "--input",
                json.dumps({"project_root": str(project), "run_id": 2}),
                env=env,
            )
            assert got.returncode == 0, got.stderr
        finally:
            d.stop()
            kill_leftover_daemons(d)
        prompt = user_prompt(fake.requests[-1])
    assert final["session"]["status"] == "finished", final["session"]
    assert final["rounds"][1]["params"] == {**baseline, **s2}
    decision = got.json()["decision"]
    assert decision["policy"] == "hybrid"
    assert decision["plan"]["change_summary"].startswith("[S2] ")
    assert "## Optimizer suggestions (TPE)" in prompt
    for i, s in enumerate(suggestions, 1):
        row = next(line for line in prompt.splitlines() if line.startswith(f"| S{i} |"))
        assert f"| {s.params['lr']!r} |" in row
    # the store keeps a digest of the prompt (debug mode off): it is the prompt sent
    stored = {m["role"]: m for m in decision["prompt"]}
    assert stored["user"]["sha256"] == hashlib.sha256(prompt.encode()).hexdigest()


# -- the decision-quality benchmark ------------------------------------------------------


@needs("optuna")
@pytest.mark.slow
def test_the_benchmark_runs_end_to_end_on_both_examples(tmp_path: Path) -> None:
    vendor = ("TRAINEE_", "OPENAI_", "ANTHROPIC_", "MOONSHOT_", "LLM_PROVIDER")
    env = {k: v for k, v in os.environ.items() if not k.startswith(vendor)}
    env["HOME"] = str(tmp_path / "home")  # no provider configured: llm and hybrid are skipped
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    out = tmp_path / "out"
    args = ["--seeds", "2", "--budgets", "2,4", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "bench/decision_quality.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = proc.stdout
    assert "2 project(s) x 2 policies (random, tpe) x 2 seeds, 4 rounds each" in text
    assert "llm and hybrid skipped" in text
    for name in ("mlp-flags", "yaml-config"):
        assert f"\n{name}: val_loss (min), baseline " in text
    with open(out / "runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2 * 2 * 4
    assert {(r["project"], r["policy"]) for r in rows} == {
        (p, q) for p in ("mlp-flags", "yaml-config") for q in ("random", "tpe")
    }
    for r in rows:
        assert r["status"] == "completed" and float(r["metric"]) > 0
        assert float(r["best_so_far"]) <= float(r["metric"])
    baselines = {r["metric"] for r in rows if r["round"] == "1" and r["project"] == "mlp-flags"}
    assert len(baselines) == 1  # every run starts from the same baseline round
    with open(out / "summary.csv", newline="") as fh:
        summary = list(csv.DictReader(fh))
    assert len(summary) == 2 * 2 * 2
    for s in summary:
        if s["policy"] == "random":
            assert float(s["regret_ratio_vs_random"]) == 1.0
        assert float(s["median_regret"]) >= 0
    svg = ET.parse(out / "best_so_far.svg").getroot()
    assert svg.tag.endswith("svg")
    titles = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert any(t.startswith("mlp-flags: best val_loss so far") for t in titles)
    assert any(t.startswith("yaml-config: best val_loss so far") for t in titles)


@needs("optuna")
def test_tpe_is_told_a_pruned_round_as_pruned_with_its_last_value(spec: ProjectSpec) -> None:
    """A round run.prune stopped is a PRUNED trial carrying its last value (Optuna's own
    pruned trials do); a failed one is PRUNED without a value; completed ones COMPLETE."""
    from optuna.trial import TrialState

    from trainee.research.analysis import search_space

    base = {t.name: t.baseline for t in spec.tunables}
    state = new_state("val_loss", "min")
    first = RoundSummary(
        index=1, status="completed", params=base, diff={}, metric=0.5, metrics={"val_loss": 0.5},
        hypothesis="baseline", expected="", verdict=None, verdict_reason="", duration_sec=1.0,
        failure_tail=[],
    )  # fmt: skip
    state, _ = record_round(state, first)
    policy = TpePolicy(seed=3)
    policy.observe(base, 0.9, "pruned")
    policy.observe(base, None, "failed")
    study = policy._study(state, search_space(spec.tunables), policy.known(state))
    states = [(t.state, t.value, t.intermediate_values) for t in study.trials]
    assert states == [
        (TrialState.COMPLETE, 0.5, {}),
        (TrialState.PRUNED, None, {0: 0.9}),
        (TrialState.PRUNED, None, {}),
    ]
    assert study.trials[1].user_attrs["status"] == "pruned"
