"""The daemon's life: lock, listen, serve, shut down gracefully.

One root task group holds every activity. SIGTERM or SIGINT starts a graceful
shutdown (stop accepting, let sessions checkpoint, flush, exit 0); a second
SIGINT forces the exit. A second daemon on the same socket refuses to start;
a socket file left by a daemon that died is removed by the next one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from trainee import errors, paths
from trainee.api.context import CallContext, Services
from trainee.api.table import registry
from trainee.daemon import systemd
from trainee.daemon.http import (
    ConnectionGate,
    HttpServer,
    allowed_hosts_for,
    bind_tcp,
    build_app,
    is_loopback,
    load_or_create_token,
)
from trainee.daemon.limits import FdBudget, LargeRequests, Limits, raise_fd_limit
from trainee.daemon.logs import setup_logging
from trainee.daemon.socket_server import SocketServer, bind_unix_socket, prepare_socket_dir
from trainee.daemon.web import WebUI
from trainee.errors import ConfigError
from trainee.events import DaemonStarted
from trainee.mcp.http import McpEndpoint
from trainee.rpc.protocol import Dispatcher
from trainee.session.bus import EventBus
from trainee.session.manager import SessionManager

log = logging.getLogger("trainee.daemon")

# Exit statuses from the one table in trainee.errors (``trainee serve`` becomes this process).
EXIT_ALREADY_RUNNING = errors.InvalidState.exit_status
EXIT_START_FAILED = errors.InternalError.exit_status


@dataclass
class DaemonConfig:
    socket_path: Path
    project_root: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    port_fallback: bool = False
    ready_fd: int | None = None
    log_level: str = "INFO"
    limits: Limits | None = None
    """None: the defaults with the environment's overrides (:meth:`Limits.from_env`)."""
    extra: dict[str, Any] = field(default_factory=dict)


class AlreadyRunning(Exception):
    def __init__(self, pid: str) -> None:
        super().__init__(pid)
        self.pid = pid


def lock_path(socket_path: Path) -> Path:
    return socket_path.with_name(socket_path.name + ".lock")


def token_path(socket_path: Path) -> Path:
    return socket_path.with_name("token")


