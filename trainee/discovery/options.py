"""Reading a Python module's command-line options from its AST, never importing it.

Understands argparse (``add_argument``), click (``@click.option``), typer (function
parameters and ``typer.Option``) and the nanoGPT configurator (module globals set by
``exec(open('configurator.py').read())`` from ``--name=value``). Defaults that are
literals or module constants are resolved; other defaults keep their source text.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from trainee.spec.kinds import scalar_type

__all__ = [
    "EntryOption",
    "Framework",
    "ModuleInfo",
    "OptionType",
    "normalize_name",
    "read_module",
]

OptionType = Literal["float", "int", "bool", "str", "path"]
Framework = Literal[
    "argparse",
    "click",
    "typer",
    "configurator",
    "hydra",
    "jsonargparse",
    "lightning_cli",
    "hf_argparser",
    "none",
]
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EntryOption(msgspec.Struct, kw_only=True):
    """One command-line option of an entrypoint, as read from its source.

    ``default`` is the literal default (module constants resolved) or None; when the
    default is an expression, ``default_source`` holds its text. ``flags`` lists every
    spelling (``-e``, ``--epochs``); ``flag`` is the preferred one. ``negative_flag`` is
    the ``--no-x`` spelling of a boolean toggle.
    """

    flag: str
    dest: str
    type: OptionType | None = None
    default: Any = None
    default_source: str | None = None
    choices: list[Any] | None = None
    help: str = ""
    action: str | None = None
    flags: list[str] = msgspec.field(default_factory=list)
    negative_flag: str | None = None
    nargs: Any = None
    required: bool = False
    min_value: int | float | None = None
    max_value: int | float | None = None


def normalize_name(text: str) -> str:
    """``--Max-Steps`` -> ``max_steps``; ``trainer.max_epochs`` -> ``trainer.max_epochs``."""
    return re.sub(r"[^a-z0-9_.]+", "_", text.lstrip("-+~").lower()).strip("_")


@dataclass
class ModuleInfo:
    """What one module's source says about running it."""

    docstring: str = ""
    options: list[EntryOption] = field(default_factory=list)
    framework: Framework = "none"
    hydra_config_path: str | None = None
    hydra_config_name: str | None = None
    choice_hints: dict[str, list[Any]] = field(default_factory=dict)
    metric_names: list[str] = field(default_factory=list)
    main_guard: bool = False
    """``if __name__ == "__main__":`` or a module-level call that parses the command line."""
    relative_imports: bool = False
    """The module imports from its own package (``from .model import``): run it with -m."""
    training: bool = False
    """The code looks like training (``.backward()``, ``optimizer.step()``, ``.fit(``)."""
    subcommands: list[str] = field(default_factory=list)
    """LightningCLI's subcommands (``fit``) when the CLI has them."""


_Reader = Callable[[ast.Module, dict[str, Any], dict[str, str], str], list[EntryOption]]


def read_module(tree: ast.Module, text: str) -> ModuleInfo:
    """Options (argparse, click, typer or a nanoGPT configurator), docstring, Hydra
    decorator, ``Literal`` hints and printed metric names of a parsed module."""
    info = ModuleInfo(docstring=(ast.get_docstring(tree) or "").strip())
    consts = _module_constants(tree)
    imports = _imported_names(tree)
    info.choice_hints = _literal_hints(tree)
    info.metric_names = _metric_names(tree)
    hydra = _hydra_main(tree, imports) if "hydra" in text else None
    if hydra is not None:
        info.hydra_config_path, info.hydra_config_name = hydra
    info.main_guard = _has_main_guard(tree)
    info.relative_imports = "from ." in text and any(
        isinstance(n, ast.ImportFrom) and n.level > 0 for n in ast.walk(tree)
    )
    info.training = bool(_TRAINING_CODE.search(text))
    readers: tuple[tuple[Framework, _Reader], ...] = (
        ("hf_argparser", _hf_options),
        ("lightning_cli", _lightning_options),
        ("argparse", _argparse_options),
        ("click", _click_options),
        ("typer", _typer_options),
        ("jsonargparse", _jsonargparse_options),
        ("configurator", _configurator_options),
    )
    for framework, reader in readers:
        options = reader(tree, consts, imports, text)
        if options:
            info.options = _dedupe(options)
            info.framework = framework
            if framework == "lightning_cli" and not _lightning_run_false(tree):
                info.subcommands = ["fit"]
            break
    else:
        info.framework = "hydra" if hydra is not None else "none"
    if not info.docstring:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in ("main", "train", "cli", "run"):
                info.docstring = (ast.get_docstring(node) or "").strip()
                if info.docstring:
                    break
    return info


