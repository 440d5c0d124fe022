"""Metric specs proposed from what the entrypoint's code prints, never from running it.

Sources, read with :mod:`ast` from the entrypoint and the project modules it imports:

- format strings that reach an output call (``print``, ``logger.info``/``logging.*``,
  ``tqdm.write``, ``click.echo``, ``sys.stdout.write``, ``accelerator.print``,
  ``set_postfix``): f-strings, ``%``-format (also logging's ``"... %.4f", x``),
  ``str.format``, ``print("val loss", x)``, ``+`` concatenation, dict literals and
  ``json.dumps`` of them, and a variable assigned (or ``+=``-ed) one of those;
- known frameworks' own output: Hugging Face Trainer (``{'eval_loss': ...}`` lines and
  ``log_metrics``' ``eval_loss = ...``), Lightning's ``self.log``/``log_dict`` keys
  shown on the progress bar (``prog_bar=True``), Keras ``fit`` with validation data
  (``val_loss: ...``).

Every proposal carries the regex, a sample line rendered from the code's own format
string, and the check that the regex reads exactly the intended number of that line
and no number of any other line the code prints. Names give the goal (loss, ppl,
error, wer, mae ... -> min; acc, f1, bleu, auc, iou ... -> max) and the split
(val/valid/eval/dev, test, train, from the label, the line, the value's expression or
the enclosing function); validation metrics rank first, then test, then the rest; a
metric the code compares with a best value (``if val_loss < best_val_loss``) ranks
first of its split.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from trainee.discovery.scan import Entrypoint, _project_imports
from trainee.spec import Goal, MetricSource, MetricSpec, ProjectFileSpec
from trainee.spec.goals import infer_goal

__all__ = [
    "MetricProposal",
    "MetricReport",
    "SourceModule",
    "Split",
    "is_training_metric",
    "metric_goal",
    "metric_split",
    "propose_for_project",
    "propose_metrics",
    "training_metric_advice",
]

Split = Literal["validation", "test", "train", "other"]

MAX_FILES = 12
"""Python files read per entrypoint: the script and the project modules it imports."""
MAX_PROPOSALS = 4
_MAX_TEMPLATES = 2_000
_MAX_PY_BYTES = 1 << 20

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf)"
"""A printed number as Python, numpy and torch write it (``nan``/``inf`` included:
the extractor records them as missing)."""
_VALUE = rf"(?P<value>{NUMBER})"


class MetricProposal(msgspec.Struct, kw_only=True):
    """A metrics.specs entry proposed from the code, with the evidence for it.

    ``sample`` is the line the code prints, rendered from its format string; the
    regex was checked to read exactly the marked number of it. ``where`` is
    ``file:line`` of the print/log call or framework call."""

    name: str
    source: str
    key_or_pattern: str
    goal: Literal["min", "max"]
    split: Split
    reason: str
    where: str
    sample: str = ""
    path: str | None = None
    selection: bool = False

    def to_spec(self, *, required: bool) -> MetricSpec:
        return MetricSpec(
            name=self.name,
            source=MetricSource(self.source),
            key_or_pattern=self.key_or_pattern,
            path=self.path,
            goal=Goal(self.goal),
            required=required,
        )


class MetricReport(msgspec.Struct, kw_only=True):
    """Proposals best first (the first is the primary metric), and what was noticed."""

    proposals: list[MetricProposal] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)

    @property
    def primary(self) -> MetricProposal | None:
        """The first proposal, unless it is only a training metric (the built-in loss
        already covers that)."""
        first = self.proposals[0] if self.proposals else None
        if first is None or first.split == "train" or is_training_metric(first.name):
            return None
        return first


# -- names: goal and split -----------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_SPLIT_WORDS: dict[str, Split] = {
    **dict.fromkeys(("val", "valid", "validation", "eval", "evaluation", "dev"), "validation"),
    **dict.fromkeys(("test", "testing", "heldout"), "test"),
    **dict.fromkeys(("train", "training", "trn"), "train"),
}
_SHORT_SPLIT = {
    "validation": "val",
    "evaluation": "eval",
    "testing": "test",
    "training": "train",
    "heldout": "test",
}
_FILLERS = _words("average avg mean running set epoch batch current cur final last best")


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]


def metric_goal(name: str) -> Literal["min", "max"] | None:
    """``min`` for losses and errors, ``max`` for scores, None when the name does not
    say: :func:`trainee.spec.goals.infer_goal`, the one reading of a metric's name."""
    goal = infer_goal(name)
    return None if goal is None else goal.value


def metric_split(name: str) -> Split:
    """Which data a metric name says it is measured on (``val_loss`` -> validation)."""
    for token in _tokens(name):
        if token in _SPLIT_WORDS:
            return _SPLIT_WORDS[token]
    return "other"


def is_training_metric(name: str) -> bool:
    """A training metric by its name: ``train_*``, or a loss that names no validation
    or test split (``loss``, ``total_loss``, ``lm_loss``)."""
    split = metric_split(name)
    if split == "train":
        return True
    return split == "other" and metric_goal(name) == "min" and "loss" in _tokens(name)


# -- reading the code ----------------------------------------------------------------------


@dataclass
class SourceModule:
    rel: str
    tree: ast.Module
    text: str


def source_modules(root: Path, ep: Entrypoint) -> list[SourceModule]:
    """The entrypoint, the module its options come from and the project modules they
    import (breadth first), at most :data:`MAX_FILES`."""
    queue = [ep.path, *([ep.options_from] if ep.options_from else [])]
    seen: set[str] = set()
    out: list[SourceModule] = []
    while queue and len(out) < MAX_FILES:
        rel = queue.pop(0)
        if rel in seen:
            continue
        seen.add(rel)
        module = _parse(root, rel)
        if module is None:
            continue
        out.append(module)
        queue.extend(r for r in _project_imports(root, rel, module.tree) if r not in seen)
    return out


