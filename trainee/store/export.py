"""Session exports: result ledgers (CSV, JSONL), research state, Markdown report + SVG chart.

Renderers are pure; writers replace each file atomically (:mod:`trainee.atomic`)
so a reader never sees half a file. The session's ``env`` (the caller's environment,
which may hold secrets) is never written anywhere by this module.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from xml.sax.saxutils import escape

import msgspec

from trainee.atomic import write_atomic
from trainee.research.analysis import build_analysis
from trainee.research.prune import pruned_reason
from trainee.spec import TunableSpec
from trainee.spec.files import Goal
from trainee.spec.primary import better
from trainee.spec.wire import SessionAnalysis
from trainee.states import RoundStatus
from trainee.store.records import DecisionRecord, RoundRecord, SessionRecord, to_builtins
from trainee.store.report_views import analysis_section, analysis_views
from trainee.store.screen_report import ScreenView, screen_lines

__all__ = [
    "CHART_NAME",
    "LEDGER_SCREEN_COLUMNS",
    "LEDGER_TAIL_COLUMNS",
    "ArtifactLayout",
    "ledger_rows",
    "render_chart_svg",
    "render_ledger_csv",
    "render_ledger_jsonl",
    "render_report",
    "sparkline",
    "write_ledgers",
    "write_report",
    "write_research_state",
]

CHART_NAME = "report_chart.svg"
"""The metric chart, written beside ``report.md`` and linked from it."""

LEDGER_HEAD_COLUMNS = ("round", "status", "verdict", "primary_metric")
LEDGER_TAIL_COLUMNS = (
    "diff",
    "hypothesis",
    "expected",
    "verdict_reason",
    "duration_sec",
    "step",
    "backend",
    "job_id",
)
LEDGER_SCREEN_COLUMNS = ("rung", "budget", "promoted_from")
"""Last, when a round ran at a ``run.screen`` rung."""
_PARAM_PREFIX = "param."
_SPARKS = "▁▂▃▄▅▆▇█"
_GOALS = tuple(str(g) for g in Goal)


class ArtifactLayout(Protocol):
    """Where a session's exports go (``trainee.launch.layout.SessionLayout`` fits)."""

    @property
    def artifacts(self) -> Path: ...

    @property
    def report(self) -> Path: ...

    @property
    def ledger_csv(self) -> Path: ...

    @property
    def ledger_jsonl(self) -> Path: ...

    @property
    def research_state(self) -> Path: ...


# -- files ---------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` at once (0644: people read the artifacts), its folder made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, mode=0o644)


def _ordered(session: SessionRecord, rounds: Sequence[RoundRecord]) -> list[RoundRecord]:
    """The session's rounds by index, one per index (the last one given wins)."""
    by_index: dict[int, RoundRecord] = {}
    for rec in rounds:
        if rec.session != session.index:
            raise ValueError(
                f"round {rec.index} belongs to session {rec.session}, not {session.id}"
            )
        by_index[rec.index] = rec
    return [by_index[i] for i in sorted(by_index)]


def _check_goal(goal: str) -> str:
    if goal not in _GOALS:
        raise ValueError(f"goal must be 'min' or 'max', got {goal!r}")
    return str(goal)


# -- ledgers ---------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value) if not isinstance(value, float) else repr(value)
    return msgspec.json.encode(to_builtins(value)).decode()


def _render_diff(diff: dict[str, Any]) -> str:
    parts: list[str] = []
    for name, change in diff.items():
        if isinstance(change, dict) and "to" in change:
            parts.append(f"{name}: {_cell(change.get('from'))} -> {_cell(change['to'])}")
        else:
            parts.append(f"{name}={_cell(change)}")
    return "; ".join(parts)


def _duration(rec: RoundRecord) -> float | None:
    if rec.started_at is None or rec.ended_at is None:
        return None
    return round(rec.ended_at - rec.started_at, 3)


def _param_names(rounds: Sequence[RoundRecord]) -> list[str]:
    names: dict[str, None] = {}
    for rec in rounds:
        names.update(dict.fromkeys(rec.params))
    return list(names)


def ledger_rows(session: SessionRecord, rounds: Sequence[RoundRecord]) -> list[dict[str, Any]]:
    """One machine-readable row per round, in order: every round field plus session id."""
    rows: list[dict[str, Any]] = []
    for rec in _ordered(session, rounds):
        row: dict[str, Any] = {"session_id": session.id}
        row.update(to_builtins(rec))
        row["duration_sec"] = _duration(rec)
        rows.append(row)
    return rows


