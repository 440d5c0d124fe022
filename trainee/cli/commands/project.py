"""``trainee init``, ``prepare``, ``tunables discover`` and ``doctor``: one method each."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from trainee.cli import daemon_client
from trainee.cli.output import print_json, render_mapping


def project_root(value: str | None) -> str:
    """The project folder as an absolute path (the daemon has another cwd)."""
    return str(Path(value or os.getcwd()).resolve())


def _show(args: argparse.Namespace, title: str, result: Any) -> int:
    if args.json or not isinstance(result, dict):
        print_json(result)
    else:
        render_mapping(title, result)
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {
        "project_root": project_root(args.project_root),
        "force": args.force,
        "skip_provider_test": args.skip_provider_test,
    }
    if args.baseline_config:
        params["baseline_config"] = args.baseline_config
    return _show(args, "trainee init", daemon_client.call("project_init", params))


def cmd_prepare(args: argparse.Namespace) -> int:
    params = {
        "project_root": project_root(args.project_root),
        "replace": args.replace,
        "skip_provider_test": args.skip_provider_test,
    }
    return _show(args, "trainee prepare", daemon_client.call("project_prepare", params))


def cmd_tunables(args: argparse.Namespace) -> int:
    params = {
        "project_root": project_root(args.project_root),
        "apply": args.apply,
        "replace": args.replace,
        "limit": args.limit,
    }
    return _show(args, "tunables", daemon_client.call("tunables_discover", params))


def cmd_doctor(args: argparse.Namespace) -> int:
    params = {
        "project_root": project_root(args.project_root),
        "skip_provider_test": args.skip_provider_test,
    }
    return _show(args, "trainee doctor", daemon_client.call("project_doctor", params))
