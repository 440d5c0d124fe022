"""``trainee serve``, ``trainee daemon start|stop|status``, ``trainee status``, ``trainee webui``."""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

from trainee import errors, paths
from trainee.cli import daemon_client
from trainee.cli.output import print_json, render_mapping

STOP_TIMEOUT = 60.0


def _root(value: str | None) -> str | None:
    return str(Path(value).resolve()) if value else None


def cmd_serve(args: argparse.Namespace) -> int:
    """Replace this process by the daemon (the CLI itself never imports it)."""
    argv = [sys.executable, "-m", "trainee.daemon", "--host", args.host, "--port", str(args.port)]
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
    return 69


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


def cmd_status(args: argparse.Namespace) -> int:
    try:
        hello = _hello(autostart=False)
    except errors.DaemonNotRunning:
        return _not_running(args)
    extra: dict[str, Any] = {}
    if "loop_get" in hello.get("capabilities", []):
        extra["sessions"] = daemon_client.call("loop_get", {}, autostart=False)
    _show_hello(args, hello, extra)
    return 0


def cmd_webui(args: argparse.Namespace) -> int:
    raise errors.NotAvailable(
        "the web dashboard is not available yet in this version; "
        "the HTTP tool API is (GET /api/tools, POST /rpc on the daemon's http address)",
        {"hint": "trainee daemon status shows the http address"},
    )
