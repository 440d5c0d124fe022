"""JSON-RPC 2.0 dispatch with no transport: frame in, encoded response out.

The socket server and ``POST /rpc`` both hand each frame (or request body) to
:meth:`Dispatcher.handle_frame` and send back what it returns, if anything.
The dispatcher validates the envelope, calls ``call(method, params, context)``
and maps what it raises onto JSON-RPC error objects: a
:class:`~trainee.errors.TraineeError` becomes its ``to_wire()`` object; any
other exception becomes -32603 with an incident id, its traceback logged and
never sent.

Protocol faults and their messages (``data`` is ``{"type": <class name>}``):

- -32700 ``Parse error: <reason>`` with id null: invalid JSON, invalid UTF-8,
  nesting too deep.
- -32600 ``Invalid Request: <reason>``: a message that is not a Request object,
  an empty batch, a batch longer than ``max_batch``, a frame over the size
  limit. The id is echoed when the request carried a valid one, else null.

A reply (one response, or a whole batch's) may hold at most ``max_reply``
bytes: a result that would pass it is answered with
:class:`~trainee.errors.LimitExceeded` instead, and so is every request of a
batch after the replies so far reached it (those requests are not run). Batch
elements run one at a time with a checkpoint between them, so a long batch
never holds the event loop from other clients.

A transport that lets its clients cancel a request (the socket's
``$/cancelRequest``) hands :meth:`Dispatcher.respond` a :class:`Cancellation`:
once it is cancelled, the request running is answered
:class:`~trainee.errors.RequestCancelled` (-32800) and so is every element of its
batch not run yet; the elements already answered keep their answers.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from trainee.errors import (
    InternalError,
    InvalidRequest,
    LimitExceeded,
    ParseError,
    RequestCancelled,
    TraineeError,
)
from trainee.rpc.framing import FrameTooLarge

__all__ = [
    "CANCEL_METHOD",
    "JSONRPC_VERSION",
    "Call",
    "Cancellation",
    "Dispatcher",
    "as_trainee_error",
    "decode_frame",
    "encode_error",
    "encode_notification",
    "encode_result",
    "is_request_id",
    "request_ids",
]

JSONRPC_VERSION = "2.0"

Call = Callable[[str, Any, Any], Awaitable[Any]]
"""``(method, params, context) -> result``; params are a dict, a list or None as sent."""

Id = str | int | float | None

_decoder = msgspec.json.Decoder()
_encode = msgspec.json.encode
_default_logger = logging.getLogger("trainee.rpc")
_NO_ID: Any = object()  # a request without an "id" member: a notification
DEFAULT_MAX_BATCH = 256
DEFAULT_MAX_REPLY = 16 * 2**20
CANCEL_METHOD = "$/cancelRequest"
"""The notification (``params: {"id": <request id>}``) that cancels a request, as in LSP."""


class Cancellation:
    """The cancel switch of one request unit (a request, or a whole batch).

    :meth:`cancel` may come from another task at any time: the element running
    is cancelled at its next checkpoint, those not run yet are not run.
    """

    __slots__ = ("_scope", "requested")

    def __init__(self) -> None:
        self.requested = False
        self._scope: anyio.CancelScope | None = None

    def cancel(self) -> None:
        self.requested = True
        if self._scope is not None:
            self._scope.cancel()


def decode_frame(frame: bytes) -> Any:
    """Decode one JSON text; raise :class:`ParseError` naming the reason."""
    try:
        return _decoder.decode(frame)
    except RecursionError:
        raise ParseError("Parse error: JSON nested too deeply") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        try:
            bytes(frame).decode("utf-8")
        except UnicodeDecodeError as bad:
            raise ParseError(f"Parse error: invalid UTF-8 at byte {bad.start}") from None
        if not bytes(frame).strip():
            raise ParseError("Parse error: empty message") from None
        raise ParseError(f"Parse error: {exc}") from None


def as_trainee_error(
    exc: Exception, *, logger: logging.Logger | None = None, where: str = "request"
) -> TraineeError:
    """``exc`` itself if it is a TraineeError, else an InternalError with a fresh incident id.

    The traceback of a foreign exception is logged under that id; only the id
    reaches the caller.
    """
    if isinstance(exc, TraineeError):
        return exc
    incident = secrets.token_hex(4)
    (logger or _default_logger).error(
        "Internal error (incident %s) in %s", incident, where, exc_info=exc
    )
    return InternalError(f"Internal error (incident {incident})", {"incident": incident})


def encode_result(id: Id, result: Any) -> bytes:
    """A success Response; raises ``TypeError``/``ValueError`` if ``result`` is not encodable."""
    return b'{"jsonrpc":"2.0","result":%b,"id":%b}' % (_encode(result), _encode(id))


def encode_error(id: Id, exc: TraineeError, *, logger: logging.Logger | None = None) -> bytes:
    """An error Response for ``exc``; an error whose data cannot be encoded becomes -32603."""
    try:
        error = _encode(exc.to_wire())
    except Exception as bad:
        error = _encode(as_trainee_error(bad, logger=logger, where="error encoding").to_wire())
    return b'{"jsonrpc":"2.0","error":%b,"id":%b}' % (error, _encode(id))


def encode_notification(method: str, params: Any = None) -> bytes:
    """A server-to-client notification (no id); ``params`` omitted when None."""
    message: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "method": method}
    if params is not None:
        message["params"] = params
    return _encode(message)


def _is_id(value: Any) -> bool:
    return value is None or (type(value) in (str, int, float))


def is_request_id(value: Any) -> bool:
    """Whether ``value`` may be a request's id: a string, a number or null."""
    return _is_id(value)


