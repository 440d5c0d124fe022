"""The HTTP side of the daemon: ``POST /rpc``, the tool API, and their guard.

The tool API can start commands, so a web page the user happens to visit must
not be able to reach it: requests must carry the daemon's Host (DNS
rebinding), a state-changing request from a browser must come from the page's
own Origin (cross-site POST), and every ``/api`` and ``/rpc`` request must
carry the access token (bearer header or the cookie the web page gets).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import uvicorn
from anyio.abc import TaskStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from trainee.api.context import CallContext, Services
from trainee.api.registry import Registry
from trainee.errors import InvalidParams, MethodNotFound, ParseError, TraineeError
from trainee.rpc.protocol import Dispatcher

log = logging.getLogger("trainee.daemon.http")

TOKEN_COOKIE = "trainee_token"
MAX_BODY = 16 * 2**20
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def load_or_create_token(path: Path) -> str:
    """The access token, kept 0600 beside the socket; made once, reused after."""
    with contextlib.suppress(FileNotFoundError):
        token = path.read_text().strip()
        if len(token) >= 32:
            os.chmod(path, 0o600)
            return token
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    os.replace(tmp, path)
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Guard:
    """ASGI middleware enforcing Host, Origin and token on every request."""

    def __init__(self, app: ASGIApp, *, token: str, allowed_hosts: Callable[[], set[str]]) -> None:
        self.app = app
        self.token = token
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        problem = self.check(request)
        if problem is not None:
            status, reason = problem
            await JSONResponse({"error": {"code": status, "message": reason}}, status_code=status)(
                scope, receive, send
            )
            return
        await self.app(scope, receive, send)

    def check(self, request: Request) -> tuple[int, str] | None:
        hosts = self.allowed_hosts()
        host = request.headers.get("host", "").lower()
        if host not in hosts:
            return 421, f"refused: Host {host!r} is not this daemon's address"
        origin = request.headers.get("origin")
        if (
            origin is not None
            and request.method not in _SAFE_METHODS
            and origin.lower().removeprefix("http://") not in hosts
        ):
            return 403, f"refused: Origin {origin!r} is not this daemon's page"
        path = request.url.path
        if (path == "/rpc" or path.startswith("/api/")) and not self.token_ok(request):
            return 401, "refused: missing or wrong access token (see `trainee webui`)"
        return None

    def token_ok(self, request: Request) -> bool:
        given = ""
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        else:
            given = request.headers.get("x-trainee-token", "") or request.cookies.get(
                TOKEN_COOKIE, ""
            )
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())


def _json(data: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(data), status_code=status, media_type="application/json")


def _error_status(exc: TraineeError) -> int:
    if isinstance(exc, MethodNotFound):
        return 404
    if isinstance(exc, InvalidParams | ParseError):
        return 400
    return 422


def build_app(
    registry: Registry,
    dispatcher: Dispatcher,
    services: Services,
    *,
    token: str,
    allowed_hosts: Callable[[], set[str]],
    extra_routes: list[Route] | None = None,
) -> ASGIApp:
    """The Starlette app of the daemon (pages come with the web UI)."""

    async def read_body(request: Request) -> bytes:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                raise ValueError("body too large")
        return body

    async def rpc(request: Request) -> Response:
        try:
            body = await read_body(request)
        except ValueError:
            return _json(
                {
                    "jsonrpc": "2.0",
                    "error": {
                        "code": -32600,
                        "message": f"request too large ({MAX_BODY} bytes max)",
                    },
                    "id": None,
                },
                413,
            )
        ctx = CallContext(services=services, transport="http")
        response = await dispatcher.handle_frame(body, ctx)
        if response is None:
            return Response(status_code=204)
        return Response(response, media_type="application/json")

    async def tools(request: Request) -> Response:
        name = request.query_params.get("name")
        if name:
            try:
                return _json([registry.get(name).tool_schema()])
            except MethodNotFound as exc:
                return _json({"error": exc.to_wire()}, 404)
        return _json(registry.tool_schemas())

    async def call_tool(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            body = await read_body(request)
            params = msgspec.json.decode(body) if body.strip() else {}
        except ValueError:
            return _json({"error": ParseError("request body is not valid JSON").to_wire()}, 400)
        except msgspec.DecodeError as exc:
            return _json(
                {"error": ParseError(f"request body is not valid JSON: {exc}").to_wire()}, 400
            )
        ctx = CallContext(services=services, transport="http")
        try:
            result = await registry.call(name, params, ctx)
        except TraineeError as exc:
            return _json({"error": exc.to_wire()}, _error_status(exc))
        except Exception:
            incident = secrets.token_hex(4)
            log.exception("tool %s failed (incident %s)", name, incident)
            return _json(
                {"error": {"code": -32603, "message": f"Internal error (incident {incident})"}}, 500
            )
        return _json({"result": result})

    routes = [
        Route("/rpc", rpc, methods=["POST"]),
        Route("/api/tools", tools, methods=["GET"]),
        Route("/api/tools/{name}", call_tool, methods=["POST"]),
        *(extra_routes or []),
    ]
    app = Starlette(routes=routes)
    return Guard(app, token=token, allowed_hosts=allowed_hosts)


def bind_tcp(host: str, port: int) -> socket.socket:
    """Bind the HTTP listening socket (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def allowed_hosts_for(host: str, port: int) -> set[str]:
    names = {"127.0.0.1", "localhost", "[::1]"}
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):
        names.add(host.lower())
    return {f"{name}:{port}" for name in names}


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside the daemon's task group: the daemon owns the signals."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_started()


class HttpServer:
    """uvicorn on an already-bound socket; ``stop()`` lets it finish gracefully."""

    def __init__(self, app: ASGIApp, sock: socket.socket) -> None:
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._sock = sock
        self._server: _EmbeddedServer | None = None
        self._config = config

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._server = _EmbeddedServer(self._config, on_started=lambda: task_status.started())
        await self._server.serve(sockets=[self._sock])

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
