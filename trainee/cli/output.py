"""How the CLI prints and exits (each error class carries its exit status)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable

from trainee import errors

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

EXIT_INTERRUPTED = errors.EXIT_INTERRUPTED
exit_status_for = errors.exit_status_for


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


_SCHEMA_PATH = re.compile(r"(?P<reason>[^:]+) - at `\$\.?(?P<field>[^`]*)`$")


def plain_message(message: str) -> str:
    """A message without msgspec's JSON path: ``Expected `int` >= 1 - at `$.max_rounds```
    reads ``max_rounds: expected an int >= 1``."""

    def field_first(m: re.Match[str]) -> str:
        raw = m.group("reason")
        lead = raw[: len(raw) - len(raw.lstrip())]
        reason = raw.strip()
        reason = re.sub(r"`(\w+)`", r"\1", reason)
        reason = reason[:1].lower() + reason[1:]
        field = re.sub(r"\[(\d+)\]", r"[\1]", m.group("field")) or "params"
        return f"{lead}{field}: {reason}"

    return _SCHEMA_PATH.sub(field_first, message)


def _describe(exc: errors.TraineeError) -> str:
    lines = [f"error: {plain_message(exc.message)}"]
    data = exc.data
    if isinstance(data, dict):
        hint = data.get("hint")
        if hint:
            lines.append(f"hint: {hint}")
    return "\n".join(lines)


def run_command(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return func(args)
    except errors.TraineeError as exc:
        if getattr(args, "json", False):
            print_json({"error": exc.to_wire()})
        else:
            sys.stderr.write(_describe(exc) + "\n")
        return exit_status_for(exc)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


def console() -> Any:
    """A rich Console, imported only when a command renders for a terminal."""
    from rich.console import Console

    return Console()


def render_mapping(title: str, rows: dict[str, Any]) -> None:
    """A two-column table for a person; plain lines when not on a terminal."""
    if not sys.stdout.isatty():
        width = max((len(k) for k in rows), default=0)
        for key, value in rows.items():
            sys.stdout.write(f"{key:<{width}}  {value}\n")
        return
    from rich.table import Table

    table = Table(title=title, show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows.items():
        table.add_row(key, str(value))
    console().print(table)


# -- values for a person -------------------------------------------------------------

MISSING = "\u2013"
"""What a missing value prints as: an en dash (never ``None``)."""


def fmt_value(value: Any) -> str:
    """A metric or parameter value, short: ``0.21996``, ``1.2e-05``, MISSING when missing."""
    if value is None:
        return MISSING
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def fmt_duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``1h02m``; MISSING when unknown."""
    if seconds is None:
        return MISSING
    total = int(max(0.0, seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def fmt_when(ts: float | None) -> str:
    """A local date and time to the minute; MISSING when unknown."""
    if ts is None:
        return MISSING
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def fmt_best_vs_baseline(
    best: float | None, baseline: float | None, *, same_round: bool = False
) -> str:
    """``0.2199 vs 0.3101 (-29.1%)``; the baseline alone while nothing beat it."""
    if best is None and baseline is None:
        return MISSING
    if best is None or same_round:
        return f"{fmt_value(baseline)} (baseline)"
    if baseline is None:
        return fmt_value(best)
    return f"{fmt_value(best)} vs {fmt_value(baseline)} ({fmt_change(best, baseline)})"


def fmt_change(value: float, baseline: float) -> str:
    """The relative change from the baseline: ``-14.2%``."""
    change = (value - baseline) / abs(baseline) * 100 if baseline else 0.0
    return f"{change:+.1f}%"


def render_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table for a person; aligned plain columns when not on a terminal."""
    if not sys.stdout.isatty():
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
        for line in [columns, *rows]:
            cells = [cell.ljust(w) for cell, w in zip(line, widths, strict=True)]
            sys.stdout.write("  ".join(cells).rstrip() + "\n")
        return
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console().print(table)
