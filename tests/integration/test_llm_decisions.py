"""Decisions against servers that behave like real local ones (issue 18): real litellm calls
to the scripted fake server, with the quirks of llama.cpp / llama-cpp-python."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm_server import FakeLLM, llama_number
from tests.support.extras import needs
from tests.support.llm import prompt_parts, run
from tests.unit.research.helpers import BASELINE, TUNABLES, summary
from trainee.errors import InvalidDecision, ProviderError
from trainee.llm import client
from trainee.llm.settings import LlmSettings, load_settings
from trainee.policies.hybrid import FALLBACK_SOURCE, HybridPolicy
from trainee.policies.llm import LlmPolicy
from trainee.research.prompt import build_messages
from trainee.research.state import DecisionBudget, ResearchState, new_state, record_round

pytestmark = pytest.mark.usefixtures("fresh_formats")

PARTS = prompt_parts()


def local(fake: FakeLLM, tmp_path: Path, **more: str) -> LlmSettings:
    """An openai_compatible provider at the fake, as a llama.cpp user configures one."""
    env = {
        "TRAINEE_LLM_PROVIDER": "openai_compatible",
        "TRAINEE_LLM_BASE_URL": fake.openai_base_url,
        "TRAINEE_LLM_MODEL": "smollm2",
        **more,
    }
    return load_settings(env, tmp_path / "config.json")


def plan(params: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "hypothesis": "a smaller step trains more stably",
        "change_summary": "lower the learning rate",
        "params": params,
        "expected": "val_loss below the baseline's",
        "stop": False,
        "stop_reason": "",
    }
    data.update(overrides)
    return {"content": json.dumps(data)}


def after_baseline(budget: DecisionBudget | None = None) -> ResearchState:
    state, _ = record_round(new_state("val_loss", "min"), summary(1, metric=0.5))
    if budget is not None:
        state.budget = budget
    return state


def formats(fake: FakeLLM) -> list[str | None]:
    out = []
    for r in fake.requests:
        rf = r["response_format"]
        out.append(rf.get("type") if isinstance(rf, dict) else None)
    return out


# -- negotiation ---------------------------------------------------------------------------


def test_an_http_500_naming_the_format_steps_down_and_is_remembered(
    fake: FakeLLM, tmp_path: Path
) -> None:
    """llama-cpp-python's server answers json_schema with HTTP 500, not 400/422."""
    settings = local(fake, tmp_path)
    fake.push({"refuse_format": ["json_schema"], "status": 500}, plan({"lr": 0.0003}))
    policy = LlmPolicy(settings, PARTS)
    proposal = run(lambda: policy.propose(after_baseline(), TUNABLES, BASELINE))
    assert proposal.plan.params == {"lr": 0.0003}
    assert proposal.response_format == "json_object"
    refused, answered = proposal.attempts
    assert (refused["kind"], refused["status"], refused["response_format"]) == (
        "refused_format",
        500,
        "json_schema",
    )
    assert refused["url"] == fake.openai_base_url
    assert answered["ok"] and answered["answer"] and answered["problems"] == []
    # remembered: the next decision starts at json_object
    fake.push(plan({"lr": 0.0002}))
    run(lambda: policy.propose(after_baseline(), TUNABLES, BASELINE))
    assert formats(fake)[-1] == "json_object"


def test_the_live_test_sends_a_schema_and_reports_the_format_that_works(
    fake: FakeLLM, tmp_path: Path
) -> None:
    settings = local(fake, tmp_path)
    fake.push({"refuse_format": ["json_schema"], "status": 500}, {"content": '{"ok": true}'})
    result = run(lambda: client.live_test(settings))
    assert result["ok"] and result["response_format"] == "json_object"
    assert result["refused_formats"] == ["json_schema"]
    assert formats(fake) == ["json_schema", "json_object"]


def test_the_live_test_fails_when_decisions_would(fake: FakeLLM, tmp_path: Path) -> None:
    """A server that fails every structured request (but answers plain text) used to pass
    the live test, which sent no schema, and then failed the first decision."""
    settings = local(fake, tmp_path)
    fake.push({"fail_structured": True})
    result = run(lambda: client.live_test(settings))
    assert not result["ok"] and "HTTP 500" in result["error"]
    assert fake.openai_base_url in result["error"]


