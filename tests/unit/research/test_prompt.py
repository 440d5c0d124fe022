"""build_messages / journal_section: order, bounds, markers, determinism."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from trainee.research.prompt import (
    DEFAULT_SYSTEM_PROMPT,
    PromptLimits,
    PromptParts,
    build_messages,
    journal_section,
    truncate,
)
from trainee.research.state import ResearchState, new_state, record_round

from .helpers import BASELINE, TUNABLES, summary

PARTS = PromptParts(
    system_prompt="SYSTEM PROMPT",
    trainee_context="TRAINEE CONTEXT",
    project_context="PROJECT CONTEXT",
    constraints="CONSTRAINTS: do not change batch size",
    metrics_prompt="METRICS: use val_loss",
    tuning_prompt="TUNING: one change per round",
    journal="- session session-0001: best val_loss 0.2 with lr=0.003",
)

HEADINGS = [
    "## Project understanding (.trainee/context.md)",
    "## Project context (context.md)",
    "## Constraints (constraints.md)",
    "## Metrics guidance (metrics.prompt)",
    "## Tuning strategy (advanced.tuning_prompt)",
    "## Search space",
    "## Primary metric",
    "## Baseline",
    "## Best so far",
    "## Recent rounds",
    "## Tried changes",
    "## Rejected changes (do not repeat)",
    "## Log tail of the last failed round",
    "## Past sessions on this project (journal)",
    "## Your answer",
]


def lr_round(
    index: int, lr: float, metric: float | None, status: str = "completed", **kw: Any
) -> Any:
    return summary(
        index,
        status,
        metric,
        params={**BASELINE, "lr": lr},
        diff={} if lr == BASELINE["lr"] else {"lr": {"from": BASELINE["lr"], "to": lr}},
        **kw,
    )


def history() -> ResearchState:
    state = new_state("val_loss", "min")
    rounds = [
        lr_round(1, 0.001, 0.30, hypothesis="baseline"),
        lr_round(2, 0.003, 0.25, hypothesis="faster", expected="val_loss < 0.28"),
        lr_round(
            3,
            0.1,
            None,
            "failed",
            expected="lower val_loss",
            tail=[f"old line {i}" for i in range(5)] + ["RuntimeError: CUDA out of memory"],
        ),
        lr_round(4, 0.01, 0.27, hypothesis="a bit more", expected="val_loss decreases by 5%"),
        lr_round(5, 0.5, None, "failed", tail=["loss is nan"]),
        lr_round(6, 0.002, 0.26),
    ]
    for r in rounds:
        state, _ = record_round(state, r)
    return state


def user_of(messages: list[dict[str, Any]]) -> str:
    assert [m["role"] for m in messages] == ["system", "user"]
    return str(messages[1]["content"])


def test_sections_follow_the_spec_order() -> None:
    messages = build_messages(PARTS, history(), TUNABLES, baseline_params=BASELINE)
    assert messages[0]["content"] == "SYSTEM PROMPT"
    user = user_of(messages)
    positions = [user.find(h) for h in HEADINGS]
    assert all(p >= 0 for p in positions), [
        h for h, p in zip(HEADINGS, positions, strict=True) if p < 0
    ]
    assert positions == sorted(positions)
    for text in ("TRAINEE CONTEXT", "PROJECT CONTEXT", "CONSTRAINTS", "METRICS", "TUNING"):
        assert text in user


def test_empty_project_texts_are_left_out_and_the_default_system_prompt_used() -> None:
    parts = PromptParts(
        system_prompt="",
        trainee_context="",
        project_context=" ",
        constraints="",
        metrics_prompt="",
        tuning_prompt="",
    )
    messages = build_messages(
        parts, new_state("val_loss", "min"), TUNABLES, baseline_params=BASELINE
    )
    assert messages[0]["content"] == DEFAULT_SYSTEM_PROMPT
    user = user_of(messages)
    assert user.startswith("## Search space")
    assert "context.md" not in user and "journal" not in user
    assert "No rounds yet" in user
    assert "Log tail" not in user


def test_default_system_prompt_says_the_essentials() -> None:
    text = DEFAULT_SYSTEM_PROMPT.lower()
    for phrase in (
        "careful, conservative",
        "one high-impact parameter",
        "bounds or choices",
        "rejected changes",
        "one json object only",
    ):
        assert phrase in text


def test_search_space_table_shows_type_bounds_log_choices_baseline_description() -> None:
    user = user_of(build_messages(PARTS, history(), TUNABLES, baseline_params=BASELINE))
    assert "| name | type | allowed values | log scale | baseline | description |" in user
    assert "| lr | float | [1e-5, 1.0] | yes | 0.001 | learning rate |" in user
    assert "| batch_size | int | [8, 256] | no | 32 | - |" in user
    assert '| optimizer | choice | one of "adam", "sgd", "adamw" | no | "adam" | - |' in user
    assert "| use_amp | bool | true or false | no | false | - |" in user


def test_history_marks_baseline_and_best_and_names_failures() -> None:
    user = user_of(build_messages(PARTS, history(), TUNABLES, baseline_params=BASELINE))
    assert "| 1 (baseline) | completed | 0.3 | baseline |" in user
    assert "| 2 (best) | completed | 0.25 | kept | held | lr 0.001 -> 0.003 |" in user
    assert "| 3 | failed: out of memory | n/a | rejected | failed | lr 0.001 -> 0.1 |" in user
    assert "| 5 | failed: nan/divergence |" in user
    assert "- round 4: a bit more | expected: val_loss decreases by 5% | outcome:" in user
    assert "prediction failed" in user
    rejected = user.split("## Rejected changes (do not repeat)")[1].split("## ")[0]
    # each change is shown once: the table has it, the lists refer to the rounds
    assert "- round 3: failed: out of memory" in rejected
    assert "- round 5: failed: nan/divergence" in rejected
    assert "lr 0.001 -> 0.1" not in rejected
    tried = user.split("## Tried changes")[1].split("## ")[0]
    assert "Every round of the table above (rounds 1, 2, 3, 4, 5, 6)" in tried
    assert "->" not in tried


def test_only_the_last_failed_rounds_tail_is_shown() -> None:
    user = user_of(build_messages(PARTS, history(), TUNABLES, baseline_params=BASELINE))
    assert "## Log tail of the last failed round (round 5, failed: nan/divergence)" in user
    assert "loss is nan" in user
    assert "RuntimeError: CUDA out of memory" not in user
    assert "old line" not in user


def test_failure_tail_keeps_the_last_lines() -> None:
    state = new_state("val_loss", "min")
    state, _ = record_round(
        state, lr_round(1, 0.001, None, "failed", tail=[f"line {i}" for i in range(100)])
    )
    user = user_of(
        build_messages(
            PARTS,
            state,
            TUNABLES,
            baseline_params=BASELINE,
            limits=PromptLimits(failure_tail_lines=3),
        )
    )
    section = user.split("## Log tail")[1].split("## ")[0]
    assert "[... 97 earlier lines omitted]" in section
    assert "line 97\nline 98\nline 99" in section
    assert "line 96" not in section


def test_each_section_is_bounded_with_a_marker() -> None:
    parts = PromptParts(
        system_prompt="S" * 50,
        trainee_context="A" * 1000,
        project_context="B" * 10,
        constraints="",
        metrics_prompt="",
        tuning_prompt="",
    )
    messages = build_messages(
        parts, history(), TUNABLES, baseline_params=BASELINE, limits=PromptLimits(section_chars=300)
    )
    user = user_of(messages)
    assert "A" * 300 + "\n[... truncated 700 chars]" in user
    assert "A" * 301 not in user
    assert "B" * 10 in user
    assert messages[0]["content"] == "S" * 50


def test_history_is_limited_to_recent_rounds_but_keeps_baseline_and_best() -> None:
    state = new_state("val_loss", "min")
    for i in range(1, 41):
        metric = 0.3 if i == 1 else (0.1 if i == 5 else 0.3 + i / 100)
        state, _ = record_round(state, lr_round(i, 0.001 + i / 1000, metric))
    user = user_of(
        build_messages(
            PARTS, state, TUNABLES, baseline_params=BASELINE, limits=PromptLimits(history_rounds=10)
        )
    )
    table = user.split("## Recent rounds")[1].split("## Tried changes")[0]
    rows = re.findall(r"^\| (\d+)", table, re.M)
    assert rows == ["1", "5", *map(str, range(31, 41))]
    assert "[... 28 earlier rounds omitted]" in table
    assert "| 1 (baseline) |" in table and "| 5 (best) |" in table


def test_total_limit_cuts_the_least_essential_sections_first() -> None:
    parts = PromptParts(
        system_prompt="S",
        trainee_context="T" * 5000,
        project_context="P" * 5000,
        constraints="C" * 500,
        metrics_prompt="M",
        tuning_prompt="U",
        journal="J" * 5000,
    )
    limits = PromptLimits(total_chars=9000)
    user = user_of(
        build_messages(parts, history(), TUNABLES, baseline_params=BASELINE, limits=limits)
    )
    assert len(user) <= limits.total_chars
    assert "C" * 500 in user, "constraints are kept whole"
    assert "## Your answer" in user and user.rstrip().endswith('"params": {}, a "stop_reason".')
    assert re.search(r"J+\n\[\.\.\. truncated \d+ chars\]", user)
    for heading in HEADINGS:
        assert heading in user


def test_a_tiny_total_still_keeps_the_answer_rules() -> None:
    limits = PromptLimits(total_chars=2500)
    user = user_of(
        build_messages(PARTS, history(), TUNABLES, baseline_params=BASELINE, limits=limits)
    )
    assert len(user) <= limits.total_chars
    assert "## Your answer" in user
    assert "[... truncated" in user


def test_output_is_deterministic() -> None:
    a = build_messages(PARTS, history(), TUNABLES, baseline_params=BASELINE)
    b = build_messages(PARTS, history(), TUNABLES, baseline_params=dict(reversed(BASELINE.items())))
    assert a == b


def test_no_tunables_says_to_stop() -> None:
    user = user_of(build_messages(PARTS, new_state(None, "min"), [], baseline_params={}))
    assert "No tunable parameters are defined" in user
    assert "None configured; the training loss" in user


@pytest.mark.parametrize(
    ("text", "limit", "keep", "expected"),
    [
        ("abcdef", 10, "head", "abcdef"),
        ("abcdef", 3, "head", "abc\n[... truncated 3 chars]"),
        ("abcdef", 2, "tail", "[... truncated 4 chars]\nef"),
        ("abcdef", 0, "head", "\n[... truncated 6 chars]"),
    ],
)
def test_truncate(text: str, limit: int, keep: str, expected: str) -> None:
    assert truncate(text, limit, keep=keep) == expected


# -- the journal ------------------------------------------------------------------------------


def store_entry(i: int) -> dict[str, Any]:
    """The shape Store.journal returns."""
    return {
        "session": f"session-{i:04d}",
        "status": "finished",
        "stop_reason": "max rounds reached",
        "finished_at": 1_700_000_000.0 + i * 3600,
        "rounds": 5,
        "baseline": {"round": 1, "metric": 0.3, "params": {"lr": 0.001, "batch_size": 32}},
        "best": {"round": 3, "metric": 0.2, "params": {"lr": 0.003, "batch_size": 32}},
        "rejected": [
            {
                "round": 4,
                "diff": {"lr": {"from": 0.001, "to": 0.1}},
                "params": {},
                "hypothesis": "h",
                "metric": None,
                "reason": "failed: nan/divergence",
            },
        ],
    }


def test_journal_entry_shows_best_changes_and_rejected() -> None:
    text = journal_section([store_entry(3)])
    assert text.startswith(
        "- session session-0003 (finished 2023-11-15 01:13 UTC; max rounds reached)"
    )
    assert "max rounds reached" in text
    assert "best metric 0.2 (round 3) with lr=0.003" in text
    assert "batch_size" not in text.split("\n")[0], "only changes vs the baseline"
    assert "  rejected: lr 0.001 -> 0.1 (failed: nan/divergence)" in text


def test_journal_brief_shape_is_read() -> None:
    entry = {
        "session": "s1",
        "best_params": {"lr": 0.01},
        "best_metric": 0.5,
        "metric_name": "val_loss",
        "rejected": [{"params": {"lr": 1.0}, "reason": "oom"}],
        "finished_at": "2024-05-01",
    }
    text = journal_section([entry])
    assert text == (
        "- session s1 (finished 2024-05-01): best val_loss 0.5 with lr=0.01\n"
        "  rejected: lr=1.0 (oom)"
    )


def test_journal_is_bounded_and_marks_omitted_sessions() -> None:
    entries = [store_entry(i) for i in range(30, 0, -1)]
    text = journal_section(entries, limit_chars=1000)
    assert len(text) <= 1000
    assert text.startswith("- session session-0030")
    match = re.search(r"\[\.\.\. (\d+) older sessions omitted\]$", text)
    assert match
    shown = text.count("- session ")
    assert shown + int(match.group(1)) == 30


def test_journal_empty_and_tiny_limit() -> None:
    assert journal_section([]) == ""
    text = journal_section([store_entry(1), store_entry(2)], limit_chars=120)
    assert len(text) <= 120
    assert "[... truncated" in text and "[... 1 older sessions omitted]" in text


def test_a_pruned_round_shows_the_llm_its_reason() -> None:
    reason = "pruned: patience rule: val_loss not improved for 3 steps (best 0.5 at step 2)"
    state = new_state("val_loss", "min")
    for r in (
        summary(1, metric=0.3),
        msgspec.structs.replace(
            summary(2, "pruned", 0.5, params={**BASELINE, "lr": 0.5}, diff={"lr": "x"}),
            error=reason,
        ),
    ):
        state, _ = record_round(state, r)
    user = user_of(build_messages(PARTS, state, TUNABLES, baseline_params=BASELINE))
    assert f"| 2 | {reason} | 0.5 | rejected |" in user
    rejected = user.split("## Rejected changes (do not repeat)")[1].split("## ")[0]
    assert f"- round 2: {reason}" in rejected


def test_the_llm_sees_the_noise_floor() -> None:
    from trainee.research.state import NoiseFloor

    state = new_state("val_loss", "min", noise=NoiseFloor(seed="seed", margin=2.0))
    base = {**BASELINE, "seed": 0}
    for i, (seed, value) in enumerate([(0, 0.30), (1, 0.32)], start=1):
        diff = {"seed": {"from": 0, "to": seed}} if seed else {}
        state, _ = record_round(
            state, summary(i, metric=value, params={**base, "seed": seed}, diff=diff)
        )
    user = user_of(build_messages(PARTS, state, TUNABLES, baseline_params=BASELINE))
    section = user.split("## Noise floor (run.noise)\n\n")[1].split("\n\n")[0]
    assert section == (
        "val_loss 0.31 ± 0.0141421 over 2 seeds of the baseline (rounds 1, 2); noise floor "
        "0.0282843.\nA change becomes the new best only when it beats the best by more than "
        "0.0282843; changing only 'seed' is never an improvement."
    )
