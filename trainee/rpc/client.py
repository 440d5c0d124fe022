"""A small blocking JSON-RPC 2.0 client over the daemon's Unix socket. Stdlib only.

The CLI imports this module on every run, so it uses ``json`` and ``socket``
rather than msgspec or asyncio. Errors the daemon sends come back as the same
:mod:`trainee.errors` classes. One client is one connection, used by one thread.

The daemon answers a connection's requests as each is done, so replies may come
in another order than the requests: the client matches them by id and drops a
reply nobody waits for (that of a call that timed out or was cancelled). A call
interrupted by Ctrl-C (KeyboardInterrupt) or that timed out asks the daemon to
cancel it (``$/cancelRequest``) before it raises.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import stat
import time
from collections import deque
from types import EllipsisType, TracebackType

from trainee.errors import (
    DaemonNotRunning,
    InvalidParams,
    ProtocolError,
    TraineeError,
    error_from_wire,
)
from trainee.paths import socket_path
from trainee.rpc.framing import DEFAULT_MAX_FRAME, FrameBuffer, FrameTooLarge, encode_frame

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any

__all__ = ["RpcClient"]

_RECV_SIZE = 256 * 1024
_TIMED_OUT: Any = object()
CANCEL_METHOD = "$/cancelRequest"
"""The notification that cancels a request in flight (the daemon's ``trainee.rpc.protocol``)."""
_CANCEL_SEND_SEC = 2.0
"""How long sending a cancel may take before the client gives up on it."""


class RpcClient:
    """Calls methods on the daemon; connects on first use.

    ``timeout`` (seconds, None = wait forever) bounds connecting, sending and
    waiting for each response. Notifications the daemon pushes while a call
    waits are kept for :meth:`next_notification`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        timeout: float | None = 30.0,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        self.path = os.fspath(path) if path is not None else str(socket_path())
        self.timeout = timeout
        self.max_frame = max_frame
        self._sock: socket.socket | None = None
        self._buffer = FrameBuffer(max_frame)
        self._frames: deque[bytes | FrameTooLarge] = deque()
        self._notifications: deque[dict[str, Any]] = deque()
        self._ids = itertools.count(1)

    # -- connection ------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Open the connection if it is not open; raise DaemonNotRunning if no daemon answers.

        ``data["reason"]`` says why: ``no_socket`` (no file at the path),
        ``not_a_socket`` (a file that is not a socket), ``refused`` (a socket
        nobody listens on: a stale file of a daemon that is gone),
        ``permission_denied`` or ``unreachable`` (any other OS error).
        """
        if self._sock is not None:
            return
        path = self.path
        try:
            mode = os.stat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            raise self._not_running(
                f"no daemon is running: no socket at {path}", "no_socket"
            ) from None
        except OSError:
            pass  # let connect() report it precisely
        else:
            if not stat.S_ISSOCK(mode):
                raise self._not_running(
                    f"no daemon is running: {path} exists but is not a socket", "not_a_socket"
                )
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(path)
        except BaseException as exc:
            sock.close()
            if isinstance(exc, FileNotFoundError):
                raise self._not_running(
                    f"no daemon is running: no socket at {path}", "no_socket"
                ) from None
            if isinstance(exc, ConnectionRefusedError):
                raise self._not_running(
                    f"no daemon is running: connection refused at {path} (stale socket file)",
                    "refused",
                ) from None
            if isinstance(exc, TimeoutError):
                raise ProtocolError(
                    f"timed out connecting to the daemon at {path} after {self.timeout:g}s",
                    {"reason": "timeout", "path": path, "timeout": self.timeout},
                ) from None
            if isinstance(exc, PermissionError):
                raise self._not_running(
                    f"cannot reach the daemon: permission denied on {path}", "permission_denied"
                ) from None
            if isinstance(exc, OSError):
                raise self._not_running(
                    f"cannot reach the daemon at {path}: {exc}", "unreachable"
                ) from None
            raise
        self._sock = sock

    def close(self) -> None:
        """Close the connection; the next call opens a new one. Queued notifications stay."""
        sock, self._sock = self._sock, None
        self._buffer = FrameBuffer(self.max_frame)
        self._frames.clear()
        if sock is not None:
            sock.close()

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- calls -------------------------------------------------------------------

    def call(
        self,
        method: str,
        params: dict[str, Any] | list[Any] | None = None,
        *,
        timeout: float | EllipsisType | None = ...,
    ) -> Any:
        """Call ``method`` and return its result; raise the error class the daemon raised.

        ``timeout`` defaults to the client's; on expiry ProtocolError (reason
        ``timeout``) is raised and a late response is discarded when it comes.
        """
        seconds = self.timeout if timeout is ... else timeout
        deadline = _deadline(seconds)
        rid = next(self._ids)
        self._send_interruptible(_encode_request(method, params, rid), deadline, method)
        try:
            while True:
                message = self._read_message(deadline)
                if message is _TIMED_OUT:
                    self._cancel_quietly([rid])
                    raise _timed_out(method, seconds)
                if self._queue_if_notification(message) or not isinstance(message, dict):
                    continue
                mid = message.get("id")
                if _is_our_id(mid, rid):
                    return _result_of(message, method)
                if mid is None and "error" in message:  # the daemon could not read our request
                    raise error_from_wire(message["error"])
                # else: the late response to a call that timed out or was cancelled earlier
        except KeyboardInterrupt:
            self._cancel_quietly([rid])
            raise

    def cancel(self, rid: int | str, *, timeout: float | EllipsisType | None = ...) -> None:
        """Ask the daemon to cancel the request ``rid`` sent on this connection: it is
        answered RequestCancelled (a reply this client drops). Nothing happens when it
        is already answered, or when the connection is closed (its requests died with it).
        """
        if self._sock is None:
            return
        seconds = self.timeout if timeout is ... else timeout
        frame = _encode_request(CANCEL_METHOD, {"id": rid}, None)
        self._send(frame, _deadline(seconds), f"the cancel of request {rid}")

    def notify(self, method: str, params: dict[str, Any] | list[Any] | None = None) -> None:
        """Send a notification: no response comes, not even an error."""
        self._send(_encode_request(method, params, None), _deadline(self.timeout), method)

    def batch(
        self,
        calls: list[tuple[str, Any]],
        *,
        timeout: float | EllipsisType | None = ...,
    ) -> list[Any | TraineeError]:
        """Send ``(method, params)`` calls as one batch; results or errors, in order.

        An error of the whole batch (e.g. a frame too large) is raised.
        """
        if not calls:
            return []
        seconds = self.timeout if timeout is ... else timeout
        deadline = _deadline(seconds)
        ids = [next(self._ids) for _ in calls]
        parts = [_encode_request(m, p, rid) for (m, p), rid in zip(calls, ids, strict=True)]
        what = f"a batch of {len(calls)} calls"
        self._send_interruptible(b"[" + b",".join(parts) + b"]", deadline, what)
        try:
            return self._batch_replies(calls, ids, deadline, what, seconds)
        except KeyboardInterrupt:
            self._cancel_quietly(ids[:1])  # a batch is one request: any of its ids cancels it
            raise

    def _batch_replies(
        self,
        calls: list[tuple[str, Any]],
        ids: list[int],
        deadline: float | None,
        what: str,
        seconds: float | None,
    ) -> list[Any | TraineeError]:
        wanted = set(ids)
        while True:
            message = self._read_message(deadline)
            if message is _TIMED_OUT:
                self._cancel_quietly(ids[:1])
                raise _timed_out(what, seconds)
            if self._queue_if_notification(message):
                continue
            if isinstance(message, dict) and message.get("id") is None and "error" in message:
                raise error_from_wire(message["error"])
            if not isinstance(message, list):
                continue
            by_id = {
                r["id"]: r for r in message if isinstance(r, dict) and type(r.get("id")) is int
            }
            if not set(by_id) <= wanted:
                continue  # a late batch response to an earlier batch
            out: list[Any | TraineeError] = []
            for (method, _), rid in zip(calls, ids, strict=True):
                response = by_id.get(rid)
                if response is None:
                    out.append(ProtocolError(f"no response to {method} in the batch"))
                    continue
                try:
                    out.append(_result_of(response, method))
                except TraineeError as exc:
                    out.append(exc)
            return out

    def next_notification(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next notification the daemon pushed, as ``{"method", "params"}``.

        Waits up to ``timeout`` seconds (None = forever) and returns None if none
        came; raises DaemonNotRunning (reason ``closed``) when the daemon hangs up.
        """
        if self._notifications:
            return self._notifications.popleft()
        self.connect()
        deadline = _deadline(timeout)
        while True:
            message = self._read_message(deadline)
            if message is _TIMED_OUT:
                return None
            if self._queue_if_notification(message):
                return self._notifications.popleft()

    # -- internals ---------------------------------------------------------------

    def _send_interruptible(self, payload: bytes, deadline: float | None, what: str) -> None:
        """Send a request; a Ctrl-C while it is being sent (or just after, before the
        caller could register it for a cancel) closes the connection: a frame may be cut
        short, and the daemon cancels a connection's requests when it ends."""
        try:
            self._send(payload, deadline, what)
        except KeyboardInterrupt:
            self.close()
            raise

    def _cancel_quietly(self, ids: list[int]) -> None:
        """Cancel requests this client gives up on, as far as a short try can."""
        try:
            for rid in ids:
                self.cancel(rid, timeout=_CANCEL_SEND_SEC)
        except (TraineeError, OSError):
            pass  # the connection is gone or stuck: the daemon cancels with its end

    def _not_running(self, message: str, reason: str) -> DaemonNotRunning:
        return DaemonNotRunning(message, {"reason": reason, "path": self.path})

    def _closed(self) -> DaemonNotRunning:
        self.close()
        return self._not_running("the daemon closed the connection", "closed")

    def _send(self, payload: bytes, deadline: float | None, what: str) -> None:
        self.connect()
        sock = self._sock
        assert sock is not None
        try:
            remaining = _remaining(deadline)
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            sock.settimeout(remaining)
            sock.sendall(encode_frame(payload))
        except TimeoutError:
            self.close()  # part of the frame may be out: the stream is no longer usable
            raise ProtocolError(
                f"timed out sending {what}", {"reason": "timeout", "method": what}
            ) from None
        except OSError:
            raise self._closed() from None

    def _read_message(self, deadline: float | None) -> Any:
        """The next decoded message from the daemon, or ``_TIMED_OUT``."""
        while not self._frames:
            sock = self._sock
            if sock is None:
                raise self._closed()
            remaining = _remaining(deadline)
            if remaining is not None and remaining <= 0:
                return _TIMED_OUT
            try:
                sock.settimeout(remaining)
                data = sock.recv(_RECV_SIZE)
            except TimeoutError:
                return _TIMED_OUT
            except OSError:
                raise self._closed() from None
            if not data:
                raise self._closed()
            self._frames.extend(self._buffer.feed(data))
        frame = self._frames.popleft()
        if isinstance(frame, FrameTooLarge):
            self.close()
            raise ProtocolError(
                f"the daemon sent a message over {frame.max_frame} bytes",
                {"reason": "frame_too_large", "max_frame": frame.max_frame},
            )
        try:
            return json.loads(frame)
        except (ValueError, RecursionError) as exc:
            self.close()
            raise ProtocolError(
                f"malformed message from the daemon: {exc}", {"reason": "malformed"}
            ) from None

    def _queue_if_notification(self, message: Any) -> bool:
        if isinstance(message, dict) and "method" in message:
            if "id" not in message:
                self._notifications.append(
                    {"method": message["method"], "params": message.get("params")}
                )
            return True  # requests from the daemon are not part of the protocol: dropped
        return False


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _timed_out(what: str, seconds: float | None) -> ProtocolError:
    return ProtocolError(
        f"timed out waiting for {what} after {seconds:g}s",
        {"reason": "timeout", "method": what, "timeout": seconds},
    )


def _is_our_id(value: Any, rid: int) -> bool:
    return type(value) is int and value == rid


def _encode_request(method: str, params: Any, rid: int | None) -> bytes:
    """One Request (or, with ``rid`` None, Notification) as JSON bytes."""
    if not isinstance(method, str):
        raise TypeError(f"method must be a string, got {type(method).__name__}")
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if isinstance(params, tuple):
        params = list(params)
    if params is not None:
        if not isinstance(params, dict | list):
            raise TypeError(f"params of {method} must be a dict, a list or None")
        message["params"] = params
    if rid is not None:
        message["id"] = rid
    try:
        text = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidParams(
            f"{method}: params cannot be sent as JSON: {exc}",
            {"method": method, "reason": str(exc)},
        ) from None


def _result_of(response: dict[str, Any], method: str) -> Any:
    if "error" in response:
        raise error_from_wire(response["error"])
    if "result" in response:
        return response["result"]
    raise ProtocolError(f"malformed response to {method}: neither result nor error")
