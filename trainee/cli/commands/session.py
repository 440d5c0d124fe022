"""``trainee run``, ``stop``, ``attach``, ``logs`` and ``report``."""

from __future__ import annotations

import argparse
import os
import sys
import time

from trainee.cli import daemon_client
from trainee.cli.commands.project import project_root
from trainee.cli.output import print_json, render_mapping

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

FOLLOW_INTERVAL = 0.25


def cmd_run(args: argparse.Namespace) -> int:
    root = project_root(args.project_root)
    env = dict(os.environ)
    if args.dry_run:
        params: dict[str, Any] = {"project_root": root, "env": env}
        if args.security_mode:
            params["security_mode"] = args.security_mode
        result = daemon_client.call("loop_dry_run", params)
        if args.json:
            print_json(result)
            return 0
        out = sys.stdout
        out.write(f"# baseline command ({result['security_mode']} mode), run in {result['cwd']}:\n")
        out.write(result["command"] + "\n")
        if result["config_path"]:
            out.write(f"# round config: {result['config_path']}\n")
            out.write(result["config_diff"] or "# (identical to the baseline config)\n")
        out.write("# environment set for the job:\n")
        for key, value in sorted(result["env"].items()):
            out.write(f"#   {key}={value}\n")
        out.write("# nothing was started and no runtime database was created\n")
        return 0
    params = {"project_root": root, "env": env, "cwd": os.getcwd()}
    for key in ("security_mode", "max_rounds", "policy", "resume"):
        value = getattr(args, key)
        if value is not None:
            params[key] = value
    result = daemon_client.call("loop_start", params)
    if args.detach:
        print_json(result) if args.json else sys.stdout.write(f"{result['session']}\n")
        return 0
    from trainee.cli.live import watch_session

    return watch_session(str(result["session"]), root, json_mode=args.json)


def cmd_stop(args: argparse.Namespace) -> int:
    params = {"session": args.session} if args.session else {}
    result = daemon_client.call("loop_stop", params)
    print_json(result) if args.json else render_mapping("trainee stop", result)
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    from trainee.cli.live import watch_session

    return watch_session(args.session, None, json_mode=args.json)


def cmd_logs(args: argparse.Namespace) -> int:
    round_index = args.round or 1
    params: dict[str, Any] = {"session": args.session, "round": round_index, "offset": 0}
    if args.project_root:
        params["project_root"] = project_root(args.project_root)
    client = daemon_client.ensure_daemon()
    with client:
        while True:
            result = client.call("logs_tail", params)
            sys.stdout.write(result["data"])
            sys.stdout.flush()
            params["offset"] = result["next_offset"]
            if result["overflow"]:
                continue
            if not args.follow:
                return 0
            try:
                time.sleep(FOLLOW_INTERVAL)
            except KeyboardInterrupt:
                return 0


def cmd_report(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"session": args.session}
    result = daemon_client.call("session_report", params)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(str(result.get("markdown", "")))
    print_json(result) if args.json else render_mapping("trainee report", result)
    return 0
