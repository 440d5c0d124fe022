"""Constraints between parameters, proposed from the checks the project's code makes.

Read with :mod:`ast` from the entrypoint and the project modules it imports (never
run):

- ``assert <test>`` and ``if <test>: raise ...`` (also one nested ``if``): the test
  must hold, or must not;
- ``x // heads`` with a heads-like divisor (``head_dim = n_embd // n_head``) and the
  attention layers of torch (``nn.MultiheadAttention(embed_dim, num_heads)``,
  ``nn.TransformerEncoderLayer(d_model, nhead)``...), which need the width to be a
  multiple of the number of heads.

An expression is kept only when it is made of names, numbers, strings, booleans,
``+ - * / // %``, comparisons, ``and``/``or``/``not``: the language of tuning.yaml's
``constraints:``. A name is the last part of what the code reads (``config.n_embd``,
``args.n_embd`` and ``self.n_embd`` are all ``n_embd``). When the check sits in a
function or class whose parameters it names (``__init__(self, ninp, nhead)``), the
names are carried to the arguments of the calls of that function or class in the
scanned code (``TransformerModel(ntokens, args.emsize, args.nhead)``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from trainee.discovery.metrics import SourceModule, source_modules
from trainee.discovery.scan import Entrypoint

__all__ = ["ConstraintProposal", "propose_constraints"]

MAX_CONSTRAINTS = 16
_HEAD_WORDS = frozenset(
    {
        "n_head",
        "n_heads",
        "nhead",
        "nheads",
        "num_heads",
        "heads",
        "n_kv_head",
        "num_attention_heads",
        "num_key_value_heads",
        "n_kv_heads",
        "num_kv_heads",
    }
)
_ATTENTION = {
    "MultiheadAttention": ("embed_dim", "num_heads"),
    "TransformerEncoderLayer": ("d_model", "nhead"),
    "TransformerDecoderLayer": ("d_model", "nhead"),
    "Transformer": ("d_model", "nhead"),
}


class ConstraintProposal(msgspec.Struct, kw_only=True):
    """``expr`` over the names the code reads (``n_embd % n_head == 0``);
    ``divisible`` is ``(dividend, divisor)`` for the ``a % b == 0`` form."""

    expr: str
    names: list[str]
    reason: str
    divisible: tuple[str, str] | None = None


# -- expressions ---------------------------------------------------------------------------


class _Unsupported(Exception):
    pass


_BINOPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}
_CMPOPS: dict[type[ast.cmpop], str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
}
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass
class _Expr:
    text: str
    names: list[str]
    prec: int  # 0 or, 1 and, 2 not, 3 compare, 4 +-, 5 */%, 6 unary, 7 atom


def _leaf(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
        and node.slice.value.isidentifier()
    ):
        return node.slice.value
    return None


def _wrap(e: _Expr, prec: int) -> str:
    return f"({e.text})" if e.prec < prec else e.text


def _convert(node: ast.AST, rename: dict[str, str]) -> _Expr:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            return _Expr("True" if value else "False", [], 7)
        if isinstance(value, int | float):
            return _Expr(repr(value), [], 7)
        if isinstance(value, str) and "'" not in value and "\\" not in value:
            return _Expr(f"'{value}'", [], 7)
        raise _Unsupported
    leaf = _leaf(node)
    if leaf is not None:
        if leaf in ("True", "False", "None"):
            raise _Unsupported
        name = rename.get(leaf, leaf)
        return _Expr(name, [name], 7)
    if isinstance(node, ast.UnaryOp):
        inner = _convert(node.operand, rename)
        if isinstance(node.op, ast.Not):
            return _Expr(f"not {_wrap(inner, 2)}", inner.names, 2)
        if isinstance(node.op, ast.USub):
            return _Expr(f"-{_wrap(inner, 6)}", inner.names, 6)
        raise _Unsupported
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        op = _BINOPS[type(node.op)]
        prec = 4 if op in "+-" else 5
        left, right = _convert(node.left, rename), _convert(node.right, rename)
        return _Expr(
            f"{_wrap(left, prec)} {op} {_wrap(right, prec + 1)}", left.names + right.names, prec
        )
    if isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
        parts = [_convert(node.left, rename)] + [_convert(c, rename) for c in node.comparators]
        pieces = []
        for i, cmp in enumerate(node.ops):
            pieces.append(f"{_wrap(parts[i], 4)} {_CMPOPS[type(cmp)]} {_wrap(parts[i + 1], 4)}")
        return _Expr(
            " and ".join(pieces), [n for p in parts for n in p.names], 3 if len(pieces) == 1 else 1
        )
    if isinstance(node, ast.BoolOp):
        word, prec = ("and", 1) if isinstance(node.op, ast.And) else ("or", 0)
        items = [_convert(v, rename) for v in node.values]
        return _Expr(
            f" {word} ".join(_wrap(i, prec + 1) for i in items),
            [n for i in items for n in i.names],
            prec,
        )
    raise _Unsupported


def _negate(node: ast.expr) -> ast.expr:
    """``not test`` as an expression (a negated comparison or a ``not``)."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
        flipped = {
            ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq,
            ast.Lt: ast.GtE,
            ast.LtE: ast.Gt,
            ast.Gt: ast.LtE,
            ast.GtE: ast.Lt,
        }
        return ast.Compare(
            left=node.left, ops=[flipped[type(node.ops[0])]()], comparators=node.comparators
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return node.operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        # ``if a % b: raise`` -> a % b == 0
        return ast.Compare(left=node, ops=[ast.Eq()], comparators=[ast.Constant(0)])
    return ast.UnaryOp(op=ast.Not(), operand=node)


def _normalize(node: ast.expr) -> ast.expr:
    """``not a % b`` -> ``a % b == 0``."""
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.Not)
        and isinstance(node.operand, ast.BinOp)
        and isinstance(node.operand.op, ast.Mod)
    ):
        return ast.Compare(left=node.operand, ops=[ast.Eq()], comparators=[ast.Constant(0)])
    return node


