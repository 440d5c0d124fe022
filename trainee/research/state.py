"""The research state of a session, and the pure transition that judges each round.

Baseline = the first completed round with a value for the primary metric. Every
later completed round is ``kept`` (a new best), ``neutral`` (not better than the
best, not worse than the baseline) or ``rejected`` (worse than the baseline);
failed, timed-out and metric-less rounds are ``rejected`` with the reason named
(out of memory and nan/divergence are recognised in the log tail). The round's
own prediction (``expected``) is judged too, so the next prompt can show the
model which of its predictions were wrong. ``research_state.json`` is this
Struct, encoded.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from trainee.spec.files import BUILTIN_METRICS, Goal
from trainee.spec.primary import REL_TOL, better
from trainee.states import RoundStatus

__all__ = [
    "FALLBACK_METRICS",
    "GOALS",
    "RECENT_ROUNDS",
    "DecisionBudget",
    "NoiseFloor",
    "RecentRound",
    "ResearchState",
    "RoundSummary",
    "failure_kind",
    "format_metric",
    "judge_expected",
    "new_state",
    "noise_repeats",
    "record_round",
    "state_from_json",
    "state_to_json",
]

GOALS = tuple(str(g) for g in Goal)
FALLBACK_METRICS = BUILTIN_METRICS
"""Metrics used, in this order, when no primary metric is configured."""

RECENT_ROUNDS = 30
"""``recent_rounds`` of research_state.json, and the decision prompt's table of rounds,
hold the last this many rounds."""

KEPT, NEUTRAL, REJECTED, BASELINE = "kept", "neutral", "rejected", "baseline"
HELD, FAILED, NOT_CHECKABLE = "held", "failed", "not checkable"


class RoundSummary(msgspec.Struct, kw_only=True):
    """One finished round as the research state sees it.

    ``params`` is the full effective parameter set; ``diff`` the changes vs the
    baseline (``{name: {"from", "to"}}``); ``metric`` the primary metric's value.
    ``verdict`` is ``baseline``, ``kept``, ``neutral``, ``rejected`` or None (stopped).
    """

    index: int
    status: str
    params: dict[str, Any]
    diff: dict[str, Any]
    metric: float | None
    metrics: dict[str, float]
    hypothesis: str
    expected: str
    verdict: str | None
    verdict_reason: str
    duration_sec: float | None
    failure_tail: list[str]
    error: str = ""
    """Why the round ended early: a prune's reason (``pruned: median rule: ...``)."""
    rung: int = 0
    """``run.screen``: the rung it ran at (1 the lowest budget), 0 without screening."""
    rungs: int = 0
    """``run.screen``: how many rungs there are (the last is the full budget)."""
    budget: float | None = None
    """``run.screen``: the budget it ran with."""

    @property
    def low_budget(self) -> bool:
        """Run below the full budget (a screening rung): its result is ranked within its
        rung only, never compared with the baseline or the best."""
        return 0 < self.rung < self.rungs


class RecentRound(msgspec.Struct, kw_only=True):
    """One of the last rounds at a glance: what changed vs the baseline, what it measured
    (``metric``: the primary metric, None when the round produced none) and its verdict."""

    round: int
    status: str
    diff: dict[str, Any]
    metric: float | None
    verdict: str | None


class DecisionBudget(msgspec.Struct, kw_only=True):
    """Where the session stands when the next decision is asked: shown to the model
    ("round 3 of at most 6"), and the rule for stops. ``finished`` counts the rounds that
    used up the budget (the baseline included; a round the user stopped does not);
    an LLM stop is honoured once ``finished >= min_rounds``."""

    round: int
    max_rounds: int
    finished: int
    min_rounds: int
    seconds_left: float | None = None
    tokens_left: int | None = None
    usd_left: float | None = None

    @property
    def stop_allowed(self) -> bool:
        return self.finished >= self.min_rounds

    def stop_refused(self) -> str | None:
        """Why a stop is not honoured now, or None when it is."""
        if self.stop_allowed:
            return None
        return (
            f"stopping is allowed once {self.min_rounds} rounds have run "
            f"(decision.min_rounds); {self.finished} have, and up to "
            f"{self.max_rounds - self.finished} more may run: set stop to false and "
            "propose a change"
        )