def acquire_lock(path: Path) -> int:
    """Hold an exclusive lock for the daemon's life; the file records our pid."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = ""
        with contextlib.suppress(OSError):
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise AlreadyRunning(holder) from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _write_ready(fd: int | None, message: str) -> None:
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, message.encode() + b"\n")
        os.close(fd)


def run(config: DaemonConfig) -> int:
    """Run the daemon in the foreground until it is told to stop. Returns the exit status."""
    setup_logging(config.log_level)
    try:
        limits = config.limits or Limits.from_env()
    except ConfigError as exc:
        log.error("daemon failed to start: %s", exc)
        _write_ready(config.ready_fd, f"FAILED {exc}")
        return EXIT_START_FAILED
    config = dataclasses.replace(config, limits=limits)
    prepare_socket_dir(config.socket_path)
    try:
        lock_fd = acquire_lock(lock_path(config.socket_path))
    except AlreadyRunning as exc:
        msg = (
            f"another trainee daemon is already running (pid {exc.pid or '?'}) "
            f"on {config.socket_path}"
        )
        log.error("%s", msg)
        _write_ready(config.ready_fd, "ALREADY " + msg)
        return EXIT_ALREADY_RUNNING
    try:
        return anyio.run(_serve, config)
    except errors.TraineeError as exc:
        # said plainly: this is what `trainee serve` shows in the terminal
        hint = exc.data.get("hint") if isinstance(exc.data, dict) else None
        sys.stderr.write(f"error: {exc.message}\n" + (f"hint: {hint}\n" if hint else ""))
        _write_ready(config.ready_fd, f"FAILED {exc.message}")
        return errors.exit_status_for(exc)
    except OSError as exc:
        log.error("daemon failed to start: %s", exc)
        _write_ready(config.ready_fd, f"FAILED {exc}")
        return EXIT_START_FAILED
    except Exception as exc:
        log.exception("daemon failed")
        _write_ready(config.ready_fd, f"FAILED {type(exc).__name__}: {exc}")
        return EXIT_START_FAILED
    finally:
        os.close(lock_fd)


async def _serve(config: DaemonConfig) -> int:
    limits = config.limits or Limits()
    fd_limit, _ = raise_fd_limit(limits.fd_limit)
    budget = FdBudget.for_limit(fd_limit, limits)
    log.info(
        "open-file limit %d (%d kept for rounds, store and logs): up to %d socket and %d "
        "HTTP connections",
        budget.fd_limit,
        budget.reserve,
        budget.socket,
        budget.http,
    )
    large = LargeRequests(limits)
    activated = systemd.listen_unix_socket()
    unix_sock = activated if activated is not None else bind_unix_socket(config.socket_path)
    http_sock = _bind_http(config)
    port = http_sock.getsockname()[1]
    http_url = f"http://{'127.0.0.1' if config.host in ('0.0.0.0', '::') else config.host}:{port}"
    if not is_loopback(config.host):
        log.warning(
            "HTTP is bound to %s, reachable beyond this machine; the access token is still required",
            config.host,
        )

    shutdown = anyio.Event()

    def begin_shutdown() -> None:
        services.closing = True  # from now on the registry answers ShuttingDown
        shutdown.set()

    # Event ids keep increasing across daemon restarts (SSE clients resume by id).
    bus = EventBus(
        first_id=int(time.time() * 1000) * 1000,
        buffer=limits.watch_events,
        buffer_bytes=limits.watch_bytes,
    )
    manager = SessionManager(bus, http_url=http_url)
    # service data (the projects it ran sessions in): ~/.trainee/runtime, private
    paths.ensure_private_dir(manager.state_dir)
    services = Services(
        bus=bus,
        socket_path=str(config.socket_path),
        started_at=time.time(),
        request_shutdown=begin_shutdown,
        project_root=config.project_root,
        http_url=http_url,
        extra={"manager": manager},
    )

    async def call(method: str, params: Any, ctx: CallContext) -> Any:
        return await registry.call(method, params, ctx)

    dispatcher = Dispatcher(
        call, logger=log, max_batch=limits.rpc_batch, max_reply=limits.reply_bytes
    )
    token = load_or_create_token(token_path(config.socket_path))
    hosts = allowed_hosts_for(config.host, port)
    web = WebUI(services)
    mcp = McpEndpoint(registry, services)
    gate = ConnectionGate(budget.http, header_timeout=limits.http_header_timeout_sec)
    app = build_app(
        registry,
        dispatcher,
        services,
        token=token,
        allowed_hosts=lambda: hosts,
        extra_routes=[mcp.route, *web.routes],
        limits=limits,
        large=large,
        gate=gate,
    )

    def end_streams() -> None:
        web.close()
        mcp.close()

    http = HttpServer(app, http_sock, on_stop=end_streams, gate=gate, limits=limits)
    socket_server = SocketServer(
        unix_sock,
        dispatcher,
        services,
        limits=limits,
        max_connections=budget.socket,
        large=large,
        monitors=manager.monitor_pids,
    )

    def remove_socket() -> None:
        if activated is None:
            with contextlib.suppress(FileNotFoundError):
                config.socket_path.unlink()

    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_signals, shutdown, begin_shutdown)
        await tg.start(manager.run)
        await tg.start(socket_server.serve)
        await tg.start(mcp.run)
        http_done = anyio.Event()

        async def run_http(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            try:
                await http.run(task_status=task_status)
            finally:
                http_done.set()

        await tg.start(run_http)
        interval = systemd.watchdog_interval()
        if interval:
            tg.start_soon(_watchdog, interval)
        bus.publish(DaemonStarted(pid=os.getpid(), http_url=http_url))
        log.info("ready: socket %s, http %s", config.socket_path, http_url)
        systemd.ready()
        _write_ready(config.ready_fd, f"READY {http_url}")

        await shutdown.wait()
        log.info("shutting down")
        systemd.stopping()
        remove_socket()
        http.stop()
        with anyio.move_on_after(5, shield=True):
            await http_done.wait()
        tg.cancel_scope.cancel()
    log.info("stopped")
    return 0


def _bind_http(config: DaemonConfig) -> socket.socket:
    choose = f"choose another with --port N or {paths.HTTP_PORT_ENV}=N (0: any free port)"
    try:
        return bind_tcp(config.host, config.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE and config.port_fallback:
            sock = bind_tcp(config.host, 0)
            log.warning(
                "port %s is taken: serving HTTP on port %s instead (%s)",
                config.port,
                sock.getsockname()[1],
                choose,
            )
            return sock
        where = f"{config.host}:{config.port}"
        if exc.errno == errno.EADDRINUSE:
            raise errors.PortInUse(
                f"port {config.port} is taken: cannot serve HTTP on {where}",
                {"port": config.port, "host": config.host, "hint": choose},
            ) from None
        raise errors.InvalidParams(
            f"cannot serve HTTP on {where}: {exc.strerror}",
            {"field": "--host/--port", "reason": exc.strerror, "hint": choose},
        ) from None


async def _watch_signals(shutdown: anyio.Event, begin_shutdown: Callable[[], None]) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if not shutdown.is_set():
                log.info("received %s, stopping gracefully", signal.Signals(signum).name)
                begin_shutdown()
            elif signum == signal.SIGINT:
                log.warning("second interrupt: forcing exit")
                os._exit(130)


async def _watchdog(interval: float) -> None:
    while True:
        systemd.watchdog_ping()
        await anyio.sleep(interval)
