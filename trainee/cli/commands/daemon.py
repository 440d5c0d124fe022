"""``trainee serve``, ``trainee daemon start|stop|status``, ``trainee status``, ``trainee webui``."""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from pathlib import Path

from trainee import errors, paths
from trainee.cli import daemon_client
from trainee.cli.output import print_json, render_mapping

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

STOP_TIMEOUT = 60.0


def _root(value: str | None) -> str | None:
    return str(Path(value).resolve()) if value else None


def cmd_serve(args: argparse.Namespace) -> int:
    """Replace this process by the daemon (the CLI itself never imports it)."""
    argv = [sys.executable, "-m", "trainee.daemon", "--host", args.host]
    if args.port is not None:
        argv += ["--port", str(args.port)]
    root = _root(args.project_root)
    if root:
        argv.append(root)
    if args.reload:
        argv.append("--reload")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 0  # pragma: no cover - execv does not return


def _hello(autostart: bool) -> dict[str, Any]:
    result: dict[str, Any] = daemon_client.call("daemon_hello", autostart=autostart)
    return result


def _show_hello(
    args: argparse.Namespace, hello: dict[str, Any], extra: dict[str, Any] | None = None
) -> None:
    if args.json:
        print_json({"running": True, **hello, **(extra or {})})
        return
    uptime = time.time() - float(hello["started_at"])
    render_mapping(
        "trainee daemon",
        {
            "daemon": f"running (pid {hello['pid']}, up {uptime:.0f}s)",
            "version": f"{hello['version']} (api {hello['api_version']})",
            "socket": hello["socket"],
            "http": hello.get("http_url") or "-",
            "project": hello.get("project_root") or "-",
            "log": str(daemon_client.log_path()),
            **(extra or {}),
        },
    )


def _not_running(args: argparse.Namespace) -> int:
    sock = paths.socket_path()
    if args.json:
        print_json({"running": False, "socket": str(sock)})
    else:
        sys.stdout.write(f"daemon: not running (socket {sock})\n")
    return errors.DaemonNotRunning.exit_status


def cmd_daemon(args: argparse.Namespace) -> int:
    if args.action == "start":
        try:
            hello = _hello(autostart=False)
            already = True
        except errors.DaemonNotRunning:
            daemon_client.spawn_daemon()
            hello = _hello(autostart=False)
            already = False
        if args.json:
            print_json({"started": not already, **hello})
        else:
            state = "already running" if already else "started"
            sys.stdout.write(f"daemon {state} (pid {hello['pid']}) on {hello['socket']}\n")
        return 0
    if args.action == "stop":
        return _stop(args)
    try:
        hello = _hello(autostart=False)
    except errors.DaemonNotRunning:
        return _not_running(args)
    _show_hello(args, hello)
    return 0


def _stop(args: argparse.Namespace) -> int:
    try:
        client = daemon_client.connect()
    except errors.DaemonNotRunning:
        return _not_running(args)
    with client:
        pid = int(client.call("daemon_hello")["pid"])
        client.call("daemon_stop")
        # The daemon closes our connection when it exits: wait for that, not a sleep.
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:
            try:
                client.next_notification(timeout=deadline - time.monotonic())
            except errors.DaemonNotRunning:
                break
    if _pid_alive(pid):
        raise errors.InvalidState(
            f"the daemon (pid {pid}) did not stop within {STOP_TIMEOUT:.0f}s",
            {"pid": pid, "hint": f"kill {pid}"},
        )
    if args.json:
        print_json({"stopped": True, "pid": pid})
    else:
        sys.stdout.write(f"daemon stopped (pid {pid})\n")
    return 0


def _pid_alive(pid: int) -> bool:
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # The socket closed before the process finished exiting; it is on its way out.
        select.select([], [], [], 0.02)
    return True


RECENT_SESSIONS = 5
"""``trainee status`` inside a project lists its latest sessions, this many."""


