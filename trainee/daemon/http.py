"""The HTTP side of the daemon: ``POST /rpc``, the tool API, and their guard.

The tool API can start commands, so a web page the user happens to visit must
not be able to reach it: requests must carry the daemon's Host (DNS
rebinding), a state-changing request from a browser must come from the page's
own Origin (cross-site POST), and every ``/api``, ``/rpc`` and ``/mcp`` request
must carry the access token (bearer header or the cookie the web page gets). A page
URL carrying ``?token=`` (what ``trainee webui`` opens) trades it for an
HttpOnly SameSite=Strict cookie and redirects to the same URL without it.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import msgspec
import uvicorn
from anyio.abc import TaskStatus
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainee.api.context import CallContext, Services
from trainee.api.registry import Registry
from trainee.errors import InvalidParams, MethodNotFound, NotFound, ParseError, TraineeError
from trainee.rpc.protocol import Dispatcher

log = logging.getLogger("trainee.daemon.http")

TOKEN_COOKIE = "trainee_token"
TOKEN_COOKIE_MAX_AGE = 30 * 24 * 3600
MAX_BODY = 16 * 2**20
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

SECURITY_HEADERS: dict[str, str] = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
}
"""Sent with every response unless the route set its own value (nothing is framed,
nothing leaves the page's origin, the token URL never travels in a Referer)."""


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
        send = _with_security_headers(send)
        problem = self.check(request)
        if problem is not None:
            status, reason = problem
            await JSONResponse({"error": {"code": status, "message": reason}}, status_code=status)(
                scope, receive, send
            )
            return
        if "token" in request.query_params and not _is_api(request.url.path):
            await self.token_login(request)(scope, receive, send)
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
        if _is_api(request.url.path) and not self.token_ok(request):
            return 401, "refused: missing or wrong access token (see `trainee webui`)"
        return None

    def token_login(self, request: Request) -> Response:
        """``GET /page?token=T``: set the cookie and redirect to ``/page`` without the token."""
        given = request.query_params.get("token", "")
        if request.method not in ("GET", "HEAD") or not hmac.compare_digest(
            given.encode(), self.token.encode()
        ):
            return JSONResponse(
                {
                    "error": {
                        "code": 401,
                        "message": "refused: wrong access token in the URL "
                        "(run `trainee webui` for a fresh link)",
                    }
                },
                status_code=401,
            )
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in rest)
        target = request.url.path + (f"?{query}" if query else "")
        response = RedirectResponse(target, status_code=303)
        response.headers["Cache-Control"] = "no-store"
        response.set_cookie(
            TOKEN_COOKIE,
            self.token,
            max_age=TOKEN_COOKIE_MAX_AGE,
            path="/",
            httponly=True,
            samesite="strict",
        )
        return response

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


def _is_api(path: str) -> bool:
    return path in ("/rpc", "/api", "/mcp") or path.startswith(("/api/", "/mcp/"))


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in SECURITY_HEADERS.items():
                headers.setdefault(name, value)
        await send(message)

    return wrapped


def json_response(data: Any, status: int = 200) -> Response:
    """``data`` encoded by msgspec (Structs, dicts, lists) as a JSON response."""
    return Response(msgspec.json.encode(data), status_code=status, media_type="application/json")


def error_status(exc: TraineeError) -> int:
    """The HTTP status of an error raised by a method."""
    if isinstance(exc, MethodNotFound | NotFound):
        return 404
    if isinstance(exc, InvalidParams | ParseError):
        return 400
    return 422


def error_response(exc: TraineeError) -> Response:
    return json_response({"error": exc.to_wire()}, error_status(exc))


def build_app(
    registry: Registry,
    dispatcher: Dispatcher,
    services: Services,
    *,
    token: str,
    allowed_hosts: Callable[[], set[str]],
    extra_routes: Sequence[BaseRoute] = (),
) -> ASGIApp:
    """The Starlette app of the daemon; the web UI adds its pages and streams as ``extra_routes``."""

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
            return json_response(
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
                return json_response([registry.get(name).tool_schema()])
            except MethodNotFound as exc:
                return json_response({"error": exc.to_wire()}, 404)
        return json_response(registry.tool_schemas())

    async def call_tool(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            body = await read_body(request)
            params = msgspec.json.decode(body) if body.strip() else {}
        except ValueError:
            return json_response(
                {"error": ParseError("request body is not valid JSON").to_wire()}, 400
            )
        except msgspec.DecodeError as exc:
            return json_response(
                {"error": ParseError(f"request body is not valid JSON: {exc}").to_wire()}, 400
            )
        ctx = CallContext(services=services, transport="http")
        try:
            result = await registry.call(name, params, ctx)
        except TraineeError as exc:
            return json_response({"error": exc.to_wire()}, error_status(exc))
        except Exception:
            incident = secrets.token_hex(4)
            log.exception("tool %s failed (incident %s)", name, incident)
            return json_response(
                {"error": {"code": -32603, "message": f"Internal error (incident {incident})"}}, 500
            )
        return json_response({"result": result})

    routes: list[BaseRoute] = [
        Route("/rpc", rpc, methods=["POST"]),
        Route("/api/tools", tools, methods=["GET"]),
        Route("/api/tools/{name}", call_tool, methods=["POST"]),
        *extra_routes,
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

    def __init__(
        self, app: ASGIApp, sock: socket.socket, *, on_stop: Callable[[], None] | None = None
    ) -> None:
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._sock = sock
        self._server: _EmbeddedServer | None = None
        self._config = config
        self._on_stop = on_stop

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._server = _EmbeddedServer(self._config, on_started=lambda: task_status.started())
        await self._server.serve(sockets=[self._sock])

    def stop(self) -> None:
        """Stop accepting; ``on_stop`` ends the endless responses (SSE) so the drain is quick."""
        if self._on_stop is not None:
            self._on_stop()
        if self._server is not None:
            self._server.should_exit = True
