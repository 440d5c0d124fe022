"""What a handler can reach: the daemon's services and the calling connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainee.session.bus import EventBus


@dataclass
class Services:
    """Long-lived parts of the daemon, built once by the composition root."""

    bus: EventBus
    socket_path: str
    started_at: float
    request_shutdown: Callable[[], None]
    project_root: Path | None = None
    http_url: str | None = None
    debug: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    closing: bool = False
    """Set when the shutdown begins: the registry then refuses calls (ShuttingDown)."""


@dataclass
class CallContext:
    """One call's view of its caller.

    ``notify`` pushes a JSON-RPC notification on the caller's connection (socket
    transport only); ``start_soon`` runs a task that lives as long as that
    connection.
    """

    services: Services
    transport: str
    notify: Callable[[str, Any], Awaitable[None]] | None = None
    start_soon: Callable[..., Any] | None = None
    watches: dict[int, Callable[[], None]] = field(default_factory=dict)