def _parse(root: Path, rel: str) -> SourceModule | None:
    path = root / rel
    try:
        if not path.resolve().is_relative_to(root) or path.stat().st_size > _MAX_PY_BYTES:
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
        return SourceModule(rel, ast.parse(text, filename=rel), text)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, TypeError, AttributeError, RecursionError):
        return "<expression>"


def _call_name(call: ast.Call) -> str:
    """``print``, ``logger.info``, ``self.log``, ``sys.stdout.write`` of a call."""
    return _dotted(call.func)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        return _dotted(node.func) + "()"
    return ""


# -- templates: what one output call prints ------------------------------------------------


@dataclass
class _Hole:
    """A formatted value of a template: its source expression and format spec."""

    expr: str
    spec: str = ""
    percent: bool = False  # a %-format spec ("%.4f")
    node: ast.AST | None = None


_Part = str | _Hole


@dataclass
class _Template:
    parts: list[_Part]
    where: str
    function: str
    kind: str = "print"  # "print", "dict", "postfix"


_PERCENT_SPEC = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?(?P<spec>[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?"
    r"(?P<type>[diouxXeEfFgGcrsa%]))"
)
_OUTPUT_METHODS = _words("info warning warn debug error critical exception log")
_WRITE_BASES = ("sys.stdout", "sys.stderr", "tqdm", "pbar", "bar", "progress")


def _is_output_call(name: str) -> bool:
    if name in ("print", "pprint", "click.echo", "typer.echo", "tqdm.write", "tqdm.tqdm.write"):
        return True
    base, _, method = name.rpartition(".")
    if method in _OUTPUT_METHODS:
        return base == "logging" or "log" in base.lower() or base in ("self", "console")
    if method == "print":  # accelerator.print, console.print, xm.master_print, self.print
        return True
    if method == "master_print":
        return True
    if method == "write":
        return base.endswith(_WRITE_BASES)
    return method in ("set_description", "set_postfix_str", "set_postfix")


def _const_str(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _parts_of(node: ast.AST, names: dict[str, list[ast.AST]], depth: int = 0) -> list[list[_Part]]:
    """The templates an expression can print: usually one; a variable built by ``=`` and
    ``+=`` gives one per piece (each piece is a substring of the printed line)."""
    if depth > 4:
        return [[_Hole(_unparse(node), node=node)]]
    text = _const_str(node)
    if text is not None:
        return [[text]]
    if isinstance(node, ast.JoinedStr):
        parts: list[_Part] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                spec = ""
                if isinstance(value.format_spec, ast.JoinedStr):
                    spec = "".join(
                        str(v.value) if isinstance(v, ast.Constant) else "0"
                        for v in value.format_spec.values
                    )
                parts.append(_Hole(_unparse(value.value), spec, node=value.value))
        return [parts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        fmt = _const_str(node.left)
        if fmt is not None:
            args = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            return [_percent_parts(fmt, list(args), node.right)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        lefts = _parts_of(node.left, names, depth + 1)
        rights = _parts_of(node.right, names, depth + 1)
        if len(lefts) == 1 and len(rights) == 1:
            return [lefts[0] + rights[0]]
        return lefts + rights
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            fmt = _const_str(func.value)
            if fmt is not None:
                return [_format_parts(fmt, node)]
        name = _call_name(node)
        if name in ("json.dumps", "str", "repr") and len(node.args) == 1:
            inner = node.args[0]
            if name == "json.dumps":
                return [_dict_parts(d, json=True) for d in _dicts(inner, names)] or [
                    [_Hole(_unparse(node), node=node)]
                ]
            if isinstance(inner, ast.Dict | ast.Name):
                found = [_dict_parts(d, json=False) for d in _dicts(inner, names)]
                if found:
                    return found
            return [[_Hole(_unparse(inner), node=inner)]]
        if name.endswith(".join") and len(node.args) == 1:
            sep = _const_str(func.value) if isinstance(func, ast.Attribute) else None
            if sep is not None and isinstance(node.args[0], ast.List | ast.Tuple):
                joined: list[_Part] = []
                for i, elt in enumerate(node.args[0].elts):
                    if i:
                        joined.append(sep)
                    pieces = _parts_of(elt, names, depth + 1)
                    joined += pieces[0] if len(pieces) == 1 else [_Hole(_unparse(elt))]
                return [joined]
    if isinstance(node, ast.Dict):
        return [_dict_parts(node, json=False)]
    if isinstance(node, ast.Name) and node.id in names:
        out: list[list[_Part]] = []
        for assigned in names[node.id][:8]:
            out += _parts_of(assigned, {k: v for k, v in names.items() if k != node.id}, depth + 1)
        if out:
            return out
    return [[_Hole(_unparse(node), node=node)]]


def _dicts(node: ast.AST, names: dict[str, list[ast.AST]]) -> list[ast.Dict]:
    if isinstance(node, ast.Dict):
        return [node]
    if isinstance(node, ast.Name):
        return [v for v in names.get(node.id, []) if isinstance(v, ast.Dict)]
    return []


def _dict_parts(node: ast.Dict, *, json: bool) -> list[_Part]:
    """``str(dict)`` (``{'val_loss': 0.5}``) or ``json.dumps`` (``{"val_loss": 0.5}``)."""
    quote = '"' if json else "'"
    parts: list[_Part] = ["{"]
    for i, (key, value) in enumerate(zip(node.keys, node.values, strict=True)):
        text = _const_str(key) if key is not None else None
        if text is None:
            return [_Hole(_unparse(node), node=node)]
        parts.append(f"{', ' if i else ''}{quote}{text}{quote}: ")
        parts.append(_Hole(_unparse(value), node=value))
    parts.append("}")
    return parts


def _percent_parts(fmt: str, args: list[ast.expr], whole: ast.expr) -> list[_Part]:
    parts: list[_Part] = []
    pos = 0
    i = 0
    keyed = isinstance(whole, ast.Dict)
    for m in _PERCENT_SPEC.finditer(fmt):
        parts.append(fmt[pos : m.start()])
        pos = m.end()
        if m.group("type") == "%":
            parts.append("%")
            continue
        node: ast.AST | None = None
        if keyed and isinstance(whole, ast.Dict):
            key = m.group("key")
            for k, v in zip(whole.keys, whole.values, strict=True):
                if k is not None and _const_str(k) == key:
                    node = v
        elif i < len(args):
            node = args[i]
        i += 1
        parts.append(
            _Hole(_unparse(node) if node else "?", m.group("spec"), percent=True, node=node)
        )
    parts.append(fmt[pos:])
    return parts


def _format_parts(fmt: str, call: ast.Call) -> list[_Part]:
    parts: list[_Part] = []
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    auto = 0
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return [fmt]
    for literal, field_name, spec, _conversion in parsed:
        if literal:
            parts.append(literal)
        if field_name is None:
            continue
        head = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        node: ast.AST | None = None
        if head == "":
            node = call.args[auto] if auto < len(call.args) else None
            auto += 1
        elif head.isdigit():
            idx = int(head)
            node = call.args[idx] if idx < len(call.args) else None
        else:
            node = keywords.get(head)
        spec = re.sub(r"\{[^{}]*\}", "0", spec or "")
        parts.append(_Hole(_unparse(node) if node else field_name, spec, node=node))
    return parts


def _print_parts(call: ast.Call, names: dict[str, list[ast.AST]]) -> list[list[_Part]]:
    """``print(a, b, ...)``: the pieces joined by ``sep`` (a space)."""
    sep = " "
    for k in call.keywords:
        if k.arg == "sep":
            sep = _const_str(k.value) or " "
    if len(call.args) == 1:
        return _parts_of(call.args[0], names)
    joined: list[_Part] = []
    extra: list[list[_Part]] = []
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            return extra or [joined]
        if i:
            joined.append(sep)
        pieces = _parts_of(arg, names)
        if len(pieces) == 1:
            joined += pieces[0]
        else:
            joined.append(_Hole(_unparse(arg), node=arg))
            extra += pieces
    return [joined, *extra]


def _templates(module: SourceModule) -> Iterator[_Template]:
    """Every template printed by an output call of the module, with its location."""
    for func, body in _scopes(module.tree):
        names = _assigned_strings(body)
        for node in _walk_scope(body):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            if not _is_output_call(name):
                continue
            where = f"{module.rel}:{node.lineno}"
            method = name.rpartition(".")[2]
            if method == "set_postfix":
                yield from _postfix(node, where, func)
                continue
            if method in _OUTPUT_METHODS and name != "print" and node.args:
                first = node.args[0]
                if method == "log" and len(node.args) > 1 and not _const_str(first):
                    first = node.args[1]  # logger.log(level, msg, ...)
                    rest = node.args[2:]
                else:
                    rest = node.args[1:]
                fmt = _const_str(first)
                if fmt is not None and rest and "%" in fmt:
                    yield _Template(
                        _percent_parts(fmt, list(rest), ast.Tuple(elts=[])), where, func
                    )
                    continue
                for parts in _parts_of(first, names):
                    yield _Template(parts, where, func)
                continue
            for parts in _print_parts(node, names):
                yield _Template(parts, where, func)


def _postfix(call: ast.Call, where: str, func: str) -> Iterator[_Template]:
    """tqdm ``set_postfix(loss=x, val_loss=y)`` shows ``loss=0.5, val_loss=0.4``."""
    pairs: list[tuple[str, ast.AST]] = [(k.arg, k.value) for k in call.keywords if k.arg]
    if call.args and isinstance(call.args[0], ast.Dict):
        for key_node, value_node in zip(call.args[0].keys, call.args[0].values, strict=True):
            text = _const_str(key_node) if key_node is not None else None
            if text:
                pairs.append((text, value_node))
    pairs = [(k, v) for k, v in pairs if k not in ("refresh", "ordered_dict")]
    parts: list[_Part] = []
    for i, (key, shown) in enumerate(pairs):
        parts.append(f"{', ' if i else ''}{key}=")
        parts.append(_Hole(_unparse(shown), node=shown))
    if parts:
        yield _Template(parts, where, func, kind="postfix")


def _scopes(tree: ast.Module) -> Iterator[tuple[str, list[ast.stmt]]]:
    yield "", tree.body
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node.body


def _walk_scope(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Nodes of a scope, not descending into nested functions or classes."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for child in reversed(list(ast.iter_child_nodes(node))):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                stack.append(child)


def _assigned_strings(body: list[ast.stmt]) -> dict[str, list[ast.AST]]:
    """Local name -> the formatted strings and dict literals assigned or ``+=``-ed to it."""
    out: dict[str, list[ast.AST]] = {}
    for node in _walk_scope(body):
        target: ast.AST
        value: ast.AST | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add)) or isinstance(
            node, ast.AnnAssign
        ):
            target, value = node.target, node.value
        else:
            continue
        if value is None:
            continue
        if isinstance(target, ast.Name) and _stringish(value):
            out.setdefault(target.id, []).append(value)
    return out


def _stringish(node: ast.AST) -> bool:
    if isinstance(node, ast.JoinedStr | ast.Dict):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.BinOp):
        return _stringish(node.left) or _stringish(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "format" and _const_str(node.func.value) is not None
    return False


# -- from a template to candidate metrics ------------------------------------------------


@dataclass(eq=False)
class _Candidate:
    name: str
    split: Split
    goal: Literal["min", "max"]
    regex: str
    template: _Template
    hole: int  # index in template.parts
    label: str
    expr: str
    reason: str
    selection: bool = False
    samples: list[str] = field(default_factory=list)


_SEP = re.compile(r"""(?P<sep>['"]?\s*(?:[:=]|->)?\s*['"]?\s*)$""")
_WORD = re.compile(r"^[A-Za-z][\w@/.\-]*$")
_DELIMS = re.compile(r"[^A-Za-z0-9_@/.\- ]|\s{2,}|\s-\s")
_NUMERIC_TYPES = frozenset("eEfFgG%")


def _label(text: str) -> tuple[str, str, str] | None:
    """(delimiter before the label, the label, the separator) at the end of the literal
    text before a value: ``", val loss "`` -> (``,``, ``val loss``, `` ``)."""
    m = _SEP.search(text)
    head, sep = (text[: m.start()], m.group("sep")) if m else (text, "")
    pieces = _DELIMS.split(head)
    chunk = pieces[-1] if pieces else head
    words = chunk.split()
    label_words: list[str] = []
    for word in reversed(words):
        if not _WORD.match(word) or len(label_words) >= 4:
            break
        label_words.insert(0, word)
    if not label_words:
        return None
    label = " ".join(label_words)
    before = head[: len(head) - len(chunk)] + chunk[: len(chunk) - len(chunk.lstrip())]
    before = before.rstrip()
    delim = before[-1] if before and not before[-1].isalnum() else ""
    if label.startswith(("-", ".", "/")):
        return None
    return delim, label, sep


def _name(label: str) -> str:
    text = label.lower().replace("@", "")
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def _context_split(*texts: str) -> tuple[Split, str] | None:
    for text in texts:
        words = _tokens(text)
        for word in reversed(words):
            if word in _SPLIT_WORDS:
                return _SPLIT_WORDS[word], _SHORT_SPLIT.get(word, word)
    return None


def _candidates(template: _Template, selection: set[str]) -> Iterator[_Candidate]:
    parts = template.parts
    prev_literal = ""
    line_before = ""
    for i, part in enumerate(parts):
        if isinstance(part, str):
            prev_literal += part
            line_before += part
            continue
        literal, prev_literal = prev_literal, ""
        hole = part
        kind = (hole.spec[-1:] if hole.spec else "") or ""
        if kind and kind not in _NUMERIC_TYPES and kind not in "sra":
            line_before += "{}"
            continue  # an int count (%d, :5d), a string (%s)
        following = next((p for p in parts[i + 1 : i + 2] if isinstance(p, str)), "")
        if following.startswith("/") or following.startswith(("s ", "s|", "s,", "ms")):
            line_before += "{}"
            continue  # "correct {}/{}" counts, "time {:.2f}s" durations
        found = _label(literal)
        line_before_label = line_before
        line_before += "{}"
        if found is None:
            continue
        delim, label, sep = found
        name = _name(label)
        goal = metric_goal(name)
        if not name or goal is None:
            continue
        name = "_".join(t for t in _tokens(name) if t not in _FILLERS) or name
        split = metric_split(name)
        if split == "other":
            ctx = _context_split(line_before_label, hole.expr, template.function)
            if ctx is not None:
                split, word = ctx
                name = f"{word}_{name}"
        regex = _regex(delim, label, sep, hole, template.kind)
        target = i
        avg = _running_average(parts, i)
        if avg is not None:
            # "Loss 0.71 (0.69)": the meter's current value, then its average
            regex = regex.replace(_VALUE, rf"(?:{NUMBER})\s*\(\s*{_VALUE}")
            target = avg
        yield _Candidate(
            name=name,
            split=split,
            goal=goal,
            regex=regex,
            template=template,
            hole=target,
            label=label,
            expr=hole.expr,
            reason="",
            selection=hole.expr in selection,
        )


def _running_average(parts: list[_Part], i: int) -> int | None:
    """The index of ``{meter.avg}`` in ``{meter.val} ({meter.avg})`` after hole ``i``."""
    if i + 3 >= len(parts):
        return None
    between, second, after = parts[i + 1], parts[i + 2], parts[i + 3]
    if not (isinstance(between, str) and isinstance(second, _Hole) and isinstance(after, str)):
        return None
    if between.strip() != "(" or not after.startswith(")"):
        return None
    words = _tokens(second.expr)
    return i + 2 if any(w in ("avg", "average", "mean") for w in words) else None


def _regex(delim: str, label: str, sep: str, hole: _Hole, kind: str) -> str:
    if delim in ("'", '"'):
        left = delim  # a quoted key: {'val_loss': 0.5}
    elif delim and delim != "{":
        left = re.escape(delim) + r"\s*"
    else:
        left = r"(?<![\w/.\-])"
    body = r"\s+".join(re.escape(w) for w in label.split())
    sep_re = ""
    stripped = sep.strip()
    for ch in stripped:
        sep_re += r"\s*" + re.escape(ch) if ch != " " else ""
    sep_re = (sep_re + r"\s*") if stripped else (r"\s+" if sep else r"\s*")
    tensor = r"(?:tensor\()?" if not hole.spec else ""
    return f"{left}{body}{sep_re}{tensor}{_VALUE}"


# -- samples and checks ------------------------------------------------------------------


@dataclass
class _Rendered:
    """A template's sample line, each placeholder's text in it, its candidates."""

    line: str
    holes: dict[int, str]
    candidates: list[_Candidate]


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> float:
        self.n += 1
        return 10.0 + self.n + 0.25


def _render(
    template: _Template, counter: _Counter, metrics: set[int]
) -> tuple[str, dict[int, str]]:
    """A line the template prints, and each hole's rendered text by part index: a
    distinct number for each (a fraction for the metric holes ``metrics``)."""
    out: list[str] = []
    holes: dict[int, str] = {}
    for i, part in enumerate(template.parts):
        if isinstance(part, str):
            out.append(part)
            continue
        value = counter.next()
        text = _format_value(value if i in metrics else float(int(value)), part)
        holes[i] = text
        out.append(text)
    return "".join(out), holes


def _format_value(value: float, hole: _Hole) -> str:
    spec = hole.spec
    try:
        if hole.percent:
            if spec and spec[-1] in "diouxXc":
                return ("%" + spec) % int(value)
            if spec and spec[-1] in "rsa":
                return ("%" + spec.replace("r", "s").replace("a", "s")) % repr(value)
            return ("%" + (spec or "s")) % value
        if spec and spec[-1] in "dnbcoxX":
            return format(int(value), spec)
        if not spec and value == int(value):
            return str(int(value))
        if spec and spec[-1] == "s":
            return format(str(value), spec)
        return format(value, spec)
    except (ValueError, TypeError, OverflowError):
        return repr(value)


def _check(cand: _Candidate, rendered: list[_Rendered]) -> bool:
    """Whether the regex reads the candidate's number from its own line and, on every
    other line, only numbers of metrics with the same name. A clash with a longer label
    that ends like this one (``best val loss`` for ``val loss``) is resolved with a
    lookbehind for the extra word."""
    own = next(r for r in rendered if cand in r.candidates)
    for _ in range(4):
        regex = re.compile(cand.regex, re.MULTILINE)
        got = [m.group("value") for m in regex.finditer(own.line)]
        if got != [own.holes[cand.hole].strip()]:
            return False
        clash = _clash(cand, regex, rendered, own)
        if clash is None:
            return True
        extra = clash[: len(clash) - len(cand.label)].split()
        if not clash.endswith(cand.label) or not extra:
            return False
        cand.regex = rf"(?<!{re.escape(extra[-1])}[\s_]){cand.regex}"
    return False


def _clash(
    cand: _Candidate, regex: re.Pattern[str], rendered: list[_Rendered], own: _Rendered
) -> str | None:
    """The label of another metric whose number the regex reads on some line ("" when
    the number read is no metric at all), None when it reads only its own."""
    for other in rendered:
        for m in regex.finditer(other.line):
            value = m.group("value")
            owners = [c for c in other.candidates if other.holes.get(c.hole, "").strip() == value]
            if (other is own and cand in owners) or any(o.name == cand.name for o in owners):
                continue
            return owners[0].label if owners else ""
    return None


# -- best-value comparisons ----------------------------------------------------------------


def _selection_exprs(modules: list[SourceModule]) -> set[str]:
    """Expressions compared with a best value: ``val_loss`` in
    ``if val_loss < best_val_loss`` or ``best = min(best, losses['val'])``."""
    out: set[str] = set()
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Compare) and len(node.comparators) == 1:
                sides = [node.left, node.comparators[0]]
                if not isinstance(node.ops[0], ast.Lt | ast.Gt | ast.LtE | ast.GtE):
                    continue
                texts = [_unparse(s) for s in sides]
                for j, text in enumerate(texts):
                    if "best" in text.lower() and "best" not in texts[1 - j].lower():
                        out.add(texts[1 - j])
            elif isinstance(node, ast.Call) and _call_name(node) in ("min", "max"):
                texts = [_unparse(a) for a in node.args]
                if len(texts) == 2 and any("best" in t.lower() for t in texts):
                    out.update(t for t in texts if "best" not in t.lower())
    return out


# -- frameworks -------------------------------------------------------------------------------


def _imports(modules: list[SourceModule]) -> set[str]:
    out: set[str] = set()
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                out.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                out.add(node.module.split(".")[0])
    return out


@dataclass
class _Known:
    """A framework proposal: the name, the regex and a line the framework prints."""

    name: str
    regex: str
    sample: str
    value: str
    where: str
    reason: str
    selection: bool = False


def _hf_trainer(modules: list[SourceModule]) -> list[_Known]:
    """Hugging Face ``Trainer``: evaluation logs ``{'eval_loss': 0.69, ...}`` and
    ``log_metrics`` prints ``  eval_loss   =   0.6931``."""
    where = ""
    keys: list[str] = []
    best: str | None = None
    for module in modules:
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node).rsplit(".", 1)[-1]
            if name in (
                "Trainer",
                "Seq2SeqTrainer",
                "SFTTrainer",
                "TrainingArguments",
                "Seq2SeqTrainingArguments",
            ):
                where = where or f"{module.rel}:{node.lineno}"
                for k in node.keywords:
                    if k.arg == "metric_for_best_model":
                        best = _const_str(k.value) or best
        for node in ast.walk(module.tree):
            if isinstance(node, ast.FunctionDef) and node.name == "compute_metrics":
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Dict):
                        keys += [k for k in (_const_str(x) for x in sub.value.keys if x) if k]
    if not where:
        return []
    names = ["eval_loss", *(k if k.startswith("eval_") else f"eval_{k}" for k in keys)]
    if best:
        chosen = best if best.startswith("eval_") else f"eval_{best}"
        names = [chosen, *(n for n in names if n != chosen)]
    out: list[_Known] = []
    for name in dict.fromkeys(names):
        if metric_goal(name) is None:
            continue
        regex = rf"""['"]?{re.escape(name)}['"]?\s*[:=]\s*(?:np\.float\d+\()?['"]?{_VALUE}"""
        out.append(
            _Known(
                name=name,
                regex=regex,
                sample=f"{{'{name}': 0.6931, 'eval_runtime': 1.2, 'epoch': 1.0}}\n  {name:<24} =     0.6931",
                value="0.6931",
                where=where,
                reason=f"Hugging Face Trainer evaluation logs ({{'{name}': ...}} and log_metrics)",
                selection=name == (names[0] if best else None),
            )
        )
    return out


