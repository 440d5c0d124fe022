"""Constraints between tunables: a small, safe expression language (never ``eval``).

tuning.yaml may say which combinations of values a round can run with::

    constraints:
      - "n_embd % n_head == 0"
      - "batch_size * grad_accum <= 512"

A constraint is one Python-style condition, parsed with :mod:`ast` and checked
against a whitelist before it is ever evaluated, by this module's own small
interpreter:

- names (tunables; fixed values of the spec, bound with :meth:`Constraint.bind`),
  numbers, strings, ``True`` / ``False`` (also spelled ``true`` / ``false``);
- ``+ - * / // % **`` on numbers, unary ``-`` ``+``;
- comparisons ``== != < <= > >=``, chained (``8 <= batch_size * accum <= 512``);
  ``in`` / ``not in`` over a literal tuple or list (``opt in ("adam", "adamw")``);
- ``and``, ``or``, ``not`` on conditions; ``abs()``, ``min()``, ``max()``.

Everything else (attribute access, subscripts, other calls, ``x if c else y``,
lambdas, comprehensions, f-strings, ``:=``) is refused when the constraint is parsed.
Sizes are bounded (text, nodes, nesting) and so are numbers: an integer result past
2**256 in magnitude, a non-finite float or a complex result is an evaluation error,
and ``**`` is refused before it is computed when its result would be that large, so
no constraint can hang or exhaust memory. Evaluation never raises: a constraint
that cannot be evaluated (division by zero, ``"a" < 1``) does not hold, and
:meth:`Constraint.problem` says why.

Stdlib + msgspec only, like the rest of :mod:`trainee.spec`.
"""

from __future__ import annotations

import ast
import difflib
import functools
import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import msgspec

from trainee.errors import ConfigError

__all__ = [
    "MAX_CONSTRAINT_CHARS",
    "Constraint",
    "parse_constraint",
    "unknown_name_reason",
]

MAX_CONSTRAINT_CHARS = 500
"""Longest constraint text accepted."""

_MAX_NODES = 120
_MAX_DEPTH = 32
_MAX_ARGS = 16
_MAX_STR = 200
_INT_BITS = 256
"""Integers (literals and results) stay below 2**_INT_BITS in magnitude."""

_FUNCTIONS = ("abs", "min", "max")

_BOOL_NAMES = {"true": True, "false": False}
"""``true`` / ``false``, the JSON and YAML spelling used everywhere else in trainee, are
booleans like ``True`` / ``False``."""

Scalar = int | float | bool | str


class Constraint(msgspec.Struct, frozen=True, kw_only=True):
    """One parsed constraint. ``names``: the names it reads, in order of appearance.

    ``fixed`` holds the values of names that are not tunables (a fixed argument, a
    baseline config key), bound once by the loader with :meth:`bind`; the values
    given to :meth:`holds` take precedence over them.
    """

    text: str
    names: tuple[str, ...]
    fixed: tuple[tuple[str, Scalar], ...] = ()

    def bind(self, fixed: Mapping[str, Scalar]) -> Constraint:
        """This constraint with ``fixed`` values for some of its names."""
        pairs = tuple((n, fixed[n]) for n in self.names if n in fixed)
        return msgspec.structs.replace(self, fixed=pairs)

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the constraint holds for these values (False if it cannot be evaluated)."""
        return self.problem(values) is None

    def problem(self, values: Mapping[str, Any]) -> str | None:
        """Why the constraint does not hold for ``values``, or None when it holds."""
        scope: dict[str, Any] = dict(self.fixed)
        scope.update((n, values[n]) for n in self.names if n in values)
        shown = ", ".join(f"{n}={_show(scope[n])}" for n in self.names if n in scope)
        try:
            result = _evaluate(_tree(self.text), scope)
        except _ParseError as exc:
            return f"`{self.text}` cannot be parsed: {exc}"
        except _EvalError as exc:
            return f"`{self.text}` cannot be evaluated for {shown or 'these values'}: {exc}"
        if not isinstance(result, bool):
            return f"`{self.text}` is {_show(result)} for {shown}, not a condition (true/false)"
        if result:
            return None
        return f"`{self.text}` does not hold for {shown}"


def parse_constraint(text: str) -> Constraint:
    """Parse and check one constraint; ConfigError (field ``constraint``) saying why not.

    The reason names what is wrong: a syntax error (with its column), a construct
    outside the language, a value that is not a condition, an oversized expression.
    Names are not checked here (see :func:`unknown_name_reason`).
    """
    tree = _tree_or_error(text)
    names: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and not _is_function(node, tree)
            and node.id not in names
            and node.id not in _BOOL_NAMES
        ):
            names.append(node.id)
    # ast.walk is breadth-first: list names in the order they are written
    names.sort(key=lambda n: _first_offset(tree, n))
    return Constraint(text=text, names=tuple(names))


def unknown_name_reason(name: str, known: Collection[str]) -> str:
    """The reason for a name that is neither a tunable (``known``) nor a fixed value."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    listed = ", ".join(sorted(known)) or "none"
    return (
        f"unknown name '{name}'{hint} (a name is a param of tuning.yaml: {listed}; or a "
        "fixed value: the flag of a constant argument, a top-level key of the baseline config)"
    )