def _dedupe(options: list[EntryOption]) -> list[EntryOption]:
    seen: set[str] = set()
    out: list[EntryOption] = []
    for o in options:
        if o.flag in seen:
            continue
        seen.add(o.flag)
        out.append(o)
    return out


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            ok, value = _literal(node.value, out)
            if ok:
                out[node.targets[0].id] = value
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.value is not None
        ):
            ok, value = _literal(node.value, out)
            if ok:
                out[node.target.id] = value
    return out


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted origin (``click.option`` for ``from click import option``)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _literal(node: ast.AST | None, consts: dict[str, Any]) -> tuple[bool, Any]:
    """(True, value) for a literal expression (module constants resolved), else (False, None)."""
    if node is None:
        return False, None
    if isinstance(node, ast.Name) and node.id in consts:
        return True, consts[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id in ("float", "int", "str", "bool") and len(node.args) == 1:
            ok, value = _literal(node.args[0], consts)
            if ok:
                try:
                    conv = {"float": float, "int": int, "str": str, "bool": bool}[node.func.id]
                    return True, conv(value)
                except (TypeError, ValueError, OverflowError):
                    return False, None
        if node.func.id in ("list", "tuple") and len(node.args) == 1:
            ok, value = _literal(node.args[0], consts)
            if ok and isinstance(value, list | tuple):
                return True, list(value)
        if node.func.id == "range" and 1 <= len(node.args) <= 3:
            values = [_literal(a, consts) for a in node.args]
            if all(ok and isinstance(v, int) for ok, v in values):
                bounds = [int(v) for _, v in values]
                if len(range(*bounds)) <= 64:
                    return True, list(range(*bounds))
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = [_literal(e, consts) for e in node.elts]
        if all(ok for ok, _ in items):
            return True, [v for _, v in items]
        return False, None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
    if isinstance(value, tuple | set | frozenset):
        value = list(value)
    if isinstance(value, bytes | complex):
        return False, None
    return True, value


def _text(node: ast.AST | None, consts: dict[str, Any]) -> str:
    """A help string: literal text, or the expression's source for f-strings and calls."""
    if node is None:
        return ""
    ok, value = _literal(node, consts)
    if ok and isinstance(value, str):
        return value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value) if isinstance(v, ast.Constant) else "{" + _unparse(v) + "}"
            for v in node.values
        )
    return _unparse(node)


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, TypeError, AttributeError, RecursionError):
        return "<expression>"


def _keywords(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg is not None}


_TYPE_NAMES: dict[str, OptionType] = {
    "float": "float",
    "int": "int",
    "str": "str",
    "bool": "bool",
    "Path": "path",
    "PosixPath": "path",
    "FileType": "path",
    "FLOAT": "float",
    "INT": "int",
    "STRING": "str",
    "BOOL": "bool",
}
"""Type spellings (builtins, pathlib, argparse.FileType, click's constants) -> kind."""


def _type_name(node: ast.AST | None, imports: dict[str, str]) -> OptionType | None:
    """``float`` for ``float``, ``path`` for ``Path``/``pathlib.Path``/``click.Path()``."""
    if node is None:
        return None
    if isinstance(node, ast.Call):
        node = node.func
    name = (
        node.id
        if isinstance(node, ast.Name)
        else (node.attr if isinstance(node, ast.Attribute) else None)
    )
    return _TYPE_NAMES.get(name) if name is not None else None


def _scalar_choices(value: Any) -> list[Any] | None:
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, str | int | float | bool) for v in value)
    ):
        return list(value)
    return None


