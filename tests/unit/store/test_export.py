"""Exports: ledgers agree with each other, the report and chart cover every round, no env."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from pathlib import Path

import msgspec
import pytest

from trainee.launch.layout import ProjectLayout, SessionLayout
from trainee.store.export import (
    CHART_NAME,
    render_chart_svg,
    render_report,
    sparkline,
    write_ledgers,
    write_report,
    write_research_state,
)
from trainee.store.records import DecisionRecord, RoundRecord, SessionRecord

SECRET = "sk-unit-secret-value-42"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def layout(tmp_path: Path) -> SessionLayout:
    return ProjectLayout.for_root(tmp_path / "proj", env={}).session(1)


def make_session(**fields: object) -> SessionRecord:
    base: dict[str, object] = {
        "index": 1,
        "project_root": "/work/proj",
        "status": "finished",
        "stop_reason": "max rounds reached",
        "policy": "llm",
        "security_mode": "guarded",
        "max_rounds": 4,
        "created_at": 1_700_000_000.0,
        "finished_at": 1_700_003_600.0,
        "env": {"OPENAI_API_KEY": SECRET},
        "spec": {"name": "demo"},
        "tokens": 321,
        "cost_usd": 0.0125,
    }
    base.update(fields)
    return SessionRecord(**base)  # type: ignore[arg-type]


def make_rounds() -> list[RoundRecord]:
    return [
        RoundRecord(
            session=1,
            index=1,
            status="completed",
            params={"lr": 0.1, "layers": 4},
            verdict="baseline",
            started_at=100.0,
            ended_at=160.0,
            primary_metric=0.5,
            finals={"val_loss": 0.5},
        ),
        RoundRecord(
            session=1,
            index=2,
            status="completed",
            params={"lr": 0.05, "layers": 4},
            diff={"lr": {"from": 0.1, "to": 0.05}},
            hypothesis="A smaller lr | steadier\nconvergence <b>",
            expected="val_loss < 0.5",
            verdict="kept",
            verdict_reason="new best",
            started_at=200.0,
            ended_at=290.5,
            primary_metric=0.4,
        ),
        RoundRecord(
            session=1,
            index=3,
            status="failed",
            params={"lr": 1.0, "layers": 4, "dropout": True},
            diff={"lr": {"from": 0.05, "to": 1.0}, "dropout": True},
            hypothesis="big steps",
            expected="faster",
            verdict="rejected",
            verdict_reason="diverged",
            failure_tail=["nan loss"],
        ),
        RoundRecord(
            session=1,
            index=4,
            status="completed",
            params={"lr": 0.04, "layers": 6},
            diff={"lr": {"from": 0.05, "to": 0.04}, "layers": {"from": 4, "to": 6}},
            hypothesis="deeper",
            expected="val_loss < 0.4",
            verdict="rejected",
            verdict_reason="worse than best",
            primary_metric=0.45,
        ),
    ]


def decisions() -> list[DecisionRecord]:
    return [
        DecisionRecord(
            id=1,
            session=1,
            round=2,
            provider="openai",
            model="gpt-4o-mini",
            policy="llm",
            prompt_tokens=100,
            completion_tokens=20,
            cost_usd=0.001,
            latency_sec=1.25,
            accepted=True,
            problems=[{"field": "params.lr", "message": "lr above max"}],
            repaired=True,
        )
    ]


# -- ledgers ---------------------------------------------------------------------------------


def test_ledgers_have_the_same_rows_in_the_same_order(layout: SessionLayout) -> None:
    rounds = make_rounds()
    shuffled = [rounds[2], rounds[0], rounds[3], rounds[1], rounds[0]]  # unordered, duplicate
    write_ledgers(layout, make_session(), shuffled)

    rows = list(csv.DictReader(io.StringIO(layout.ledger_csv.read_text())))
    lines = layout.ledger_jsonl.read_text().splitlines()
    jsonl = [msgspec.json.decode(line) for line in lines]
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4]
    assert [j["index"] for j in jsonl] == [1, 2, 3, 4]
    for row, obj in zip(rows, jsonl, strict=True):
        assert row["status"] == obj["status"]
        assert row["verdict"] == (obj["verdict"] or "")
        assert row["hypothesis"] == obj["hypothesis"]
        assert row["primary_metric"] == (
            "" if obj["primary_metric"] is None else repr(obj["primary_metric"])
        )
        for name, value in obj["params"].items():
            assert row[f"param.{name}"] in (str(value), repr(value), "true")
    assert jsonl[0]["session_id"] == "session-0001"
    assert {f.name for f in msgspec.structs.fields(RoundRecord)} <= set(jsonl[0])
    assert rows[0]["param.dropout"] == "" and rows[2]["param.dropout"] == "true"
    assert rows[1]["diff"] == "lr: 0.1 -> 0.05"
    assert rows[2]["diff"] == "lr: 0.05 -> 1.0; dropout=true"
    assert rows[1]["duration_sec"] == "90.5" and rows[2]["duration_sec"] == ""
    assert jsonl[1]["duration_sec"] == 90.5
    header = layout.ledger_csv.read_text().splitlines()[0].split(",")
    assert header[:4] == ["round", "status", "verdict", "primary_metric"]
    assert header[-8:] == [
        "diff",
        "hypothesis",
        "expected",
        "verdict_reason",
        "duration_sec",
        "step",
        "backend",
        "job_id",
    ]
    assert rows[0]["backend"] == "local" and rows[0]["job_id"] == "" and rows[0]["step"] == "0"


def test_a_round_of_another_session_is_refused_and_nothing_written(layout: SessionLayout) -> None:
    stray = RoundRecord(session=2, index=1)
    with pytest.raises(ValueError, match="belongs to session 2"):
        write_ledgers(layout, make_session(), [*make_rounds(), stray])
    assert not layout.artifacts.exists()


def test_rewriting_replaces_files_and_leaves_no_temp_files(layout: SessionLayout) -> None:
    rounds = make_rounds()
    write_ledgers(layout, make_session(), rounds[:2])
    write_ledgers(layout, make_session(), rounds)
    assert len(layout.ledger_jsonl.read_text().splitlines()) == 4
    assert sorted(p.name for p in layout.artifacts.iterdir()) == [
        "result_ledger.csv",
        "result_ledger.jsonl",
    ]


def test_research_state_is_written_indented_and_bad_json_changes_nothing(
    layout: SessionLayout,
) -> None:
    write_research_state(layout, b'{"baseline":{"round":1},"rejected":[]}')
    text = layout.research_state.read_text()
    assert msgspec.json.decode(text) == {"baseline": {"round": 1}, "rejected": []}
    assert "\n  " in text
    with pytest.raises(ValueError, match="not valid JSON"):
        write_research_state(layout, b'{"baseline": ')
    assert layout.research_state.read_text() == text


# -- report -----------------------------------------------------------------------------------


def test_report_covers_every_round_and_the_baseline_and_best(layout: SessionLayout) -> None:
    text = render_report(
        make_session(), make_rounds(), metric_name="val_loss", goal="min", decisions=decisions()
    )
    assert text.startswith("# Trainee report — session-0001\n")
    assert "- **Status:** finished" in text
    assert "- **Stop reason:** max rounds reached" in text
    assert "- **Baseline:** round 1, val_loss = 0.5" in text
    assert "- **Best:** round 2, val_loss = 0.4 (20.00% better than baseline)" in text
    assert "| lr | 0.1 | 0.05 **(changed)** |" in text
    assert "| layers | 4 | 4 |" in text
    section = text.split("## Rounds\n", 1)[1].split("## Decisions\n", 1)[0]
    round_rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert [row.split("|")[1].strip() for row in round_rows] == [
        "1 (baseline)",
        "2 (best)",
        "3",
        "4",
    ]
    assert "lr: 0.05 -> 1.0; dropout=true" in text
    assert "A smaller lr \\| steadier<br>convergence &lt;b>" in text
    assert "expected: val_loss &lt; 0.4<br>outcome: val_loss = 0.45 (worse than best)" in text
    assert "expected: faster<br>outcome: failed (diverged)" in text
    assert f"![val_loss per round]({CHART_NAME})" in text
    assert "▁" in text and "·" in text  # sparkline with a gap for the failed round
    assert (
        "| 2 | openai / gpt-4o-mini | — | yes | yes | — | 120 | $0.0010 | 1.2 s | lr above max |"
        in text
    )
    assert SECRET not in text


def test_decided_by_names_no_empty_provider_or_model() -> None:
    """A policy without a provider is named by itself; an agent without a model alone."""
    offline = [
        DecisionRecord(id=2, session=1, round=3, provider="", model="", policy="random"),
        DecisionRecord(id=3, session=1, round=4, provider="my-agent", model="", policy="external"),
    ]
    text = render_report(
        make_session(), make_rounds(), metric_name="val_loss", goal="min", decisions=offline
    )
    rows = [
        line
        for line in text.split("## Decisions\n", 1)[1].splitlines()
        if line[:3] in ("| 3", "| 4")
    ]
    assert [row.split("|")[2].strip() for row in rows] == ["random", "my-agent"]
    assert " / " not in text.split("## Decisions\n", 1)[1]


def test_report_uses_the_recorded_best_and_baseline_and_the_goal(layout: SessionLayout) -> None:
    rounds = make_rounds()
    text = render_report(
        make_session(best_round=4, baseline_round=1), rounds, metric_name="acc", goal="max"
    )
    assert "- **Best:** round 4, acc = 0.45 (10.00% worse than baseline)" in text
    derived = render_report(make_session(), rounds, metric_name="acc", goal="max")
    assert "- **Best:** round 1, acc = 0.5 (same as baseline)" in derived
    zero = [RoundRecord(session=1, index=1, status="completed", primary_metric=0.0)]
    assert "relative change undefined" in render_report(
        make_session(),
        [*zero, RoundRecord(session=1, index=2, status="completed", primary_metric=-1.0)],
        metric_name="loss",
        goal="min",
    )
    with pytest.raises(ValueError, match="goal must be 'min' or 'max'"):
        render_report(make_session(), rounds, metric_name="acc", goal="up")


def test_report_without_metrics_has_no_chart(layout: SessionLayout) -> None:
    session = make_session(status="failed", error="provider failed")
    rounds = [RoundRecord(session=1, index=1, status="failed")]
    text = render_report(session, rounds, metric_name="loss", goal="min")
    assert "No round has reported the metric yet." in text
    assert CHART_NAME not in text
    assert "- **Baseline:** none" in text and "- **Best:** none" in text
    assert "- **Error:** provider failed" in text
    write_report(layout, session, rounds, metric_name="loss", goal="min")
    assert not (layout.artifacts / CHART_NAME).exists()
    assert render_chart_svg(rounds, metric_name="loss", goal="min") is None


def test_write_report_writes_the_chart_beside_the_report(layout: SessionLayout) -> None:
    path = write_report(
        layout,
        make_session(),
        make_rounds(),
        metric_name="val_loss",
        goal="min",
        decisions=decisions(),
    )
    assert path == layout.report
    chart = layout.artifacts / CHART_NAME
    root = ET.fromstring(chart.read_text())
    assert root.tag == f"{SVG}svg"
    metric = [e for e in root.iter(f"{SVG}polyline") if e.get("class") == "metric"]
    assert len(metric) == 1 and len(metric[0].get("points", "").split()) == 3
    baseline = [e for e in root.iter(f"{SVG}line") if e.get("class") == "baseline"]
    assert len(baseline) == 1 and baseline[0].get("stroke-dasharray")
    best = [e for e in root.iter(f"{SVG}path") if e.get("class") == "best"]
    assert len(best) == 1 and best[0].get("d", "").startswith("M ")
    assert len(list(root.iter(f"{SVG}circle"))) == 3
    for file in layout.artifacts.iterdir():
        assert SECRET not in file.read_text()


def test_chart_is_well_formed_for_awkward_names_and_single_points() -> None:
    one = [RoundRecord(session=1, index=1, status="completed", primary_metric=2.0)]
    svg = render_chart_svg(one, metric_name='a<b & "c"', goal="max", baseline=2.0)
    assert svg is not None
    root = ET.fromstring(svg)
    assert 'a<b & "c" per round' in (root.find(f"{SVG}title").text or "")  # type: ignore[union-attr]


def test_best_so_far_steps_only_on_improvement() -> None:
    rounds = [
        RoundRecord(session=1, index=i, status="completed", primary_metric=v)
        for i, v in enumerate([3.0, 2.0, 2.5, 1.0], start=1)
    ]
    svg = render_chart_svg(rounds, metric_name="loss", goal="min")
    assert svg is not None
    path = next(e for e in ET.fromstring(svg).iter(f"{SVG}path") if e.get("class") == "best")
    moves = (
        path.get("d", "").split()[::3]
        if False
        else [t for t in path.get("d", "").split() if t.isalpha()]
    )
    assert moves == ["M", "H", "V", "H", "H", "V"]


def test_sparkline() -> None:
    assert sparkline([]) == ""
    assert sparkline([None, None]) == ""
    assert sparkline([1.0, None, 3.0, 2.0]) == "▁·█▅"
    assert sparkline([5.0, 5.0]) == "▅▅"


def test_report_explains_each_pruned_round_in_one_line() -> None:
    reason = "pruned: threshold rule: val_loss 150 at step 6 above the bound 100"
    rounds = [
        RoundRecord(session=1, index=1, status="completed", primary_metric=0.5),
        RoundRecord(session=1, index=2, status="pruned", primary_metric=150.0, warnings=[reason]),
        RoundRecord(session=1, index=3, status="completed", primary_metric=0.4),
    ]
    text = render_report(make_session(), rounds, metric_name="val_loss", goal="min")
    section = text.split("## Pruned rounds\n\n")[1].split("\n\n")[0].strip()
    assert section == f"- Round 2: {reason}"
    assert "(2 completed, 1 pruned)" in text
    plain = render_report(make_session(), [rounds[0]], metric_name="val_loss", goal="min")
    assert "Pruned rounds" not in plain