def _lightning(modules: list[SourceModule]) -> tuple[list[_Known], list[str]]:
    """Lightning ``self.log`` / ``log_dict`` keys as the output shows them: on the
    progress bar with ``prog_bar=True`` (``val_loss=0.693`` on the tqdm bar,
    ``val_loss: 0.693`` on the rich one), and in the table ``trainer.test()`` /
    ``trainer.validate()`` prints at the end (``test/acc │ 0.91``). A key logged both on
    step and on epoch shows as ``<key>_epoch``. ``f"{stage}_loss"`` keys take the stage
    names the module passes as literals (``"val"``, ``"test"``). Other keys reach only
    the logger's files (noted)."""
    out: list[_Known] = []
    hidden: list[str] = []
    stages = _stage_literals(modules)
    tables = {m for m in ("test", "validate") if _calls_method(modules, m)}
    for module in modules:
        for func, body in _scopes(module.tree):
            for node in _walk_scope(body):
                if not isinstance(node, ast.Call):
                    continue
                name = _call_name(node)
                if name not in ("self.log", "self.log_dict"):
                    continue
                flags = {
                    k.arg: k.value.value
                    for k in node.keywords
                    if k.arg and isinstance(k.value, ast.Constant)
                }
                keys: list[str] = []
                if name == "self.log" and node.args:
                    keys += _log_keys(node.args[0], stages)
                elif node.args and isinstance(node.args[0], ast.Dict):
                    for x in node.args[0].keys:
                        keys += _log_keys(x, stages) if x is not None else []
                for key in keys:
                    if metric_goal(key) is None:
                        continue
                    split = metric_split(key)
                    ctx = _context_split(func) if split == "other" else None
                    split = ctx[0] if ctx is not None else split
                    in_table = ("test" in tables and split == "test") or (
                        "validate" in tables and split == "validation"
                    )
                    both = flags.get("on_step") is True and flags.get("on_epoch") is not False
                    if flags.get("prog_bar") is not True and not in_table:
                        hidden.append(f"{key}_epoch" if both else key)  # the logger's tag
                        continue
                    suffix = "(?:_epoch)?" if both else ""
                    where = (
                        "the progress bar" if flags.get("prog_bar") is True else "the final table"
                    )
                    out.append(
                        _Known(
                            name=_name(key),
                            regex=rf"(?<![\w/.\-]){re.escape(key)}{suffix}"
                            rf"(?:=|:\s*|\s*[│┃|]?\s+){_VALUE}",
                            sample=(
                                f"Epoch 0: 100%|#####| 8/8 [00:00<00:00, v_num=0, {key}=0.693]\n"
                                f"Epoch 0/0 8/8 0:00:00 • 0:00:00 v_num: 0 {key}: 0.693\n"
                                f"│ {key:>20} │ 0.693 │"
                            ),
                            value="0.693",
                            where=f"{module.rel}:{node.lineno}",
                            reason=f"Lightning self.log({key!r}) shows on {where}",
                        )
                    )
    return out, hidden


