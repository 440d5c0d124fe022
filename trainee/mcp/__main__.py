"""``python -m trainee.mcp``: the MCP server over stdio (what ``trainee mcp`` execs).

It serves one client on stdin/stdout and forwards every request to the daemon,
starting one when none answers. Diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import anyio

from trainee.mcp.backend import DaemonBackend
from trainee.mcp.server import TraineeMcp

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="trainee mcp",
        description="Serve trainee to an MCP client over stdio (the daemon does the work).",
    )
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default="WARNING",
        help="what to log on stderr (default WARNING)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    server = TraineeMcp(DaemonBackend(), base_dir=Path.cwd())
    try:
        anyio.run(server.serve_stdio)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