# -- parsing ---------------------------------------------------------------------------


def _fail(reason: str) -> ConfigError:
    return ConfigError(f"constraint: {reason}", field="constraint", reason=reason)


def _tree_or_error(text: str) -> ast.expr:
    try:
        return _tree(text)
    except _ParseError as exc:
        raise _fail(str(exc)) from None


@functools.lru_cache(maxsize=512)
def _tree(text: str) -> ast.expr:
    """The checked syntax tree of ``text`` (cached: constraints are re-checked often)."""
    if not isinstance(text, str):
        raise _ParseError(f"must be a string, got {type(text).__name__}")
    if not text.strip():
        raise _ParseError("is empty; write a condition such as `n_embd % n_head == 0`")
    if len(text) > MAX_CONSTRAINT_CHARS:
        raise _ParseError(f"is {len(text)} characters long; at most {MAX_CONSTRAINT_CHARS}")
    if "\x00" in text:
        raise _ParseError("contains a NUL byte")
    try:
        module = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise _ParseError(f"syntax error{where}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise _ParseError(f"cannot be parsed ({type(exc).__name__})") from None
    tree = module.body
    _Checker().check(tree)
    if not _is_condition(tree):
        raise _ParseError(
            "must be a condition (a comparison such as `n_embd % n_head == 0`, "
            f"or and/or/not of conditions), not the value `{_snippet(tree)}`"
        )
    return tree


class _ParseError(Exception):
    pass


class _EvalError(Exception):
    pass


_FORBIDDEN: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access (`a.b`) is not allowed",
    ast.Subscript: "subscripts (`a[0]`) are not allowed",
    ast.IfExp: "`x if c else y` is not allowed",
    ast.Lambda: "lambda is not allowed",
    ast.NamedExpr: "`:=` is not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.Dict: "dict literals are not allowed",
    ast.Starred: "`*` unpacking is not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
    ast.Slice: "slices are not allowed",
}

_BINOPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}

_CMPOPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)