_LIGHTNING_SCAN = 400
"""Files looked at for a LightningModule when the entrypoint imports none (a Hydra app
names it by ``_target_`` only)."""


def _lightning_modules(root: Path, known: list[SourceModule]) -> list[SourceModule]:
    from trainee.discovery.scan import SKIP_DIRS

    seen = {m.rel for m in known}
    out: list[SourceModule] = []
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and d not in ("tests", "test", "docs")
        )
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            count += 1
            if count > _LIGHTNING_SCAN or len(out) >= MAX_FILES:
                return out
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if rel in seen:
                continue
            module = _parse(root, rel)
            if (
                module is not None
                and "LightningModule" in module.text
                and "self.log" in module.text
            ):
                out.append(module)
    return out


def _defines_lightning_module(module: SourceModule) -> bool:
    return any(
        isinstance(node, ast.ClassDef)
        and any(_dotted(b).rsplit(".", 1)[-1] == "LightningModule" for b in node.bases)
        for node in ast.walk(module.tree)
    )


def _calls_named(modules: list[SourceModule], name: str) -> str:
    """``file:line`` of the first call of ``name`` in the code, else ""."""
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call) and _call_name(node).rsplit(".", 1)[-1] == name:
                return f"{module.rel}:{node.lineno}"
    return ""