class NoiseFloor(msgspec.Struct, kw_only=True):
    """``run.noise``: how much the primary metric moves with the seed alone. ``values``:
    the baseline's configuration measured on each seed (``rounds``); ``floor`` is
    ``margin`` times their sample standard deviation, once two are measured. A change
    becomes the new best only when it beats the best by more than the floor."""

    seed: str
    margin: float = 1.0
    values: list[float] = msgspec.field(default_factory=list)
    rounds: list[int] = msgspec.field(default_factory=list)

    @property
    def floor(self) -> float | None:
        if len(self.values) < 2:
            return None
        return self.margin * statistics.stdev(self.values)

    @property
    def mean(self) -> float | None:
        """The mean of the measured values; None before any."""
        return statistics.fmean(self.values) if self.values else None

    @property
    def spread(self) -> float | None:
        """Their sample standard deviation (0 for one value); None before any."""
        if not self.values:
            return None
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    def describe(self, name: str) -> str:
        """``val_loss 0.412 ± 0.013 over 3 seeds of the baseline (rounds 1, 2, 3); noise floor 0.013``."""
        mean, spread = self.mean, self.spread
        if mean is None or spread is None:
            return f"not measured yet (the baseline's configuration on other '{self.seed}')"
        rounds = ", ".join(str(i) for i in self.rounds)
        text = (
            f"{name} {format_metric(mean)} ± {format_metric(spread)} over {len(self.values)} "
            f"seeds of the baseline (rounds {rounds})"
        )
        floor = self.floor
        return text + (f"; noise floor {format_metric(floor)}" if floor is not None else "")


def noise_repeats(
    seed: str,
    repeats: int,
    baseline: Mapping[str, Any],
    done: Sequence[tuple[Mapping[str, Any], str]],
) -> list[dict[str, Any]]:
    """The runs of the baseline's configuration on other seeds still to do (``run.noise``):
    seeds baseline + 1 ... + ``repeats`` - 1, less those already run (``done``: every
    round's params and status; a stopped one is run again)."""
    base_seed = baseline[seed]
    same = {k: v for k, v in baseline.items() if k != seed}
    ran = {
        params.get(seed)
        for params, status in done
        if status != RoundStatus.STOPPED and {k: v for k, v in params.items() if k != seed} == same
    }
    return [
        {**baseline, seed: base_seed + i} for i in range(1, repeats) if base_seed + i not in ran
    ]


class ResearchState(msgspec.Struct, kw_only=True):
    """Everything the next decision needs to know about this session so far.

    ``recent_rounds``: the last :data:`RECENT_ROUNDS` rounds, oldest first;
    ``tried`` entries: ``{"round", "params", "diff", "status", "verdict"}``;
    ``rejected`` entries: ``{"round", "params", "diff", "reason"}``;
    ``hypotheses`` entries: ``{"round", "hypothesis", "expected", "verdict", "prediction"}``
    (``prediction`` is ``held``, ``failed`` or ``not checkable``).
    """

    primary_metric: str | None
    goal: str
    baseline: RoundSummary | None
    best: RoundSummary | None
    rounds: list[RoundSummary]
    tried: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    hypotheses: list[dict[str, Any]]
    recent_rounds: list[RecentRound] = msgspec.field(default_factory=list)
    budget: DecisionBudget | None = None
    """Set by the session before each decision; None outside a session."""
    noise: NoiseFloor | None = None
    """With ``run.noise``: the baseline's spread over seeds, which a new best must beat."""


def new_state(
    primary_metric: str | None, goal: str, *, noise: NoiseFloor | None = None
) -> ResearchState:
    """An empty state; ``goal`` is ``min`` or ``max`` (ValueError otherwise); ``noise``:
    the seed tunable and margin of ``run.noise`` (nothing measured yet)."""
    goal = str(goal)
    if goal not in GOALS:
        raise ValueError(f"goal must be 'min' or 'max', got {goal!r}")
    return ResearchState(
        primary_metric=primary_metric,
        goal=goal,
        baseline=None,
        best=None,
        rounds=[],
        tried=[],
        rejected=[],
        hypotheses=[],
        noise=None if noise is None else NoiseFloor(seed=noise.seed, margin=noise.margin),
    )


