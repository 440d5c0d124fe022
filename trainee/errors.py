"""One error tree for the whole of trainee, mapped onto JSON-RPC error objects.

Stdlib only: the thin CLI imports this module to rebuild the server's errors as
the same classes, so it can catch classes rather than integers.

Codes are stable and append-only. The JSON-RPC reserved codes (-32768..-32000)
are used only for protocol faults; application errors live at 1001 and up.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the CLI's start-up is measured
if TYPE_CHECKING:
    from typing import Any, ClassVar

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_STATUS",
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
    "SandboxError",
    "ShuttingDown",
    "TraineeError",
    "error_class_for_code",
    "error_from_wire",
    "exit_status_for",
]


class TraineeError(Exception):
    """Base of every error trainee raises on purpose.

    ``message`` is one human sentence; ``data`` is a JSON-able object with the
    details a client may show or act on (file, line, field, reason, ...).
    """

    code: ClassVar[int] = 1000
    kind: ClassVar[str] = "error"

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


class ParseError(ProtocolError):
    code = -32700


class InvalidRequest(ProtocolError):
    code = -32600


class MethodNotFound(ProtocolError):
    code = -32601


class InvalidParams(TraineeError):
    """The request's params do not match the method's Params type."""

    code = -32602
    kind = "params"


class InternalError(TraineeError):
    """An unexpected failure; the traceback is in the daemon log under ``incident``."""

    code = -32603
    kind = "internal"


# -- application errors --------------------------------------------------------


class ConfigError(TraineeError):
    """A user file (project.yaml, tuning.yaml, a baseline config) is invalid.

    ``data`` carries ``file``, ``line``, ``field`` and ``reason`` when known.
    """

    code = 1001
    kind = "config"

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


class InvalidState(TraineeError):
    code = 1003
    kind = "state"


class LaunchError(TraineeError):
    code = 1004
    kind = "launch"


class NotAvailable(TraineeError):
    """The method exists in the registry but its capability has not landed yet."""

    code = 1005
    kind = "not_available"


class ProviderError(TraineeError):
    code = 1006
    kind = "provider"


class BudgetExceeded(TraineeError):
    code = 1007
    kind = "budget"


class ShuttingDown(TraineeError):
    code = 1008
    kind = "shutting_down"


class InvalidDecision(TraineeError):
    """A decision failed validation twice (after one repair request): nothing is launched."""

    code = 1009
    kind = "invalid_decision"


class SandboxError(LaunchError):
    code = 1014
    kind = "sandbox"


class LimitExceeded(TraineeError):
    """A request or a client went over one of the daemon's limits (connections, batch
    length, reply size, ...); ``data`` names the limit. Nothing was changed."""

    code = 1020
    kind = "limit"


class Forbidden(TraineeError):
    """The caller may not use the daemon at all (e.g. a training job on the socket)."""

    code = 1021
    kind = "forbidden"


class PortInUse(TraineeError):
    """The daemon's HTTP port is taken by another program."""

    code = 1015
    kind = "port_in_use"


class DaemonNotRunning(TraineeError):
    """Client side only: no daemon answered on the socket."""

    code = 1100
    kind = "daemon"


_ALL: tuple[type[TraineeError], ...] = (
    TraineeError,
    ProtocolError,
    ParseError,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    InternalError,
    ConfigError,
    NotFound,
    InvalidState,
    LaunchError,
    NotAvailable,
    ProviderError,
    BudgetExceeded,
    ShuttingDown,
    InvalidDecision,
    SandboxError,
    LimitExceeded,
    Forbidden,
    PortInUse,
    DaemonNotRunning,
)
_BY_NAME: dict[str, type[TraineeError]] = {cls.__name__: cls for cls in _ALL}
_BY_CODE: dict[int, type[TraineeError]] = {}
for _cls in _ALL:
    _BY_CODE.setdefault(_cls.code, _cls)


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


# -- exit statuses ---------------------------------------------------------------------

# The one table from error class to process exit status, for the CLI and for the daemon
# process that ``trainee serve`` becomes. Most specific first: the first class in an
# error's MRO found here wins. The README lists it; 0 is success, 1 a failed session.
EXIT_STATUS: dict[type[TraineeError], int] = {
    InvalidParams: 2,
    ConfigError: 3,
    NotFound: 4,
    InvalidState: 5,
    SandboxError: 6,
    LaunchError: 7,
    NotAvailable: 8,
    ProviderError: 9,
    BudgetExceeded: 10,
    ProtocolError: 11,
    PortInUse: 12,
    InternalError: 70,
    DaemonNotRunning: 69,
    ShuttingDown: 75,
    TraineeError: 1,
}
EXIT_INTERRUPTED = 130


def exit_status_for(exc: TraineeError) -> int:
    """The exit status of a command that ended with ``exc``."""
    for cls in type(exc).__mro__:
        if cls in EXIT_STATUS:
            return EXIT_STATUS[cls]
    return 1