def _lightning_event_specs(tags: list[str], where: str) -> list[MetricProposal]:
    """Keys a LightningCLI app logs only to its logger: TensorBoard event files below
    ``--trainer.default_root_dir`` (which output.flag points at the round's outputs)."""
    out: list[MetricProposal] = []
    for tag in dict.fromkeys(tags):
        goal, split = metric_goal(tag), metric_split(tag)
        if goal is None or split == "train":
            continue
        out.append(
            MetricProposal(
                name=_name(tag.removesuffix("_epoch")),
                source=MetricSource.TENSORBOARD.value,
                key_or_pattern=tag,
                goal=goal,
                split=split,
                reason=f"Lightning logs {tag!r} to its logger only (no prog_bar=True); "
                "LightningCLI writes it below --trainer.default_root_dir",
                where=where,
                path="{outputs_dir}/lightning_logs/version_*",
            )
        )
    return out


def _log_keys(node: ast.AST, stages: list[str]) -> list[str]:
    text = _const_str(node)
    if text is not None:
        return [text]
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        first, second = node.values
        rest = _const_str(second)
        if isinstance(first, ast.FormattedValue) and rest:
            return [f"{stage}{rest}" for stage in stages]
    return []


def _stage_literals(modules: list[SourceModule]) -> list[str]:
    """Stage names passed as string literals in the code (``self._step(batch, "val")``)."""
    found: list[str] = []
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call):
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    text = _const_str(arg)
                    if (
                        text in ("train", "val", "valid", "validation", "test")
                        and text not in found
                    ):
                        found.append(text)
    return found


