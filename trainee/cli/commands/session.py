"""``trainee run``, ``stop``, ``attach``, ``logs``, ``sessions`` and ``report``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from trainee import errors
from trainee.cli import daemon_client
from trainee.cli.commands.project import project_option, project_root
from trainee.cli.output import (
    fmt_best_vs_baseline,
    fmt_duration,
    fmt_when,
    print_json,
    render_table,
)

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
        return errors.EXIT_INTERRUPTED
    session = str(result["session"])
    if args.detach:
        if args.json:
            print_json(result)
            return 0
        sys.stdout.write(f"{session}\n")  # alone on stdout: `id=$(trainee run --detach)`
        where = project_option(root)
        sys.stderr.write(
            f"{session} runs in the background (policy {result['policy']}, up to "
            f"{result['max_rounds']} rounds)\n"
            f"  watch it:    trainee attach {session}{where}\n"
            f"  follow logs: trainee logs -f {session}{where}\n"
            f"  stop it:     trainee stop {session}{where}\n"
        )
        return 0
    from trainee.cli.live import watch_session

    return watch_session(
        session,
        root,
        json_mode=args.json,
        since=int(result.get("cursor", 0)),
        full_output=args.full_output,
    )


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
            raise KeyboardInterrupt  # the second cancels the call (RpcClient.call sends the cancel)
        interrupted = True
        sys.stderr.write(
            "\ninterrupted: the daemon is still starting the session; it is stopped as "
            "soon as it exists (Ctrl-C again to cancel the start: a session already "
            "made runs on)\n"
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
        # the daemon answers within loop_stop's wait (the round may still be ending, within
        # its grace); a session that has already ended is as good as stopped
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
    """Stop the named (or running) session; nothing running is success, said so."""
    params = {**_session_params(args, args.session), "wait_sec": args.wait}
    # the daemon answers after at most --wait seconds; the socket's limit is above that
    result = daemon_client.call("loop_stop", params, timeout=args.wait + 30)
    if args.json:
        print_json(result)
        return 0
    sys.stdout.write(f"{result['message']}\n")
    if result["stopped"] and not result.get("ended", True):
        rec = result["state"]["session"]
        sys.stdout.write(f"it ends within its grace; see it with: trainee status {rec['id']}\n")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    """End a running round early (``round_prune``); says how it ended."""
    params = {
        **_session_params(args, args.session),
        "round": args.round,
        "reason": args.reason,
        "wait_sec": args.wait,
    }
    result = daemon_client.call("round_prune", params, timeout=args.wait + 30)
    if args.json:
        print_json(result)
        return 0
    sys.stdout.write(f"{result['message']}\n")
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
        sys.stdout.write(
            f"{rec['id']}: round {current['index']} is {current['status']} "
            "(Ctrl-C detaches; the session goes on)\n"
        )
    return watch_session(
        rec["id"],
        rec["project_root"],
        json_mode=args.json,
        since=None,
        attach=True,
        full_output=args.full_output,
    )


def cmd_logs(args: argparse.Namespace) -> int:
    """A round's log as it is; with ``-f``, every round from that one on, each under a
    header, until the session ends (said in a last header)."""
    params = _session_params(args, args.session)
    client = daemon_client.ensure_daemon()
    try:
        with client:
            return _logs(client, args, params)
    except KeyboardInterrupt:
        if args.follow:
            sys.stdout.write("\n")
            return 0
        raise


def _logs(client: Any, args: argparse.Namespace, params: dict[str, Any]) -> int:
    out = sys.stdout
    state = client.call("loop_get", params)
    sid, root = state["session"]["id"], state["session"]["project_root"]
    get = {"session": sid, "project_root": root}
    rounds = [r["index"] for r in state["rounds"]]
    if (
        args.round is not None
        and args.round not in rounds
        and not (args.follow and state["running"])
    ):
        shown = f"rounds: {rounds[0]}..{rounds[-1]}" if rounds else "no round yet"
        raise errors.NotFound(f"{sid} has no round {args.round} ({shown})", {"round": args.round})
    if not args.follow:
        if not rounds:
            sys.stderr.write(f"{sid} has no round yet\n")
            return 0
        _copy_log(client, sid, root, args.round or rounds[-1], out)
        return 0
    current = args.round or (rounds[-1] if rounds else 1)
    while current not in rounds:  # a session that has only just started
        if not state["running"]:
            _end_header(out, state, newline=False)
            return 0
        time.sleep(FOLLOW_INTERVAL)
        state = client.call("loop_get", get)
        rounds = [r["index"] for r in state["rounds"]]
    out.write(f"==> round {current} <==\n")
    tail = {"session": sid, "project_root": root, "round": current, "offset": 0}
    at_line_start = True
    while True:
        at_line_start = _drain(client, tail, out, at_line_start)
        out.flush()
        state = client.call("loop_get", get)
        later = [r["index"] for r in state["rounds"] if r["index"] > tail["round"]]
        if later:  # the round ended and the next began: the rest of this one, then that one
            at_line_start = _drain(client, tail, out, at_line_start)
            tail.update(round=later[0], offset=0)
            out.write(("" if at_line_start else "\n") + f"\n==> round {later[0]} <==\n")
            at_line_start = True
            continue
        if not state["running"]:  # what the round wrote as the session ended, then the end
            at_line_start = _drain(client, tail, out, at_line_start)
            _end_header(out, state, newline=not at_line_start)
            return 0
        time.sleep(FOLLOW_INTERVAL)


def _drain(client: Any, tail: dict[str, Any], out: Any, at_line_start: bool) -> bool:
    """Write what is left of ``tail``'s round; whether the output now ends a line."""
    while True:
        result = client.call("logs_tail", tail)
        tail["offset"] = result["next_offset"]
        if result["data"]:
            out.write(result["data"])
            at_line_start = result["data"].endswith("\n")
        if not result["overflow"]:
            return at_line_start


