"""The constraint language: what it accepts, what it refuses, and how tuning.yaml reports it.

Table-driven: valid conditions with the values they hold or fail for, refused texts with
the reason, and hostile inputs (huge powers, deep nesting, ``__import__``) that must be
refused or fail fast without evaluating anything dangerous.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from trainee.errors import ConfigError
from trainee.spec import load_project
from trainee.spec.compile import ProjectSpec
from trainee.spec.constraints import MAX_CONSTRAINT_CHARS, Constraint, parse_constraint

from .conftest import write

V = {"n_embd": 64, "n_head": 4, "bs": 32, "accum": 8, "lr": 0.01, "opt": "adam", "amp": True}

# -- valid conditions ----------------------------------------------------------------------

HOLDS: list[tuple[str, dict[str, Any], bool]] = [
    ("n_embd % n_head == 0", V, True),
    ("n_embd % n_head == 0", {**V, "n_head": 3}, False),
    ("bs * accum <= 512", V, True),
    ("bs * accum <= 512", {**V, "accum": 32}, False),
    ("8 <= bs * accum <= 256", V, True),  # a chain
    ("8 <= bs * accum <= 255", V, False),
    ("opt in ('adam', 'adamw')", V, True),
    ("opt not in ['sgd']", V, True),
    ("opt in ('sgd',)", V, False),
    ("not amp or lr < 0.001", V, False),
    ("not amp or lr < 0.1", V, True),
    ("amp and bs >= 16", V, True),
    ("amp", V, True),
    ("amp == true and (amp != false)", V, True),  # the JSON / YAML spelling
    ("amp in (true,)", V, True),
    ("abs(lr - 0.01) < 1e-9", V, True),
    ("max(bs, accum) == 32 and min(bs, accum, 4) == 4", V, True),
    ("n_embd // n_head == 16 and n_embd / n_head == 16.0", V, True),
    ("2 ** 10 == 1024 and bs ** 2 == 1024", V, True),
    ("-bs < 0 and +bs > 0", V, True),
    ("bs in (32, -1)", V, True),
    ("bs == 32.0", V, True),  # 1 == 1.0
    ("amp == 1", V, False),  # a boolean is not a number
    ("opt == 'ADAM'", V, False),
    ("opt < 'b'", V, True),  # strings compare with strings
]


@pytest.mark.parametrize(("text", "values", "expected"), HOLDS)
def test_conditions_evaluate(text: str, values: dict[str, Any], expected: bool) -> None:
    c = parse_constraint(text)
    assert c.holds(values) is expected
    assert (c.problem(values) is None) is expected


def test_names_in_written_order_and_functions_are_not_names() -> None:
    c = parse_constraint("max(n_head, bs) * n_embd <= accum + n_head or amp == true")
    assert c.names == ("n_head", "bs", "n_embd", "accum", "amp")


def test_problem_names_the_constraint_and_its_values() -> None:
    c = parse_constraint("n_embd % n_head == 0")
    assert c.problem({"n_embd": 100, "n_head": 3}) == (
        "`n_embd % n_head == 0` does not hold for n_embd=100, n_head=3"
    )


# -- evaluation errors: the constraint does not hold, with the reason -----------------------

FAILS: list[tuple[str, dict[str, Any], str]] = [
    ("n_embd % n_head == 0", {"n_embd": 64, "n_head": 0}, "divides by zero"),
    ("bs / accum < 1", {"bs": 1, "accum": 0}, "divides by zero"),
    ("opt < 1", V, 'is "adam", not a number'),
    ("bs + opt == 1", V, "not a number"),
    ("bs and amp", V, "not a condition"),
    ("bs ** 300 > 0", V, "too large"),
    ("bs ** 100000 > 0", V, "exponent is too large"),
    ("9 ** 9 ** 9 > bs", V, "exponent is too large"),
    ("bs ** 50 * bs ** 50 > 0", V, "too large"),
    ("lr ** 0.5 > 0", {"lr": -1.0}, "not a real number"),
    ("lr * 1e308 * 10 > 0", {"lr": 1.0}, "not a finite number"),
    ("missing > 0 or bs > 0", V, "no value for 'missing'"),
    ("bs > 0", {"bs": None}, "no usable value"),
]


@pytest.mark.parametrize(("text", "values", "reason"), FAILS)
def test_evaluation_errors_do_not_hold(text: str, values: dict[str, Any], reason: str) -> None:
    c = parse_constraint(text)
    started = time.process_time()
    problem = c.problem(values)
    assert time.process_time() - started < 1.0  # refused before anything big is computed
    assert not c.holds(values)
    assert problem is not None and "cannot be evaluated" in problem
    assert reason in problem


# -- refused when parsed --------------------------------------------------------------------

REFUSED: list[tuple[str, str]] = [
    ("", "is empty"),
    ("   ", "is empty"),
    ("n_embd %% n_head == 0", "syntax error at column"),
    ("bs = 4", "syntax error"),
    ("bs > 4;", "syntax error"),
    ("__import__('os').system('true')", "calls are limited"),
    ("__import__('os') == 1", "calls are limited to abs(), min() and max()"),
    ("eval('1') == 1", "calls are limited"),
    ("open('/etc/passwd') == 1", "calls are limited"),
    ("bs.bit_length() > 1", "calls are limited"),
    ("bs.real > 1", "attribute access"),
    ("model.lr > 0", "attribute access"),
    ("().__class__ == 1", "attribute access"),
    ("bs[0] > 1", "subscripts"),
    ("(bs if amp else 1) > 0", "`x if c else y` is not allowed"),
    ("(lambda: 1)() == 1", "calls are limited"),
    ("[x for x in (1, 2)] == 1", "comprehensions"),
    ("f'{bs}' == '1'", "f-strings"),
    ("(n := 3) > 1", "`:=` is not allowed"),
    ("{1: 2} == bs", "dict literals"),
    ("bs is 1", "`is` is not allowed"),
    ("bs << 2 > 1", "operator"),
    ("bs & 1 == 0", "operator"),
    ("~bs > 0", "bitwise"),
    ("bs % 2", "must be a condition"),
    ("abs(bs)", "must be a condition"),
    ("'yes'", "must be a condition"),
    ("bs in accum", "needs a literal list"),
    ("bs in (accum, 1)", "may hold only numbers, strings and booleans"),
    ("bs in (1, 2) == True", "cannot be part of a chain"),
    ("(1, 2) == bs", "may only follow `in`"),
    ("min() == 0", "needs 1 to 16 arguments"),
    ("abs(bs, 2) == 0", "abs() takes one argument"),
    ("max(bs, key=abs) == 0", "keyword arguments"),
    ("max(*bs) == 0", "`*` unpacking"),
    ("bs == None", "null values are not allowed"),
    ("bs == 1j", "complex values are not allowed"),
    ("bs < 1e999", "not finite"),
    ("bs < " + "9" * 100, "is too large"),
    ("bs == '" + "x" * 300 + "'", "longer than 200"),
    ("abs(" * 40 + "bs" + ")" * 40 + " > 0", "nested too deeply"),
    ("(" * 240 + "bs" + ")" * 240 + " > 0", "syntax error"),  # too many parentheses
    ("not " * 40 + "amp", "nested too deeply"),
    ("bs==1 or " * 45 + "amp", "too large"),
    ("bs > " + " + ".join(["1"] * 200), "characters long"),
    ("bs\x00 > 1", "NUL byte"),
]


@pytest.mark.parametrize(("text", "reason"), REFUSED)
def test_refused_texts_name_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_constraint(text)
    assert reason in (info.value.reason or ""), info.value.reason
    assert info.value.field == "constraint"


def test_length_bound_is_checked_before_parsing() -> None:
    huge = "(" * 100_000 + "1" + ")" * 100_000
    with pytest.raises(ConfigError, match=f"at most {MAX_CONSTRAINT_CHARS}"):
        parse_constraint(huge)


def test_a_constraint_decoded_from_anywhere_cannot_smuggle_code() -> None:
    # a Constraint built from the wire is parsed again before it is evaluated
    forged = msgspec.convert(
        {"text": "__import__('os').getpid() > 0", "names": []}, type=Constraint
    )
    problem = forged.problem({})
    assert problem is not None and "cannot be parsed" in problem


# -- tuning.yaml ----------------------------------------------------------------------------

PROJECT = """\
version: 1
launch:
  command: [python, train.py]
  baseline_config: configs/base.yaml
  args:
    - {flag: --grad-accum, value: 4}