# -- the transition ------------------------------------------------------------------------


def record_round(state: ResearchState, summary: RoundSummary) -> tuple[ResearchState, RoundSummary]:
    """The state after ``summary``, and the summary with its verdict. Pure.

    A round whose index was already recorded (or is older than the last one)
    replaces/slots in and the state is rebuilt from all rounds in index order.
    """
    if any(r.index >= summary.index for r in state.rounds):
        rounds = sorted(
            [r for r in state.rounds if r.index != summary.index] + [summary],
            key=lambda r: r.index,
        )
        rebuilt = new_state(state.primary_metric, state.goal, noise=state.noise)
        judged = summary
        for r in rounds:
            rebuilt, out = _record(rebuilt, r)
            if r is summary:
                judged = out
        return rebuilt, judged
    return _record(state, summary)


def _record(state: ResearchState, summary: RoundSummary) -> tuple[ResearchState, RoundSummary]:
    primary, metric = _resolve_metric(state.primary_metric, summary)
    goal = state.goal
    baseline, best = state.baseline, state.best
    noise = state.noise
    rejected = list(state.rejected)
    tried = list(state.tried)
    name = primary or "metric"
    status = summary.status
    prediction, detail = NOT_CHECKABLE, ""

    verdict: str | None
    if status == RoundStatus.STOPPED:
        verdict, reason = None, "stopped before it finished; not judged"
    elif status == RoundStatus.COMPLETED and metric is not None and math.isfinite(metric):
        prediction, detail = judge_expected(
            summary.expected,
            primary=primary,
            goal=goal,
            metric=metric,
            baseline=baseline.metric if baseline else None,
            best=best.metric if best else None,
            other_metrics=[k for k in summary.metrics if k != primary],
        )
        repeat = (
            noise is not None
            and baseline is not None
            and bool(summary.diff)
            and set(summary.diff) <= {noise.seed}
        )
        if summary.low_budget:
            repeat = False
        if noise is not None and (baseline is None or repeat) and not summary.low_budget:
            noise = msgspec.structs.replace(
                noise, values=[*noise.values, metric], rounds=[*noise.rounds, summary.index]
            )
        if summary.low_budget:
            verdict = NEUTRAL
            reason = (
                f"screening rung {summary.rung} of {summary.rungs} (budget "
                f"{format_metric(summary.budget)}): {name} {format_metric(metric)}, a low-budget "
                "result ranked within its rung only, never compared with the best"
            )
        elif baseline is None or best is None or best.metric is None:
            verdict = BASELINE
            reason = f"baseline: first completed round, {name} {format_metric(metric)}"
        elif repeat:
            assert noise is not None
            verdict = NEUTRAL
            reason = (
                f"the baseline's configuration on another seed: {name} {format_metric(metric)}; "
                f"{noise.describe(name)}"
            )
        elif (
            noise is not None
            and noise.floor is not None
            and better(metric, best.metric, goal)
            and abs(metric - best.metric) <= noise.floor
        ):
            verdict = NEUTRAL
            reason = (
                f"{name} {format_metric(metric)} better than best {format_metric(best.metric)} "
                f"(round {best.index}) by {format_metric(abs(metric - best.metric))}, within "
                f"the noise floor {format_metric(noise.floor)} ({len(noise.values)} seeds of the "
                "baseline): not a new best"
            )
        elif better(metric, best.metric, goal):
            verdict = KEPT
            reason = (
                f"new best: {name} {format_metric(metric)} better than best "
                f"{format_metric(best.metric)} (round {best.index})"
            )
        elif baseline.metric is not None and not better(baseline.metric, metric, goal):
            verdict = NEUTRAL
            reason = (
                f"{name} {format_metric(metric)} not better than best "
                f"{format_metric(best.metric)} (round {best.index}), not worse than baseline "
                f"{format_metric(baseline.metric)} (round {baseline.index})"
            )
        else:
            verdict = REJECTED
            base = baseline.metric if baseline.metric is not None else best.metric
            reason = (
                f"{name} {format_metric(metric)} worse than best {format_metric(best.metric)} "
                f"(round {best.index}) and baseline {format_metric(base)} "
                f"(round {baseline.index})"
            )
    else:
        verdict = REJECTED
        reason = _failure_reason(summary, primary, metric)
        prediction, detail = judge_expected(
            summary.expected,
            primary=primary,
            goal=goal,
            metric=None,
            baseline=baseline.metric if baseline else None,
            best=best.metric if best else None,
            other_metrics=[k for k in summary.metrics if k != primary],
        )

    outcome = reason
    reason += f"; prediction {prediction}" + (f" ({detail})" if detail else "")
    judged = msgspec.structs.replace(
        summary,
        metric=metric if metric is None or math.isfinite(metric) else None,
        verdict=verdict,
        verdict_reason=reason,
        diff=dict(summary.diff),
        params=dict(summary.params),
        metrics=dict(summary.metrics),
        failure_tail=list(summary.failure_tail),
    )
    if verdict == BASELINE:
        baseline = best = judged
    elif verdict == KEPT:
        best = judged
    if status != RoundStatus.STOPPED:
        tried.append(
            {
                "round": summary.index,
                "params": dict(summary.params),
                "diff": dict(summary.diff),
                "status": status,
                "verdict": verdict,
            }
        )
    if verdict == REJECTED:
        rejected.append(
            {
                "round": summary.index,
                "params": dict(summary.params),
                "diff": dict(summary.diff),
                "reason": outcome,
            }
        )
    hypotheses = [
        *state.hypotheses,
        {
            "round": summary.index,
            "hypothesis": summary.hypothesis,
            "expected": summary.expected,
            "verdict": verdict,
            "prediction": prediction,
        },
    ]
    rounds = [*state.rounds, judged]
    new = ResearchState(
        primary_metric=primary,
        goal=goal,
        baseline=baseline,
        best=best,
        rounds=rounds,
        tried=tried,
        rejected=rejected,
        hypotheses=hypotheses,
        noise=noise,
        recent_rounds=[
            RecentRound(
                round=r.index,
                status=r.status,
                diff=dict(r.diff),
                metric=r.metric,
                verdict=r.verdict,
            )
            for r in rounds[-RECENT_ROUNDS:]
        ],
    )
    return new, judged


