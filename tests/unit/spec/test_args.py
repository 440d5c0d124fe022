"""Argument rendering: each style x float/int/bool/str, floats that read back as floats."""

from __future__ import annotations

import ast
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainee.spec import (
    ArgStyle,
    ParamSpec,
    ParamType,
    format_float,
    render_arg,
    render_override_value,
    render_param,
    render_value,
)


def flag_param(type_: ParamType, **kw: object) -> ParamSpec:
    return ParamSpec(name="p", flag="--p", type=type_, **kw)  # type: ignore[arg-type]


def override_param(type_: ParamType, **kw: object) -> ParamSpec:
    return ParamSpec(name="p", override="opt.p", type=type_, **kw)  # type: ignore[arg-type]


RENDER = [
    # (param type, value, space style, equals style, override style)
    (ParamType.FLOAT, 0.001, ["--p", "0.001"], ["--p=0.001"], ["opt.p=0.001"]),
    (ParamType.FLOAT, 1.0, ["--p", "1.0"], ["--p=1.0"], ["opt.p=1.0"]),
    (ParamType.FLOAT, 1, ["--p", "1.0"], ["--p=1.0"], ["opt.p=1.0"]),
    # one float spelling everywhere: no leading zero or "+" in an exponent (JSON grammars)
    (ParamType.FLOAT, 1e-5, ["--p", "1e-5"], ["--p=1e-5"], ["opt.p=1e-5"]),
    (ParamType.FLOAT, -2.5, ["--p", "-2.5"], ["--p=-2.5"], ["opt.p=-2.5"]),
    (ParamType.FLOAT, 1e20, ["--p", "1e20"], ["--p=1e20"], ["opt.p=1e20"]),
    (ParamType.INT, 32, ["--p", "32"], ["--p=32"], ["opt.p=32"]),
    (ParamType.INT, 64.0, ["--p", "64"], ["--p=64"], ["opt.p=64"]),
    (ParamType.BOOL, True, ["--p"], ["--p=True"], ["opt.p=true"]),
    (ParamType.BOOL, False, [], ["--p=False"], ["opt.p=false"]),
    (ParamType.CHOICE, "adamw", ["--p", "adamw"], ["--p=adamw"], ["opt.p=adamw"]),
    (ParamType.CHOICE, "two words", ["--p", "two words"], ["--p=two words"], ["opt.p='two words'"]),
    (ParamType.CHOICE, "1e-3", ["--p", "1e-3"], ["--p=1e-3"], ["opt.p='1e-3'"]),
    (ParamType.CHOICE, "true", ["--p", "true"], ["--p=true"], ["opt.p='true'"]),
    (ParamType.CHOICE, "it's", ["--p", "it's"], ["--p=it's"], ['opt.p="it\'s"']),
    (ParamType.CHOICE, 16, ["--p", "16"], ["--p=16"], ["opt.p=16"]),
    (ParamType.CHOICE, 0.5, ["--p", "0.5"], ["--p=0.5"], ["opt.p=0.5"]),
    (ParamType.CHOICE, True, ["--p"], ["--p=True"], ["opt.p=true"]),
]


@pytest.mark.parametrize(("type_", "value", "space", "equals", "override"), RENDER)
def test_render_param_per_style(
    type_: ParamType, value: object, space: list[str], equals: list[str], override: list[str]
) -> None:
    choices = (value, "other") if type_ is ParamType.CHOICE else None
    param = flag_param(type_, choices=choices)
    assert render_param(param, value, ArgStyle.SPACE) == space  # type: ignore[arg-type]
    assert render_param(param, value, "equals") == equals  # type: ignore[arg-type]
    assert render_param(override_param(type_, choices=choices), value) == override  # type: ignore[arg-type]


def test_config_backed_and_unset_params_render_nothing() -> None:
    param = ParamSpec(name="p", config_path="optimizer.lr", type=ParamType.FLOAT)
    assert render_param(param, 0.1) == []
    assert render_param(flag_param(ParamType.FLOAT), None) == []