def request_ids(message: Any) -> list[Any]:
    """The ids of the requests of a decoded message (each of a batch's); a
    notification or a malformed element has none."""
    items = message if isinstance(message, list) else [message]
    return [m["id"] for m in items if isinstance(m, dict) and "id" in m and _is_id(m["id"])]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class Dispatcher:
    """Turns JSON-RPC frames into calls of ``call`` and their results into Response frames.

    Batches are processed in order, one element at a time. Not bound to any
    transport; ``context`` is passed through to ``call`` untouched.
    """

    def __init__(
        self,
        call: Call,
        *,
        logger: logging.Logger | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_reply: int = DEFAULT_MAX_REPLY,
    ) -> None:
        self._call = call
        self._logger = logger or _default_logger
        self.max_batch = max_batch
        self.max_reply = max_reply

    async def handle_frame(self, frame: bytes | FrameTooLarge, context: Any = None) -> bytes | None:
        """One frame in; the encoded Response (no newline) out, or None when none is due."""
        if isinstance(frame, FrameTooLarge):
            return self._error(
                None,
                InvalidRequest(f"Invalid Request: frame too large ({frame.max_frame} bytes max)"),
            )
        try:
            message = decode_frame(frame)
        except ParseError as exc:
            return self._error(None, exc)
        return await self.respond(message, context)

    async def handle_message(self, message: Any, context: Any = None) -> Any | None:
        """Like :meth:`handle_frame` for an already-decoded message; returns decoded JSON."""
        response = await self.respond(message, context)
        return None if response is None else msgspec.json.decode(response)

    def refuse(self, message: Any, error: TraineeError) -> bytes | None:
        """The answer to a decoded message not run at all: ``error`` with the request's
        id (None for a notification); a batch, refused whole, gets one error with id null."""
        if isinstance(message, dict):
            rid = message.get("id", _NO_ID)
            if rid is _NO_ID:
                return None
            return self._error(rid if _is_id(rid) else None, error)
        return self._error(None, error)

    async def respond(
        self, message: Any, context: Any = None, cancel: Cancellation | None = None
    ) -> bytes | None:
        """The encoded Response to an already-decoded message (a request, a notification
        or a batch), or None when none is due; ``cancel`` may cut it short."""
        if not isinstance(message, list):
            return await self._respond_one(message, context, None, cancel)
        if not message:
            return self._error(None, InvalidRequest("Invalid Request: empty batch"))
        if len(message) > self.max_batch:
            return self._error(
                None,
                InvalidRequest(
                    f"Invalid Request: a batch of {len(message)} requests "
                    f"(at most {self.max_batch}); send fewer at a time"
                ),
            )
        parts: list[bytes] = []
        size = 2
        for m in message:
            if size > self.max_reply:
                response = self._over_reply(m, "the batch's replies so far reached")
            else:
                await anyio.lowlevel.checkpoint()
                response = await self._respond_one(m, context, self.max_reply - size, cancel)
            if response is not None:
                parts.append(response)
                size += len(response) + 1
        return b"[" + b",".join(parts) + b"]" if parts else None

    def _over_reply(self, message: Any, why: str) -> bytes | None:
        """The answer to a batch element left unrun because the reply is full."""
        rid = message.get("id", _NO_ID) if isinstance(message, dict) else None
        if rid is _NO_ID:
            return None
        error = LimitExceeded(
            f"not run: {why} {self.max_reply} bytes, the most one reply may hold; "
            "send the rest in another batch",
            {"what": "reply bytes", "limit": self.max_reply},
        )
        return self._error(rid if _is_id(rid) else None, error)

    async def _respond_one(
        self,
        message: Any,
        context: Any,
        room: int | None = None,
        cancel: Cancellation | None = None,
    ) -> bytes | None:
        if not isinstance(message, dict):
            return self._error(
                None,
                InvalidRequest(f"Invalid Request: expected an object, got {_kind(message)}"),
            )
        rid = message.get("id", _NO_ID)
        if rid is not _NO_ID and not _is_id(rid):
            return self._error(
                None,
                InvalidRequest(
                    f"Invalid Request: 'id' must be a string, a number or null, got {_kind(rid)}"
                ),
            )
        reply_id = None if rid is _NO_ID else rid
        if message.get("jsonrpc") != JSONRPC_VERSION:
            return self._error(
                reply_id, InvalidRequest("Invalid Request: 'jsonrpc' must be \"2.0\"")
            )
        method = message.get("method")
        if not isinstance(method, str):
            why = "missing" if "method" not in message else f"got {_kind(method)}"
            return self._error(
                reply_id, InvalidRequest(f"Invalid Request: 'method' must be a string, {why}")
            )
        params = message.get("params")
        if "params" in message and not isinstance(params, dict | list):
            return self._error(
                reply_id,
                InvalidRequest(
                    f"Invalid Request: 'params' must be an object or an array, got {_kind(params)}"
                ),
            )
        if cancel is not None and cancel.requested:
            return None if rid is _NO_ID else self._error(rid, _cancelled(method, rid, run=False))
        with anyio.CancelScope() as scope:
            if cancel is not None:
                cancel._scope = scope
            try:
                result = await self._call(method, params, context)
            except Exception as exc:
                error = as_trainee_error(exc, logger=self._logger, where=f"method {method!r}")
                if rid is _NO_ID:
                    self._logger.debug("notification %s failed: %r", method, error)
                    return None
                return self._error(rid, error)
            finally:
                if cancel is not None:
                    cancel._scope = None
        if scope.cancelled_caught:
            return None if rid is _NO_ID else self._error(rid, _cancelled(method, rid, run=True))
        if rid is _NO_ID:
            return None
        try:
            encoded = encode_result(rid, result)
        except Exception as exc:
            where = f"encoding the result of {method!r}"
            return self._error(rid, as_trainee_error(exc, logger=self._logger, where=where))
        limit = self.max_reply if room is None else min(room, self.max_reply)
        if len(encoded) > limit:
            return self._error(
                rid,
                LimitExceeded(
                    f"the result of {method} is {len(encoded)} bytes, over the "
                    f"{limit} bytes this reply may still hold; ask for less "
                    "(a smaller limit or length) or call it outside a batch",
                    {"what": "reply bytes", "limit": limit, "size": len(encoded)},
                ),
            )
        return encoded

    def _error(self, id: Id, exc: TraineeError) -> bytes:
        return encode_error(id, exc, logger=self._logger)


def _cancelled(method: str, rid: Id, *, run: bool) -> RequestCancelled:
    what = f"{method} (id {_encode(rid).decode()})"
    how = "was cancelled by the client" if run else "was not run: its batch was cancelled"
    return RequestCancelled(f"request cancelled: {what} {how}", {"id": rid, "method": method})
