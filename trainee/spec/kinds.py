"""What kind of value a parsed file or argument holds: one answer for the spec's loaders
(``is a list, not a mapping``), argument rendering and discovery's option types.

Stdlib only: the bottom of trainee.spec.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["ScalarType", "kind_words", "scalar_type"]

ScalarType = Literal["bool", "int", "float", "str"]


def scalar_type(value: Any) -> ScalarType | None:
    """``bool``, ``int``, ``float`` or ``str`` for a scalar of that type (a bool is not an
    int here); None for anything else (None, a list, a mapping...)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return None


def kind_words(value: Any) -> str:
    """A value's kind as an error message says it: ``null``, ``a list``, ``a string``,
    ``a boolean``, ``a number``, ``a mapping``, else its type's name."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