RENDER_ARG = [
    ("--seed", 7, "space", ["--seed", "7"]),
    ("--seed", 7, "equals", ["--seed=7"]),
    ("--ratio", 1.0, "space", ["--ratio", "1.0"]),
    ("--ratio", 1.0, "equals", ["--ratio=1.0"]),
    ("--amp", None, "space", ["--amp"]),
    ("--amp", None, "equals", ["--amp"]),
    ("--compile", True, "space", ["--compile"]),
    ("--compile", False, "space", []),
    ("--compile", False, "equals", ["--compile=False"]),
    ("--name", "run a", "space", ["--name", "run a"]),
    ("--name", "run a", "equals", ["--name=run a"]),
    ("trainer.max_epochs", 10, "space", ["trainer.max_epochs=10"]),
    ("trainer.max_epochs", 10, "equals", ["trainer.max_epochs=10"]),
    ("+trainer.fast", True, "space", ["+trainer.fast=true"]),
    ("model.lr", 1.0, "space", ["model.lr=1.0"]),
    ("data.root", "/data/set one", "space", ["data.root='/data/set one'"]),
]


@pytest.mark.parametrize(("flag", "value", "style", "expected"), RENDER_ARG)
def test_render_arg_table(flag: str, value: object, style: str, expected: list[str]) -> None:
    assert render_arg(flag, value, style) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "type_", "error"),
    [
        (True, "float", TypeError),
        ("0.1", "float", TypeError),
        (float("nan"), "float", ValueError),
        (float("inf"), None, ValueError),
        (2.5, "int", ValueError),
        (False, "int", TypeError),
        (1, "bool", TypeError),
        (1, "str", TypeError),
        (1, "double", ValueError),
    ],
)
def test_render_value_rejects_values_that_do_not_fit(
    value: object, type_: str | None, error: type[Exception]
) -> None:
    with pytest.raises(error):
        render_value(value, type_)  # type: ignore[arg-type]


@given(st.floats(allow_nan=False, allow_infinity=False))
@settings(database=None)
def test_floats_read_back_as_the_same_float(value: float) -> None:
    text = render_value(value, "float")
    assert isinstance(ast.literal_eval(text), float)  # nanoGPT's configurator
    assert float(text) == value and math.copysign(1, float(text)) == math.copysign(1, value)
    assert "." in text or "e" in text or "inf" in text


@given(st.integers(min_value=-(10**30), max_value=10**30))
@settings(database=None)
def test_ints_render_as_ints(value: int) -> None:
    assert int(render_value(value, "int")) == value
    assert float(render_value(value, "float")) == float(value)
    assert re.fullmatch(
        r"-?\d+\.\d+(e-?[1-9]\d*)?|-?\d+(\.\d+)?e[1-9]\d*", render_value(value, "float")
    )


@given(st.text(min_size=1, max_size=20))
@settings(database=None)
def test_hydra_strings_are_quoted_unless_plain(value: str) -> None:
    text = render_override_value(value)
    if text[0] in "'\"":
        quote = text[0]
        assert text.endswith(quote) and len(text) >= 2
        body = text[1:-1]
        # every quote of the same kind inside is escaped
        i = 0
        while i < len(body):
            if body[i] == "\\":
                i += 2
                continue
            assert body[i] != quote
            i += 1
    else:
        assert text == value


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-05, "1e-5"), (1.5e-07, "1.5e-7"), (1e20, "1e20"), (-2.5e-300, "-2.5e-300"), (0.1, "0.1")],
)
def test_the_one_float_spelling_has_no_leading_zero_in_the_exponent(
    value: float, text: str
) -> None:
    """llama.cpp's JSON grammar forbids ``1e-05``: a model made to copy it writes ``1e-0``."""
    assert format_float(value) == text
    assert float(text) == value
