"""The screening section of report.md (``run.screen``): one line per round, its rung and
budget, and which rounds were promoted (and from where)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainee.research.screen import rung_label
from trainee.research.state import format_metric
from trainee.states import RoundStatus
from trainee.store.records import RoundRecord

__all__ = ["ScreenView", "screen_lines"]


@dataclass(frozen=True)
class ScreenView:
    """What the report needs of ``run.screen``: the budget flag, the rungs' budgets and
    whether a promoted round resumes from a checkpoint."""

    flag: str
    rungs: tuple[float, ...]
    resumes: bool = False


def screen_lines(rounds: Sequence[RoundRecord], view: ScreenView, metric_name: str) -> list[str]:
    """``## Screening (run.screen)``: one line per round that ran at a rung."""
    screened = [r for r in rounds if 0 < r.rung <= len(view.rungs)]
    if not screened:
        return []
    promoted_to = {r.promoted_from: r.index for r in rounds if r.promoted_from is not None}
    top = len(view.rungs)
    lines = [
        "## Screening (run.screen)",
        "",
        f"Candidates start at {view.flag} {view.rungs[0]:g}; the best of each rung go on "
        f"(rungs {', '.join(f'{b:g}' for b in view.rungs)}). Only full-budget results are "
        "compared with the baseline and the best (and shown in the analysis views).",
        "",
    ]
    for r in screened:
        parts = [rung_label(r.rung, view.rungs, view.flag)]
        if r.promoted_from is not None:
            how = "resumed" if view.resumes else "run again from the start"
            parts.append(f"promoted from round {r.promoted_from} ({how})")
        elif r.index == min(x.index for x in screened) and r.rung == top:
            parts.append("the baseline")
        if r.status == RoundStatus.COMPLETED:
            parts.append(f"{metric_name} {format_metric(r.primary_metric)}")
        else:
            parts.append(str(r.status))
        if r.rung < top and r.status not in (RoundStatus.PENDING, RoundStatus.RUNNING):
            parts.append(
                f"promoted to round {promoted_to[r.index]}"
                if r.index in promoted_to
                else "not promoted"
            )
        lines.append(f"- round {r.index}: " + ", ".join(parts))
    return [*lines, ""]