def _calls_method(modules: list[SourceModule], method: str) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
        for module in modules
        for node in ast.walk(module.tree)
    )


_TIMM_SUMMARY = ("eval_top1", "eval_loss", "eval_top5")
"""The columns timm's ``update_summary`` writes for its evaluation (``eval_`` + the
validate() metrics), besides ``epoch``, ``train_loss`` and ``lr``."""


def _csv_columns(modules: list[SourceModule]) -> list[MetricProposal]:
    """Columns of CSV summaries the code writes, read with the ``csv`` source: a
    ``csv.DictWriter`` with literal field names (or the keys of a dict literal), a
    literal header row, timm's ``update_summary``. The file is looked for below the
    round's outputs folder (``{outputs_dir}/**/<name>.csv``)."""
    out: list[MetricProposal] = []
    for module in modules:
        for _, body in _scopes(module.tree):
            names = _assigned_strings(body)
            files = [
                n.value.rsplit("/", 1)[-1]
                for n in _walk_scope(body)
                if isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and n.value.endswith(".csv")
            ]
            for node in _walk_scope(body):
                if not isinstance(node, ast.Call):
                    continue
                name = _call_name(node).rsplit(".", 1)[-1]
                columns: list[str] = []
                what = ""
                if name == "update_summary":
                    columns, what = list(_TIMM_SUMMARY), "timm's update_summary"
                    files = files or ["summary.csv"]
                elif name == "DictWriter":
                    fields = next((k.value for k in node.keywords if k.arg == "fieldnames"), None)
                    if fields is None and len(node.args) > 1:
                        fields = node.args[1]
                    columns, what = _field_names(fields, names), "csv.DictWriter"
                elif (
                    name == "writerow"
                    and node.args
                    and isinstance(node.args[0], ast.List | ast.Tuple)
                ):
                    texts = [_const_str(e) for e in node.args[0].elts]
                    if texts and all(texts):
                        columns, what = [t for t in texts if t], "a csv header row"
                if not columns or not files:
                    continue
                for column in columns:
                    goal = metric_goal(column)
                    split = metric_split(column)
                    if goal is None or split == "train" or not re.fullmatch(r"[\w./\-]+", column):
                        continue
                    out.append(
                        MetricProposal(
                            name=_name(column),
                            source=MetricSource.CSV.value,
                            key_or_pattern=column,
                            goal=goal,
                            split=split,
                            reason=f"{module.rel}:{node.lineno} writes column {column!r} of "
                            f"{files[0]} ({what})",
                            where=f"{module.rel}:{node.lineno}",
                            path="{outputs_dir}/**/" + files[0],
                        )
                    )
    return out


