"""The ``hybrid`` policy: the LLM decides, shown the TPE optimizer's suggestions and state.

Each round the prompt gains one section: TPE's next suggestions (ids ``S1``..``Sk``,
full values of the searched parameters), the best results it knows and its current
parameter importances. The LLM may take a suggestion as it is, modify one, or reject
them all; it says which by starting ``change_summary`` with ``[S2]``, ``[S2 modified]``
or ``[own]``. What it really did is checked against the params (a claimed ``[S2]``
with other values is recorded as ``S2 modified``; a missing token is inferred) and
kept in ``Proposal.source``, in the notes and as the canonical token at the start of
the plan's ``change_summary``, which the decision record stores. Every result,
whoever chose the point, is told to the optimizer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import anyio.to_thread

from trainee.errors import InvalidDecision
from trainee.llm.settings import LlmSettings
from trainee.policies.base import Proposal, propose_one_by_one
from trainee.policies.llm import DecisionRequest, LlmPolicy
from trainee.policies.tpe import OptimizerView, Suggestion, TpePolicy
from trainee.research.decision import (
    DecisionPlan,
    effective_params,
    format_value,
    params_diff,
    params_equal,
    validate_plan,
)
from trainee.research.prompt import PromptParts, format_diff
from trainee.research.state import ResearchState, format_metric
from trainee.spec import TunableSpec
from trainee.spec.constraints import Constraint

__all__ = [
    "DEFAULT_SUGGESTIONS",
    "FALLBACK_SOURCE",
    "HybridPolicy",
    "classify",
    "suggestions_section",
]

DEFAULT_SUGGESTIONS = 3

SECTION_HEADING = "## Optimizer suggestions (TPE)"
_ANSWER_HEADING = "\n\n## Your answer"
_TOKEN = re.compile(r"\[\s*(?:(?P<s>S\s*(?P<n>\d+))(?P<mod>\s+modified)?|(?P<own>own))\s*\]", re.I)


class HybridPolicy(LlmPolicy):
    """An LLM policy whose prompt carries the TPE optimizer's suggestions and state."""

    name = "hybrid"

    def __init__(
        self,
        settings: LlmSettings,
        parts: PromptParts,
        *,
        seed: int = 0,
        k: int = DEFAULT_SUGGESTIONS,
        optimizer: TpePolicy | None = None,
        max_tokens: int = 2048,
        constraints: Sequence[Constraint] = (),
    ) -> None:
        super().__init__(settings, parts, max_tokens=max_tokens, constraints=constraints)
        self.optimizer = (
            optimizer if optimizer is not None else TpePolicy(seed, constraints=constraints)
        )
        self.k = max(1, k)
        self._advice: tuple[list[Suggestion], OptimizerView] | None = None

    def observe(self, params: Mapping[str, Any], metric: float | None, status: str) -> None:
        self.optimizer.observe(params, metric, status)

    def advise(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> tuple[list[Suggestion], OptimizerView]:
        """The optimizer's next ``k`` suggestions and its view (synchronous, CPU work)."""
        suggestions, _notes = self.optimizer.suggest(state, tunables, baseline, self.k)
        return suggestions, self.optimizer.view(state, tunables)

    def messages(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        messages = super().messages(state, tunables, baseline)
        suggestions, view = self._advice or self.advise(state, tunables, baseline)
        section = suggestions_section(state, tunables, baseline, suggestions, view)
        user = dict(messages[-1])
        content = str(user["content"])
        cut = content.rfind(_ANSWER_HEADING)
        if cut < 0:
            content = content + "\n\n" + section
        else:
            content = content[:cut] + "\n\n" + section + content[cut:]
        user["content"] = content
        return [*messages[:-1], user]

    def request(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int = 1,
    ) -> DecisionRequest:
        """One plan per request: the candidates of a step are decided one by one."""
        return super().request(state, tunables, baseline, 1)

    async def propose_batch(
        self,
        state: ResearchState,
        tunables: Sequence[TunableSpec],
        baseline: Mapping[str, Any],
        k: int,
    ) -> list[Proposal]:
        """One choice among the optimizer's suggestions per candidate: each decision sees
        the candidates chosen before it (the one-request batch of the LLM policy has no
        place for the suggestion protocol)."""
        return await propose_one_by_one(self, state, tunables, baseline, k)

    async def propose(
        self, state: ResearchState, tunables: Sequence[TunableSpec], baseline: Mapping[str, Any]
    ) -> Proposal:
        self._advice = await anyio.to_thread.run_sync(self.advise, state, tunables, dict(baseline))
        suggestions = self._advice[0]
        try:
            proposal = await super().propose(state, tunables, baseline)
        except InvalidDecision as exc:
            fallback = _optimizer_fallback(
                exc, suggestions, tunables, baseline, state, self.constraints
            )
            if fallback is None:
                raise
            fallback.suggestions = [dict(s.params) for s in suggestions]
            return fallback
        finally:
            self._advice = None
        proposal.suggestions = [dict(s.params) for s in suggestions]
        source, note, summary = classify(proposal.plan, suggestions, baseline)
        proposal.source = source
        proposal.notes.append(note)
        if not proposal.plan.stop:
            proposal.plan.change_summary = summary
        return proposal


FALLBACK_SOURCE = "S1 (optimizer fallback)"
"""``Proposal.source`` of the optimizer's first suggestion run because the LLM's answer was
still invalid after its repair."""


def _optimizer_fallback(
    exc: InvalidDecision,
    suggestions: Sequence[Suggestion],
    tunables: Sequence[TunableSpec],
    baseline: Mapping[str, Any],
    state: ResearchState,
    constraints: Sequence[Constraint] = (),
) -> Proposal | None:
    """The hybrid's defined answer to an LLM that could not give a valid plan after the
    repair: the optimizer's first suggestion (S1), checked like any plan, recorded as
    such and carrying the LLM's attempts and cost. None when there is no runnable S1
    (the session then stops with invalid_decision)."""
    data = exc.data if isinstance(exc.data, dict) else {}
    failed = data.get("proposal")
    if not suggestions or not isinstance(failed, Proposal):
        return None
    s1 = suggestions[0]
    plan = DecisionPlan(
        hypothesis="the LLM's answer was still invalid after its repair, so the hybrid "
        "policy runs the optimizer's first suggestion (S1)",
        change_summary=f"[{FALLBACK_SOURCE}] {format_diff(params_diff(dict(baseline), dict(s1.params)))}",
        params=dict(s1.params),
        expected=f"unknown: TPE's next point for {state.primary_metric or 'the metric'}",
    )
    problems = validate_plan(
        plan,
        tunables,
        baseline=dict(baseline),
        tried=[r.params for r in state.rounds],
        rejected=[r["params"] for r in state.rejected],
        constraints=constraints,
    )
    if problems:
        return None
    reasons = "; ".join(f"{p['field']}: {p['reason']}" for p in failed.problems)
    failed.plan = plan
    failed.source = FALLBACK_SOURCE
    failed.notes.append(
        f"hybrid: the LLM's answer was invalid after the repair ({reasons}); "
        "ran the optimizer's S1 instead"
    )
    return failed


def classify(
    plan: DecisionPlan, suggestions: Sequence[Suggestion], baseline: Mapping[str, Any]
) -> tuple[str, str, str]:
    """``(source, note, change_summary with the canonical token first)`` for a plan.

    The source is what the params show, not only what the model claims: an exact
    match with a suggestion is that suggestion; a claimed ``[Sn]`` with other values
    is ``Sn modified``; no match and no valid claim is ``own``.
    """
    text = plan.change_summary
    if plan.stop:
        return "stop", "hybrid: the LLM stopped the session", text
    full = effective_params(dict(baseline), plan.params)
    exact = next(
        (
            i
            for i, s in enumerate(suggestions, 1)
            if params_equal(full, effective_params(dict(baseline), s.params))
        ),
        None,
    )
    in_summary = _TOKEN.search(text)
    m = in_summary or _TOKEN.search(plan.hypothesis)
    claim: str | None = None
    claimed_n: int | None = None
    if m is not None:
        if m.group("own"):
            claim = "own"
        else:
            claimed_n = int(m.group("n"))
            if 1 <= claimed_n <= len(suggestions):
                claim = f"S{claimed_n}" + (" modified" if m.group("mod") else "")
    stripped = text
    if in_summary is not None:
        stripped = (text[: in_summary.start()] + text[in_summary.end() :]).strip(" :-\u2014")
    if exact is not None:
        source = f"S{exact}"
        if claim == source:
            note = f"hybrid: took {source} as suggested"
        elif claim is None:
            note = f"hybrid: took {source} (no choice token; read from the params)"
        else:
            note = f"hybrid: said [{claim}] but the params equal {source}; recorded as {source}"
    elif claimed_n is not None and claim is not None:
        source = f"S{claimed_n} modified"
        s = suggestions[claimed_n - 1]
        changed = params_diff(effective_params(dict(baseline), s.params), full)
        note = f"hybrid: modified S{claimed_n} ({format_diff(changed)})"
        if m is not None and not m.group("mod"):
            note += f"; it said [S{claimed_n}] but changed values"
    else:
        source = "own"
        if claim == "own":
            note = f"hybrid: rejected {_ids(suggestions)} for its own point"
        elif m is not None:
            note = "hybrid: its choice token named no shown suggestion; recorded as own"
        else:
            note = "hybrid: own point (no choice token; it matches no suggestion)"
    return source, note, f"[{source}] {stripped}".rstrip()


def _ids(suggestions: Sequence[Suggestion]) -> str:
    if not suggestions:
        return "no suggestions"
    return "S1" if len(suggestions) == 1 else f"S1-S{len(suggestions)}"


def suggestions_section(
    state: ResearchState,
    tunables: Sequence[TunableSpec],
    baseline: Mapping[str, Any],
    suggestions: Sequence[Suggestion],
    view: OptimizerView,
) -> str:
    """The prompt section: suggestions, best known results, importances, how to answer."""
    name = state.primary_metric or "metric"
    told = view.completed + view.failed
    lines = [SECTION_HEADING, ""]
    phase = (
        f"It is still in its random start-up phase ({told} of {view.startup_trials} results), "
        "so its suggestions are random draws."
        if view.in_startup
        else "Its suggestions come from its model of the results so far."
    )
    lines.append(
        "A TPE optimizer (Optuna) is told every finished round of this session, whoever chose "
        f"it: {view.completed} completed, {view.failed} failed. {phase}"
    )
    lines.append("")
    if suggestions:
        searched = list(suggestions[0].params)
        lines.append("Its next suggestions (full values of the searched parameters):")
        lines.append("")
        lines.append("| id | " + " | ".join(searched) + " | changes vs baseline |")
        lines.append("|---" * (len(searched) + 2) + "|")
        for i, s in enumerate(suggestions, 1):
            full = effective_params(dict(baseline), s.params)
            values = " | ".join(format_value(s.params.get(n)) for n in searched)
            lines.append(f"| S{i} | {values} | {format_diff(params_diff(dict(baseline), full))} |")
    else:
        lines.append("It has no untried suggestion this round.")
    lines.append("")
    if view.best:
        lines.append(f"Best results it knows ({name}):")
        for p in view.best:
            where = f"round {p.round}" if p.round is not None else "a round"
            diff = format_diff(params_diff(dict(baseline), p.params))
            lines.append(f"- {where}: {name} {format_metric(p.metric)} ({diff})")
    else:
        lines.append("Best results it knows: none yet.")
    lines.append("")
    if view.importances:
        shown = ", ".join(
            f"{k} {v:.2f}" for k, v in sorted(view.importances.items(), key=lambda kv: -kv[1])
        )
        lines.append(f"Parameter importances (share of the variation in {name}): {shown}")
    else:
        lines.append(f"Parameter importances: {view.importance_note or 'not available yet'}")
    lines.append("")
    ids = ", ".join(f"[S{i}]" for i in range(1, len(suggestions) + 1))
    lines.append(
        "Take one suggestion as it is (copy its params exactly), modify one, or reject them "
        "all for your own point. Start change_summary with your choice: "
        + (f"{ids} to take one, [S1 modified] (etc.) to change one, " if suggestions else "")
        + "[own] for your own point. Say in the hypothesis why."
    )
    return "\n".join(lines)