class _Checker:
    """Walks the tree once: every node must be in the whitelist, and small."""

    def __init__(self) -> None:
        self.nodes = 0

    def check(self, node: ast.AST, depth: int = 0) -> None:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise _ParseError(f"is too large (more than {_MAX_NODES} parts); split it up")
        if depth > _MAX_DEPTH:
            raise _ParseError(f"is nested too deeply (more than {_MAX_DEPTH} levels)")
        reason = _FORBIDDEN.get(type(node))
        if reason is not None:
            raise _ParseError(f"{reason}: `{_snippet(node)}`")
        if isinstance(node, ast.Name):
            return
        if isinstance(node, ast.Constant):
            _check_constant(node)
            return
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                raise _ParseError(
                    f"the operator in `{_snippet(node)}` is not allowed (allowed: + - * / // % **)"
                )
            children: list[ast.AST] = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
                raise _ParseError(f"`{_snippet(node)}`: bitwise operators are not allowed")
            children = [node.operand]
        elif isinstance(node, ast.BoolOp):
            children = list(node.values)
        elif isinstance(node, ast.Compare):
            if len(node.ops) > 1 and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
                raise _ParseError(f"`{_snippet(node)}`: `in` cannot be part of a chain")
            for op, right in zip(node.ops, node.comparators, strict=True):
                if not isinstance(op, _CMPOPS):
                    raise _ParseError(f"`{_snippet(node)}`: `is` is not allowed; use == or !=")
                if isinstance(op, ast.In | ast.NotIn):
                    _check_literal_list(right)
            children = [node.left, *node.comparators]
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            # only on the right of in / not in (checked there)
            raise _ParseError(f"a list `{_snippet(node)}` may only follow `in` or `not in`")
        elif isinstance(node, ast.Call):
            self._check_call(node)
            children = list(node.args)
        else:
            raise _ParseError(f"`{_snippet(node)}` ({type(node).__name__}) is not allowed")
        lists: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            lists = [
                right
                for op, right in zip(node.ops, node.comparators, strict=True)
                if isinstance(op, ast.In | ast.NotIn)
            ]
        for child in children:
            if isinstance(child, ast.Tuple | ast.List | ast.Set) and any(child is x for x in lists):
                self.nodes += len(child.elts) + 1
                if self.nodes > _MAX_NODES:
                    raise _ParseError(f"is too large (more than {_MAX_NODES} parts); split it up")
                continue
            self.check(child, depth + 1)

    def _check_call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Name) or func.id not in _FUNCTIONS:
            raise _ParseError(
                f"calls are limited to abs(), min() and max(); got `{_snippet(node)}`"
            )
        if node.keywords:
            raise _ParseError(f"`{_snippet(node)}`: keyword arguments are not allowed")
        if not node.args or len(node.args) > _MAX_ARGS:
            raise _ParseError(f"`{_snippet(node)}` needs 1 to {_MAX_ARGS} arguments")
        if func.id == "abs" and len(node.args) != 1:
            raise _ParseError(f"`{_snippet(node)}`: abs() takes one argument")


def _check_constant(node: ast.Constant) -> None:
    value = node.value
    if isinstance(value, bool | str):
        if isinstance(value, str) and len(value) > _MAX_STR:
            raise _ParseError(f"a string longer than {_MAX_STR} characters")
        return
    if isinstance(value, int):
        if abs(value).bit_length() > _INT_BITS:
            raise _ParseError(f"the number {_snippet(node)} is too large")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _ParseError(f"the number {_snippet(node)} is not finite")
        return
    kind = "null" if value is None else type(value).__name__
    raise _ParseError(f"`{_snippet(node)}`: {kind} values are not allowed")


def _check_literal_list(node: ast.expr) -> None:
    if not isinstance(node, ast.Tuple | ast.List | ast.Set):
        raise _ParseError(
            f'`in` needs a literal list such as ("adam", "sgd"), got `{_snippet(node)}`'
        )
    if len(node.elts) > 64:
        raise _ParseError("a list after `in` holds at most 64 values")
    for elt in node.elts:
        if isinstance(elt, ast.Name) and elt.id in _BOOL_NAMES:
            continue
        operand = (
            elt.operand if isinstance(elt, ast.UnaryOp) and isinstance(elt.op, ast.USub) else elt
        )
        if not isinstance(operand, ast.Constant) or (
            operand is not elt and not isinstance(operand.value, int | float)
        ):
            raise _ParseError(
                f"the list after `in` may hold only numbers, strings and booleans, "
                f"got `{_snippet(elt)}`"
            )
        _check_constant(operand)


def _is_condition(node: ast.expr) -> bool:
    if isinstance(node, ast.Compare | ast.BoolOp | ast.Name):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, bool)


def _is_function(node: ast.Name, tree: ast.expr) -> bool:
    return any(isinstance(n, ast.Call) and n.func is node for n in ast.walk(tree))


def _first_offset(tree: ast.expr, name: str) -> tuple[int, int]:
    return min(
        (n.lineno, n.col_offset) for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
    )