def _resolve_metric(primary: str | None, summary: RoundSummary) -> tuple[str | None, float | None]:
    """The primary metric's name and this round's value (the loss when none is configured)."""
    metric = summary.metric
    if metric is None and primary is not None:
        metric = summary.metrics.get(primary)
    if primary is None:
        for name in FALLBACK_METRICS:
            if name in summary.metrics:
                return name, summary.metrics[name] if metric is None else metric
    return primary, metric


def _failure_reason(summary: RoundSummary, primary: str | None, metric: float | None) -> str:
    status = summary.status
    if status == RoundStatus.PRUNED:
        return summary.error or status
    kind = failure_kind(summary.failure_tail)
    if status == RoundStatus.COMPLETED:
        if metric is not None and not math.isfinite(metric):
            return f"completed: {primary or 'metric'} is {metric} (nan/divergence)"
        status = RoundStatus.COMPLETED_WITHOUT_METRICS
        kind = kind or (f"no value for {primary}" if primary else "no metric")
    return f"{status}: {kind}" if kind else status


_NAN = re.compile(r"(?<![a-z])nan(?![a-z])|diverg", re.I)
_OOM = re.compile(r"out of memory|outofmemory|\boom\b|memoryerror", re.I)


def failure_kind(tail: list[str]) -> str | None:
    """``out of memory`` or ``nan/divergence`` when the log tail shows it, else None."""
    text = "\n".join(tail)
    if _OOM.search(text):
        return "out of memory"
    if _NAN.search(text):
        return "nan/divergence"
    return None


def format_metric(value: float | None) -> str:
    """A metric value, short: ``0.3142``, ``1.2e-05``, ``n/a``."""
    if value is None:
        return "n/a"
    return f"{value:.6g}"


# -- judging the prediction -----------------------------------------------------------------