def _tautology(node: ast.expr) -> bool:
    """``block_size <= config.block_size``: one name on both sides says nothing."""
    return (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and _leaf(node.left) is not None
        and _leaf(node.left) == _leaf(node.comparators[0])
    )


def _divisible(node: ast.expr) -> tuple[str, str] | None:
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.Eq)
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value == 0
        and isinstance(node.left, ast.BinOp)
        and isinstance(node.left.op, ast.Mod)
    ):
        a, b = _leaf(node.left.left), _leaf(node.left.right)
        if a and b:
            return a, b
    return None


# -- finding checks ---------------------------------------------------------------------------


@dataclass
class _Check:
    test: ast.expr
    where: str
    code: str
    scope: ast.FunctionDef | ast.AsyncFunctionDef | None
    cls: ast.ClassDef | None


def _raises(body: list[ast.stmt]) -> bool:
    return any(isinstance(s, ast.Raise) for s in body) or any(
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and isinstance(s.value.func, ast.Attribute)
        and s.value.func.attr == "error"
        and isinstance(s.value.func.value, ast.Name)
        and "pars" in s.value.func.value.id
        for s in body
    )


def _guarded(test: ast.expr, guards: list[ast.expr]) -> ast.expr:
    """``test`` where it applies: under ``if g:`` a check holds only when ``g`` does, so
    the constraint is ``not g or test``."""
    if not guards:
        return test
    when = guards[0] if len(guards) == 1 else ast.BoolOp(op=ast.And(), values=list(guards))
    return ast.BoolOp(op=ast.Or(), values=[_negate(when), test])


def _checks(module: SourceModule) -> Iterator[_Check]:
    def check(
        test: ast.expr, guards: list[ast.expr], node: ast.AST, code: str, scope: Any, cls: Any
    ) -> _Check:
        where = f"{module.rel}:{getattr(node, 'lineno', 0)}"
        shown = code if not guards else f"{code} (under if {_code(guards[-1])})"
        return _Check(_guarded(test, guards), where, shown, scope, cls)

    def visit_body(
        body: list[ast.stmt],
        guards: list[ast.expr],
        scope: ast.FunctionDef | ast.AsyncFunctionDef | None,
        cls: ast.ClassDef | None,
    ) -> Iterator[_Check]:
        for stmt in body:
            yield from visit(stmt, guards, scope, cls)

    def visit(
        node: ast.AST,
        guards: list[ast.expr],
        scope: ast.FunctionDef | ast.AsyncFunctionDef | None,
        cls: ast.ClassDef | None,
    ) -> Iterator[_Check]:
        if isinstance(node, ast.ClassDef):
            yield from visit_body(node.body, [], None, node)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from visit_body(node.body, [], node, cls)
            return
        if isinstance(node, ast.Assert):
            yield check(node.test, guards, node, _code(node), scope, cls)
        elif isinstance(node, ast.If):
            if _raises(node.body):
                yield check(_negate(node.test), guards, node, _code(node.test, "if "), scope, cls)
            yield from visit_body(node.body, [*guards, node.test], scope, cls)
            yield from visit_body(node.orelse, [*guards, _negate(node.test)], scope, cls)
            yield from _expressions(node.test, guards, scope, cls)
            return
        yield from _expressions(node, guards, scope, cls)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                yield from visit(child, guards, scope, cls)

    def _expressions(
        node: ast.AST,
        guards: list[ast.expr],
        scope: ast.FunctionDef | ast.AsyncFunctionDef | None,
        cls: ast.ClassDef | None,
    ) -> Iterator[_Check]:
        """Checks implied by expressions of one statement (not nested statements)."""
        stack = [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.stmt)]
        while stack:
            child = stack.pop()
            stack.extend(c for c in ast.iter_child_nodes(child) if not isinstance(c, ast.stmt))
            if isinstance(child, ast.BinOp) and isinstance(child.op, ast.FloorDiv):
                divisor = _leaf(child.right)
                if divisor and divisor.lower() in _HEAD_WORDS and _leaf(child.left):
                    test = _mod_zero(child.left, child.right)
                    yield check(
                        test, [], child, _code(child) + " (heads must divide it)", scope, cls
                    )
            if isinstance(child, ast.Call):
                name = _leaf(child.func) or ""
                if name == "__init__" and _is_super(child.func) and cls is not None:
                    name = next((b for b in map(_leaf, cls.bases) if b in _ATTENTION), name)
                if name in _ATTENTION:
                    width, heads = _attention_args(child, _ATTENTION[name])
                    if width is not None and heads is not None:
                        code = f"torch {name}: {_code(width)} must be a multiple of {_code(heads)}"
                        yield check(_mod_zero(width, heads), [], child, code, scope, cls)

    yield from visit_body(module.tree.body, [], None, None)


