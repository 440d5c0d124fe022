"""``trainee init``, ``prepare``, ``tunables discover``, ``doctor``: one method each, rendered."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from trainee.cli import daemon_client
from trainee.cli.output import console, print_json

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

EXIT_DOCTOR_FAILED = 1


def project_root(value: str | None) -> str:
    """The project folder as an absolute path (the daemon has another cwd)."""
    return str(Path(value or os.getcwd()).resolve())


def project_option(root: str | None) -> str:
    """`` --project-root ROOT`` for a command to suggest, unless ROOT is the current
    folder's project (where commands find it by themselves)."""
    import shlex

    if root is None or root == project_root(None):
        return ""
    return f" --project-root {shlex.quote(root)}"


def _lines(items: list[str], label: str) -> None:
    if items:
        sys.stdout.write(f"{label}: {', '.join(items)}\n")


EXIT_PROVIDER_TEST_FAILED = 1
"""init and prepare when the project's policy needs a provider that failed its live test
(their files are written all the same)."""


def provider_failed(test: dict[str, Any] | None) -> bool:
    """Whether the live test ran, was needed, and failed."""
    return test is not None and not test.get("skipped") and not test.get("ok")


def _provider_line(test: dict[str, Any] | None) -> None:
    if not test:
        return
    if test.get("skipped"):
        sys.stdout.write(f"provider: live test skipped ({test.get('reason') or 'asked'})\n")
    elif test.get("ok"):
        sys.stdout.write(f"provider: {test.get('provider')} {test.get('model')} answered\n")
    else:
        sys.stderr.write(
            f"LLM provider test failed: {test.get('error')}\n"
            f"hint: policy {test.get('policy') or 'llm'} needs a provider: set "
            "TRAINEE_LLM_PROVIDER and its key (see README), or set decision.policy: tpe|random "
            "in .trainee/project.yaml; --skip-provider-test to set up offline\n"
        )


def _provider_exit(result: dict[str, Any]) -> int:
    return EXIT_PROVIDER_TEST_FAILED if provider_failed(result.get("provider_test")) else 0


