"""The thin CLI: parse arguments, resolve paths, call one method, render the answer.

It never imports the daemon's heavy dependencies (litellm, anyio, aiosqlite,
starlette, uvicorn, watchfiles, ruamel): command modules are imported lazily
from the table below, and each talks to the daemon through ``trainee.rpc``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable, Sequence

import trainee
from trainee import ids, paths
from trainee.policies import POLICIES

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
    "status": (
        "trainee.cli.commands.daemon:cmd_status",
        "show the daemon, its running sessions and this project's latest ones",
    ),
    "sessions": (
        "trainee.cli.commands.session:cmd_sessions",
        "list a project's sessions: status, rounds, best vs baseline, duration",
    ),
    "tools": ("trainee.cli.commands.tools:cmd_tools", "print OpenAI-style function schemas"),
    "call": ("trainee.cli.commands.tools:cmd_call", "call one tool and print its JSON result"),
    "init": ("trainee.cli.commands.project:cmd_init", "create .trainee/ in a training project"),
    "prepare": ("trainee.cli.commands.project:cmd_prepare", "validate and fill tuning.yaml"),
    "tunables": ("trainee.cli.commands.project:cmd_tunables", "discover tunable parameters"),
    "doctor": ("trainee.cli.commands.project:cmd_doctor", "check that a project is ready to run"),
    "run": ("trainee.cli.commands.session:cmd_run", "start the tuning loop (or --dry-run)"),
    "stop": ("trainee.cli.commands.session:cmd_stop", "ask a session to stop"),
    "prune": (
        "trainee.cli.commands.session:cmd_prune",
        "end a running round early with a reason (external and hybrid sessions)",
    ),
    "attach": (
        "trainee.cli.commands.session:cmd_attach",
        "watch a running session live (Ctrl-C detaches; the session goes on)",
    ),
    "logs": ("trainee.cli.commands.session:cmd_logs", "print a round's log (-f to follow)"),
    "report": ("trainee.cli.commands.session:cmd_report", "write a session's report"),
    "webui": ("trainee.cli.commands.daemon:cmd_webui", "open the web dashboard"),
    "mcp": ("trainee.cli.commands.mcp:cmd_mcp", "serve MCP over stdio for coding agents"),
}

POLICY_HELP = (
    "decision policy (default: decision.policy in project.yaml, else llm): "
    "llm and hybrid ask the LLM provider; tpe (Optuna) and random need none; "
    "external: an agent submits each plan"
)
PORT_HELP = (
    f"HTTP port (default ${paths.HTTP_PORT_ENV}, else {paths.DEFAULT_HTTP_PORT}; "
    "a port asked for that is taken is an error, the default gives way to a free one)"
)
SESSION_HELP = "session id: session-0001, 0001 or 1"
PROJECT_HELP = "the session's project (default: the current folder's)"


def _add_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("project_root", nargs="?", default=None, help="training project (default: cwd)")


def _at_least_one(option: str) -> Callable[[str], int]:
    """An argparse type: an integer >= 1, refused as ``OPTION must be at least 1``."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise _OptionError(f"{option} must be a whole number, got {text!r}") from None
        if value < 1:
            raise _OptionError(f"{option} must be at least 1, got {value}")
        return value

    return convert


class _OptionError(argparse.ArgumentTypeError):
    """A value check whose message names the option itself (no "argument X:" prefix)."""