def _mod_zero(a: ast.expr, b: ast.expr) -> ast.expr:
    return ast.Compare(
        left=ast.BinOp(left=a, op=ast.Mod(), right=b), ops=[ast.Eq()], comparators=[ast.Constant(0)]
    )


def _is_super(func: ast.expr) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def _attention_args(
    call: ast.Call, params: tuple[str, str]
) -> tuple[ast.expr | None, ast.expr | None]:
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    width = call.args[0] if call.args else kw.get(params[0])
    heads = call.args[1] if len(call.args) > 1 else kw.get(params[1])
    return width, heads


def _code(node: ast.AST, prefix: str = "") -> str:
    try:
        return prefix + " ".join(ast.unparse(node).split())[:120]
    except (ValueError, TypeError, AttributeError, RecursionError):
        return prefix + "<expression>"


# -- carrying names to call sites ---------------------------------------------------------------


def _params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = [a.arg for a in func.args.posonlyargs + func.args.args]
    return args[1:] if args and args[0] in ("self", "cls") else args


def _bindings(modules: list[SourceModule], callee: str, params: list[str]) -> list[dict[str, str]]:
    """For each call of ``callee`` in the code: param -> the leaf name passed to it."""
    out: list[dict[str, str]] = []
    for module in modules:
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call) or _leaf(node.func) != callee:
                continue
            bound: dict[str, str] = {}
            for param, arg in zip(params, node.args, strict=False):
                leaf = _leaf(arg)
                if leaf:
                    bound[param] = leaf
            for k in node.keywords:
                leaf = _leaf(k.value) if k.arg in params else None
                if k.arg and leaf:
                    bound[k.arg] = leaf
            if bound:
                out.append(bound)
    return out


def propose_constraints(
    root: Path | str, entrypoint: Entrypoint | None
) -> list[ConstraintProposal]:
    """Constraints the code checks, over the names it reads (see the module doc)."""
    if entrypoint is None:
        return []
    modules = source_modules(Path(root).resolve(), entrypoint)
    out: dict[str, ConstraintProposal] = {}
    for module in modules:
        for check in _checks(module):
            test = _normalize(check.test)
            renames: list[dict[str, str]] = [{}]
            scope_params: list[str] = []
            callee = None
            if check.scope is not None:
                scope_params = _params(check.scope)
                callee = (
                    check.cls.name
                    if check.cls is not None and check.scope.name == "__init__"
                    else check.scope.name
                )
            try:
                plain = _convert(test, {})
            except _Unsupported:
                continue
            if not plain.names or _tautology(test):
                continue
            if callee and any(n in scope_params for n in plain.names):
                found = _bindings(modules, callee, scope_params)
                renames = found or [{}]
            for rename in renames:
                expr = _convert(test, rename)
                div = _divisible(test)
                divisible = (
                    (rename.get(div[0], div[0]), rename.get(div[1], div[1])) if div else None
                )
                if expr.text not in out:
                    out[expr.text] = ConstraintProposal(
                        expr=expr.text,
                        names=list(dict.fromkeys(expr.names)),
                        reason=f"{check.where} {check.code}",
                        divisible=divisible,
                    )
            if len(out) >= MAX_CONSTRAINTS:
                break
    return list(out.values())
