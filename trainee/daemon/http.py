"""The HTTP side of the daemon: ``POST /rpc``, the tool API, their guard and connection limits.

Every API route is a registry method: ``POST /api/tools/{name}`` and ``/rpc`` for all
of them, plus the URLs of :data:`trainee.api.routes.ALIASES` (path and query are the
method's params). A method's error becomes its class's HTTP status
(:mod:`trainee.errors`, one Starlette exception handler); an unexpected exception
becomes InternalError (500) with an incident id, its traceback only in the log.

The tool API can start commands, so a web page the user happens to visit must
not be able to reach it: requests must carry the daemon's Host (DNS
rebinding), a state-changing request from a browser must come from the page's
own Origin (cross-site POST), and every ``/api``, ``/rpc`` and ``/mcp`` request
must carry the access token (bearer header or the cookie the web page gets). A page
URL carrying ``?token=`` (what ``trainee webui`` opens) trades it for an
HttpOnly SameSite=Strict cookie and redirects to the same URL without it.

No client can hold the server: at most ``http_connections`` connections at once
(:class:`ConnectionGate`); a connection must send its request headers within
``http_header_timeout_sec`` of opening (or of its last response), and when every
place is taken a new connection closes the oldest one that is waiting for its
headers (those that never showed the token first), else it gets 503. A request
refused by the guard closes its connection. Bodies must arrive within
``http_body_timeout_sec``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
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
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from trainee.api.context import CallContext, Services
from trainee.api.registry import Registry
from trainee.api.routes import ALIASES, TOKEN_COOKIE, HttpAlias
from trainee.atomic import write_atomic
from trainee.daemon.limits import LargeRequests, Limits
from trainee.errors import (
    InvalidParams,
    LimitExceeded,
    NotFound,
    ParseError,
    TraineeError,
)
from trainee.jobfiles import NotRegularFile, open_job_file
from trainee.rpc.protocol import Dispatcher, as_trainee_error

log = logging.getLogger("trainee.daemon.http")

TOKEN_COOKIE_MAX_AGE = 30 * 24 * 3600
ACCEPT_BACKLOG = 128
ACCEPT_BATCH = 16
"""Connections accepted per wake-up: a flood cannot open hundreds of file descriptors
before the gate has looked at them (the kernel's backlog holds the rest)."""
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
    write_atomic(path, token + "\n", mode=0o600)
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

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        allowed_hosts: Callable[[], set[str]],
        gate: ConnectionGate | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self.allowed_hosts = allowed_hosts
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        send = _with_security_headers(send)
        problem = self.check(request)
        if problem is not None:
            status, reason = problem
            # A refused request closes its connection: holding one costs a token.
            await JSONResponse(
                {"error": {"code": status, "message": reason}},
                status_code=status,
                headers={"Connection": "close"},
            )(scope, receive, send)
            return
        if self.gate is not None and self.token_ok(request):
            self.gate.trust(scope.get("client"))
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


def error_response(exc: TraineeError, *, rpc: bool = False) -> Response:
    """The answer to a request that ended with ``exc``: its class's HTTP status and its
    wire form (as a JSON-RPC answer with id null on ``/rpc``)."""
    body = (
        {"jsonrpc": "2.0", "error": exc.to_wire(), "id": None} if rpc else {"error": exc.to_wire()}
    )
    return json_response(body, exc.response_status())


async def _on_error(request: Request, exc: Exception) -> Response:
    """The one exception handler: every TraineeError an endpoint raises ends here."""
    assert isinstance(exc, TraineeError)
    return error_response(exc, rpc=request.url.path == "/rpc")


DOWNLOAD_CSP = "default-src 'none'; style-src 'unsafe-inline'; sandbox"
DOWNLOAD_CHUNK = 1 << 20


def json_body(body: bytes) -> Any:
    """A request body as JSON ({} when empty); ParseError naming the reason."""
    if not body.strip():
        return {}
    try:
        return msgspec.json.decode(body)
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:
        raise ParseError(f"request body is not valid JSON: {exc}") from None


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def query_params(request: Request, props: dict[str, Any], skip: frozenset[str]) -> dict[str, Any]:
    """The query string as a method's params: each value converted to the type its
    param takes (an empty value is left out, as if not given)."""
    out: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        if key in skip or value == "":
            continue
        schema = props.get(key, {})
        kinds = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
        if "string" in kinds or isinstance(schema.get("type"), list):
            out[key] = value
        elif "integer" in kinds:
            try:
                out[key] = int(value)
            except ValueError:
                raise InvalidParams(
                    f"{key} must be an integer, got {value[:40]!r}",
                    {"field": key, "reason": "not an int"},
                ) from None
        elif "boolean" in kinds:
            if value.lower() not in _TRUE | _FALSE:
                raise InvalidParams(
                    f"{key} must be true or false, got {value[:40]!r}",
                    {"field": key, "reason": "not a boolean"},
                )
            out[key] = value.lower() in _TRUE
        else:
            out[key] = value
    return out


async def stream_file(request: Request, path: str, filename: str, media_type: str) -> Response:
    """The regular file at ``path`` (no symlink) streamed as it is now: its size when
    opened, in chunks, never more held than one."""
    try:
        fd = await anyio.to_thread.run_sync(open_job_file, path)
    except (FileNotFoundError, NotRegularFile) as exc:
        raise NotFound(
            f"{filename} is not there: {path}", {"path": path, "reason": str(exc)}
        ) from None
    size = os.fstat(fd).st_size
    disposition = "inline" if request.query_params.get("inline") else "attachment"
    headers = {
        "Content-Length": str(size),
        "Content-Disposition": f'{disposition}; filename="{filename}"',
        "Content-Security-Policy": DOWNLOAD_CSP,
        "Cache-Control": "no-cache",
    }
    if request.method == "HEAD":
        os.close(fd)
        return Response(headers=headers, media_type=media_type)

    async def chunks() -> Any:
        try:
            left = size
            while left > 0:
                chunk = await anyio.to_thread.run_sync(os.read, fd, min(DOWNLOAD_CHUNK, left))
                if not chunk:
                    return
                left -= len(chunk)
                yield chunk
        finally:
            os.close(fd)

    return StreamingResponse(chunks(), headers=headers, media_type=media_type)


def build_app(
    registry: Registry,
    dispatcher: Dispatcher,
    services: Services,
    *,
    token: str,
    allowed_hosts: Callable[[], set[str]],
    extra_routes: Sequence[BaseRoute] = (),
    limits: Limits | None = None,
    large: LargeRequests | None = None,
    gate: ConnectionGate | None = None,
) -> ASGIApp:
    """The Starlette app of the daemon: ``/rpc``, every method as a tool and by its aliases;
    the web UI adds its pages and event stream as ``extra_routes``."""
    limits = limits or Limits()
    large = large or LargeRequests(limits)

    async def run(name: str, params: Any, ctx: CallContext) -> Any:
        """Call a method; a failure that is no TraineeError becomes InternalError."""
        try:
            return await registry.call(name, params, ctx)
        except TraineeError:
            raise
        except Exception as exc:
            raise as_trainee_error(exc, logger=log, where=f"tool {name}") from None

    def encoded(name: str, result: Any) -> bytes:
        try:
            return msgspec.json.encode(result)
        except Exception as exc:
            raise as_trainee_error(
                exc, logger=log, where=f"encoding the result of {name}"
            ) from None

    async def read_body(request: Request) -> bytes:
        """The whole body, bounded in size and time; LimitExceeded names what was passed."""
        body = bytearray()
        try:
            with anyio.fail_after(limits.http_body_timeout_sec):
                async for chunk in request.stream():
                    if len(body) + len(chunk) > limits.max_request_bytes:
                        raise LimitExceeded(
                            f"request body too large ({limits.max_request_bytes} bytes max)",
                            {"what": "request bytes", "limit": limits.max_request_bytes},
                        )
                    if not large.charge(len(body), len(body) + len(chunk)):
                        raise LimitExceeded(
                            "request dropped: the daemon is receiving too many large requests "
                            f"at once ({large.total} bytes in all); send it again later",
                            {"what": "large requests", "limit": large.total},
                        )
                    body += chunk
        except TimeoutError:
            raise LimitExceeded(
                f"request body not received within {limits.http_body_timeout_sec:g} s",
                {"what": "body time", "limit": limits.http_body_timeout_sec},
            ) from None
        finally:
            large.release(len(body))
        return bytes(body)

    async def rpc(request: Request) -> Response:
        body = await read_body(request)
        ctx = CallContext(services=services, transport="http")
        if not large.charge(0, len(body)):  # handled too: decoding takes a few times its size
            busy = LimitExceeded(
                "request dropped: the daemon is receiving too many large requests at once "
                f"({large.total} bytes in all); send it again later",
                {"what": "large requests", "limit": large.total},
            )
            return json_response({"jsonrpc": "2.0", "error": busy.to_wire(), "id": None}, 503)
        try:
            response = await dispatcher.handle_frame(body, ctx)
        finally:
            large.release(len(body))
        if response is None:
            return Response(status_code=204)
        return Response(response, media_type="application/json")

    async def call_tool(request: Request) -> Response:
        name = request.path_params["name"]
        params = json_body(await read_body(request))
        ctx = CallContext(services=services, transport="http")
        result = encoded(name, await run(name, params, ctx))
        return Response(b'{"result":' + result + b"}", media_type="application/json")

    def alias_endpoint(alias: HttpAlias) -> Callable[[Request], Any]:
        skip = frozenset({"inline"}) if alias.stream else frozenset()

        async def endpoint(request: Request) -> Response:
            ctx = CallContext(services=services, transport="http")
            if alias.body:
                params = json_body(await read_body(request))
                if not isinstance(params, dict):
                    raise InvalidParams(
                        f"the body of {request.method} {request.url.path} must be a JSON "
                        f"object of {alias.method}'s params",
                        {"field": "body", "reason": "not an object"},
                    )
            else:
                props = registry.get(alias.method).params_schema().get("properties", {})
                params = query_params(request, props, skip)
            params.update(request.path_params)
            if alias.stream:
                params["length"] = 0  # only the file's facts: the file itself is streamed
                found = await run(alias.method, params, ctx)
                return await stream_file(request, found.path, found.filename, found.media_type)
            result = await run(alias.method, params, ctx)
            return Response(encoded(alias.method, result), media_type="application/json")

        return endpoint

    routes: list[BaseRoute] = [
        Route("/rpc", rpc, methods=["POST"]),
        Route("/api/tools/{name}", call_tool, methods=["POST"]),
        *(Route(alias.path, alias_endpoint(alias), methods=list(alias.verbs)) for alias in ALIASES),
        *extra_routes,
    ]
    app = Starlette(routes=routes, exception_handlers={TraineeError: _on_error})
    return Guard(app, token=token, allowed_hosts=allowed_hosts, gate=gate)


def bind_tcp(host: str, port: int) -> socket.socket:
    """Bind the HTTP listening socket (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(ACCEPT_BACKLOG)
    sock.setblocking(False)
    return sock


def allowed_hosts_for(host: str, port: int) -> set[str]:
    names = {"127.0.0.1", "localhost", "[::1]"}
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):
        names.add(host.lower())
    return {f"{name}:{port}" for name in names}


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside the daemon's task group: the daemon owns the signals, and
    connections come through the gate's own accept loop (:class:`GatedAcceptor`)."""

    def __init__(
        self, config: uvicorn.Config, gate: ConnectionGate, on_started: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self._gate = gate
        self._on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await self.lifespan.startup()
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )
            return protocol

        acceptors = [GatedAcceptor(sock, create_protocol, self._gate) for sock in sockets or []]
        for acceptor in acceptors:
            acceptor.start()
        self.servers = acceptors  # type: ignore[assignment]
        self.started = True
        self._on_started()


class GatedAcceptor:
    """Accepts TCP connections itself, a few per wake-up, and asks the gate first: a
    connection over the limit is answered 503 and closed at once, so the daemon never
    holds more client descriptors than the gate allows (plus one burst). Out of
    descriptors or memory, it pauses accepting for a moment; clients wait in the
    kernel's backlog and nothing else is disturbed."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        gate: ConnectionGate,
    ) -> None:
        self.sock = sock
        self.factory = factory
        self.gate = gate
        self.loop = asyncio.get_running_loop()
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        self.sock.setblocking(False)
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("cannot accept an HTTP connection now: %s", exc)
                    self.loop.remove_reader(self.sock.fileno())
                    self.loop.call_later(0.1, self._resume)
                return
            conn.setblocking(False)
            if not self.gate.make_room():
                with contextlib.suppress(OSError):
                    conn.send(self.gate.refusal)
                conn.close()
                continue
            self.gate.pending += 1
            task = self.loop.create_task(self._connect(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn)
        except OSError:
            conn.close()
        finally:
            self.gate.pending -= 1

    def _resume(self) -> None:
        if not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.sock.fileno())

    async def wait_closed(self) -> None:
        return None


class ConnectionGate:
    """Admits HTTP connections up to ``limit``; see the module docstring for the rules."""

    def __init__(self, limit: int, *, header_timeout: float = 10.0) -> None:
        self.limit = limit
        self.header_timeout = header_timeout
        self.open: dict[GuardedH11Protocol, None] = {}
        """Admitted connections, oldest first."""
        self.pending = 0
        """Accepted, their protocol not made yet."""
        self._by_client: dict[Any, GuardedH11Protocol] = {}
        self.refused = 0
        self.evicted = 0
        self.timed_out = 0
        self.refusal = _refusal(
            503,
            "Service Unavailable",
            f"refused: too many HTTP connections ({limit} open, all busy); try again",
        )

    def make_room(self) -> bool:
        """Whether one more connection may come in, closing the oldest connection that
        waits for its request headers when every place is taken (those that never showed
        the token first); False when every one is busy."""
        if len(self.open) + self.pending < self.limit:
            return True
        victim = next((c for c in self.open if c.waiting and not c.trusted), None)
        if victim is None:
            victim = next((c for c in self.open if c.waiting), None)
        if victim is None:
            self.refused += 1
            if self.refused % 100 == 1:
                log.warning(
                    "refusing HTTP connections: %d open, all busy (%d refused)",
                    len(self.open),
                    self.refused,
                )
            return False
        self.evicted += 1
        self.leave(victim)
        victim.transport.close()
        return True

    def joined(self, conn: GuardedH11Protocol) -> None:
        self.open[conn] = None
        if conn.client is not None:
            self._by_client[conn.client] = conn

    def leave(self, conn: GuardedH11Protocol) -> None:
        self.open.pop(conn, None)
        if conn.client is not None and self._by_client.get(conn.client) is conn:
            del self._by_client[conn.client]

    def trust(self, client: Any) -> None:
        """The connection of ``client`` (host, port) showed the token."""
        key = tuple(client) if isinstance(client, list | tuple) else client
        conn = self._by_client.get(key)
        if conn is not None:
            conn.trusted = True

    def protocol(self) -> type[GuardedH11Protocol]:
        """uvicorn's h11 protocol bound to this gate."""
        return type("GatedH11Protocol", (GuardedH11Protocol,), {"gate": self})


def _refusal(status: int, phrase: str, message: str) -> bytes:
    body = msgspec.json.encode({"error": {"code": status, "message": message}})
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"connection: close\r\nretry-after: 1\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol under a :class:`ConnectionGate`: a deadline for each
    request's headers, eviction while it waits for them."""

    gate: ConnectionGate
    trusted = False
    waiting = False
    """Waiting for a request's headers (the connection is idle): it may be evicted."""
    _timer: Any = None
    _joined = False

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.gate.joined(self)
        self._joined = True
        self._await_request()

    def _await_request(self) -> None:
        self.waiting = True
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(self.gate.header_timeout, self._headers_too_slow)

    def _headers_too_slow(self) -> None:
        self._timer = None
        if self.waiting and not self.transport.is_closing():
            self.gate.timed_out += 1
            self.transport.close()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None:
            self.waiting = False  # a request arrived: its handler runs, no header deadline
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._await_request()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._joined:
            self.gate.leave(self)
        super().connection_lost(exc)


class HttpServer:
    """uvicorn on an already-bound socket; ``stop()`` lets it finish gracefully."""

    def __init__(
        self,
        app: ASGIApp,
        sock: socket.socket,
        *,
        on_stop: Callable[[], None] | None = None,
        gate: ConnectionGate | None = None,
        limits: Limits | None = None,
    ) -> None:
        limits = limits or Limits()
        self.gate = gate or ConnectionGate(
            limits.http_connections, header_timeout=limits.http_header_timeout_sec
        )
        config = uvicorn.Config(
            app,
            log_level="warning",
            log_config=None,
            access_log=False,
            lifespan="off",
            http=self.gate.protocol(),
            timeout_keep_alive=limits.http_keep_alive_sec,
            h11_max_incomplete_event_size=limits.http_max_header_bytes,
            # the gate admits at most ``limit`` connections; uvicorn's own check (which
            # counts the asking connection too) is the second line
            limit_concurrency=self.gate.limit + 1,
        )
        self._sock = sock
        self._server: _EmbeddedServer | None = None
        self._config = config
        self._on_stop = on_stop

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._server = _EmbeddedServer(
            self._config, self.gate, on_started=lambda: task_status.started()
        )
        await self._server.serve(sockets=[self._sock])

    def stop(self) -> None:
        """Stop accepting; ``on_stop`` ends the endless responses (SSE) so the drain is quick."""
        if self._on_stop is not None:
            self._on_stop()
        if self._server is not None:
            self._server.should_exit = True