def _field_names(node: ast.AST | None, names: dict[str, list[ast.AST]]) -> list[str]:
    """Literal field names: a list, or the keys of a dict literal (``row.keys()``)."""
    if node is None:
        return []
    if isinstance(node, ast.List | ast.Tuple):
        texts = [_const_str(e) for e in node.elts]
        return [t for t in texts if t] if all(texts) else []
    target = node
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "keys"
    ):
        target = node.func.value
    elif isinstance(node, ast.Call) and _call_name(node) == "list" and node.args:
        target = node.args[0]
    for d in _dicts(target, names):
        keys = [_const_str(k) if k is not None else None for k in d.keys]
        if keys and all(keys):
            return [k for k in keys if k]
    return []


def _keras(modules: list[SourceModule], imported: set[str]) -> list[_Known]:
    """Keras ``model.fit(..., validation_data=...)`` prints ``val_loss: 0.69`` and
    ``val_<metric>: ...`` for each compiled metric."""
    if not imported & {"keras", "tensorflow", "tf_keras"}:
        return []
    where = ""
    metrics: list[str] = []
    for module in modules:
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr == "fit" and any(
                k.arg in ("validation_data", "validation_split") for k in node.keywords
            ):
                where = where or f"{module.rel}:{node.lineno}"
            if node.func.attr == "compile":
                for k in node.keywords:
                    if k.arg == "metrics" and isinstance(k.value, ast.List | ast.Tuple):
                        metrics += [m for m in (_const_str(e) for e in k.value.elts) if m]
    if not where:
        return []
    out: list[_Known] = []
    for metric in ["loss", *metrics]:
        name = f"val_{metric}"
        if metric_goal(name) is None:
            continue
        out.append(
            _Known(
                name=name,
                regex=rf"(?<![\w/.\-]){re.escape(name)}:\s*{_VALUE}",
                sample=f"8/8 - 0s - 5ms/step - loss: 0.5000 - {name}: 0.6931",
                value="0.6931",
                where=where,
                reason=f"Keras fit with validation data prints {name}: after each epoch",
            )
        )
    return out


# -- the proposal ---------------------------------------------------------------------------

_SPLIT_RANK: dict[Split, int] = {"validation": 0, "test": 1, "other": 2, "train": 3}