def _copy_log(client: Any, sid: str, root: str, round_index: int, out: Any) -> None:
    tail = {"session": sid, "project_root": root, "round": round_index, "offset": 0}
    while True:
        result = client.call("logs_tail", tail)
        out.write(result["data"])
        tail["offset"] = result["next_offset"]
        if not result["overflow"]:
            return


def _end_header(out: Any, state: dict[str, Any], *, newline: bool) -> None:
    rec = state["session"]
    end = f"{rec['id']} {rec['status']}" + (
        f" ({rec['stop_reason']})" if rec.get("stop_reason") else ""
    )
    if rec.get("best_round"):
        end += f"; best round {rec['best_round']}"
    out.write(("\n" if newline else "") + f"\n==> {end} <==\n")
    out.flush()


def cmd_sessions(args: argparse.Namespace) -> int:
    root = project_root(args.project_root)
    params: dict[str, Any] = {"project_root": root}
    if args.limit is not None:
        params["limit"] = args.limit
    sessions = daemon_client.call("sessions_list", params)["sessions"]
    if args.json:
        print_json({"project_root": root, "sessions": sessions})
        return 0
    if not sessions:
        sys.stdout.write(f"no session in {root} yet (start one: trainee run)\n")
        return 0
    render_sessions(f"sessions of {root}", sessions)
    return 0


def render_sessions(
    title: str, sessions: list[dict[str, Any]], *, with_project: bool = False
) -> None:
    """``sessions_list`` entries as one table (oldest first)."""
    metrics = {s.get("metric") for s in sessions if s.get("metric")}
    metric = metrics.pop() if len(metrics) == 1 else "metric"
    rows = []
    for s in sessions:
        same = s.get("best_round") is not None and s.get("best_round") == s.get("baseline_round")
        best = fmt_best_vs_baseline(s.get("best_metric"), s.get("baseline_metric"), same_round=same)
        if len(metrics) > 1 and s.get("metric"):
            best = f"{s['metric']} {best}"
        rows.append(
            [
                s["id"],
                s["status"],
                s.get("stop_reason") or "",
                f"{s['rounds']}/{s['max_rounds']}",
                best,
                s["policy"],
                fmt_when(s.get("started_at")),
                fmt_duration(s.get("duration_sec")),
                *([s["project_root"]] if with_project else []),
            ]
        )
    columns = ["session", "status", "stop reason", "rounds", f"best vs baseline ({metric})"]
    columns += ["policy", "started", "duration", *(["project"] if with_project else [])]
    render_table(title, columns, rows)


def cmd_report(args: argparse.Namespace) -> int:
    result = daemon_client.call("session_report", _session_params(args, args.session))
    if args.output:
        try:
            with open(args.output, "w") as fh:
                fh.write(str(result.get("markdown", "")))
        except OSError as exc:
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