def _snippet(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # unparse of a pathological tree: show its kind
        text = type(node).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- evaluation -------------------------------------------------------------------------


def _evaluate(node: ast.expr, scope: Mapping[str, Any]) -> Any:
    """The value of a checked tree (depth is bounded by the checker)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in _BOOL_NAMES:
            return _BOOL_NAMES[node.id]
        if node.id not in scope:
            raise _EvalError(f"no value for '{node.id}'")
        value = scope[node.id]
        if not isinstance(value, int | float | str):  # bool is an int
            raise _EvalError(f"'{node.id}' has no usable value ({_show(value)})")
        return value
    if isinstance(node, ast.BinOp):
        return _binop(node, _evaluate(node.left, scope), _evaluate(node.right, scope))
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, scope)
        if isinstance(node.op, ast.Not):
            return not _condition(value, node)
        number = _number(value, node)
        return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        for part in node.values:
            if _condition(_evaluate(part, scope), part) != is_and:
                return not is_and
        return is_and
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, scope)
        left_node: ast.expr = node.left
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                assert isinstance(right_node, ast.Tuple | ast.List | ast.Set)
                member = any(_equal(left, _literal(e)) for e in right_node.elts)
                ok = member if isinstance(op, ast.In) else not member
                right: Any = None
            else:
                right = _evaluate(right_node, scope)
                ok = _compare(op, (left, left_node), (right, right_node))
            if not ok:
                return False
            left, left_node = right, right_node
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        args = [_number(_evaluate(a, scope), a) for a in node.args]
        if node.func.id == "abs":
            return _bounded(abs(args[0]), node)
        return min(args) if node.func.id == "min" else max(args)
    raise _EvalError(f"`{_snippet(node)}` cannot be evaluated")  # pragma: no cover


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name):
        return _BOOL_NAMES[node.id]
    if isinstance(node, ast.UnaryOp):
        assert isinstance(node.operand, ast.Constant)
        value: Any = node.operand.value  # a number: checked by _check_literal_list
        return -value
    assert isinstance(node, ast.Constant)
    return node.value


def _number(value: Any, node: ast.AST) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _EvalError(f"`{_snippet(node)}` is {_show(value)}, not a number")
    return value


def _condition(value: Any, node: ast.AST) -> bool:
    if not isinstance(value, bool):
        raise _EvalError(f"`{_snippet(node)}` is {_show(value)}, not a condition (true/false)")
    return value


def _bounded(value: Any, node: ast.AST) -> int | float:
    if isinstance(value, complex):
        raise _EvalError(f"`{_snippet(node)}` is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise _EvalError(f"`{_snippet(node)}` is not a finite number")
    if isinstance(value, int) and abs(value).bit_length() > _INT_BITS:
        raise _EvalError(f"`{_snippet(node)}` is too large")
    return value  # type: ignore[no-any-return]


def _binop(node: ast.BinOp, a: Any, b: Any) -> int | float:
    x, y = _number(a, node.left), _number(b, node.right)
    op = type(node.op)
    try:
        if op is ast.Pow:
            return _bounded(_power(x, y, node), node)
        fn = _ARITH[op]
        return _bounded(fn(x, y), node)
    except ZeroDivisionError:
        raise _EvalError(f"`{_snippet(node)}` divides by zero") from None
    except (OverflowError, ValueError):
        raise _EvalError(f"`{_snippet(node)}` is out of range") from None


_ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: lambda x, y: x + y,
    ast.Sub: lambda x, y: x - y,
    ast.Mult: lambda x, y: x * y,
    ast.Div: lambda x, y: x / y,
    ast.FloorDiv: lambda x, y: x // y,
    ast.Mod: lambda x, y: x % y,
}


def _power(x: int | float, y: int | float, node: ast.AST) -> Any:
    """``x ** y``, refused before it is computed when the result would be too large."""
    if abs(y) > 4096:
        if abs(x) in (0, 1) and isinstance(y, int):
            pass  # 0**n, 1**n, (-1)**n are small
        else:
            raise _EvalError(f"`{_snippet(node)}`: the exponent is too large")
    if abs(x) > 1 and y > 0 and y * math.log2(abs(x)) > _INT_BITS + 8:
        raise _EvalError(f"`{_snippet(node)}` is too large")
    return x**y


def _equal(a: Any, b: Any) -> bool:
    """``==`` of values: a boolean equals only a boolean; ``1 == 1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _compare(op: ast.cmpop, left: tuple[Any, ast.expr], right: tuple[Any, ast.expr]) -> bool:
    a, b = left[0], right[0]
    if isinstance(op, ast.Eq):
        return _equal(a, b)
    if isinstance(op, ast.NotEq):
        return not _equal(a, b)
    if not (isinstance(a, str) and isinstance(b, str)):
        a, b = _number(a, left[1]), _number(b, right[1])
    if isinstance(op, ast.Lt):
        return bool(a < b)
    if isinstance(op, ast.LtE):
        return bool(a <= b)
    if isinstance(op, ast.Gt):
        return bool(a > b)
    return bool(a >= b)


def _show(value: Any, limit: int = 40) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, str):
        text = msgspec.json.encode(value).decode()
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