def propose_metrics(
    root: Path | str, entrypoint: Entrypoint | None, *, limit: int = MAX_PROPOSALS
) -> MetricReport:
    """Metric specs for what ``entrypoint`` prints, best first (see the module doc)."""
    report = MetricReport()
    if entrypoint is None:
        return report
    root_path = Path(root).resolve()
    modules = source_modules(root_path, entrypoint)
    if not modules:
        return report
    selection = _selection_exprs(modules)
    counter = _Counter()
    rendered: list[_Rendered] = []
    for module in modules:
        for template in _templates(module):
            if len(rendered) >= _MAX_TEMPLATES:
                break
            cands = list(_candidates(template, selection))
            line, holes = _render(template, counter, {c.hole for c in cands})
            rendered.append(_Rendered(line, holes, cands))
    found: list[MetricProposal] = []
    for r in rendered:
        line = r.line
        for cand in r.candidates:
            if not _check(cand, rendered):
                continue
            found.append(
                MetricProposal(
                    name=cand.name,
                    source=MetricSource.STDOUT_REGEX.value,
                    key_or_pattern=cand.regex,
                    goal=cand.goal,
                    split=cand.split,
                    reason=f"{cand.template.where} prints {cand.label!r} ({cand.expr})",
                    where=cand.template.where,
                    sample=line.strip("\n"),
                    selection=cand.selection,
                )
            )
    found += _csv_columns(modules)
    imported = _imports(modules)
    known: list[_Known] = []
    if "transformers" in imported or "trl" in imported:
        known += _hf_trainer(modules)
    if imported & {"lightning", "pytorch_lightning"}:
        own = any(_defines_lightning_module(m) for m in modules)
        extra = [] if own else _lightning_modules(root_path, modules)
        lit, logged = _lightning([*modules, *extra])
        known += lit
        shown = {x.name for x in lit}
        hidden = [k for k in logged if _name(k.removesuffix("_epoch")) not in shown]
        cli = _calls_named(modules, "LightningCLI")
        if hidden and cli:
            found += _lightning_event_specs(hidden, cli)
        elif hidden:
            report.notes.append(
                "Lightning logs " + ", ".join(sorted(set(hidden))[:4]) + " without prog_bar=True, "
                "so they reach only the logger's files; add prog_bar=True to that self.log call "
                "to have them on the output"
            )
    known += _keras(modules, imported)
    for k in known:
        regex = re.compile(k.regex, re.MULTILINE)
        values = [m.group("value") for m in regex.finditer(k.sample)]
        if not values or any(v != k.value for v in values):
            continue
        found.append(
            MetricProposal(
                name=k.name,
                source=MetricSource.STDOUT_REGEX.value,
                key_or_pattern=k.regex,
                goal=metric_goal(k.name) or "min",
                split=metric_split(k.name),
                reason=k.reason,
                where=k.where,
                sample=k.sample.splitlines()[0],
                selection=k.selection,
            )
        )
    report.proposals = _rank(found)[:limit]
    return report


def _rank(found: list[MetricProposal]) -> list[MetricProposal]:
    """One proposal per name (the first seen), validation first, a compared-with-best
    metric first within its split, losses before other metrics of a split."""
    unique: dict[str, MetricProposal] = {}
    for p in found:
        if p.name not in unique:
            unique[p.name] = p
        elif p.selection and not unique[p.name].selection:
            unique[p.name].selection = True
    order = list(unique.values())
    for p in order:
        # Keras-style ``accuracy`` beside ``val_accuracy``: the bare one is the training one
        twins = (f"{q}_{p.name}" for q in ("val", "valid", "validation", "eval", "dev", "test"))
        if p.split == "other" and any(t in unique for t in twins):
            p.split = "train"

    def key(item: tuple[int, MetricProposal]) -> tuple[int, int, int, int]:
        i, p = item
        split = _SPLIT_RANK[p.split]
        if p.split == "other" and is_training_metric(p.name):
            split = _SPLIT_RANK["train"]
        return (split, 0 if p.selection else 1, 0 if p.goal == "min" else 1, i)

    return [p for _, p in sorted(enumerate(order), key=key)]


def propose_for_project(root: Path | str, project: ProjectFileSpec) -> MetricReport:
    """:func:`propose_metrics` for the entrypoint that ``launch.command`` (or
    ``advanced.shell_command``) runs."""
    from trainee.discovery.scan import discover, entrypoint_for_command

    root_path = Path(root).resolve()
    words: list[str] = list(project.launch.command or ())
    if project.advanced.shell_command:
        try:
            words = shlex.split(project.advanced.shell_command)
        except ValueError:
            words = project.advanced.shell_command.split()
    ep = entrypoint_for_command(root_path, discover(root_path), words, project.advanced.working_dir)
    return propose_metrics(root_path, ep)


def training_metric_advice(root: Path | str, project: ProjectFileSpec) -> tuple[str, str] | None:
    """(detail, fix) when the primary metric (the first spec, else the built-in ``loss``)
    is a training metric: rounds are then ranked by how well they fit the training data,
    so an overfit round looks best. The fix names the validation metric the code
    prints, when there is one."""
    specs = project.metrics.specs
    name = specs[0].name if specs else "loss"
    if not is_training_metric(name):
        return None
    what = "the built-in training loss" if not specs else f"'{name}', a training metric"
    detail = f"the primary metric is {what}: an overfit round would look best"
    better = propose_for_project(root, project).primary
    if better is None:
        return detail, (
            "print a validation metric and list it first in metrics.specs "
            "(name, source: stdout_regex, key_or_pattern with (?P<value>...), goal)"
        )
    fix = (
        f"list {better.name} first in metrics.specs ({better.reason}): "
        f"{{name: {better.name}, source: {better.source}, key_or_pattern: "
        f"'{better.key_or_pattern}', goal: {better.goal}, required: true}}"
    )
    return detail, fix
