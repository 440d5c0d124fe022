"""Session and round ids: the one parser and formatter. Stdlib only (the CLI may import it).

A session is named ``1``, ``0001`` or ``session-0001`` (any number of digits
after ``session-``); all three mean session 1, whose canonical id is
``session-0001``. A round is named ``1``, ``0001`` or ``round-0001``. Only ASCII
digits count: fullwidth or superscript digits, ``+1``, ``-1``, `` 1``, ``1\\n`` and
``1_000`` are refused, as are 0 and more than :data:`MAX_DIGITS` digits. JSON
integers (not booleans) are accepted where a number is natural (``"session": 1``).

A refused id raises :class:`IdError`, an :class:`~trainee.errors.InvalidParams`
(-32602 over JSON-RPC, HTTP 400) that is also a ``ValueError``, whose message names
the value and the accepted forms.
"""

from __future__ import annotations

from trainee.errors import InvalidParams

__all__ = [
    "MAX_DIGITS",
    "ROUND_PATTERN",
    "SESSION_PATTERN",
    "IdError",
    "canonical_session",
    "parse_round",
    "parse_session",
    "round_name",
    "session_id",
]

MAX_DIGITS = 12
"""At most this many digits (leading zeros included): ids fit SQLite's integers."""

SESSION_PATTERN = r"^(session-)?[0-9]{1,12}$"
"""The accepted session forms as a regex (documentation and JSON schemas)."""
ROUND_PATTERN = r"^(round-)?[0-9]{1,12}$"

_DIGITS = frozenset("0123456789")


class IdError(InvalidParams, ValueError):
    """A session or round id that is not in one of the accepted forms."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message, {"field": field, "reason": f"bad {field} id"})


def session_id(index: int) -> str:
    """7 -> ``session-0007``."""
    return f"session-{index:04d}"


def round_name(index: int) -> str:
    """7 -> ``round-0007``."""
    return f"round-{index:04d}"


def _number(value: object, prefix: str, what: str, example: str) -> int:
    field = prefix.rstrip("-")
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise IdError(f"{what} must be 1 or more, got {value}", field)
        if value >= 10**MAX_DIGITS:
            raise IdError(f"{what} must have at most {MAX_DIGITS} digits", field)
        return value
    if not isinstance(value, str):
        raise IdError(
            f"{what} must be a string like {example!r} or a number, got {type(value).__name__}",
            field,
        )
    digits = value[len(prefix) :] if value.startswith(prefix) else value
    if not digits or len(digits) > MAX_DIGITS or not _DIGITS.issuperset(digits):
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise IdError(
            f"not a {what}: {shown!r} (expected {example}, "
            f"{example.removeprefix(prefix)} or {int(example.removeprefix(prefix))}: "
            f"ASCII digits, at most {MAX_DIGITS})",
            field,
        )
    number = int(digits)
    if number < 1:
        raise IdError(f"not a {what}: {value!r} ({what}s start at 1)", field)
    return number


def parse_session(value: object) -> int:
    """``1``, ``"1"``, ``"0001"``, ``"session-0001"`` -> 1; :class:`IdError` otherwise."""
    return _number(value, "session-", "session id", "session-0001")


def parse_round(value: object) -> int:
    """``1``, ``"1"``, ``"0001"``, ``"round-0001"`` -> 1; :class:`IdError` otherwise."""
    return _number(value, "round-", "round number", "round-0001")


def canonical_session(value: object) -> str:
    """Any accepted session form -> its canonical id ``session-NNNN``."""
    return session_id(parse_session(value))