def _argparse_options(
    tree: ast.Module, consts: dict[str, Any], imports: dict[str, str], text: str
) -> list[EntryOption]:
    if "add_argument" not in text:
        return []
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "add_argument"
    ]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    out: list[EntryOption] = []
    for call in calls:
        flags = [
            a.value
            for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
        ]
        if not flags or len(flags) != len(call.args):
            continue  # a positional argument: not settable by a flag
        kw = _keywords(call)
        flag = next((f for f in flags if f.startswith("--")), flags[0])
        ok, dest = _literal(kw.get("dest"), consts)
        dest_name = dest if ok and isinstance(dest, str) else normalize_name(flag)
        action = None
        if "action" in kw:
            ok, act = _literal(kw["action"], consts)
            action = act if ok and isinstance(act, str) else _unparse(kw["action"]).split(".")[-1]
        option = EntryOption(flag=flag, dest=dest_name, flags=flags, action=action)
        option.help = _text(kw.get("help"), consts)
        ok, nargs = _literal(kw.get("nargs"), consts)
        option.nargs = nargs if ok else (None if "nargs" not in kw else "?")
        ok, required = _literal(kw.get("required"), consts)
        option.required = bool(required) if ok else False
        ok, choices = _literal(kw.get("choices"), consts)
        option.choices = _scalar_choices(choices) if ok else None
        declared = _type_name(kw.get("type"), imports)
        has_default = "default" in kw
        ok, default = _literal(kw.get("default"), consts)
        if has_default and not ok:
            option.default_source = _unparse(kw["default"])
        if action in ("store_true", "store_false"):
            option.type = "bool"
            option.default = default if has_default and ok else action == "store_false"
        elif action == "BooleanOptionalAction":
            option.type = "bool"
            option.default = default if has_default and ok else None
            option.negative_flag = "--no-" + flag[2:] if flag.startswith("--") else None
        elif action in ("count", "store_const", "append_const", "help", "version"):
            option.type = None
            option.default = default if ok else None
        else:
            if "type" in kw and declared is None:
                option.type = None  # a custom conversion function: the value kind is unknown
            elif declared is not None:
                option.type = declared
            elif ok and has_default and default is not None:
                option.type = scalar_type(default)
            else:
                option.type = "str"
            option.default = default if ok else None
            if (
                option.type == "float"
                and isinstance(option.default, int)
                and not isinstance(option.default, bool)
            ):
                option.default = float(option.default)
            if option.type == "bool" and "type" in kw:
                # ``type=bool`` reads any non-empty text as True: not safely settable
                option.type = None
        out.append(option)
    return out


