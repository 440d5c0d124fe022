"""``trainee mcp``: the Model Context Protocol server over stdio, for coding agents."""

from __future__ import annotations

import argparse
import os
import sys


def cmd_mcp(args: argparse.Namespace) -> int:
    """Replace this process by ``python -m trainee.mcp`` (the CLI never imports the mcp SDK)."""
    argv = [sys.executable, "-m", "trainee.mcp", "--log-level", args.log_level]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 0  # pragma: no cover - execv does not return