_NUM = r"(?>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_OPS = {"<": "<", "<=": "<=", "=<": "<=", "≤": "<=", ">": ">", ">=": ">=", "=>": ">=", "≥": ">="}
_UNIT = (
    r"(?!\s*(?:epoch|step|iter|minute|min\b|second|sec\b|hour|round|batch|sample|layer|"
    r"x\b|times|gb|mb|k\b))"
)
_SYMBOL_CMP = re.compile(rf"(<=|>=|=<|=>|≤|≥|<|>)\s*({_NUM})\s*(%?){_UNIT}", re.I)
_WORD_OPS = {
    "below": "<",
    "under": "<",
    "less than": "<",
    "lower than": "<",
    "smaller than": "<",
    "at most": "<=",
    "no more than": "<=",
    "above": ">",
    "over": ">",
    "greater than": ">",
    "higher than": ">",
    "more than": ">",
    "larger than": ">",
    "exceeds": ">",
    "exceed": ">",
    "at least": ">=",
    "no less than": ">=",
}
_WORD_CMP = re.compile(
    r"\b(" + "|".join(sorted(map(re.escape, _WORD_OPS), key=len, reverse=True)) + rf")\s+({_NUM})"
    rf"\s*(%?){_UNIT}",
    re.I,
)
_DOWN = (
    r"decreas\w*|drop\w*|fall\w*|fell|reduc\w*|lower\w*|declin\w*|smaller|go(?:es)? down|shrink\w*"
)
_UP = r"increas\w*|ris(?:e|es|ing)|rose|rais\w*|grow\w*|higher|larger|go(?:es)? up"
_GOOD = r"improv\w*|better|beat\w*|new best|outperform\w*"
_DIRECTION = re.compile(rf"\b(?:(?P<down>{_DOWN})|(?P<up>{_UP})|(?P<good>{_GOOD}))\b", re.I)
_BY = re.compile(
    r"\bby\s+(?:about\s+|around\s+|roughly\s+|approximately\s+|at least\s+|~\s*)?"
    rf"({_NUM})\s*(%|percent)?",
    re.I,
)
_TO = re.compile(
    rf"\bto\s+(?:about\s+|around\s+|roughly\s+|approximately\s+|~\s*)?({_NUM})\s*(%?)", re.I
)
_NEGATION = re.compile(
    r"\b(?:not|no|never|without|neither|nor|unchanged|same|similar|comparable|stable|"
    r"flat|worse|between)\b|n't",
    re.I,
)
_CLAUSES = re.compile(r"[;\n]|,\s|\.\s|\b(?:and|but|while|whereas|although)\b", re.I)


def _mentions(text: str, name: str) -> bool:
    forms = {name, name.replace("_", " "), name.replace("_", "-")}
    return any(
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(f)}(?![A-Za-z0-9_])", text, re.I) for f in forms
    )


def judge_expected(
    expected: str,
    *,
    primary: str | None,
    goal: str,
    metric: float | None,
    baseline: float | None,
    best: float | None,
    other_metrics: list[str] | tuple[str, ...] = (),
) -> tuple[str, str]:
    """Did the round's prediction hold? ``(held|failed|not checkable, detail)``.

    Understands a threshold (``val_loss < 0.25``, ``below 0.25``), a change
    (``decreases by 5%``, ``drops to 0.2``) or a direction (``lower val_loss``,
    ``improves``) for the primary metric, measured against the best before this
    round (the baseline when the text says so). Negated, vague or other-metric
    predictions are not checkable; a checkable prediction fails if the round
    produced no metric.
    """
    text = (expected or "").strip()
    if not text or primary is None:
        return NOT_CHECKABLE, ""
    clauses = [c.strip() for c in _CLAUSES.split(text) if c and c.strip()]
    mentioning = [c for c in clauses if _mentions(c, primary)]
    others = [m for m in other_metrics if m and m != primary]
    if not mentioning:
        mentioning = [c for c in clauses if not any(_mentions(c, m) for m in others)]
    use_baseline = bool(re.search(r"\bbaseline\b", text, re.I))
    reference = baseline if use_baseline and baseline is not None else best
    ref_name = "baseline" if use_baseline and baseline is not None else "best"
    for clause in mentioning:
        criterion = _criterion(clause, primary, goal, reference, ref_name)
        if criterion is None:
            continue
        op, target, shown = criterion
        if metric is None:
            return FAILED, f"expected {primary} {shown}, got no value"
        held = _compare(metric, op, target)
        return (
            HELD if held else FAILED
        ), f"expected {primary} {shown}, got {format_metric(metric)}"
    return NOT_CHECKABLE, ""