def render_ledger_jsonl(session: SessionRecord, rounds: Sequence[RoundRecord]) -> bytes:
    return b"".join(msgspec.json.encode(row) + b"\n" for row in ledger_rows(session, rounds))


def render_ledger_csv(session: SessionRecord, rounds: Sequence[RoundRecord]) -> str:
    """The human-readable ledger: one row per round, each param in its own column."""
    ordered = _ordered(session, rounds)
    params = _param_names(ordered)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    screened = any(rec.rung for rec in ordered)
    screen = LEDGER_SCREEN_COLUMNS if screened else ()
    writer.writerow(
        [*LEDGER_HEAD_COLUMNS, *(_PARAM_PREFIX + p for p in params), *LEDGER_TAIL_COLUMNS, *screen]
    )
    for rec in ordered:
        writer.writerow(
            [
                rec.index,
                rec.status,
                _cell(rec.verdict),
                _cell(rec.primary_metric),
                *(_cell(rec.params.get(p)) for p in params),
                _render_diff(rec.diff),
                rec.hypothesis,
                rec.expected,
                rec.verdict_reason,
                _cell(_duration(rec)),
                rec.batch,
                rec.backend,
                _cell(rec.job_id),
                *(
                    (_cell(rec.rung or None), _cell(rec.budget), _cell(rec.promoted_from))
                    if screened
                    else ()
                ),
            ]
        )
    return buffer.getvalue()


def write_ledgers(
    layout: ArtifactLayout, session: SessionRecord, rounds: Sequence[RoundRecord]
) -> None:
    """Write ``result_ledger.csv`` and ``result_ledger.jsonl`` (same rounds, same order)."""
    csv_text = render_ledger_csv(session, rounds).encode()
    jsonl = render_ledger_jsonl(session, rounds)
    _write(layout.ledger_csv, csv_text)
    _write(layout.ledger_jsonl, jsonl)


def write_research_state(layout: ArtifactLayout, state_json: bytes) -> None:
    """Write ``research_state.json`` (indented); ValueError, and no write, if it is not JSON."""
    try:
        msgspec.json.decode(state_json)
    except msgspec.DecodeError as exc:
        raise ValueError(f"research state is not valid JSON: {exc}") from None
    _write(layout.research_state, msgspec.json.format(state_json, indent=2) + b"\n")


# -- report ----------------------------------------------------------------------------


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.6g}"


def _md(text: Any) -> str:
    """``text`` safe inside a Markdown table cell (no pipes, no raw HTML, one line)."""
    safe = str(text).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")
    return "<br>".join(safe.splitlines())


def _when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _scored(rounds: Sequence[RoundRecord]) -> list[RoundRecord]:
    return [r for r in rounds if r.status == RoundStatus.COMPLETED and r.primary_metric is not None]


def _baseline_and_best(
    session: SessionRecord, rounds: Sequence[RoundRecord], goal: str
) -> tuple[RoundRecord | None, RoundRecord | None]:
    """The session's recorded baseline/best rounds, else derived from completed rounds."""
    by_index = {r.index: r for r in rounds}
    scored = _scored(rounds)
    if session.baseline_round is not None:
        baseline = by_index.get(session.baseline_round)
    else:
        baseline = scored[0] if scored else None
    if session.best_round is not None:
        return baseline, by_index.get(session.best_round)
    best: RoundRecord | None = None
    best_value = 0.0
    for rec in scored:
        value = rec.primary_metric
        assert value is not None
        if best is None or better(value, best_value, goal):
            best, best_value = rec, value
    return baseline, best


def _improvement(baseline: float, best: float, goal: str) -> float | None:
    if baseline == 0:
        return None
    delta = baseline - best if goal == "min" else best - baseline
    return delta / abs(baseline)


def _improvement_text(baseline: float, best: float, goal: str) -> str:
    rel = _improvement(baseline, best, goal)
    if rel is None:
        return "relative change undefined: baseline is 0"
    if rel == 0:
        return "same as baseline"
    return f"{abs(rel) * 100:.2f}% {'better' if rel > 0 else 'worse'} than baseline"