def cmd_status(args: argparse.Namespace) -> int:
    """The daemon (started when none answers: it re-adopts and resumes sessions), the
    sessions running anywhere, and the current folder's project's latest sessions."""
    from trainee.cli.commands.session import current_project, render_sessions

    hello = _hello(autostart=True)
    running = daemon_client.call("sessions_list", {})["sessions"]
    root = current_project(None)
    recent: list[dict[str, Any]] = []
    if root:
        recent = daemon_client.call(
            "sessions_list", {"project_root": root, "limit": RECENT_SESSIONS}
        )["sessions"]
    if args.json:
        extra = {"project_root": root, "recent": recent} if root else {}
        print_json({"running": True, **hello, "sessions": running, **extra})
        return 0
    _show_hello(args, hello)
    if running:
        render_sessions("running sessions", running, with_project=True)
    else:
        sys.stdout.write("sessions: none running\n")
    if root:
        sys.stdout.write("\n")
        if recent:
            render_sessions(f"latest sessions of {root}", recent)
            sys.stdout.write("all of them: trainee sessions\n")
        else:
            sys.stdout.write(f"no session in {root} yet\n")
    return 0


def cmd_webui(args: argparse.Namespace) -> int:
    """Ensure the daemon, then open the dashboard at a URL that carries the access token once.

    The page trades the token for an HttpOnly cookie and drops it from the address.
    ``--host``/``--port``/``--reload``/``project_root`` shape a daemon this command
    starts; a daemon already running keeps its own, and this says so.
    """
    import webbrowser
    from urllib.parse import quote, urlsplit

    asked = args.port
    if asked is None:
        port, from_env = paths.http_port()
        asked = port if from_env else None
    root = _root(args.project_root)
    notes: list[str] = []
    try:
        hello = _hello(autostart=False)
        started = False
    except errors.DaemonNotRunning:
        extra = ["--host", args.host]
        if asked is not None:
            extra += ["--port", str(asked)]
        if args.reload:
            extra.append("--reload")
        if root:
            extra.append(root)
        daemon_client.spawn_daemon(extra)
        hello = _hello(autostart=False)
        started = True
    http_url = str(hello.get("http_url") or "")
    if not http_url:
        raise errors.InvalidState("the daemon serves no HTTP address", {"hello": hello})
    where = urlsplit(http_url)
    if started:
        if asked not in (None, 0) and where.port != asked:
            notes.append(f"port {asked} was taken: the dashboard is on port {where.port}")
    else:
        if args.host not in ("127.0.0.1", where.hostname) or asked not in (None, 0, where.port):
            notes.append(
                f"a daemon is already running (pid {hello['pid']}) at {http_url}; "
                "--host/--port/--reload apply only when the daemon starts "
                "(run `trainee daemon stop` first to change them)"
            )
        bound = hello.get("project_root")
        if root and bound != root:
            notes.append(
                f"the running daemon is bound to {bound or 'no project'}; "
                f"the page opens with {root} selected"
            )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        notes.append(
            f"warning: --host {args.host} makes the daemon reachable beyond this machine; "
            "every /api request still needs the access token"
        )
    token_file = paths.socket_path().with_name("token")
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise errors.InvalidState(
            f"cannot read the daemon's access token {token_file}: {exc.strerror}",
            {"path": str(token_file), "hint": "the daemon writes it when it starts"},
        ) from None
    url = f"{http_url}/?token={quote(token, safe='')}"
    if root:
        url += f"&project={quote(root, safe='')}"
    opened = False
    if not args.no_open:
        try:
            opened = bool(webbrowser.open(url, new=2))
        except Exception:  # a broken browser setup must not hide the address
            opened = False
    if args.json:
        print_json({"url": url, "http_url": http_url, "opened": opened, "notes": notes})
        return 0
    for note in notes:
        sys.stderr.write(note + "\n")
    sys.stdout.write(f"trainee dashboard: {url}\n")
    if not args.no_open and not opened:
        sys.stdout.write("(no browser could be opened: open the address above yourself)\n")
    return 0