def test_every_configured_provider_is_live_tested_and_a_healthy_backup_runs(
    fake: FakeLLM, tmp_path: Path
) -> None:
    dead = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    settings = load_settings(
        {
            "TRAINEE_LLM_PROVIDER": "openai",
            "OPENAI_API_KEY": "sk-live-test-0123456789",
            "OPENAI_MODEL": "gpt-4o-mini",
            "OPENAI_BASE_URL": dead,
            "TRAINEE_LLM_BASE_URL": fake.openai_base_url,
            "TRAINEE_LLM_MODEL": "smollm2",
        },
        tmp_path / "config.json",
    )
    fake.push({"content": '{"ok": true}'})
    result = run(lambda: client.live_test_all(settings))
    assert result["ok"] and result["provider"] == "openai_compatible"
    assert [r["provider"] for r in result["providers"]] == ["openai", "openai_compatible"]
    assert not result["providers"][0]["ok"] and dead in result["providers"][0]["error"]
    assert "decisions will fail over to openai_compatible" in result["note"]


def test_a_missing_key_is_a_client_side_error_naming_the_url(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "TRAINEE_LLM_PROVIDER": "openai",
            "OPENAI_MODEL": "gpt-4o-mini",
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        },
        tmp_path / "config.json",
    )
    result = run(lambda: client.live_test(settings))
    assert not result["ok"] and result["kind"] == "config"
    assert "no API key configured" in result["error"] and "nothing was sent" in result["error"]
    assert "http://127.0.0.1:9/v1" in result["error"]
    assert "HTTP 500" not in result["error"]


# -- numbers -------------------------------------------------------------------------------


def test_a_model_copying_a_bound_under_llamas_grammar_gets_it_right(
    fake: FakeLLM, tmp_path: Path
) -> None:
    """The prompt used to write 1e-05, which llama.cpp's grammar cuts to 1e-0 (= 1.0)."""
    assert llama_number("1e-05") == "1e-0"
    fake.push({"copy_min_of": "lr"})
    proposal = run(
        lambda: LlmPolicy(local(fake, tmp_path), PARTS).propose(
            after_baseline(), TUNABLES, BASELINE
        )
    )
    assert proposal.plan.params == {"lr": 1e-5}
    assert not proposal.repaired
    prompt = fake.requests[0]["messages"][-1]["content"]
    assert "[1e-5, 1.0]" in prompt and "1e-05" not in prompt


# -- stops ---------------------------------------------------------------------------------


def test_a_stop_before_min_rounds_is_repaired_into_a_change(fake: FakeLLM, tmp_path: Path) -> None:
    budget = DecisionBudget(round=2, max_rounds=6, finished=1, min_rounds=2)
    fake.push(
        plan({}, stop=True, stop_reason="the baseline is good enough"),
        plan({"dropout": 0.2}),
    )
    proposal = run(
        lambda: LlmPolicy(local(fake, tmp_path), PARTS).propose(
            after_baseline(budget), TUNABLES, BASELINE
        )
    )
    assert not proposal.plan.stop and proposal.plan.params == {"dropout": 0.2}
    assert proposal.repaired
    first_prompt = fake.requests[0]["messages"][-1]["content"]
    assert "This decision is for round 2 of at most 6; 1 round has run (5 left)." in first_prompt
    assert "Stopping is not allowed before 2 rounds have run" in first_prompt
    repair = fake.requests[1]["messages"][-1]["content"]
    assert "- stop: stopping is allowed once 2 rounds have run (decision.min_rounds)" in repair
    assert "Stopping is not allowed yet: propose a change." in repair


def test_a_stop_after_min_rounds_is_honoured(fake: FakeLLM, tmp_path: Path) -> None:
    budget = DecisionBudget(round=3, max_rounds=6, finished=2, min_rounds=2)
    fake.push(plan({}, stop=True, stop_reason="val_loss is flat in both rounds"))
    proposal = run(
        lambda: LlmPolicy(local(fake, tmp_path), PARTS).propose(
            after_baseline(budget), TUNABLES, BASELINE
        )
    )
    assert proposal.plan.stop and proposal.plan.stop_reason == "val_loss is flat in both rounds"


