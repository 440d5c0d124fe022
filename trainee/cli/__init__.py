"""The thin CLI: parse arguments, resolve paths, call one method, render the answer.

It never imports the daemon's heavy dependencies (litellm, anyio, aiosqlite,
starlette, uvicorn, watchfiles, ruamel): command modules are imported lazily
from the table below, and each talks to the daemon through ``trainee.rpc``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

import trainee

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

# command -> "module:function" (pip's lazy command table)
COMMANDS: dict[str, tuple[str, str]] = {
    "version": ("trainee.cli.commands.basic:cmd_version", "print the version"),
    "serve": ("trainee.cli.commands.daemon:cmd_serve", "run the daemon in the foreground"),
    "daemon": (
        "trainee.cli.commands.daemon:cmd_daemon",
        "start, stop or inspect the background daemon",
    ),
    "status": ("trainee.cli.commands.daemon:cmd_status", "show the daemon and its sessions"),
    "tools": ("trainee.cli.commands.tools:cmd_tools", "print OpenAI-style function schemas"),
    "call": ("trainee.cli.commands.tools:cmd_call", "call one tool and print its JSON result"),
    "init": ("trainee.cli.commands.project:cmd_init", "create .trainee/ in a training project"),
    "prepare": ("trainee.cli.commands.project:cmd_prepare", "validate and fill tuning.yaml"),
    "tunables": ("trainee.cli.commands.project:cmd_tunables", "discover tunable parameters"),
    "doctor": ("trainee.cli.commands.project:cmd_doctor", "check that a project is ready to run"),
    "run": ("trainee.cli.commands.session:cmd_run", "start the tuning loop (or --dry-run)"),
    "stop": ("trainee.cli.commands.session:cmd_stop", "ask a session to stop"),
    "attach": ("trainee.cli.commands.session:cmd_attach", "watch a session live"),
    "logs": ("trainee.cli.commands.session:cmd_logs", "print a round's log (-f to follow)"),
    "report": ("trainee.cli.commands.session:cmd_report", "write a session's report"),
    "webui": ("trainee.cli.commands.daemon:cmd_webui", "open the web dashboard"),
    "mcp": ("trainee.cli.commands.mcp:cmd_mcp", "serve MCP over stdio for coding agents"),
}


def _add_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("project_root", nargs="?", default=None, help="training project (default: cwd)")


class _Skipped:
    """Stands in for the subparser of a command that is not being run (cheaper start-up)."""

    def add_argument(self, *args: object, **kwargs: object) -> None:
        return None

    def add_mutually_exclusive_group(self, *args: object, **kwargs: object) -> _Skipped:
        return self


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``only``) the top level plus that one command's subparser."""
    parser = argparse.ArgumentParser(
        prog="trainee",
        description="Run the outer loop of training for a project: run, watch, measure, decide, repeat.",
    )
    parser.add_argument("--version", action="version", version=f"trainee {trainee.__version__}")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str) -> Any:
        if only is not None and name != only:
            return _Skipped()
        p = sub.add_parser(name, help=COMMANDS[name][1], description=COMMANDS[name][1])
        p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        return p

    add("version")

    for name in ("serve", "webui"):
        p = add(name)
        _add_root(p)
        p.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
        p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
        p.add_argument("--reload", action="store_true", help="restart when trainee's code changes")
        if name == "webui":
            p.add_argument("--no-open", action="store_true", help="do not open a browser")

    p = add("daemon")
    p.add_argument("action", choices=["start", "stop", "status"])

    add("status")

    p = add("tools")
    p.add_argument("--base-url", default=None, help="ask a daemon over HTTP instead of the socket")
    p.add_argument("--name", default=None, help="only this tool")

    p = add("call")
    p.add_argument("tool", metavar="TOOL_NAME")
    p.add_argument("--input", default=None, help="JSON, @file or - for stdin")

    p = add("init")
    _add_root(p)
    p.add_argument("--baseline-config", default=None, metavar="PATH")
    p.add_argument(
        "--command",
        dest="train_command",
        default=None,
        metavar="CMD",
        help='the training command, quoted ("python train.py --cfg a.yaml"); '
        "discovery reads its script or module",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="regenerate the files; fields you changed in project.yaml are kept",
    )
    p.add_argument("--skip-provider-test", action="store_true")

    p = add("prepare")
    _add_root(p)
    p.add_argument("--replace", action="store_true", help="regenerate tuning.yaml")
    p.add_argument("--skip-provider-test", action="store_true")

    p = add("tunables")
    p.add_argument("action", choices=["discover"])
    _add_root(p)
    p.add_argument("--apply", action="store_true", help="write the suggestions to tuning.yaml")
    p.add_argument("--replace", action="store_true", help="replace existing params")
    p.add_argument("--limit", type=int, default=32, help="at most N suggestions (default 32)")

    p = add("doctor")
    _add_root(p)
    p.add_argument("--skip-provider-test", action="store_true")
    p.add_argument(
        "--policy",
        default=None,
        help="the policy you will run with (default: decision.policy); tpe, random and "
        "external need no provider",
    )

    p = add("run")
    _add_root(p)
    p.add_argument(
        "--dry-run", action="store_true", help="print the baseline command, start nothing"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--guarded", dest="security_mode", action="store_const", const="guarded")
    mode.add_argument("--unsafe", dest="security_mode", action="store_const", const="unsafe")
    p.add_argument("--detach", action="store_true", help="return at once with the session id")
    p.add_argument("--resume", metavar="SESSION_ID", default=None)
    p.add_argument("--max-rounds", type=int, default=None)
    p.add_argument("--policy", default=None)

    p = add("stop")
    p.add_argument("session", nargs="?", default=None)
    p.add_argument("--project-root", default=None, help="default: the current folder's project")

    p = add("attach")
    p.add_argument("session")
    p.add_argument("--project-root", default=None, help="default: the current folder's project")

    p = add("logs")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("session")
    p.add_argument("round", nargs="?", type=int, default=None)
    p.add_argument("--project-root", default=None)

    p = add("report")
    p.add_argument("session")
    p.add_argument("--output", default=None, metavar="FILE")
    p.add_argument("--project-root", default=None, help="default: the current folder's project")

    p = add("mcp")
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default="WARNING",
        help="what to log on stderr (default WARNING)",
    )
    return parser


def _resolve(name: str) -> Callable[[argparse.Namespace], int]:
    target = COMMANDS[name][0]
    module_name, _, func_name = target.partition(":")
    func: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(module_name), func_name
    )
    return func


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    first = next((w for w in words if not w.startswith("-")), None)
    only = first if first in COMMANDS and first == (words[0] if words else None) else None
    args = build_parser(only).parse_args(words)
    if args.command is None:  # bare `trainee` starts the service, like `trainee serve`
        args = build_parser("serve").parse_args(["serve", *words])
    from trainee.cli.output import run_command

    return run_command(_resolve(args.command), args)


__all__ = ["COMMANDS", "build_parser", "main"]
