"""One error tree for the whole of trainee, and the one table of what each error means.

Stdlib only: the thin CLI imports this module to rebuild the server's errors as
the same classes, so it can catch classes rather than integers.

Each class carries, in one place, its JSON-RPC ``code``, the CLI's ``exit_status``
and the ``http_status`` of the HTTP API (subclasses inherit what they do not set).
Codes are stable and append-only. The JSON-RPC reserved codes (-32768..-32000)
are used only for protocol faults, -32800 for a request its client cancelled (the
code LSP gives it); application errors live at 1001 and up.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any, ClassVar

__all__ = [
    "EXIT_INTERRUPTED",
    "BudgetExceeded",
    "ConfigError",
    "DaemonNotRunning",
    "Forbidden",
    "InternalError",
    "InvalidDecision",
    "InvalidParams",
    "InvalidRequest",
    "InvalidState",
    "LaunchError",
    "LimitExceeded",
    "MethodNotFound",
    "NotAvailable",
    "NotFound",
    "ParseError",
    "PortInUse",
    "ProtocolError",
    "ProviderError",
    "RequestCancelled",
    "SandboxError",
    "ShuttingDown",
    "TraineeError",
    "error_class_for_code",
    "error_classes",
    "error_from_wire",
    "exit_status_for",
]

EXIT_INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (0 is success, 1 a failed session)."""

_CLASSES: list[type[TraineeError]] = []
"""Every error class of this module, in definition order (filled as they are defined)."""


class TraineeError(Exception):
    """Base of every error trainee raises on purpose.

    ``message`` is one human sentence; ``data`` is a JSON-able object with the
    details a client may show or act on (file, line, field, reason, ...).
    """

    code: ClassVar[int] = 1000
    """The JSON-RPC error code (stable, append-only)."""
    kind: ClassVar[str] = "error"
    exit_status: ClassVar[int] = 1
    """The exit status of a CLI command (and of ``trainee serve``) that ends with it."""
    http_status: ClassVar[int] = 422
    """The HTTP status of the API's answer (422: understood, but it cannot be done)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:  # the table holds this module's classes only
            _CLASSES.append(cls)

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, data={self.data!r})"

    def __eq__(self, other: object) -> bool:
        return (
            type(self) is type(other)
            and isinstance(other, TraineeError)
            and (self.message, self.data) == (other.message, other.data)
        )

    def __hash__(self) -> int:
        return hash((type(self), self.message))

    def response_status(self) -> int:
        """The HTTP status of this error's answer (a class may refine it by its data)."""
        return self.http_status

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member for this error."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        data: dict[str, Any] = {"type": type(self).__name__}
        if self.data is not None:
            data["details"] = self.data
        err["data"] = data
        return err


# -- protocol faults (JSON-RPC reserved codes) --------------------------------


class ProtocolError(TraineeError):
    """A fault in the JSON-RPC conversation itself."""

    code = -32600
    kind = "protocol"
    exit_status = 11
    http_status = 400


class ParseError(ProtocolError):
    code = -32700


class InvalidRequest(ProtocolError):
    code = -32600


class MethodNotFound(ProtocolError):
    code = -32601
    http_status = 404


class InvalidParams(TraineeError):
    """The request's params do not match the method's Params type."""

    code = -32602
    kind = "params"
    exit_status = 2
    http_status = 400


class InternalError(TraineeError):
    """An unexpected failure; the traceback is in the daemon log under ``incident``."""

    code = -32603
    kind = "internal"
    exit_status = 70
    http_status = 500


class RequestCancelled(TraineeError):
    """The client cancelled the request (``$/cancelRequest`` on the socket) before it
    was through. What it had already done stays done: cancelling is for waits and reads."""

    code = -32800
    kind = "cancelled"
    exit_status = 13
    http_status = 499
    """Never sent over HTTP (a request there ends with its connection): nginx's 499."""


# -- application errors --------------------------------------------------------


