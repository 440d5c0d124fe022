"""The one check of parameter values: does a value fit its tunable, does a point keep
the constraints. Every place that accepts values for a round (a decision plan of any
policy, ``plan_submit``, the launch itself) asks here, so they cannot disagree.

Stdlib + msgspec only.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from trainee.spec.args import format_float
from trainee.spec.files import ParamType

if TYPE_CHECKING:
    from trainee.spec.compile import TunableSpec
    from trainee.spec.constraints import Constraint

__all__ = [
    "REL_TOL",
    "constraint_problems",
    "format_value",
    "point_problems",
    "value_problem",
    "values_equal",
]

REL_TOL = 1e-9
"""Relative tolerance when comparing float parameter values."""


def values_equal(a: Any, b: Any, *, rel_tol: float = REL_TOL) -> bool:
    """Equal as parameter values: ``True`` is not ``1``; ``1 == 1.0``; floats within ``rel_tol``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if isinstance(a, float) or isinstance(b, float):
            return math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0) or a == b
        return a == b
    return bool(type(a) is type(b) and a == b)


def value_problem(spec: TunableSpec, value: Any) -> str | None:
    """Why ``value`` is not allowed for the tunable ``spec`` (type, choices, bounds,
    log scale), or None when it fits. Bounds are inclusive."""
    if spec.type == ParamType.BOOL:
        return None if isinstance(value, bool) else f"must be true or false, got {_show(value)}"
    if spec.choices:
        if any(values_equal(value, c, rel_tol=0.0) for c in spec.choices):
            return None
        shown = ", ".join(_show(c) for c in spec.choices)
        reason = f"{_show(value)} is not one of the choices: {shown}"
        if isinstance(value, str):
            texts = {str(c).lower(): str(c) for c in spec.choices if isinstance(c, str)}
            close = difflib.get_close_matches(value.lower(), list(texts), n=1, cutoff=0.6)
            if close:
                reason += f" (did you mean {_show(texts[close[0]])}?)"
        return reason
    if spec.type == ParamType.CHOICE:
        return f"{_show(value)} is not one of the choices"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number ({spec.type}), got {_show(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if spec.type == ParamType.INT and isinstance(value, float):
        # one rule for ints, as msgspec's strict mode: 32.0 is not an integer (a program
        # that sends it has a bug; only an LLM's text answer is read leniently, with a note)
        hint = " (write it without a decimal point)" if value.is_integer() else ""
        return f"must be an integer, got {format_value(value)}{hint}"
    lo, hi = spec.min_value, spec.max_value
    shown = format_value(value)
    if lo is not None and value < lo:
        return (
            f"{shown} is below the minimum {format_value(lo)} "
            f"(bounds are inclusive: {_bounds(spec)})"
        )
    if hi is not None and value > hi:
        return (
            f"{shown} is above the maximum {format_value(hi)} "
            f"(bounds are inclusive: {_bounds(spec)})"
        )
    if spec.log and value <= 0:
        return f"{shown} must be > 0 (log-scale parameter)"
    return None


def constraint_problems(
    constraints: Sequence[Constraint], values: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """``(field, reason)`` for every constraint the full point ``values`` breaks;
    the field is ``constraints[i]`` (the position in tuning.yaml)."""
    out: list[tuple[str, str]] = []
    for i, constraint in enumerate(constraints):
        reason = constraint.problem(values)
        if reason is not None:
            out.append((f"constraints[{i}]", reason))
    return out


def point_problems(
    tunables: Sequence[TunableSpec],
    constraints: Sequence[Constraint],
    values: Mapping[str, Any],
) -> list[tuple[str, str]]:
    """``(field, reason)`` for everything wrong with a full point (every tunable's value,
    by name): ``params.<name>`` for a value that does not fit its tunable (a ``None``
    value means "not passed" and fits), then ``constraints[i]`` for each constraint it
    breaks (checked only when every value fits). Names that are not tunables are the
    caller's to report."""
    out: list[tuple[str, str]] = []
    for t in tunables:
        if t.name in values and values[t.name] is not None:
            reason = value_problem(t, values[t.name])
            if reason is not None:
                out.append((f"params.{t.name}", reason))
    if not out:
        out.extend(constraint_problems(constraints, values))
    return out


def format_value(value: Any) -> str:
    """A parameter value as people and models read it: JSON spelling (true, null, 0.001,
    1e-5; floats by the one formatter, :func:`trainee.spec.args.format_float`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return msgspec.json.encode(value).decode()
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def _bounds(spec: TunableSpec) -> str:
    lo = "-inf" if spec.min_value is None else format_value(spec.min_value)
    hi = "inf" if spec.max_value is None else format_value(spec.max_value)
    return f"[{lo}, {hi}]"


def _show(value: Any, limit: int = 80) -> str:
    text = format_value(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