def _is_attr_call(node: ast.AST, names: set[str], imports: dict[str, str], module: str) -> bool:
    """``click.option(...)``/``option(...)`` where ``option`` comes from ``module``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in names:
        base = func.value
        return isinstance(base, ast.Name) and imports.get(base.id, base.id) == module
    if isinstance(func, ast.Name) and func.id in names:
        return imports.get(func.id, "").startswith(module + ".")
    return False


def _click_type(
    node: ast.AST | None, consts: dict[str, Any], imports: dict[str, str]
) -> tuple[OptionType | None, list[Any] | None, Any, Any]:
    """(type, choices, min, max) of a click ``type=``."""
    if isinstance(node, ast.Call):
        fname = (
            node.func.attr
            if isinstance(node.func, ast.Attribute)
            else (node.func.id if isinstance(node.func, ast.Name) else "")
        )
        if fname == "Choice" and node.args:
            ok, values = _literal(node.args[0], consts)
            return "str", (_scalar_choices(values) if ok else None), None, None
        if fname in ("FloatRange", "IntRange"):
            kw = _keywords(node)
            lo = _literal(node.args[0] if node.args else kw.get("min"), consts)
            hi = _literal(node.args[1] if len(node.args) > 1 else kw.get("max"), consts)
            kind: OptionType = "float" if fname == "FloatRange" else "int"
            return kind, None, lo[1] if lo[0] else None, hi[1] if hi[0] else None
        if fname == "Path":
            return "path", None, None, None
    name = _type_name(node, imports)
    return name, None, None, None


def _click_options(
    tree: ast.Module, consts: dict[str, Any], imports: dict[str, str], text: str
) -> list[EntryOption]:
    if not any(v == "click" or v.startswith("click.") for v in imports.values()):
        return []
    out: list[EntryOption] = []
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    funcs.sort(key=lambda n: n.lineno)
    for func in funcs:
        # decorators apply bottom-up, but click lists options top-down in --help
        for deco in func.decorator_list:
            if not _is_attr_call(deco, {"option"}, imports, "click"):
                continue
            assert isinstance(deco, ast.Call)
            decls = [
                a.value
                for a in deco.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            kw = _keywords(deco)
            dashed: list[str] = []
            negative: str | None = None
            dest: str | None = None
            for d in decls:
                if "/" in d and d.startswith("-"):
                    pos, _, neg = d.partition("/")
                    dashed.append(pos.strip())
                    negative = neg.strip() or None
                elif d.startswith("-"):
                    dashed.append(d)
                elif _IDENT.match(d):
                    dest = d
            if not dashed:
                continue
            flag = max((f for f in dashed if f.startswith("--")), key=len, default=dashed[0])
            option = EntryOption(
                flag=flag,
                dest=dest or normalize_name(flag),
                flags=dashed + ([negative] if negative else []),
                negative_flag=negative,
            )
            option.help = _text(kw.get("help"), consts)
            ok, required = _literal(kw.get("required"), consts)
            option.required = bool(required) if ok else False
            ok, multiple = _literal(kw.get("multiple"), consts)
            ok_n, nargs = _literal(kw.get("nargs"), consts)
            if (ok and multiple) or (ok_n and nargs not in (None, 1)):
                option.nargs = "*" if ok and multiple else nargs
            ok_flag, is_flag = _literal(kw.get("is_flag"), consts)
            ok_d, default = _literal(kw.get("default"), consts)
            if "default" in kw and not ok_d:
                option.default_source = _unparse(kw["default"])
            kind, choices, lo, hi = _click_type(kw.get("type"), consts, imports)
            if (ok_flag and is_flag) or negative is not None:
                option.type = "bool"
                option.action = "toggle" if negative else "store_true"
                option.default = bool(default) if ok_d and default is not None else False
            else:
                if kind is None and "type" not in kw:
                    kind = scalar_type(default) if ok_d and default is not None else "str"
                option.type = kind
                option.choices = choices
                option.min_value = lo if isinstance(lo, int | float) else None
                option.max_value = hi if isinstance(hi, int | float) else None
                option.default = default if ok_d else None
                if (
                    kind == "float"
                    and isinstance(option.default, int)
                    and not isinstance(option.default, bool)
                ):
                    option.default = float(option.default)
            out.append(option)
    return out


def _annotation_type(
    node: ast.AST | None, consts: dict[str, Any], enums: dict[str, list[Any]]
) -> tuple[OptionType | None, list[Any] | None, ast.Call | None]:
    """(type, choices, typer.Option call inside Annotated) of a parameter annotation."""
    if node is None:
        return None, None, None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None, None, None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for side in (node.left, node.right):
            if not (isinstance(side, ast.Constant) and side.value is None):
                return _annotation_type(side, consts, enums)
    if isinstance(node, ast.Subscript):
        base = (
            node.value.attr
            if isinstance(node.value, ast.Attribute)
            else (node.value.id if isinstance(node.value, ast.Name) else "")
        )
        inner = node.slice
        if base == "Optional":
            return _annotation_type(inner, consts, enums)
        if base == "Literal":
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            values = [_literal(e, consts) for e in elts]
            if all(ok for ok, _ in values):
                literals = [v for _, v in values]
                return scalar_type(literals[0]) if literals else None, literals, None
        if base == "Annotated" and isinstance(inner, ast.Tuple) and inner.elts:
            kind, choices, _ = _annotation_type(inner.elts[0], consts, enums)
            call = next(
                (
                    e
                    for e in inner.elts[1:]
                    if isinstance(e, ast.Call) and _call_name(e) == "Option"
                ),
                None,
            )
            return kind, choices, call
        if base == "Union" and isinstance(inner, ast.Tuple):
            for e in inner.elts:
                if not (isinstance(e, ast.Constant) and e.value is None):
                    return _annotation_type(e, consts, enums)
    name = (
        node.id
        if isinstance(node, ast.Name)
        else (node.attr if isinstance(node, ast.Attribute) else None)
    )
    if name in enums:
        return "str", enums[name], None
    if name in ("float", "int", "str", "bool", "Path", "PosixPath"):
        return _TYPE_NAMES[name], None, None
    return None, None, None


def _call_name(call: ast.Call) -> str:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return ""


def _enum_values(tree: ast.Module, consts: dict[str, Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {_unparse(b).split(".")[-1] for b in node.bases}
        if not bases & {"Enum", "StrEnum", "IntEnum"}:
            continue
        values: list[Any] = []
        for item in node.body:
            if isinstance(item, ast.Assign) and len(item.targets) == 1:
                ok, value = _literal(item.value, consts)
                if ok and isinstance(value, str | int):
                    values.append(value)
        if values:
            out[node.name] = values
    return out


def _typer_options(
    tree: ast.Module, consts: dict[str, Any], imports: dict[str, str], text: str
) -> list[EntryOption]:
    if not any(v == "typer" or v.startswith("typer.") for v in imports.values()):
        return []
    enums = _enum_values(tree, consts)
    run_targets = {
        a.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and _call_name(n) == "run"
        for a in n.args
        if isinstance(a, ast.Name)
    }
    out: list[EntryOption] = []
    for func in tree.body:
        if not isinstance(func, ast.FunctionDef):
            continue
        decorated = any(
            isinstance(d, ast.Call)
            and isinstance(d.func, ast.Attribute)
            and d.func.attr in ("command", "callback")
            for d in func.decorator_list
        )
        if not (decorated or func.name in run_targets):
            continue
        args = func.args.args + func.args.kwonlyargs
        defaults: list[ast.expr | None] = (
            [None] * (len(func.args.args) - len(func.args.defaults))
            + list(func.args.defaults)
            + list(func.args.kw_defaults)
        )
        for arg, default_node in zip(args, defaults, strict=True):
            kind, choices, annotated_call = _annotation_type(arg.annotation, consts, enums)
            call = annotated_call
            value_node: ast.expr | None = default_node
            if isinstance(default_node, ast.Call) and _call_name(default_node) in (
                "Option",
                "Argument",
            ):
                if _call_name(default_node) == "Argument":
                    continue
                call = default_node
                value_node = default_node.args[0] if default_node.args else None
                if value_node is None and "default" in _keywords(default_node):
                    value_node = _keywords(default_node)["default"]
            if call is None and default_node is None:
                continue  # a typer argument (positional)
            decls = [
                a.value
                for a in (call.args if call is not None else [])
                if isinstance(a, ast.Constant)
                and isinstance(a.value, str)
                and a.value.startswith("-")
            ]
            flag = next((d.split("/")[0] for d in decls if d.startswith("--")), None)
            flag = flag or "--" + arg.arg.replace("_", "-")
            option = EntryOption(flag=flag, dest=arg.arg, flags=[flag])
            kw = _keywords(call) if call is not None else {}
            option.help = _text(kw.get("help"), consts)
            ok, default = _literal(value_node, consts)
            if isinstance(value_node, ast.Constant) and value_node.value is Ellipsis:
                ok, default, option.required = True, None, True
            elif value_node is not None and not ok:
                option.default_source = _unparse(value_node)
            option.default = default if ok else None
            option.type = kind or (scalar_type(default) if ok else None)
            option.choices = choices
            for key in ("min", "max"):
                lit = _literal(kw.get(key), consts)
                if lit[0] and isinstance(lit[1], int | float):
                    setattr(option, f"{key}_value", lit[1])
            if option.type == "bool":
                option.action = "toggle"
                option.negative_flag = "--no-" + flag[2:]
                option.flags.append(option.negative_flag)
            if (
                option.type == "float"
                and isinstance(option.default, int)
                and not isinstance(option.default, bool)
            ):
                option.default = float(option.default)
            out.append(option)
    return out


def _configurator_options(
    tree: ast.Module, consts: dict[str, Any], imports: dict[str, str], text: str
) -> list[EntryOption]:
    """nanoGPT style: module globals overridden by ``exec(open('configurator.py').read())``
    with ``--name=value`` arguments."""
    exec_line = None
    for node in tree.body:
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and _call_name(node.value) == "exec"
            and "configurator" in _unparse(node.value)
        ):
            exec_line = node.lineno
            break
    if exec_line is None:
        return []
    out: list[EntryOption] = []
    for node in tree.body:
        if node.lineno >= exec_line:
            break
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and not node.targets[0].id.startswith("_")
            and node.targets[0].id.islower()
        ):
            ok, value = _literal(node.value, consts)
            kind = scalar_type(value) if ok else None
            if kind is None:
                continue
            name = node.targets[0].id
            line = (
                text.splitlines()[node.lineno - 1] if node.lineno <= len(text.splitlines()) else ""
            )
            comment = line.split("#", 1)[1].strip() if "#" in line else ""
            out.append(
                EntryOption(
                    flag=f"--{name}",
                    dest=name,
                    flags=[f"--{name}"],
                    type=kind,
                    default=value,
                    help=comment,
                )
            )
    return out


def _hydra_main(tree: ast.Module, imports: dict[str, str]) -> tuple[str | None, str | None] | None:
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if not isinstance(deco, ast.Call) or _call_name(deco) != "main":
                continue
            func = deco.func
            origin = (
                imports.get(func.value.id, "")
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                else imports.get(func.id, "")
                if isinstance(func, ast.Name)
                else ""
            )
            if not origin.startswith("hydra"):
                continue
            kw = _keywords(deco)
            path = kw.get("config_path")
            name = kw.get("config_name")
            ok_p, p = _literal(path, {})
            ok_n, n = _literal(name, {})
            return (p if ok_p and isinstance(p, str) else None), (
                n if ok_n and isinstance(n, str) else None
            )
    return None


def _literal_hints(tree: ast.Module) -> dict[str, list[Any]]:
    """Names annotated ``Literal[...]`` anywhere in the module (dataclass fields, params)."""
    out: dict[str, list[Any]] = {}
    for node in ast.walk(tree):
        target: str | None = None
        annotation: ast.expr | None = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, annotation = node.target.id, node.annotation
        elif isinstance(node, ast.arg):
            target, annotation = node.arg, node.annotation
        if target is None or annotation is None:
            continue
        _, choices, _ = _annotation_type(annotation, {}, {})
        if choices and target not in out:
            out[target] = choices
    return out


_METRIC_WORD = re.compile(
    r"\b((?:final_|best_)?(?:val|valid|validation|eval|test)_(?:loss|acc|accuracy|error|ppl|mse|mae|f1)"
    r"|loss|total_loss|accuracy)\s*[=:]"
)


def _metric_names(tree: ast.Module) -> list[str]:
    """Metric-looking names in printed strings (``val_loss=``), for a commented example."""
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 400:
            for match in _METRIC_WORD.finditer(node.value):
                if match.group(1) not in out:
                    out.append(match.group(1))
    return out[:8]


# -- entry signals -----------------------------------------------------------------------------

_TRAINING_CODE = re.compile(
    r"\.backward\(|optimizer\.step\(|\.fit\(|Trainer\(|trainer\.train\(|train_one_epoch|"
    r"for\s+\w+\s+in\s+range\(\s*(?:\w+\.)?(?:max_iters|max_steps|epochs|num_epochs|n_epochs)"
)
_CLI_CALLS = frozenset(
    [
        "parse_args",
        "parse_known_args",
        "parse_args_into_dataclasses",
        "LightningCLI",
        "CLI",
        "auto_cli",
    ]
)


def _has_main_guard(tree: ast.Module) -> bool:
    """A ``__main__`` guard, or module-level code that reads the command line."""
    for node in tree.body:
        if isinstance(node, ast.If):
            test = _unparse(node.test).replace('"', "'")
            if "__name__" in test and "'__main__'" in test:
                return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                name = _call_name(sub)
                if name in _CLI_CALLS or (name == "exec" and "configurator" in _unparse(sub)):
                    return True
    return False


def _origin(node: ast.AST, imports: dict[str, str]) -> str:
    """The dotted origin of a called name (``transformers.HfArgumentParser``)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return imports.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        return f"{_origin(node.value, imports)}.{node.attr}"
    return ""


