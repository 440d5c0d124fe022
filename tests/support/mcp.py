"""``trainee mcp`` over stdio, driven by the MCP SDK's own client (tests/e2e/test_mcp.py,
tests/e2e/test_facade.py)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def server_params(env: dict[str, str], cwd: Path | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "trainee", "mcp"], env=env, cwd=cwd
    )


@asynccontextmanager
async def legacy_stdio(
    env: dict[str, str],
    on_update: Callable[[str], None] | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[ClientSession]:
    """``trainee mcp`` over stdio with the 2025 handshake; ``on_update`` gets updated URIs."""

    async def handler(message: Any) -> None:
        if on_update is not None and isinstance(message, types.ResourceUpdatedNotification):
            on_update(message.params.uri)

    async with (
        stdio_client(server_params(env, cwd)) as (read, write),
        ClientSession(read, write, message_handler=handler) as session,
    ):
        await session.initialize()
        yield session