def _mention_span(text: str, name: str) -> tuple[int, int] | None:
    """Where the first mention of metric ``name`` in ``text`` is, or None."""
    spans = []
    for form in (name, name.replace("_", " "), name.replace("_", "-")):
        m = re.search(rf"(?<![A-Za-z0-9_]){re.escape(form)}(?![A-Za-z0-9_])", text, re.I)
        if m:
            spans.append(m.span())
    return min(spans) if spans else None


def _criterion(
    clause: str, primary: str, goal: str, reference: float | None, ref_name: str
) -> tuple[str, float, str] | None:
    """``(op, target, description)`` of one clause, or None if it is not checkable.

    A comparison must follow the metric's name when the clause names it, and be
    the only one when it does not; directions that disagree are not checkable.
    """
    if _NEGATION.search(clause):
        return None
    span = _mention_span(clause, primary)
    end = span[1] if span is not None else None
    after = clause[end:] if end is not None else clause
    # directions: the two words before the name ("lower val_loss") and all after it
    window = clause
    if span is not None:
        before = clause[: span[0]].split()[-2:]
        window = " ".join(before) + " " + after
    comparisons = [(m, _OPS[m.group(1)]) for m in _SYMBOL_CMP.finditer(after)] + [
        (m, _WORD_OPS[m.group(1).lower()]) for m in _WORD_CMP.finditer(after)
    ]
    comparisons.sort(key=lambda c: c[0].start())
    if comparisons:
        if end is None and len(comparisons) > 1:
            return None
        m, op = comparisons[0]
        if m.group(3):
            return None  # a percentage threshold: the metric's scale is unknown
        value = float(m.group(2))
        return (op, value, f"{op} {format_metric(value)}") if math.isfinite(value) else None
    directions = {
        "down"
        if d.group("down")
        else "up"
        if d.group("up")
        else ("down" if goal == "min" else "up")
        for d in _DIRECTION.finditer(window)
    }
    if len(directions) != 1:
        return None
    direction = directions.pop()
    d = _DIRECTION.search(window)
    assert d is not None
    op = "<" if direction == "down" else ">"
    rest = window[d.end() :]
    to = _TO.search(rest)
    if to is not None and not _BY.search(rest[: to.start()]):
        if to.group(2):
            return None
        value = float(to.group(1))
        return (op + "=", value, f"{op}= {format_metric(value)}") if math.isfinite(value) else None
    if reference is None:
        return None
    by = _BY.search(rest)
    if by is not None:
        amount = float(by.group(1))
        if not math.isfinite(amount):
            return None
        if by.group(2):
            delta = abs(reference) * amount / 100.0
            what = f"{format_metric(amount)}%"
        else:
            delta = abs(amount)
            what = format_metric(abs(amount))
        target = reference - delta if direction == "down" else reference + delta
        word = "down" if direction == "down" else "up"
        return (
            op + "=",
            target,
            f"{op}= {format_metric(target)} ({word} {what} from {ref_name} "
            f"{format_metric(reference)})",
        )
    return op, reference, f"{op} {ref_name} {format_metric(reference)}"


def _compare(value: float, op: str, target: float) -> bool:
    close = math.isclose(value, target, rel_tol=REL_TOL, abs_tol=0.0)
    if op == "<":
        return value < target and not close
    if op == ">":
        return value > target and not close
    if op == "<=":
        return value <= target or close
    return value >= target or close


# -- JSON ----------------------------------------------------------------------------------

_DECODER = msgspec.json.Decoder(ResearchState)


def state_to_json(state: ResearchState) -> bytes:
    """``research_state.json`` bytes (compact; the store indents it)."""
    return msgspec.json.encode(state)


def state_from_json(data: bytes) -> ResearchState:
    """Read ``research_state.json`` bytes; ValueError naming the field if they do not fit."""
    try:
        state = _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"research state: {exc}") from None
    if state.goal not in GOALS:
        raise ValueError(f"research state: goal must be 'min' or 'max', got {state.goal!r}")
    return state
