"""How the CLI prints and exits: one table from error class to exit status."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from trainee import errors

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

# Most specific first: the first class in an error's MRO found here wins.
EXIT_STATUS: dict[type[errors.TraineeError], int] = {
    errors.InvalidParams: 2,
    errors.ConfigError: 3,
    errors.NotFound: 4,
    errors.InvalidState: 5,
    errors.SandboxError: 6,
    errors.LaunchError: 7,
    errors.NotAvailable: 8,
    errors.ProviderError: 9,
    errors.BudgetExceeded: 10,
    errors.ProtocolError: 11,
    errors.InternalError: 70,
    errors.DaemonNotRunning: 69,
    errors.ShuttingDown: 75,
    errors.TraineeError: 1,
}
EXIT_INTERRUPTED = 130


def exit_status_for(exc: errors.TraineeError) -> int:
    for cls in type(exc).__mro__:
        if cls in EXIT_STATUS:
            return EXIT_STATUS[cls]
    return 1


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _describe(exc: errors.TraineeError) -> str:
    lines = [f"error: {exc.message}"]
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