def cmd_init(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {
        "project_root": project_root(args.project_root),
        "force": args.force,
        "skip_provider_test": args.skip_provider_test,
        "env": dict(os.environ),
    }
    if args.baseline_config:
        params["baseline_config"] = args.baseline_config
    if args.train_command is not None:
        params["command"] = args.train_command
    result = daemon_client.call("project_init", params)
    if args.json:
        print_json(result)
        return _provider_exit(result)
    init = result["init"]
    disc = init["discovery"]
    sys.stdout.write(f"trainee init: {init['project_root']}\n")
    _lines(init["created"], "created")
    _lines(init["rewritten"], "rewritten")
    _lines(init["kept"], "kept (use --force to rewrite)")
    sys.stdout.write(f"environment: {disc['environment']} ({disc['environment_reason']})\n")
    if init.get("entrypoint"):
        sys.stdout.write(f"entrypoint: {init['entrypoint']}\n")
    else:
        sys.stdout.write("entrypoint: NOT FOUND (see the note below)\n")
    if init.get("command"):
        sys.stdout.write(f"command: {' '.join(init['command'])}\n")
    if init.get("output_flag"):
        sys.stdout.write(f"output: {init['output_flag']} receives each round's outputs folder\n")
    for lim in init.get("limits", []):
        mark = f"  <- {lim['problem']}" if lim.get("problem") else ""
        sys.stdout.write(f"{lim['kind']}: {lim['flag']} = {lim['value']}{mark}\n")
    for change in init.get("kept_fields", []):
        sys.stdout.write(
            f"kept your {change['field']}: {change['yours']!r} (init would write "
            f"{change['generated']!r})\n"
        )
    for change in init.get("replaced_fields", []):
        sys.stdout.write(
            f"replaced {change['field']}: {change['yours']!r} -> {change['generated']!r} "
            f"({change['reason']})\n"
        )
    if init.get("backup"):
        sys.stdout.write(f"backup of the old project.yaml: {init['backup']}\n")
    for i, m in enumerate(init.get("metrics", [])):
        role = "primary metric" if i == 0 else "metric"
        sys.stdout.write(f"{role}: {m['name']} ({m['split']}, {m['goal']}) from {m['where']}\n")
    for note in init.get("notes", []):
        sys.stdout.write(f"note: {note}\n")
    sys.stdout.write(
        "next: review .trainee/project.yaml (values marked CHOOSE must be set), then "
        "`trainee prepare`\n"
    )
    _provider_line(result.get("provider_test"))
    return _provider_exit(result)


def cmd_prepare(args: argparse.Namespace) -> int:
    params = {
        "project_root": project_root(args.project_root),
        "replace": args.replace,
        "skip_provider_test": args.skip_provider_test,
        "env": dict(os.environ),
    }
    result = daemon_client.call("project_prepare", params)
    if args.json:
        print_json(result)
        return _provider_exit(result)
    prep = result["prepare"]
    sys.stdout.write(f"trainee prepare: {prep['project_root']}\n")
    sys.stdout.write(f"tuning.yaml: {prep['tuning']}")
    if prep["params_written"]:
        sys.stdout.write(f" ({', '.join(prep['params_written'])})")
    sys.stdout.write(f"\ncontext.md: {prep['context']}\n")
    for c in prep.get("constraints", []):
        sys.stdout.write(f"constraint: {c['expr']} ({c['reason']})\n")
    _excluded(prep.get("excluded", []))
    for skipped in prep.get("skipped", []):
        sys.stdout.write(f"skipped {skipped['name']}: {skipped['reason']}\n")
    metrics = prep.get("metrics", [])
    sys.stdout.write(
        f"metrics: {', '.join(metrics)} (primary first)\n"
        if metrics
        else "metrics: none in project.yaml (rounds are ranked by the built-in training loss)\n"
    )
    for note in prep.get("notes", []):
        sys.stdout.write(f"note: {note}\n")
    if prep["params_written"]:
        sys.stdout.write("review .trainee/tuning.yaml: only safe parameters should be listed\n")
    _provider_line(result.get("provider_test"))
    return _provider_exit(result)


def _excluded(items: list[dict[str, Any]]) -> None:
    """One line per candidate left out, with the reason (beyond-the-limit ones counted)."""
    extra = [e for e in items if e["reason"].startswith("beyond the limit")]
    for e in items:
        if e not in extra:
            sys.stdout.write(f"left out {e['key']}: {e['reason']}\n")
    if extra:
        sys.stdout.write(f"left out {len(extra)} more beyond the limit (see --limit)\n")


def _bounds(s: dict[str, Any]) -> str:
    if s.get("choices"):
        return "|".join(str(c) for c in s["choices"])
    if s.get("min_value") is None and s.get("max_value") is None:
        return ""
    return f"{s.get('min_value')} .. {s.get('max_value')}" + (" (log)" if s.get("log") else "")


def cmd_tunables(args: argparse.Namespace) -> int:
    params = {
        "project_root": project_root(args.project_root),
        "apply": args.apply,
        "replace": args.replace,
        **({"limit": args.limit} if args.limit is not None else {}),
    }
    result = daemon_client.call("tunables_discover", params)
    if args.json:
        print_json(result)
        return 0
    from rich.table import Table

    table = Table(title=f"tunable suggestions ({len(result['suggestions'])})")
    for col in ("name", "target", "type", "default", "range", "reason"):
        table.add_column(col, overflow="fold")
    for s in result["suggestions"]:
        target = s.get("flag") or s.get("config_path") or s.get("override") or ""
        table.add_row(s["name"], target, s["type"], str(s.get("default")), _bounds(s), s["reason"])
    console().print(table)
    for c in result.get("constraints", []):
        sys.stdout.write(f"constraint: {c['expr']} ({c['reason']})\n")
    _excluded(result["excluded"])
    for note in result.get("notes", []):
        sys.stdout.write(f"note: {note}\n")
    if result.get("applied"):
        _lines(result["written"], "written to tuning.yaml")
        for skipped in result.get("skipped", []):
            sys.stdout.write(f"skipped {skipped['name']}: {skipped['reason']}\n")
    else:
        sys.stdout.write("nothing written: review, then `trainee tunables discover --apply`\n")
    return 0


# Method names a fix may mention, as the command a person types.
_COMMAND_FOR_METHOD = {
    "project_init": "trainee init",
    "project_prepare": "trainee prepare",
    "tunables_discover": "trainee tunables discover",
    "project_doctor": "trainee doctor",
    "loop_dry_run": "trainee run --dry-run",
    "loop_start": "trainee run",
    "loop_stop": "trainee stop",
}


def actionable_fix(check: dict[str, Any], root: str) -> str:
    """A doctor row's fix as something to do here: ``trainee init`` when project.yaml
    is missing (not "edit" a file that is not there), commands rather than method names."""
    fix = str(check.get("fix") or "")
    missing = not os.path.exists(os.path.join(root, ".trainee", "project.yaml"))
    if check.get("name") == "config" and check.get("status") == "fail" and missing:
        return "run `trainee init` to create .trainee/project.yaml"
    for method, command in _COMMAND_FOR_METHOD.items():
        fix = fix.replace(method, f"`{command}`")
    return fix


def cmd_doctor(args: argparse.Namespace) -> int:
    params = {
        "project_root": project_root(args.project_root),
        "skip_provider_test": args.skip_provider_test,
        "env": dict(os.environ),
    }
    if args.policy is not None:
        params["policy"] = args.policy
    report = daemon_client.call("project_doctor", params)
    if args.json:
        print_json(report)
        return 0 if report["ok"] else EXIT_DOCTOR_FAILED
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"trainee doctor: {report['project_root']}")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    colors = {"pass": "green", "warn": "yellow", "fail": "bold red"}
    for check in report["checks"]:
        status = check["status"]
        table.add_row(
            check["name"],
            f"[{colors[status]}]{status}[/]",
            escape(check["detail"]),
            escape(actionable_fix(check, report["project_root"])),
        )
    console().print(table)
    if not report["ok"]:
        sys.stdout.write("not ready: fix the failed checks above\n")
        return EXIT_DOCTOR_FAILED
    return 0
