"""The daemon's side of systemd: sd_notify and socket activation, stdlib only.

``notify`` sends ``READY=1``/``STOPPING=1``/``WATCHDOG=1``/``STATUS=...`` datagrams to
``$NOTIFY_SOCKET``; ``listen_fds`` takes over the sockets systemd bound for us
(``LISTEN_FDS`` starting at fd 3, meant for us when ``LISTEN_PID`` is our pid).
Outside systemd every function is a quiet no-op: ``notify`` returns False,
``watchdog_interval`` returns None, ``listen_fds`` returns an empty list.
Malformed variables are an error naming the variable and the reason.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from collections.abc import Mapping

__all__ = [
    "SD_LISTEN_FDS_START",
    "listen_fds",
    "listen_unix_socket",
    "notify",
    "ready",
    "status",
    "stopping",
    "watchdog_interval",
    "watchdog_ping",
]

SD_LISTEN_FDS_START = 3
"""The first file descriptor systemd passes (after stdin, stdout, stderr)."""

_LISTEN_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")

log = logging.getLogger(__name__)


def notify(state: str, *, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (newline-separated ``KEY=VALUE`` lines) to ``$NOTIFY_SOCKET``.

    Returns True when the datagram was sent; False when not run by systemd
    (no ``NOTIFY_SOCKET``) or when sending failed (logged as a warning: a lost
    watchdog ping must not bring the daemon down). ``NOTIFY_SOCKET`` is an
    absolute path or an abstract socket name written ``@name``.
    """
    if not state:
        raise ValueError("notify: the state must not be empty (e.g. 'READY=1')")
    value = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if not value:
        return False
    address = _notify_address(value)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.connect(address)
            sock.sendall(state.encode("utf-8"))
        except OSError as exc:
            log.warning("sd_notify %r to NOTIFY_SOCKET=%s failed: %s", state, value, exc)
            return False
    return True


def ready(*, env: Mapping[str, str] | None = None) -> bool:
    """Tell systemd that start-up is complete (every server is up)."""
    return notify("READY=1", env=env)


def stopping(*, env: Mapping[str, str] | None = None) -> bool:
    """Tell systemd that shutdown has begun."""
    return notify("STOPPING=1", env=env)


def watchdog_ping(*, env: Mapping[str, str] | None = None) -> bool:
    """Feed the service watchdog (every ``watchdog_interval()`` seconds)."""
    return notify("WATCHDOG=1", env=env)


def status(text: str, *, env: Mapping[str, str] | None = None) -> bool:
    """Set the one-line status shown by ``systemctl status`` (newlines become spaces)."""
    return notify("STATUS=" + " ".join(text.splitlines()), env=env)


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between watchdog pings (half of ``WATCHDOG_USEC``), or None.

    None when no watchdog is configured or when ``WATCHDOG_PID`` names another
    process (the variables were inherited, not meant for us).
    """
    environ = os.environ if env is None else env
    usec_text = environ.get("WATCHDOG_USEC", "")
    if not usec_text:
        return None
    pid_text = environ.get("WATCHDOG_PID", "")
    if pid_text and _parse_positive("WATCHDOG_PID", pid_text) != os.getpid():
        return None
    return _parse_positive("WATCHDOG_USEC", usec_text) / 2 / 1_000_000


def listen_fds(unset_env: bool = True, env: Mapping[str, str] | None = None) -> list[socket.socket]:
    """The sockets systemd passed to this process, as socket objects, in fd order.

    Empty when ``LISTEN_PID`` is missing or names another process. The fds are
    made close-on-exec so training processes never inherit them. With
    ``unset_env`` the ``LISTEN_*`` variables are removed from ``os.environ``
    (also when they were not meant for us), so children never see them.
    A malformed variable or a passed fd that is not an open socket raises
    ValueError and changes nothing.
    """
    environ = os.environ if env is None else env
    sockets = _take_sockets(environ)
    if unset_env:
        for name in _LISTEN_VARS:
            os.environ.pop(name, None)
    return sockets


def listen_unix_socket(
    unset_env: bool = True, env: Mapping[str, str] | None = None
) -> socket.socket | None:
    """The first passed ``AF_UNIX`` ``SOCK_STREAM`` listening socket, or None.

    Any other passed socket is closed (the daemon serves one control socket).
    """
    found: socket.socket | None = None
    for sock in listen_fds(unset_env=unset_env, env=env):
        if found is None and _is_unix_listener(sock):
            found = sock
        else:
            sock.close()
    return found


def _take_sockets(environ: Mapping[str, str]) -> list[socket.socket]:
    pid_text = environ.get("LISTEN_PID", "")
    if not pid_text or _parse_positive("LISTEN_PID", pid_text) != os.getpid():
        return []
    count_text = environ.get("LISTEN_FDS", "")
    if not count_text:
        return []
    count = _parse_count("LISTEN_FDS", count_text)
    fds = range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count)
    for fd in fds:  # validate every fd before touching any
        try:
            mode = os.fstat(fd).st_mode
        except OSError as exc:
            raise ValueError(
                f"LISTEN_FDS={count_text}: fd {fd} is not open ({exc.strerror})"
            ) from None
        if not stat.S_ISSOCK(mode):
            raise ValueError(f"LISTEN_FDS={count_text}: fd {fd} is not a socket")
    sockets: list[socket.socket] = []
    for fd in fds:
        os.set_inheritable(fd, False)
        sockets.append(socket.socket(fileno=fd))
    return sockets


def _is_unix_listener(sock: socket.socket) -> bool:
    return (
        sock.family == socket.AF_UNIX
        and sock.type == socket.SOCK_STREAM
        and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 0
    )


def _notify_address(value: str) -> bytes:
    if value.startswith("@") and len(value) > 1:
        return b"\0" + os.fsencode(value[1:])
    if value.startswith("/"):
        return os.fsencode(value)
    raise ValueError(
        f"NOTIFY_SOCKET={value!r}: expected an absolute path or an abstract socket name '@name'"
    )


def _parse_count(name: str, text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{name}={text!r}: expected a non-negative integer")
    return int(text)


def _parse_positive(name: str, text: str) -> int:
    value = _parse_count(name, text)
    if value == 0:
        raise ValueError(f"{name}={text!r}: expected a positive integer")
    return value
