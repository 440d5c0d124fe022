"""``trainee run``, ``stop``, ``attach``, ``logs`` and ``report``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from trainee import errors
from trainee.cli import daemon_client
from trainee.cli.commands.project import project_root
from trainee.cli.output import print_json

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
        out.write(
            f"# the next session would be {result['session']}; its round {result['round']} "
            "(the baseline) would run:\n"
        )
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
    result = _start_session(params, root)
    if result is None:
        return EXIT_INTERRUPTED
    if args.detach:
        print_json(result) if args.json else sys.stdout.write(f"{result['session']}\n")
        return 0
    from trainee.cli.live import watch_session

    return watch_session(
        str(result["session"]), root, json_mode=args.json, since=int(result.get("cursor", 0))
    )


EXIT_INTERRUPTED = 130


def _start_session(params: dict[str, Any], root: str) -> dict[str, Any] | None:
    """``loop_start``; a Ctrl-C while the daemon is still starting the session (the
    provider's live test takes seconds) stops the session as soon as it exists, rather
    than leaving it to run unseen. None when it was stopped so."""
    import signal

    interrupted = False

    def on_interrupt(signum: int, frame: object) -> None:
        # The first Ctrl-C only takes note: an exception raised inside the wait for the
        # answer could lose the answer, and with it the id of the session to stop.
        nonlocal interrupted
        if interrupted:
            raise KeyboardInterrupt  # the second leaves the session running
        interrupted = True
        sys.stderr.write(
            "\ninterrupted: the daemon is still starting the session; it is stopped as "
            "soon as it exists (Ctrl-C again to leave it running)\n"
        )

    client = daemon_client.ensure_daemon()
    with client:
        previous = signal.signal(signal.SIGINT, on_interrupt)
        try:
            result: dict[str, Any] = client.call("loop_start", params)
        finally:
            signal.signal(signal.SIGINT, previous)
        if not interrupted:
            return result
        session = str(result["session"])
        # the stop waits for the round's grace (and a cluster's): no time limit here; a
        # session that has already ended is as good as stopped
        with contextlib.suppress(errors.NotFound, errors.InvalidState):
            client.call("loop_stop", {"project_root": root, "session": session}, timeout=None)
        sys.stderr.write(f"{session} stopped\n")
        return None


def current_project(value: str | None) -> str | None:
    """``--project-root``, else the current folder when it is a trainee project."""
    if value:
        return project_root(value)
    here = project_root(None)
    return here if os.path.isdir(os.path.join(here, ".trainee")) else None


def _session_params(args: argparse.Namespace, session: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if session:
        params["session"] = session
    root = current_project(getattr(args, "project_root", None))
    if root:
        params["project_root"] = root
    return params


def cmd_stop(args: argparse.Namespace) -> int:
    result = daemon_client.call("loop_stop", _session_params(args, args.session))
    if args.json:
        print_json(result)
        return 0
    rec = result["session"]
    sys.stdout.write(f"{rec['id']}: {rec['status']} ({rec.get('stop_reason')})\n")
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    from trainee.cli.live import watch_session

    params = _session_params(args, args.session)
    state = daemon_client.call("loop_get", params)  # NotFound for an unknown session
    rec = state["session"]
    if not state["running"]:
        sys.stdout.write(
            f"{rec['id']} is not running: {rec['status']} ({rec.get('stop_reason')}); "
            f"report: trainee report {rec['id']}\n"
        )
        return 0
    current = state.get("current_round")
    if current and not args.json:
        sys.stdout.write(f"{rec['id']}: round {current['index']} is {current['status']}\n")
    return watch_session(rec["id"], rec["project_root"], json_mode=args.json, since=None)


def cmd_logs(args: argparse.Namespace) -> int:
    params = _session_params(args, args.session)
    client = daemon_client.ensure_daemon()
    with client:
        state = client.call("loop_get", params)
        root = state["session"]["project_root"]
        rounds = [r["index"] for r in state["rounds"]]
        if not rounds:
            return 0
        round_index = args.round or rounds[-1]
        if round_index not in rounds:
            from trainee import errors

            raise errors.NotFound(
                f"{args.session} has no round {round_index} (rounds: {rounds[0]}..{rounds[-1]})",
                {"round": round_index},
            )
        tail = {"session": args.session, "project_root": root, "round": round_index, "offset": 0}
        while True:
            result = client.call("logs_tail", tail)
            sys.stdout.write(result["data"])
            sys.stdout.flush()
            tail["offset"] = result["next_offset"]
            if result["overflow"]:
                continue
            if not args.follow:
                return 0
            state = client.call("loop_get", {"session": args.session, "project_root": root})
            later = [r["index"] for r in state["rounds"] if r["index"] > tail["round"]]
            if later:  # the round ended and the next began: follow it
                tail.update(round=later[0], offset=0)
                sys.stdout.write(f"\n==> round {later[0]} <==\n")
                continue
            if not state["running"]:
                return 0
            try:
                time.sleep(FOLLOW_INTERVAL)
            except KeyboardInterrupt:
                return 0


def cmd_report(args: argparse.Namespace) -> int:
    result = daemon_client.call("session_report", _session_params(args, args.session))
    if args.output:
        try:
            with open(args.output, "w") as fh:
                fh.write(str(result.get("markdown", "")))
        except OSError as exc:
            from trainee import errors

            raise errors.InvalidParams(
                f"--output {args.output}: cannot write it: {exc.strerror}",
                {"field": "--output", "reason": exc.strerror},
            ) from None
    if args.json:
        print_json({k: v for k, v in result.items() if k != "markdown"})
    else:
        sys.stdout.write(f"report: {args.output or result['report']}\n")
        sys.stdout.write(f"ledgers: {result['ledger_csv']}, {result['ledger_jsonl']}\n")
    return 0