def _stop_wait(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 600:
        raise argparse.ArgumentTypeError(f"must be 0 to 600 seconds, got {text!r}")
    return value


def _session_id(option: str) -> Callable[[str], str]:
    """An argparse type: ``1``, ``0001`` or ``session-0001``, as ``session-0001``."""

    def convert(text: str) -> str:
        try:
            return ids.canonical_session(text)
        except ids.IdError as exc:
            raise _OptionError(f"{option}: {exc.message}") from None

    return convert


def _round_number(text: str) -> int:
    """An argparse type: ``2``, ``0002`` or ``round-0002``, as 2."""
    try:
        return ids.parse_round(text)
    except ids.IdError as exc:
        raise _OptionError(f"ROUND: {exc.message}") from None


def _close(word: str, candidates: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean ..." for mistyped commands, choices and options
    (Python 3.14's ``suggest_on_error``, which 3.11 lacks), and value checks that name
    the option plainly."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(c) for c in choices]
        guess = _close(str(value), names)
        what = "command" if isinstance(action, argparse._SubParsersAction) else "choice"
        raise argparse.ArgumentError(
            action,
            f"unknown {what} {value!r}"
            + (f": did you mean {guess!r}?" if guess else "")
            + f" (choose from {', '.join(names)})",
        )

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:
            cause = exc.__context__
            if isinstance(cause, _OptionError):
                self.error(str(cause))
            raise

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(ns, "command", None)
            target = self.commands.get(command, self) if command else self
            target.error(_unrecognized(extras, target))
        return ns

    commands: dict[str, argparse.ArgumentParser]


def _unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    message = f"unrecognized arguments: {' '.join(extras)}"
    options = [o for o in parser._option_string_actions if o.startswith("--")]
    for word in extras:
        if word.startswith("-") and word not in ("-", "--"):
            guess = _close(word.split("=", 1)[0], options)
            if guess:
                return message + f" (did you mean {guess}?)"
    return message


class _Skipped:
    """Stands in for the subparser of a command that is not being run (cheaper start-up)."""

    def add_argument(self, *args: object, **kwargs: object) -> None:
        return None

    def add_mutually_exclusive_group(self, *args: object, **kwargs: object) -> _Skipped:
        return self


def build_parser(only: str | None = None) -> Parser:
    """The whole parser, or (``only``) the top level plus that one command's subparser."""
    parser = Parser(
        prog="trainee",
        description="Run the outer loop of training for a project: run, watch, measure, decide, "
        "repeat. Without a command: `trainee serve`.",
    )
    parser.commands = {}
    parser.add_argument("--version", action="version", version=f"trainee {trainee.__version__}")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def add(name: str) -> Any:
        if only is not None and name != only:
            return _Skipped()
        p = sub.add_parser(name, help=COMMANDS[name][1], description=COMMANDS[name][1])
        p.commands = {}
        parser.commands[name] = p
        # SUPPRESS: `trainee --json CMD` and `trainee CMD --json` are the same; an unset
        # subcommand flag must not reset the top-level one.
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
        return p

    add("version")

    for name in ("serve", "webui"):
        p = add(name)
        _add_root(p)
        p.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
        p.add_argument("--port", type=int, default=None, help=PORT_HELP)
        p.add_argument("--reload", action="store_true", help="restart when trainee's code changes")
        if name == "webui":
            p.add_argument("--no-open", action="store_true", help="do not open a browser")

    p = add("daemon")
    p.add_argument(
        "action",
        choices=["start", "stop", "status"],
        help="start one in the background, stop it, or say whether one runs",
    )

    add("status")

    p = add("sessions")
    _add_root(p)
    p.add_argument(
        "--limit", type=_at_least_one("--limit"), default=None, help="only the latest N sessions"
    )

    p = add("tools")
    p.add_argument("--base-url", default=None, help="ask a daemon over HTTP instead of the socket")
    p.add_argument("--name", default=None, help="only this tool")

    p = add("call")
    p.add_argument("tool", metavar="TOOL_NAME", help="a method name (see `trainee tools`)")
    p.add_argument("--input", default=None, help="the params: a JSON object, @file or - for stdin")

    p = add("init")
    _add_root(p)
    p.add_argument(
        "--baseline-config",
        default=None,
        metavar="PATH",
        help="the project's config file each round copies (launch.baseline_config)",
    )
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
    p.add_argument(
        "--skip-provider-test", action="store_true", help="do not live-test the LLM provider"
    )

    p = add("prepare")
    _add_root(p)
    p.add_argument("--replace", action="store_true", help="regenerate tuning.yaml")
    p.add_argument(
        "--skip-provider-test", action="store_true", help="do not live-test the LLM provider"
    )

    p = add("tunables")
    p.add_argument("action", choices=["discover"], help="discover: suggest tunable parameters")
    _add_root(p)
    p.add_argument("--apply", action="store_true", help="write the suggestions to tuning.yaml")
    p.add_argument("--replace", action="store_true", help="replace existing params")
    p.add_argument(
        "--limit",
        type=_at_least_one("--limit"),
        default=None,
        help="at most N suggestions (default 16)",
    )

    p = add("doctor")
    _add_root(p)
    p.add_argument(
        "--skip-provider-test", action="store_true", help="do not live-test the LLM provider"
    )
    p.add_argument(
        "--policy",
        default=None,
        choices=POLICIES,
        help="the policy you will run with (default: decision.policy); tpe, random and "
        "external need no provider",
    )

    p = add("run")
    _add_root(p)
    p.add_argument(
        "--dry-run", action="store_true", help="print the baseline command, start nothing"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--guarded",
        dest="security_mode",
        action="store_const",
        const="guarded",
        help="run rounds in the bubblewrap sandbox: the project read-only (the default)",
    )
    mode.add_argument(
        "--unsafe",
        dest="security_mode",
        action="store_const",
        const="unsafe",
        help="run rounds without isolation (when bwrap is missing or the job writes elsewhere)",
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="return at once with the session id (it runs on in the daemon)",
    )
    p.add_argument(
        "--resume",
        metavar="SESSION_ID",
        type=_session_id("--resume"),
        default=None,
        help="continue a stopped or failed session from where it ended",
    )
    p.add_argument(
        "--max-rounds",
        type=_at_least_one("--max-rounds"),
        default=None,
        metavar="N",
        help="stop after N rounds (default: run.max_rounds in project.yaml)",
    )
    p.add_argument("--policy", default=None, choices=POLICIES, help=POLICY_HELP)
    p.add_argument(
        "--full-output",
        action="store_true",
        help="print every line of the job's output (default: a live tail of the last lines)",
    )

    p = add("stop")
    p.add_argument(
        "session",
        nargs="?",
        type=_session_id("SESSION"),
        default=None,
        help=SESSION_HELP + " (default: the running one)",
    )
    p.add_argument("--project-root", default=None, help=PROJECT_HELP)
    p.add_argument(
        "--wait",
        type=_stop_wait,
        default=10.0,
        metavar="SEC",
        help="wait this long for the session to end (default 10; it goes on ending after)",
    )

    p = add("prune")
    p.add_argument("session", type=_session_id("SESSION"), help=SESSION_HELP)
    p.add_argument("round", type=_round_number, help="the running round to end")
    p.add_argument(
        "--reason", required=True, help="why it ends early, in one line (kept in the report)"
    )
    p.add_argument("--project-root", default=None, help=PROJECT_HELP)
    p.add_argument(
        "--wait",
        type=_stop_wait,
        default=10.0,
        metavar="SEC",
        help="wait this long for the round to end (default 10; it goes on ending after)",
    )

    p = add("attach")
    p.add_argument("session", type=_session_id("SESSION"), help=SESSION_HELP)
    p.add_argument("--project-root", default=None, help=PROJECT_HELP)
    p.add_argument(
        "--full-output", action="store_true", help="print every line of the job's output"
    )

    p = add("logs")
    p.add_argument(
        "-f", "--follow", action="store_true", help="follow round after round until the end"
    )
    p.add_argument("session", type=_session_id("SESSION"), help=SESSION_HELP)
    p.add_argument(
        "round",
        nargs="?",
        type=_round_number,
        default=None,
        help="round number (default: the latest)",
    )
    p.add_argument("--project-root", default=None, help=PROJECT_HELP)

    p = add("report")
    p.add_argument("session", type=_session_id("SESSION"), help=SESSION_HELP)
    p.add_argument(
        "--output", default=None, metavar="FILE", help="also write the Markdown report here"
    )
    p.add_argument("--project-root", default=None, help=PROJECT_HELP)

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
    lead = 0  # top-level flags before the command (`trainee --json status`)
    while lead < len(words) and words[lead] == "--json":
        lead += 1
    following = words[lead] if lead < len(words) else None
    if following is None or (following.startswith("-") and following not in _TOP_LEVEL):
        # bare `trainee [--port N ...]` starts the service, like `trainee serve`
        words = [*words[:lead], "serve", *words[lead:]]
        following = "serve"
    only = following if following in COMMANDS else None
    args = build_parser(only).parse_args(words)
    from trainee.cli.output import run_command

    return run_command(_resolve(args.command), args)


_TOP_LEVEL = ("-h", "--help", "--version")


__all__ = ["COMMANDS", "build_parser", "main"]