run:
  fixed_args:
    - {flag: --max_iters, value: 100}
"""

PARAMS = """\
version: 1
params:
  - {name: n_embd, flag: --n_embd, type: int, default: 64, min_value: 8, max_value: 512}
  - {name: n_head, flag: --n_head, type: int, default: 4, min_value: 1, max_value: 16}
  - {name: batch_size, flag: --batch_size, type: int, default: 32, min_value: 1, max_value: 256}
  - {name: warmup, flag: --warmup, type: int}
  - {name: layers, config_path: model.layers, type: int, min_value: 1, max_value: 12}
"""


def _tuning(project: Path, constraints: str) -> Path:
    write(project / ".trainee" / "project.yaml", PROJECT)
    return write(project / ".trainee" / "tuning.yaml", PARAMS + constraints)


def test_constraints_compile_with_fixed_values_bound(project: Path) -> None:
    _tuning(
        project,
        "constraints:\n"
        '  - "n_embd % n_head == 0"\n'
        '  - "batch_size * grad_accum <= 512"\n'
        '  - "layers * n_head <= 64 and max_iters >= 10"\n',
    )
    spec = load_project(project)
    first, second, third = spec.constraints
    assert first.names == ("n_embd", "n_head") and first.fixed == ()
    assert second.fixed == (("grad_accum", 4),)
    assert third.fixed == (("max_iters", 100),)
    assert second.holds({"batch_size": 128}) and not second.holds({"batch_size": 129})
    # the compiled spec survives the wire and still evaluates
    again = msgspec.json.decode(msgspec.json.encode(spec), type=ProjectSpec)
    assert again.constraints == spec.constraints
    assert not again.constraints[1].holds({"batch_size": 200})
    assert spec.to_tuning_file().constraints == tuple(c.text for c in spec.constraints)


@pytest.mark.parametrize(
    ("constraints", "index", "reason"),
    [
        ('  - "n_embd %% n_head == 0"\n', 0, "syntax error"),
        ('  - "n_embd % n_head == 0"\n  - "n_embed % 2 == 0"\n', 1, "did you mean 'n_embd'"),
        ("  - \"__import__('os') == 1\"\n", 0, "calls are limited"),
        ('  - "n_head.real > 0"\n', 0, "attribute access"),
        ('  - "warmup < n_head"\n', 0, "param 'warmup' has no baseline value"),
        ('  - "grad_accum > 1"\n', 0, "names no tunable param"),
        ('  - "n_embd % 3 == 0"\n', 0, "the baseline breaks it: `n_embd % 3 == 0` does not hold"),
        ("  - \"n_embd < 'a'\"\n", 0, "the baseline breaks it"),
    ],
)
def test_bad_constraints_name_file_line_and_index(
    project: Path, constraints: str, index: int, reason: str
) -> None:
    tfile = _tuning(project, "constraints:\n" + constraints)
    with pytest.raises(ConfigError) as info:
        load_project(project)
    err = info.value
    assert err.file == str(tfile)
    assert err.field == f"constraints[{index}]"
    assert err.line == len(PARAMS.splitlines()) + 2 + index
    assert reason in (err.reason or ""), err.reason
    assert str(err).startswith(f"{tfile}:{err.line}: constraints[{index}]: ")


def test_a_constraint_must_be_a_string(project: Path) -> None:
    _tuning(project, "constraints:\n  - 3\n")
    with pytest.raises(ConfigError, match=r"constraints\[0\]"):
        load_project(project)