def _calls_named(tree: ast.Module, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n) == name]


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _fields_of_dataclass(
    cls: ast.ClassDef, consts: dict[str, Any], prefix: str = "--"
) -> list[EntryOption]:
    """Annotated class attributes (dataclass fields) as options ``--name``."""
    out: list[EntryOption] = []
    for item in cls.body:
        if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
            continue
        name = item.target.id
        if name.startswith("_"):
            continue
        kind, choices, _ = _annotation_type(item.annotation, consts, {})
        option = EntryOption(flag=f"{prefix}{name}", dest=name, flags=[f"{prefix}{name}"])
        value = item.value
        if isinstance(value, ast.Call) and _call_name(value) == "field":
            kw = _keywords(value)
            meta = kw.get("metadata")
            if isinstance(meta, ast.Dict):
                for k, v in zip(meta.keys, meta.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "help":
                        option.help = _text(v, consts)
            value = kw.get("default")
            if value is None and "default_factory" in kw:
                option.default_source = _unparse(kw["default_factory"]) + "()"
        ok, default = _literal(value, consts)
        if value is not None and not ok:
            option.default_source = _unparse(value)
        option.default = default if ok else None
        option.type = kind or (scalar_type(default) if ok else None)
        option.choices = choices
        if (
            option.type == "float"
            and isinstance(option.default, int)
            and not isinstance(option.default, bool)
        ):
            option.default = float(option.default)
        if option.type == "bool":
            option.action = "store_true" if not option.default else "toggle"
            if option.default:
                option.negative_flag = f"{prefix}no_{name}"
                option.flags.append(option.negative_flag)
        out.append(option)
    return out


def _init_params(
    cls: ast.ClassDef | ast.FunctionDef, consts: dict[str, Any], prefix: str
) -> list[EntryOption]:
    """Parameters of a function (or a class's ``__init__``) with their defaults."""
    func: ast.FunctionDef | None
    if isinstance(cls, ast.ClassDef):
        func = next(
            (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
        )
    else:
        func = cls
    if func is None:
        return []
    args = func.args.args + func.args.kwonlyargs
    defaults: list[ast.expr | None] = (
        [None] * (len(func.args.args) - len(func.args.defaults))
        + list(func.args.defaults)
        + list(func.args.kw_defaults)
    )
    out: list[EntryOption] = []
    for arg, default_node in zip(args, defaults, strict=True):
        if arg.arg in ("self", "cls") or arg.arg.startswith("_"):
            continue
        kind, choices, _ = _annotation_type(arg.annotation, consts, {})
        flag = f"{prefix}{arg.arg}"
        option = EntryOption(flag=flag, dest=arg.arg, flags=[flag], choices=choices)
        ok, default = _literal(default_node, consts)
        if default_node is None:
            option.required = True
        elif not ok:
            option.default_source = _unparse(default_node)
        option.default = default if ok else None
        option.type = kind or (scalar_type(default) if ok else None)
        if (
            option.type == "float"
            and isinstance(option.default, int)
            and not isinstance(option.default, bool)
        ):
            option.default = float(option.default)
        out.append(option)
    return out


def _known(prefix: str, rows: str) -> list[EntryOption]:
    """Options of a library (TrainingArguments, Lightning's Trainer) from a small table
    ``name type default help`` (one per line; default read as a Python literal)."""
    out: list[EntryOption] = []
    for line in rows.strip().splitlines():
        name, kind, default_text, help_text = line.split(None, 3)
        default = ast.literal_eval(default_text)
        flag = f"{prefix}{name}"
        opt_type: OptionType | None = kind if kind != "-" else None  # type: ignore[assignment]
        option = EntryOption(flag=flag, dest=name, flags=[flag], type=opt_type, default=default)
        option.help = help_text
        out.append(option)
    return out


_HF_TRAINING_ARGS = """
output_dir str None the output directory where the model predictions and checkpoints will be written
num_train_epochs float 3.0 total number of training epochs to perform
max_steps int -1 if > 0: total number of training steps to perform; overrides num_train_epochs
learning_rate float 5e-05 the initial learning rate for AdamW
weight_decay float 0.0 weight decay for AdamW
warmup_steps int 0 linear warmup over warmup_steps
warmup_ratio float 0.0 linear warmup over warmup_ratio fraction of total steps
per_device_train_batch_size int 8 batch size per device for training
per_device_eval_batch_size int 8 batch size per device for evaluation
gradient_accumulation_steps int 1 number of updates steps to accumulate before a backward/update pass
lr_scheduler_type str 'linear' the scheduler type to use
max_grad_norm float 1.0 max gradient norm
adam_beta1 float 0.9 beta1 for AdamW
adam_beta2 float 0.999 beta2 for AdamW
label_smoothing_factor float 0.0 the label smoothing epsilon to apply
seed int 42 random seed set at the beginning of training
logging_dir str None tensorboard log dir
logging_steps int 500 log every X updates steps
save_steps int 500 save checkpoint every X updates steps
eval_steps int None run an evaluation every X steps
do_train bool False whether to run training
do_eval bool False whether to run eval on the dev set
overwrite_output_dir bool False overwrite the content of the output directory
report_to str None the list of integrations to report the results and logs to
"""

_LIGHTNING_TRAINER = """
trainer.max_epochs int None stop training once this number of epochs is reached (Lightning's default: 1000)
trainer.max_steps int -1 stop training after this number of steps (-1: no limit)
trainer.max_time str None stop after this amount of time (DD:HH:MM:SS)
trainer.default_root_dir str None default path for logs and weights (default: the current working directory)
trainer.accelerator str 'auto' the accelerator to use
trainer.devices str 'auto' the devices to use
trainer.precision str None double, full, half or mixed precision
trainer.gradient_clip_val float None the value at which to clip gradients
trainer.accumulate_grad_batches int 1 accumulates gradients over k batches
trainer.check_val_every_n_epoch int 1 run validation every n epochs
trainer.limit_train_batches float 1.0 how much of the training set to use per epoch
trainer.log_every_n_steps int 50 how often to log within steps
seed_everything - True the seed of the random generators
"""


def _hf_options(
    tree: ast.Module, consts: dict[str, Any], imports: dict[str, str], text: str
) -> list[EntryOption]:
    """``HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))``: the
    fields of the module's dataclasses plus the common TrainingArguments."""
    if "HfArgumentParser" not in text:
        return []
    calls = [c for c in _calls_named(tree, "HfArgumentParser") if c.args]
    if not calls:
        return []
    classes = _classes(tree)
    arg = calls[0].args[0]
    names = [e for e in arg.elts] if isinstance(arg, ast.Tuple | ast.List) else [arg]
    out: list[EntryOption] = []
    for node in names:
        name = node.id if isinstance(node, ast.Name) else _unparse(node).rsplit(".", 1)[-1]
        if name in classes:
            out += _fields_of_dataclass(classes[name], consts)
        elif name.endswith("TrainingArguments"):
            out += _known("--", _HF_TRAINING_ARGS)
    return out


def _lightning_options(
    tree: ast.Module, consts: dict[str, Any], imports: dict[str, str], text: str
) -> list[EntryOption]:
    """``LightningCLI(Model, DataModule)``: the Trainer's common options and the
    ``__init__`` parameters of the model and data classes defined in this module."""
    if "LightningCLI" not in text:
        return []
    calls = [
        c
        for c in _calls_named(tree, "LightningCLI")
        if "lightning" in _origin(c, imports) or "LightningCLI" in imports
    ]
    if not calls:
        return []
    call = calls[0]
    kw = _keywords(call)
    classes = _classes(tree)
    out = _known("--", _LIGHTNING_TRAINER)
    defaults = kw.get("trainer_defaults")
    if isinstance(defaults, ast.Dict):
        by_flag = {o.flag: o for o in out}
        for k, v in zip(defaults.keys, defaults.values, strict=True):
            ok_k, key = _literal(k, consts)
            ok_v, value = _literal(v, consts)
            if not (ok_k and isinstance(key, str) and ok_v) or isinstance(value, list | dict):
                continue
            option = by_flag.get(f"--trainer.{key}")
            if option is None:
                option = EntryOption(
                    flag=f"--trainer.{key}", dest=f"trainer.{key}", flags=[f"--trainer.{key}"]
                )
                option.type = scalar_type(value)
                out.append(option)
            option.default = value
            option.help = (option.help + " (set by trainer_defaults)").strip()
    for index, (key, prefix) in enumerate(
        (("model_class", "--model."), ("datamodule_class", "--data."))
    ):
        node = call.args[index] if len(call.args) > index else kw.get(key)
        if isinstance(node, ast.Name) and node.id in classes:
            out += _init_params(classes[node.id], consts, prefix)
    return out


def _lightning_run_false(tree: ast.Module) -> bool:
    for call in _calls_named(tree, "LightningCLI"):
        run = _keywords(call).get("run")
        if isinstance(run, ast.Constant) and run.value is False:
            return True
    return False


def _jsonargparse_options(
    tree: ast.Module, consts: dict[str, Any], imports: dict[str, str], text: str
) -> list[EntryOption]:
    """``jsonargparse.CLI(main)`` / ``auto_cli(main)``: the parameters of the function
    (or the class's ``__init__``) it runs."""
    if "jsonargparse" not in text or not any(
        v.startswith("jsonargparse") for v in imports.values()
    ):
        return []
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = _classes(tree)
    for name in ("CLI", "auto_cli"):
        for call in _calls_named(tree, name):
            target = call.args[0] if call.args else None
            if isinstance(target, ast.Name) and target.id in funcs:
                return _init_params(funcs[target.id], consts, "--")
            if isinstance(target, ast.Name) and target.id in classes:
                return _init_params(classes[target.id], consts, "--")
            if target is None and len(funcs) == 1:
                return _init_params(next(iter(funcs.values())), consts, "--")
    return []