class ConfigError(TraineeError):
    """A user file (project.yaml, tuning.yaml, a baseline config) is invalid.

    ``data`` carries ``file``, ``line``, ``field`` and ``reason`` when known.
    """

    code = 1001
    kind = "config"
    exit_status = 3

    def __init__(
        self,
        message: str,
        data: Any = None,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
        reason: str | None = None,
    ) -> None:
        details: dict[str, Any] = dict(data) if isinstance(data, dict) else {}
        for key, value in (("file", file), ("line", line), ("field", field), ("reason", reason)):
            if value is not None:
                details[key] = value
        super().__init__(message, details or data)

    @property
    def file(self) -> str | None:
        value = self._detail("file")
        return str(value) if value is not None else None

    @property
    def line(self) -> int | None:
        value = self._detail("line")
        return value if isinstance(value, int) else None

    @property
    def field(self) -> str | None:
        value = self._detail("field")
        return str(value) if value is not None else None

    @property
    def reason(self) -> str | None:
        value = self._detail("reason")
        return str(value) if value is not None else None

    def _detail(self, key: str) -> object:
        return self.data.get(key) if isinstance(self.data, dict) else None


class NotFound(TraineeError):
    code = 1002
    kind = "not_found"
    exit_status = 4
    http_status = 404


class InvalidState(TraineeError):
    code = 1003
    kind = "state"
    exit_status = 5


class LaunchError(TraineeError):
    code = 1004
    kind = "launch"
    exit_status = 7


class NotAvailable(TraineeError):
    """The method exists in the registry but its capability has not landed yet."""

    code = 1005
    kind = "not_available"
    exit_status = 8


class ProviderError(TraineeError):
    code = 1006
    kind = "provider"
    exit_status = 9


class BudgetExceeded(TraineeError):
    code = 1007
    kind = "budget"
    exit_status = 10


class ShuttingDown(TraineeError):
    """The daemon is stopping: it takes no new request (ask the next daemon)."""

    code = 1008
    kind = "shutting_down"
    exit_status = 75
    http_status = 503


class InvalidDecision(TraineeError):
    """A decision failed validation twice (after one repair request): nothing is launched."""

    code = 1009
    kind = "invalid_decision"


class SandboxError(LaunchError):
    code = 1014
    kind = "sandbox"
    exit_status = 6


class LimitExceeded(TraineeError):
    """A request or a client went over one of the daemon's limits (connections, batch
    length, reply size, ...); ``data`` names the limit. Nothing was changed."""

    code = 1020
    kind = "limit"
    http_status = 503
    """413 for a request or reply over its size (:meth:`response_status`), else 503."""

    def response_status(self) -> int:
        what = self.data.get("what") if isinstance(self.data, dict) else None
        if what in ("request bytes", "reply bytes"):
            return 413
        return 408 if what == "body time" else 503


class Forbidden(TraineeError):
    """The caller may not use the daemon at all (e.g. a training job on the socket)."""

    code = 1021
    kind = "forbidden"
    http_status = 403


class PortInUse(TraineeError):
    """The daemon's HTTP port is taken by another program."""

    code = 1015
    kind = "port_in_use"
    exit_status = 12


class DaemonNotRunning(TraineeError):
    """Client side only: no daemon answered on the socket."""

    code = 1100
    kind = "daemon"
    exit_status = 69
    http_status = 503


_CLASSES.insert(0, TraineeError)
_BY_NAME: dict[str, type[TraineeError]] = {cls.__name__: cls for cls in _CLASSES}
_BY_CODE: dict[int, type[TraineeError]] = {}
for _cls in _CLASSES:
    _BY_CODE.setdefault(_cls.code, _cls)  # a shared code means its first (most general) class


def error_classes() -> tuple[type[TraineeError], ...]:
    """Every error class, base first: the one table (code, exit status, HTTP status)."""
    return tuple(_CLASSES)


def error_class_for_code(code: int) -> type[TraineeError]:
    return _BY_CODE.get(code, TraineeError)


def error_from_wire(error: Any) -> TraineeError:
    """Rebuild the error class a server raised from a JSON-RPC ``error`` member."""
    if not isinstance(error, dict):
        return ProtocolError(f"malformed error object: {error!r}")
    code = error.get("code")
    message = str(error.get("message", "unknown error"))
    data = error.get("data")
    cls: type[TraineeError] | None = None
    details: Any = data
    if isinstance(data, dict) and isinstance(data.get("type"), str):
        cls = _BY_NAME.get(data["type"])
        details = data.get("details")
    if cls is None:
        cls = error_class_for_code(code) if isinstance(code, int) else TraineeError
    exc = cls.__new__(cls)
    TraineeError.__init__(exc, message, details)
    return exc


def exit_status_for(exc: TraineeError) -> int:
    """The exit status of a command that ended with ``exc`` (its class's ``exit_status``)."""
    return exc.exit_status
