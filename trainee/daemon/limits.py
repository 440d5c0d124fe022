"""What one client may take from the daemon, in one place: connections, file
descriptors, request and reply sizes, time to send a request or read a reply.

No client can take the daemon down: every limit has a default, a client over it
gets a clear error (or its connection closed) and every other client, session
and round goes on. Defaults, and the environment variables that change a few:

| limit | default | variable |
|---|---|---|
| open files (soft RLIMIT_NOFILE) | raised to the hard limit | ``TRAINEE_FD_LIMIT`` |
| file descriptors kept for rounds, store, logs | max(64, limit / 8) | |
| Unix socket connections at once | 256 | ``TRAINEE_MAX_SOCKET_CONNECTIONS`` |
| HTTP connections at once | 512 | ``TRAINEE_MAX_HTTP_CONNECTIONS`` |
| HTTP: time to send the request headers | 10 s | |
| HTTP: an idle keep-alive connection closes after | 5 s | |
| HTTP: request line + headers | 64 KiB | |
| HTTP: time to send a request body | 60 s | |
| request (socket frame, HTTP body) | 4 MiB | |
| requests over 256 KiB being received or handled at once, all clients | 32 MiB | |
| JSON-RPC batch | 256 requests | |
| reply (one response or a whole batch) | 16 MiB | |
| a client that reads nothing is dropped after | 30 s | |
| requests in flight per socket connection (a batch is one) | 64 | |
| replies waiting to be written, per socket connection | 16 MiB | |
| watches per socket connection | 32 | |
| events queued for one watcher or SSE stream | 10,000 events / 8 MiB, then a gap | |

The connection budgets never exceed what the file-descriptor limit leaves after
the reserve (a quarter of it for the socket, the rest for HTTP), so at the
limit new connections are refused while rounds, the store and logs keep theirs.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass, replace

from trainee.errors import ConfigError

log = logging.getLogger("trainee.daemon.limits")

__all__ = ["FdBudget", "LargeRequests", "Limits", "raise_fd_limit"]


@dataclass(frozen=True)
class Limits:
    socket_connections: int = 256
    http_connections: int = 512
    fd_limit: int | None = None
    """None: raise the soft limit to the hard one."""
    http_header_timeout_sec: float = 10.0
    http_keep_alive_sec: int = 5
    http_max_header_bytes: int = 64 * 1024
    http_body_timeout_sec: float = 60.0
    max_request_bytes: int = 4 * 2**20
    large_request_bytes: int = 256 * 2**10
    large_requests_total_bytes: int = 32 * 2**20
    rpc_batch: int = 256
    reply_bytes: int = 16 * 2**20
    send_timeout_sec: float = 30.0
    requests_in_flight: int = 64
    """Requests (a batch counts as one) one socket connection may have running at once;
    the next is answered LimitExceeded at once and the connection goes on."""
    waiting_reply_bytes: int = 16 * 2**20
    """Bytes of replies one socket connection may have waiting for the client to read
    them; a reply past that is answered LimitExceeded instead (its call ran)."""
    watch_events: int = 10_000
    watch_bytes: int = 8 * 2**20

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        """The defaults with the ``TRAINEE_*`` overrides of ``env``; ConfigError naming a bad one."""
        env = os.environ if env is None else env
        limits = cls()
        for name, field, least in (
            ("TRAINEE_MAX_SOCKET_CONNECTIONS", "socket_connections", 1),
            ("TRAINEE_MAX_HTTP_CONNECTIONS", "http_connections", 1),
            ("TRAINEE_FD_LIMIT", "fd_limit", 64),
        ):
            raw = env.get(name)
            if raw is None or raw == "":
                continue
            text = raw.strip()
            if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < least:
                raise ConfigError(
                    f"{name} must be a whole number >= {least}, got {raw!r}",
                    field=name,
                    reason="not a whole number in range",
                )
            limits = replace(limits, **{field: int(text)})
        return limits


def raise_fd_limit(wanted: int | None) -> tuple[int, int]:
    """Set the soft open-file limit to ``wanted`` (None: the hard limit); returns
    (soft, hard) as they are now. A ``wanted`` above the hard limit is capped."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if wanted is None else wanted
    if hard != resource.RLIM_INFINITY:
        target = min(target, hard)
    elif wanted is None:
        target = max(soft, 1 << 20)
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot set the open-file limit to %s (keeping %s): %s", target, soft, exc)
    return soft, hard


@dataclass(frozen=True)
class FdBudget:
    """How many client connections each transport may hold for a file-descriptor limit."""

    fd_limit: int
    reserve: int
    socket: int
    http: int

    @classmethod
    def for_limit(cls, fd_limit: int, limits: Limits) -> FdBudget:
        reserve = max(64, fd_limit // 8)
        clients = max(2, fd_limit - reserve)
        socket_share = max(1, clients // 4)
        return cls(
            fd_limit=fd_limit,
            reserve=reserve,
            socket=min(limits.socket_connections, socket_share),
            http=min(limits.http_connections, clients - socket_share),
        )


class LargeRequests:
    """One daemon-wide allowance for requests bigger than ``large_request_bytes``
    being received at once: many clients each sending a request near the size
    limit cannot add up to gigabytes. Holders release what they took."""

    def __init__(self, limits: Limits) -> None:
        self.small = limits.large_request_bytes
        self.total = limits.large_requests_total_bytes
        self.held = 0

    def charge(self, before: int, after: int) -> bool:
        """Move one request's charge from ``before`` to ``after`` held bytes; False
        (and nothing changed) when the allowance cannot cover the growth."""
        old = max(0, before - self.small)
        new = max(0, after - self.small)
        if new > old and self.held + new - old > self.total:
            return False
        self.held += new - old
        return True

    def release(self, held: int) -> None:
        self.held -= max(0, held - self.small)
