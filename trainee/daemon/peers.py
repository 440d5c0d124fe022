"""Who is on the other end of a Unix socket connection (SO_PEERCRED), and may it talk to us.

Defence in depth behind the sandbox, which already hides the socket from guarded
jobs: a peer of another user is refused, and so is any process that descends
from a round's monitor (the job, its children, whatever it daemonized: the
monitor is a child subreaper, so they stay below it) or that carries a round's
environment (``TRAINEE_ROUND_DIR``). A job must never drive the daemon that
supervises it (start an unsafe session, read provider keys).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable, Collection

__all__ = ["Peer", "peer_of", "refusal"]

_UCRED = struct.Struct("3i")
_MAX_DEPTH = 64
_ROUND_MARKER = b"TRAINEE_ROUND_DIR="


class Peer:
    __slots__ = ("gid", "pid", "uid")

    def __init__(self, pid: int, uid: int, gid: int) -> None:
        self.pid, self.uid, self.gid = pid, uid, gid

    def __repr__(self) -> str:
        return f"Peer(pid={self.pid}, uid={self.uid})"


def peer_of(sock: socket.socket) -> Peer | None:
    """The peer's credentials as the kernel recorded them at connect; None if unknown."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    except (OSError, AttributeError):
        return None
    pid, uid, gid = _UCRED.unpack(raw)
    return Peer(pid, uid, gid)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read(4096)
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ")"
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def _has_round_environment(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read(1 << 20)
    except OSError:
        return False
    return environ.startswith(_ROUND_MARKER) or b"\0" + _ROUND_MARKER in environ


def refusal(peer: Peer | None, monitors: Callable[[], Collection[int]]) -> str | None:
    """Why ``peer`` may not use the daemon, or None when it may.

    ``monitors`` gives the pids of the running rounds' monitors (asked only when
    the peer is known).
    """
    if peer is None:
        return None  # not a Unix socket with credentials: nothing to check
    if peer.uid not in (os.getuid(), 0):
        return f"refused: the connecting process (pid {peer.pid}) belongs to another user"
    if peer.pid <= 0:
        return None
    if _has_round_environment(peer.pid):
        return (
            f"refused: the connecting process (pid {peer.pid}) runs in a training round; "
            "a job may not drive the daemon that supervises it"
        )
    watched = set(monitors())
    if not watched:
        return None
    pid: int | None = peer.pid
    for _ in range(_MAX_DEPTH):
        if pid is None or pid <= 1:
            return None
        if pid in watched:
            return (
                f"refused: the connecting process (pid {peer.pid}) descends from the monitor "
                f"of a running round (pid {pid}); a job may not drive the daemon that "
                "supervises it"
            )
        pid = _parent(pid)
    return None
