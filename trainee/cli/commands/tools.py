"""``trainee tools`` and ``trainee call``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from trainee import errors, paths
from trainee.cli import daemon_client
from trainee.cli.output import print_json

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any


def _http_tools(base_url: str, name: str | None) -> Any:
    token_file = paths.socket_path().with_name("token")
    try:
        token = token_file.read_text().strip()
    except OSError:
        raise errors.DaemonNotRunning(
            f"no access token at {token_file}: is the daemon at {base_url} this user's?",
            {"reason": "no_token", "path": str(token_file)},
        ) from None
    host = urllib.parse.urlsplit(base_url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        # The token is this machine's daemon's; it is never sent anywhere else.
        raise errors.InvalidParams(
            f"--base-url {base_url}: only a daemon on this machine (127.0.0.1, localhost) "
            "can be asked: its access token is never sent to another host",
            {"field": "--base-url", "reason": "not a loopback address"},
        )
    query = "?" + urllib.parse.urlencode({"name": name}) if name else ""
    url = base_url.rstrip("/") + "/api/tools" + query
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})

    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        try:
            raise errors.error_from_wire(json.loads(body)["error"]) from None
        except (ValueError, KeyError, TypeError):
            raise errors.ProtocolError(f"{url}: HTTP {exc.code}: {body[:200]}") from None
    except urllib.error.URLError as exc:
        raise errors.DaemonNotRunning(f"{url}: {exc.reason}", {"reason": "refused"}) from None


def cmd_tools(args: argparse.Namespace) -> int:
    if args.base_url:
        schemas = _http_tools(args.base_url, args.name)
    else:
        schemas = daemon_client.call("tools_list", {"name": args.name} if args.name else {})
    if args.json or args.name or not sys.stdout.isatty():
        print_json(schemas)
        return 0
    from rich.table import Table

    from trainee.cli.output import console

    table = Table(title="trainee tools")
    table.add_column("tool", style="bold")
    table.add_column("description")
    for entry in schemas:
        fn = entry["function"]
        table.add_row(fn["name"], fn["description"])
    console().print(table)
    return 0


def read_input(value: str | None) -> Any:
    """``--input``: inline JSON, ``@file`` or ``-`` for standard input."""
    if value is None:
        return {}
    source = "--input"
    if value == "-":
        text, source = sys.stdin.read(), "standard input"
    elif value.startswith("@"):
        path = Path(value[1:]).expanduser()
        try:
            text = path.read_text()
        except OSError as exc:
            raise errors.InvalidParams(
                f"--input {value}: cannot read {path}: {exc.strerror}",
                {"field": "--input", "reason": "unreadable file"},
            ) from None
        source = str(path)
    else:
        text = value
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise errors.InvalidParams(
            f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            {"field": "--input", "reason": exc.msg, "line": exc.lineno},
        ) from None


def cmd_call(args: argparse.Namespace) -> int:
    params = read_input(args.input)
    if not isinstance(params, dict):
        raise errors.InvalidParams(
            f"--input must be a JSON object of {args.tool}'s params, "
            f"like '{{\"name\": value}}', not {_json_kind(params)}",
            {
                "field": "--input",
                "reason": "not an object",
                "hint": f"trainee tools --name {args.tool}",
            },
        )
    if "project_root" not in params:
        _default_project(args.tool, params)
    result = daemon_client.call(args.tool, params)
    print_json(result)
    return 0


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return "a number"


def _default_project(tool: str, params: dict[str, Any]) -> None:
    """Inside a trainee project, a tool that takes ``project_root`` gets the current one."""
    here = os.path.realpath(os.getcwd())
    if not os.path.isdir(os.path.join(here, ".trainee")):
        return
    try:
        (schema,) = daemon_client.call("tools_list", {"name": tool})
    except errors.MethodNotFound:
        return  # the call itself reports the unknown tool
    if "project_root" in schema["function"]["parameters"].get("properties", {}):
        params["project_root"] = here