def test_a_stop_with_a_valid_change_runs_the_change(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push(plan({"lr": 0.0003}, stop=True, stop_reason=""))
    proposal = run(
        lambda: LlmPolicy(local(fake, tmp_path), PARTS).propose(
            after_baseline(), TUNABLES, BASELINE
        )
    )
    assert not proposal.plan.stop and proposal.plan.params == {"lr": 0.0003}
    assert len(fake.requests) == 1
    assert any("the change runs" in n for n in proposal.notes)


# -- template copies -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("hypothesis", "..."), ("change_summary", "<the change>"), ("expected", "")],
)
def test_template_copies_are_refused_and_repaired(
    fake: FakeLLM, tmp_path: Path, field: str, value: str
) -> None:
    fake.push(plan({"lr": 0.0003}, **{field: value}), plan({"lr": 0.0003}))
    proposal = run(
        lambda: LlmPolicy(local(fake, tmp_path), PARTS).propose(
            after_baseline(), TUNABLES, BASELINE
        )
    )
    assert proposal.repaired
    repair = fake.requests[1]["messages"][-1]["content"]
    assert f"- {field}: " in repair
    assert proposal.attempts[0]["problems"][0]["field"] == field


def test_the_answer_example_rotates_and_names_no_metric_value(
    fake: FakeLLM, tmp_path: Path
) -> None:
    state = after_baseline()
    names = set()
    for extra in range(len(TUNABLES)):
        s = state
        for i in range(extra):
            s, _ = record_round(s, summary(2 + i, metric=0.4))
        user = build_messages(PARTS, s, TUNABLES, baseline_params=BASELINE)[1]["content"]
        example = user.split("## Your answer")[1].split('"params": {"')[1].split('"')[0]
        names.add(example)
    assert names == {t.name for t in TUNABLES}
    schema = json.dumps(
        __import__("trainee.research.decision", fromlist=["x"]).plan_json_schema(TUNABLES)
    )
    assert "0.25" not in schema and "val_loss <" not in schema


# -- the hybrid ----------------------------------------------------------------------------


@needs("optuna")
def test_the_hybrid_runs_the_optimizers_s1_when_the_repair_fails_too(
    fake: FakeLLM, tmp_path: Path
) -> None:
    bad = plan({"lr": 50.0})  # out of bounds, twice
    fake.push(bad, bad)
    policy = HybridPolicy(local(fake, tmp_path), PARTS, seed=3)
    proposal = run(lambda: policy.propose(after_baseline(), TUNABLES, BASELINE))
    assert proposal.source == FALLBACK_SOURCE
    assert proposal.plan.params == proposal.suggestions[0]
    assert proposal.plan.change_summary.startswith(f"[{FALLBACK_SOURCE}]")
    assert len(proposal.attempts) == 2 and all(a["problems"] for a in proposal.attempts)
    assert any("ran the optimizer's S1 instead" in n for n in proposal.notes)
    # the llm policy keeps stopping: no silent fallback there
    fake.push(bad, bad)
    with pytest.raises(InvalidDecision):
        run(
            lambda: LlmPolicy(local(fake, tmp_path), PARTS).propose(
                after_baseline(), TUNABLES, BASELINE
            )
        )


# -- one deadline ----------------------------------------------------------------------------


def test_one_deadline_covers_every_attempt_and_the_failover(fake: FakeLLM, tmp_path: Path) -> None:
    """A frozen primary gets half the decision's time; the backup still gets its turn."""
    with FakeLLM() as frozen:
        settings = load_settings(
            {
                "TRAINEE_LLM_PROVIDER": "openai",
                "OPENAI_API_KEY": "sk-deadline-0123456789",
                "OPENAI_MODEL": "gpt-4o-mini",
                "OPENAI_BASE_URL": frozen.openai_base_url,
                "TRAINEE_LLM_BASE_URL": fake.openai_base_url,
                "TRAINEE_LLM_MODEL": "smollm2",
                "TRAINEE_LLM_TIMEOUT_SEC": "6",
            },
            tmp_path / "config.json",
        )
        frozen.push({"delay": 600})
        fake.push(plan({"lr": 0.0003}))
        proposal = run(
            lambda: LlmPolicy(settings, PARTS).propose(after_baseline(), TUNABLES, BASELINE)
        )
    assert proposal.provider == "openai_compatible"
    timed_out, answered = proposal.attempts
    assert timed_out["kind"] == "timeout" and timed_out["provider"] == "openai"
    assert "no reply within 3 s" in timed_out["error"]
    assert answered["ok"]


def test_a_frozen_only_provider_fails_within_the_deadline(fake: FakeLLM, tmp_path: Path) -> None:
    settings = local(fake, tmp_path, TRAINEE_LLM_TIMEOUT_SEC="2")
    fake.push({"delay": 600})
    with pytest.raises(ProviderError) as info:
        run(lambda: LlmPolicy(settings, PARTS).propose(after_baseline(), TUNABLES, BASELINE))
    assert "no reply within 2 s" in info.value.message