def sparkline(values: Sequence[float | None]) -> str:
    """One block character per value (``·`` for a missing one), scaled to min..max."""
    present = [v for v in values if v is not None]
    if not present:
        return ""
    low, high = min(present), max(present)
    span = high - low
    out: list[str] = []
    for value in values:
        if value is None:
            out.append("·")
        elif span == 0:
            out.append(_SPARKS[len(_SPARKS) // 2])
        else:
            out.append(_SPARKS[round((value - low) / span * (len(_SPARKS) - 1))])
    return "".join(out)


def _outcome(rec: RoundRecord, metric_name: str) -> str:
    if rec.primary_metric is not None:
        outcome = f"{metric_name} = {_num(rec.primary_metric)}"
    else:
        outcome = rec.status
    if rec.verdict_reason:
        outcome += f" ({rec.verdict_reason})"
    expected = rec.expected or "—"
    return f"expected: {expected}\noutcome: {outcome}"


def render_report(
    session: SessionRecord,
    rounds: Sequence[RoundRecord],
    *,
    metric_name: str,
    goal: str,
    decisions: Sequence[DecisionRecord] | None = None,
    noise: str | None = None,
    analysis: SessionAnalysis | None = None,
    screen: ScreenView | None = None,
) -> str:
    """The Markdown session report (links ``report_chart.svg`` when any round has a metric,
    and the analysis SVGs of :mod:`trainee.store.report_views` given ``analysis``)."""
    goal = _check_goal(goal)
    ordered = _ordered(session, rounds)
    baseline, best = _baseline_and_best(session, ordered, goal)
    lines: list[str] = [f"# Trainee report — {session.id}", ""]

    counts: dict[str, int] = {}
    for rec in ordered:
        counts[rec.status] = counts.get(rec.status, 0) + 1
    by_status = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    lines += [
        "## Summary",
        "",
        f"- **Project:** `{session.project_root}`",
        f"- **Status:** {session.status}",
        f"- **Stop reason:** {session.stop_reason or '—'}"
        + (f" — {_md(session.stop_detail)}" if session.stop_detail else ""),
        f"- **Rounds:** {len(ordered)} of at most {session.max_rounds}"
        + (f" ({by_status})" if by_status else ""),
        f"- **Goal:** {'minimize' if goal == 'min' else 'maximize'} `{metric_name}`",
        f"- **Policy:** {session.policy}; **security mode:** {session.security_mode}",
        *_backend_line(ordered),
        f"- **Started:** {_when(session.created_at)}; **finished:** {_when(session.finished_at)}",
        f"- **LLM usage:** {session.tokens} tokens, {_usage_cost(session, decisions)}",
    ]
    if baseline is not None:
        lines.append(
            f"- **Baseline:** round {baseline.index}, {metric_name} = {_num(baseline.primary_metric)}"
        )
    else:
        lines.append("- **Baseline:** none (no round completed with a metric)")
    if best is not None:
        text = f"- **Best:** round {best.index}, {metric_name} = {_num(best.primary_metric)}"
        if (
            baseline is not None
            and baseline.primary_metric is not None
            and best.primary_metric is not None
        ):
            text += f" ({_improvement_text(baseline.primary_metric, best.primary_metric, goal)})"
        lines.append(text)
    else:
        lines.append("- **Best:** none")
    if noise:
        lines.append(f"- **Seed noise:** {_md(noise)}")
    if session.error:
        lines.append(f"- **Error:** {_md(session.error)}")
    lines.append("")

    if best is not None:
        lines += _best_params(baseline, best)

    values = [r.primary_metric for r in ordered]
    lines += ["## Metric chart", ""]
    if any(v is not None for v in values):
        lines += [
            f"![{metric_name} per round]({CHART_NAME})",
            "",
            "```text",
            f"{metric_name} by round {ordered[0].index}..{ordered[-1].index}: {sparkline(values)}",
            f"min {_num(min(v for v in values if v is not None))}, "
            f"max {_num(max(v for v in values if v is not None))}",
            "```",
            "",
        ]
    else:
        lines += ["No round has reported the metric yet.", ""]

    if analysis is not None:
        lines += analysis_section(analysis)
    lines += _round_table(ordered, metric_name, baseline, best)
    lines += _pruned_lines(ordered)
    if screen is not None:
        lines += screen_lines(ordered, screen, metric_name)
    if decisions:
        lines += _decision_table(decisions)
    return "\n".join(lines).rstrip("\n") + "\n"


def _pruned_lines(rounds: Sequence[RoundRecord]) -> list[str]:
    """One line per round a ``run.prune`` rule stopped early: the rule and the comparison."""
    pruned = [r for r in rounds if r.status == RoundStatus.PRUNED]
    if not pruned:
        return []
    lines = ["## Pruned rounds", ""]
    for r in pruned:
        reason = pruned_reason(r.warnings) or RoundStatus.PRUNED.value
        lines.append(f"- Round {r.index}: {_md(reason)}")
    return [*lines, ""]


def _backend_line(rounds: Sequence[RoundRecord]) -> list[str]:
    backends = sorted({r.backend for r in rounds})
    widest = max(_step_sizes(rounds).values(), default=1)
    if not rounds or (backends == ["local"] and widest <= 1):
        return []
    text = f"- **Ran on:** {', '.join(backends)}"
    if widest > 1:
        text += f"; up to {widest} candidates at once per decision step"
    return [text]


def _step_sizes(rounds: Sequence[RoundRecord]) -> dict[int, int]:
    """Rounds per decision step (step 0, the baseline, and rounds stored before steps
    were recorded, are not a step of candidates)."""
    sizes: dict[int, int] = {}
    for rec in rounds:
        if rec.batch > 0:
            sizes[rec.batch] = sizes.get(rec.batch, 0) + 1
    return sizes


def _best_params(baseline: RoundRecord | None, best: RoundRecord) -> list[str]:
    lines = ["## Best params", "", f"Round {best.index}.", ""]
    names = list(dict.fromkeys([*(baseline.params if baseline else {}), *best.params]))
    if not names:
        return [*lines, "No tunable params.", ""]
    lines += ["| Param | Baseline | Best |", "|---|---|---|"]
    for name in names:
        base = _cell(baseline.params.get(name)) if baseline else ""
        value = _cell(best.params.get(name))
        mark = " **(changed)**" if baseline is not None and base != value else ""
        lines.append(f"| {_md(name)} | {_md(base)} | {_md(value)}{mark} |")
    return [*lines, ""]


def _round_table(
    rounds: Sequence[RoundRecord],
    metric_name: str,
    baseline: RoundRecord | None,
    best: RoundRecord | None,
) -> list[str]:
    # With parallel candidates, a Step column shows which rounds ran together.
    steps = max(_step_sizes(rounds).values(), default=1) > 1
    lines = [
        "## Rounds",
        "",
        ("| Step " if steps else "")
        + f"| Round | Status | Verdict | {_md(metric_name)} | Params diff | Hypothesis "
        "| Expected vs outcome |",
        ("|---" if steps else "") + "|---|---|---|---|---|---|---|",
    ]
    for rec in rounds:
        tags = []
        if baseline is not None and rec.index == baseline.index:
            tags.append("baseline")
        if best is not None and rec.index == best.index:
            tags.append("best")
        label = f"{rec.index}" + (f" ({', '.join(tags)})" if tags else "")
        cells = [
            label,
            rec.status,
            rec.verdict or "—",
            _num(rec.primary_metric),
            _render_diff(rec.diff) or "—",
            rec.hypothesis or "—",
            _outcome(rec, metric_name),
        ]
        if steps:
            cells.insert(0, str(rec.batch))
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    if not rounds:
        lines.append("| — | no rounds yet | | | | | |")
    return [*lines, ""]


def _problem_text(problem: dict[str, Any]) -> str:
    for key in ("message", "reason", "detail"):
        if isinstance(problem.get(key), str):
            return str(problem[key])
    return _cell(problem)


def _usage_cost(session: SessionRecord, decisions: Sequence[DecisionRecord] | None) -> str:
    """The session's LLM cost; "unknown" when a provider's price is not known (a local
    model, a model missing from the price table): never a made-up $0.0000."""
    unpriced = [
        d for d in decisions or () if d.cost_usd is None and d.prompt_tokens + d.completion_tokens
    ]
    if not unpriced:
        return f"${session.cost_usd:.4f}"
    if session.cost_usd:
        return f"${session.cost_usd:.4f} + unknown (no price for {len(unpriced)} decisions)"
    return "cost unknown (no price for the model; set prices in config.json)"


def _decision_cost(d: DecisionRecord) -> str:
    if d.cost_usd is not None:
        return f"${d.cost_usd:.4f}"
    return "unknown" if d.prompt_tokens + d.completion_tokens else "—"


def _repaired(d: DecisionRecord) -> str:
    answers = [a for a in d.attempts if a.get("ok")]
    if d.repaired:
        return "yes"
    if not d.accepted and len(answers) > 1:
        return "failed"
    return "no"


def _attempt_line(a: dict[str, Any]) -> str:
    where = f"{a.get('provider')} ({a.get('model')}"
    where += f" at {a['url']})" if a.get("url") else ")"
    fmt = a.get("response_format") or "-"
    took = a.get("latency_sec")
    took_text = f", {took:.1f} s" if isinstance(took, int | float) else ""
    if a.get("ok"):
        tokens = int(a.get("prompt_tokens") or 0) + int(a.get("completion_tokens") or 0)
        problems = a.get("problems") or []
        verdict = (
            "problems: " + "; ".join(_problem_text(p) for p in problems) if problems else "valid"
        )
        answer = str(a.get("answer") or "")
        shown = answer if len(answer) <= 300 else answer[:297] + "..."
        return f"{where}, {fmt}{took_text}, {tokens} tokens: {verdict}; answer `{_md(shown)}`"
    return f"{where}, {fmt}{took_text}: {a.get('kind')}: {_md(a.get('error'))}"


def _decision_table(decisions: Sequence[DecisionRecord]) -> list[str]:
    lines = [
        "## Decisions",
        "",
        "| For round | Decided by | Format | Accepted | Repaired | Requests | Tokens | Cost "
        "| Latency | Problems |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    detailed: list[DecisionRecord] = []
    for d in sorted(decisions, key=lambda d: d.id):
        problems = "; ".join(_problem_text(p) for p in d.problems) or "—"
        who = " / ".join(part for part in (d.provider, d.model) if part) or d.policy
        if d.source:
            who += f" ({d.source})"
        cells = [
            str(d.round),
            who,
            d.response_format or "—",
            "yes" if d.accepted else "no",
            _repaired(d),
            str(len(d.attempts)) if d.attempts else "—",
            str(d.prompt_tokens + d.completion_tokens),
            _decision_cost(d),
            f"{d.latency_sec:.1f} s",
            problems,
        ]
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
        if len(d.attempts) > 1 or any(not a.get("ok") for a in d.attempts):
            detailed.append(d)
    lines.append("")
    for d in detailed:
        lines += [f"Requests of the decision for round {d.round}:", ""]
        lines += [f"{i}. {_attempt_line(a)}" for i, a in enumerate(d.attempts, 1)]
        lines.append("")
    return lines


# -- chart -----------------------------------------------------------------------------

_W, _H = 720, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 80, 24, 48, 56


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    return [low + (high - low) * i / (count - 1) for i in range(count)]


def render_chart_svg(
    rounds: Sequence[RoundRecord],
    *,
    metric_name: str,
    goal: str,
    baseline: float | None = None,
) -> str | None:
    """An SVG line chart of the primary metric per round, or None when no round has one.

    Draws the metric of every round that reported it, the best-so-far of completed
    rounds as a step line, and ``baseline`` as a dashed horizontal line.
    """
    goal = _check_goal(goal)
    ordered = sorted(rounds, key=lambda r: r.index)
    points = [(r.index, r.primary_metric) for r in ordered if r.primary_metric is not None]
    if not points:
        return None
    xs = [float(i) for i, _ in points]
    ys = [v for _, v in points] + ([baseline] if baseline is not None else [])
    x0, x1 = min(xs), max(xs)
    if x0 == x1:
        x0, x1 = x0 - 1, x1 + 1
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.08 if y1 > y0 else (abs(y0) * 0.1 or 1.0)
    y0, y1 = y0 - pad, y1 + pad
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def sx(x: float) -> float:
        return _LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return _TOP + (y1 - y) / (y1 - y0) * plot_h

    def attr(text: str) -> str:
        return escape(text, {'"': "&quot;"})

    direction = "lower" if goal == "min" else "higher"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(metric_name)} per round</title>",
        f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="#ffffff"/>',
        f'<text x="{_W / 2:.1f}" y="24" text-anchor="middle" font-size="15">'
        f"{escape(metric_name)} per round ({direction} is better)</text>",
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}" stroke="#444"/>',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_LEFT + plot_w}" y2="{_TOP + plot_h}" '
        'stroke="#444"/>',
    ]
    for value in _ticks(y0, y1):
        y = sy(value)
        out.append(
            f'<line x1="{_LEFT - 4}" y1="{y:.1f}" x2="{_LEFT + plot_w}" y2="{y:.1f}" '
            'stroke="#e5e5e5"/>'
        )
        out.append(f'<text x="{_LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{value:.4g}</text>')
    indices = sorted({i for i, _ in points})
    step = max(1, math.ceil(len(indices) / 15))
    for index in indices[::step]:
        x = sx(index)
        out.append(
            f'<text x="{x:.1f}" y="{_TOP + plot_h + 18}" text-anchor="middle">{index}</text>'
        )
    out.append(
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{_H - 12}" text-anchor="middle">round</text>'
    )
    if baseline is not None:
        y = sy(baseline)
        out.append(
            f'<line class="baseline" x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + plot_w}" '
            f'y2="{y:.1f}" stroke="#888" stroke-dasharray="6 4"/>'
        )
    best_path: list[str] = []
    best: float | None = None
    for rec in _scored(ordered):
        assert rec.primary_metric is not None
        x = sx(rec.index)
        if best is None:
            best = rec.primary_metric
            best_path.append(f"M {x:.1f} {sy(best):.1f}")
            continue
        best_path.append(f"H {x:.1f}")
        if better(rec.primary_metric, best, goal):
            best = rec.primary_metric
            best_path.append(f"V {sy(best):.1f}")
    if best_path:
        out.append(
            f'<path class="best" d="{" ".join(best_path)}" fill="none" stroke="#2a9d55" '
            'stroke-width="2"/>'
        )
    coords = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in points)
    out.append(
        f'<polyline class="metric" points="{coords}" fill="none" stroke="#1f6fd1" '
        'stroke-width="1.5"/>'
    )
    for index, value in points:
        out.append(
            f'<circle cx="{sx(index):.1f}" cy="{sy(value):.1f}" r="3.5" fill="#1f6fd1">'
            f"<title>{attr(f'round {index}: {metric_name} = {value:.6g}')}</title></circle>"
        )
    legend_y = _TOP - 10
    legend = [("#1f6fd1", "", escape(metric_name)), ("#2a9d55", "", "best so far")]
    if baseline is not None:
        legend.append(("#888", ' stroke-dasharray="6 4"', "baseline"))
    x = _LEFT + plot_w - 110 * len(legend)
    for color, dash, label in legend:
        out.append(
            f'<line x1="{x}" y1="{legend_y}" x2="{x + 22}" y2="{legend_y}" stroke="{color}" '
            f'stroke-width="2"{dash}/>'
        )
        out.append(f'<text x="{x + 28}" y="{legend_y + 4}">{label}</text>')
        x += 110
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_report(
    layout: ArtifactLayout,
    session: SessionRecord,
    rounds: Sequence[RoundRecord],
    *,
    metric_name: str,
    goal: str,
    decisions: Sequence[DecisionRecord] | None = None,
    tunables: Sequence[TunableSpec] = (),
    noise: str | None = None,
    screen: ScreenView | None = None,
) -> Path:
    """Write ``report.md`` and, when any round has a metric, ``report_chart.svg`` beside it,
    with the analysis views (importance, parallel coordinates, slices) as SVG files.
    ``noise``: the baseline's mean ± spread over seeds (``run.noise``), when measured."""
    ordered = _ordered(session, rounds)
    baseline, best = _baseline_and_best(session, ordered, _check_goal(goal))
    # run.screen: the analysis views compare full-budget results only
    top = len(screen.rungs) if screen is not None else 0
    analysis = build_analysis(
        session.id,
        [r for r in ordered if not 0 < r.rung < top],
        tunables,
        metric=metric_name,
        goal=goal,
        baseline_round=baseline.index if baseline is not None else None,
        best_round=best.index if best is not None else None,
    )
    text = render_report(
        session,
        ordered,
        metric_name=metric_name,
        goal=goal,
        decisions=decisions,
        analysis=analysis,
        noise=noise,
        screen=screen,
    )
    svg = render_chart_svg(
        ordered,
        metric_name=metric_name,
        goal=goal,
        baseline=baseline.primary_metric if baseline is not None else None,
    )
    if svg is not None:
        _write(layout.artifacts / CHART_NAME, svg.encode())
    for name, view in analysis_views(analysis).items():
        _write(layout.artifacts / name, view.encode())
    _write(layout.report, text.encode())
    return layout.report
