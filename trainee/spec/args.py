"""Rendering argument values and flags into argv pieces.

Styles: ``space`` (``--lr 0.001``, argparse), ``equals`` (``--lr=0.001``, the
nanoGPT configurator accepts only this) and override (``optimizer.lr=0.001``,
Hydra), the last chosen per parameter by ``override:`` or by an argument whose
flag has no leading dash. Floats always read back as floats (``1.0``, ``1e-05``).
"""

from __future__ import annotations

import math
import re

from trainee.spec.compile import TunableSpec
from trainee.spec.files import ArgStyle, ParamSpec, ParamType, Value
from trainee.spec.kinds import scalar_type

__all__ = ["format_float", "render_arg", "render_override_value", "render_param", "render_value"]

_HYDRA_PLAIN = re.compile(r"^(?:[A-Za-z_/]|\.(?![0-9]))[A-Za-z0-9_\-./@+]*$")
"""Strings Hydra reads back as the same string unquoted (``./out``, but not ``.5``)."""
_INTERPOLATION = r"\$\{[^{}'\"]+\}"
_PLAIN_PART = rf"(?:{_INTERPOLATION}|[A-Za-z0-9_\-./@+:])*"
_HYDRA_INTERPOLATED = re.compile(rf"^{_PLAIN_PART}{_INTERPOLATION}{_PLAIN_PART}$")
"""Interpolations (``${oc.env:HOME}/out``) Hydra reads unquoted: passed byte for byte."""
_HYDRA_KEYWORDS = {"true", "false", "null", "inf", "nan"}


def _infer(value: Value) -> str:
    kind = scalar_type(value)
    if kind is None:
        raise TypeError(f"unsupported argument value {value!r} of type {type(value).__name__}")
    return kind


def _kind(value: Value, type_: ParamType | str | None) -> str:
    """The rendering kind: the param type, or the value's own type for choice/None."""
    if type_ is None or str(type_) == "choice":
        return _infer(value)
    kind = str(type_)
    if kind not in ("float", "int", "bool", "str"):
        raise ValueError(f"unknown param type {type_!r}")
    return kind


def format_float(value: float) -> str:
    """The one spelling of a float, in commands, prompts, examples and repair messages:
    the shortest text that reads back to the same float (``repr``), with the exponent
    written without ``+`` or leading zeros (``1e-5``, not ``1e-05``; ``1e20``, not
    ``1e+20``), because JSON grammars such as llama.cpp's forbid a leading zero in an
    exponent: a model made to copy ``1e-05`` under such a grammar writes ``1e-0`` (= 1.0).
    Python, argparse and every JSON parser read this form. Non-finite values are spelled
    ``inf``, ``-inf``, ``nan`` (callers refuse them where they are not allowed)."""
    text = repr(float(value))
    mantissa, sep, exponent = text.partition("e")
    if not sep:
        return text
    sign = "-" if exponent.startswith("-") else ""
    digits = exponent.lstrip("+-").lstrip("0") or "0"
    return f"{mantissa}e{sign}{digits}"


def render_value(value: Value, type: ParamType | str | None = None) -> str:
    """The text of one value: floats by :func:`format_float` (``1.0``, ``1e-5``), ints as
    ints, bools as ``True``/``False``, strings unchanged.

    ``type`` is the param type (``float``/``int``/``bool``/``choice``) or ``str``;
    ``None`` or ``choice`` uses the value's own Python type. Raises ``TypeError``/``ValueError`` for
    a value that does not fit the type (a bool for a float, 2.5 for an int, ``nan``).
    """
    kind = _kind(value, type)
    if kind == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"expected a bool, got {value!r}")
        return "True" if value else "False"
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"expected a number, got {value!r}")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"cannot pass a non-finite number {number}")
        return format_float(number)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"expected an integer, got {value!r}")
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"expected an integer, got {value!r}")
            value = int(value)
        return str(int(value))
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def render_override_value(value: Value, type: ParamType | str | None = None) -> str:
    """A value in Hydra override syntax: ``true``/``false``, numbers as in
    :func:`render_value`, and strings quoted when Hydra would read them otherwise
    (an interpolation such as ``${oc.env:HOME}/out`` is left as written)."""
    kind = _kind(value, type)
    if kind == "bool":
        return render_value(value, "bool").lower()
    if kind in ("float", "int"):
        return render_value(value, kind)
    text = render_value(value, "str")
    if _HYDRA_PLAIN.match(text) and text.lower() not in _HYDRA_KEYWORDS:
        return text
    if "${" in text and _HYDRA_INTERPOLATED.match(text):
        return text
    return _hydra_quote(text)


def _hydra_quote(text: str) -> str:
    quote = "'" if "'" not in text or '"' in text else '"'
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch == quote:
            # backslashes right before an escaped quote are themselves escaped
            _double_trailing_backslashes(out)
            out.append("\\" + ch)
        else:
            out.append(ch)
        if i == len(text) - 1:
            _double_trailing_backslashes(out)
    return quote + "".join(out) + quote


def _double_trailing_backslashes(out: list[str]) -> None:
    count = 0
    while count < len(out) and out[len(out) - 1 - count] == "\\":
        count += 1
    out.extend("\\" * count)


def render_arg(
    flag: str, value: Value | None, arg_style: ArgStyle | str = ArgStyle.SPACE
) -> list[str]:
    """argv pieces for a constant argument (``launch.args``, ``run.fixed_args``, data flags).

    ``value`` None passes the bare flag. A flag without a leading dash is written
    override style (``trainer.max_epochs=10``). Bools: ``space`` passes the bare flag
    for True and nothing for False; ``equals`` writes ``--flag=True``/``--flag=False``.
    """
    if value is None:
        return [flag]
    if not flag.startswith("-"):
        return [f"{flag}={render_override_value(value)}"]
    return _flag_value(flag, value, None, arg_style)


def render_param(
    param: ParamSpec | TunableSpec,
    value: Value | None,
    arg_style: ArgStyle | str = ArgStyle.SPACE,
) -> list[str]:
    """argv pieces for a tunable at ``value``.

    Config-backed params render nothing (they go into the per-round config), and so
    does ``value`` None (the script's own default applies). Override params render
    ``key=value``; flag params follow ``arg_style`` as in :func:`render_arg`, with the
    value rendered for the param's type (a float param at 1 gives ``1.0``).
    """
    spec = param.param if isinstance(param, TunableSpec) else param
    if value is None or spec.config_path is not None:
        return []
    if spec.override is not None:
        return [f"{spec.override}={render_override_value(value, spec.type)}"]
    if spec.flag is None:
        raise ValueError(f"param {spec.name!r} has none of flag, config_path, override")
    return _flag_value(spec.flag, value, spec.type, arg_style)


def _flag_value(
    flag: str, value: Value, type_: ParamType | str | None, arg_style: ArgStyle | str
) -> list[str]:
    style = ArgStyle(arg_style)
    if _kind(value, type_) == "bool" and style == ArgStyle.SPACE:
        render_value(value, "bool")
        return [flag] if value else []
    text = render_value(value, type_)
    if style == ArgStyle.EQUALS:
        return [f"{flag}={text}"]
    return [flag, text]
