"""Where an entrypoint writes: its output-folder option, read from option names and
help texts, so that ``output.flag`` can send every guarded round's writes into the
round's outputs folder.

One source of truth for ``trainee init`` (what it writes to ``output.flag`` and to
``run.fixed_args``) and ``trainee doctor`` (its ``output`` row).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable

import msgspec

from trainee.discovery.options import EntryOption, normalize_name

__all__ = ["OutputOption", "is_output_key", "output_options", "relative_writes"]

_PRIMARY = re.compile(
    r"^(?:o|out|outdir|out_dir|output|outputs|output_dir|output_directory|output_path|"
    r"output_folder|output_root|out_path|out_root|save|save_dir|savedir|save_path|save_folder|"
    r"save_root|work_dir|workdir|working_dir|work_directory|exp_dir|experiment_dir|expdir|"
    r"run_dir|rundir|results_dir|result_dir|results|default_root_dir|root_dir|model_dir|"
    r"output_model_dir|dir)$"
)
_SECONDARY = re.compile(
    r"^(?:checkpoint_dir|checkpoints_dir|ckpt_dir|ckpts_dir|checkpoint_folder|log_dir|logdir|"
    r"logs_dir|logging_dir|log_path|log_folder|tensorboard_dir|tb_dir|tb_log_dir|sample_dir|"
    r"samples_dir|figure_dir|plot_dir|wandb_dir|cache_dir_out)$"
)
_NOT_OUTPUT = re.compile(
    r"(?:^|_)(?:resume|load|init|pretrained|from|input|in|data|dataset|config|cfg|vocab|"
    r"tokenizer|cache|src|source|eval|test|val)(?:_|$)"
)
_FILE = re.compile(
    r"\.(?:pt|pth|bin|ckpt|safetensors|json|jsonl|pkl|pickle|h5|hdf5|npz|npy|onnx|txt|csv|"
    r"log|yaml|yml|tar|zip|model|keras|joblib)$",
    re.I,
)
_HELP_WRITE = re.compile(
    r"\b(?:output|outputs|save|saved|saving|write|written|store|checkpoints?)\b", re.I
)
_HELP_PLACE = re.compile(r"\b(?:dir|directory|folder|path|location|root)\b", re.I)
_HELP_READ = re.compile(r"\b(?:load|resume|read|input|from which|pretrained)\b", re.I)


class OutputOption(msgspec.Struct, kw_only=True):
    """An option that names a place the run writes to. ``primary``: the output
    folder itself (goes to ``output.flag``); otherwise a log or checkpoint folder
    (given a sub-folder of the round's outputs in ``run.fixed_args``)."""

    flag: str
    name: str
    default: object = None
    primary: bool
    reason: str
    is_file: bool = False
    """The default names a file (``--save model.pt``): the round gets a file in its
    outputs folder, never the folder itself."""


def is_output_key(name: str) -> bool:
    """A name that reads as a folder the run writes to (``out_dir``, ``log_dir``)."""
    leaf = normalize_name(name).rsplit(".", 1)[-1]
    return bool(_PRIMARY.match(leaf) or _SECONDARY.match(leaf))


def _kind(o: EntryOption) -> tuple[int, bool, str] | None:
    """(score, primary, why) when ``o`` names a place the run writes to."""
    if o.type not in ("str", "path", None) or o.nargs not in (None, "?"):
        return None
    if o.action in ("store_true", "store_false", "count", "toggle", "BooleanOptionalAction"):
        return None
    leaf = normalize_name(o.dest).rsplit(".", 1)[-1]
    short = [f for f in o.flags if re.fullmatch(r"-[A-Za-z]", f)]
    if _PRIMARY.match(leaf):
        score = 100 if leaf != "dir" else 60
        why = f"option {o.flag} names the output folder"
        if "-o" in short:
            score += 10
        return score, True, why
    if _SECONDARY.match(leaf):
        return 70, False, f"option {o.flag} names a folder the run writes to"
    if _NOT_OUTPUT.search(leaf):
        return None
    text = o.help or ""
    if _HELP_WRITE.search(text) and _HELP_PLACE.search(text) and not _HELP_READ.search(text):
        return 80, True, f"option {o.flag}: {' '.join(text.split())[:80]!r}"
    if "-o" in short and o.type in ("str", "path", None):
        return 75, True, f"option {o.flag} (-o) takes an output path"
    return None


def output_options(options: Iterable[EntryOption]) -> list[OutputOption]:
    """The options naming a place the run writes to, the output folder first.

    At most one is ``primary``: the best-named one (``-o``/``--out_dir``/
    ``--output_dir``/``--work_dir``, or one whose help says it saves outputs in a
    folder); the others are log / checkpoint folders."""
    found: list[tuple[int, OutputOption]] = []
    for o in options:
        kind = _kind(o)
        if kind is None:
            continue
        score, primary, why = kind
        is_file = isinstance(o.default, str) and bool(_FILE.search(o.default))
        if is_file:
            primary, score = False, score - 50
            why = f"option {o.flag} names an output file ({o.default})"
        found.append(
            (
                score,
                OutputOption(
                    flag=o.flag,
                    name=o.dest,
                    default=o.default,
                    primary=primary,
                    reason=why,
                    is_file=is_file,
                ),
            )
        )
    found.sort(key=lambda x: -x[0])
    out: list[OutputOption] = []
    have_primary = False
    for _, item in found:
        if item.primary and have_primary:
            item.primary = False
        have_primary = have_primary or item.primary
        out.append(item)
    if not have_primary and out and not out[0].is_file:
        out[0].primary = True
    return out


_WRITERS = frozenset(
    [
        "savefig",
        "save_image",
        "imsave",
        "imwrite",
        "to_csv",
        "to_json",
        "to_parquet",
        "to_pickle",
        "to_excel",
        "save",
        "savez",
        "savez_compressed",
        "save_pretrained",
        "save_checkpoint",
        "write_image",
    ]
)
_FILE_WORD = re.compile(r"^[^/{$~][^\s]*\.[A-Za-z0-9]{1,8}$")


def _relative_text(node: ast.AST) -> str | None:
    """A relative file path written as a literal or an f-string starting with text
    (``"model.pt"``, ``f"grid_{epoch}.png"``); None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if not (isinstance(head, ast.Constant) and isinstance(head.value, str)):
            return None  # f"{out_dir}/x.png": the folder comes from a variable
        text = "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
            for v in node.values
        )
    else:
        return None
    return text if _FILE_WORD.match(text.replace("{}", "0")) else None


def relative_writes(text: str) -> list[tuple[int, str]]:
    """(line, path) of calls in a module's source that write a file at a path relative
    to the working directory: ``open("log.txt", "w")``, ``plt.savefig("loss.png")``,
    ``save_image(x, f"grid_{i}.png")``, ``torch.save(m, "model.pt")``."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "open" and node.args:
            mode = node.args[1] if len(node.args) > 1 else None
            for kw in node.keywords:
                if kw.arg == "mode":
                    mode = kw.value
            writes = (
                isinstance(mode, ast.Constant)
                and isinstance(mode.value, str)
                and any(c in mode.value for c in "wax")
            )
            path = _relative_text(node.args[0]) if writes else None
        elif name in _WRITERS:
            path = next((p for p in map(_relative_text, node.args) if p), None)
        else:
            path = None
        if path is not None:
            out.append((node.lineno, path))
    return sorted(out)[:20]


def _is_this_file(node: ast.AST) -> bool:
    """``__file__``, or ``os.path.abspath`` / ``realpath`` of it."""
    if isinstance(node, ast.Name):
        return node.id == "__file__"
    if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute | ast.Name):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        return name in ("abspath", "realpath") and _is_this_file(node.args[0])
    return False


def _file_dir_parts(node: ast.AST) -> int | None:
    """How many folders up from the script's own folder ``node`` is: 0 for
    ``os.path.dirname(__file__)`` / ``Path(__file__).parent`` (``.resolve()``/``.absolute()``
    allowed), 1 more per ``.parent`` or ``dirname(...)`` around it; None otherwise."""
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "dirname":
            arg = node.args[0]
            if _is_this_file(arg):
                return 0
            inner = _file_dir_parts(arg)
            return None if inner is None else inner + 1
        if name in ("abspath", "realpath"):
            return _file_dir_parts(node.args[0])
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("resolve", "absolute")
        and not node.args
    ):
        return _file_dir_parts(node.func.value)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        base = node.value
        if (
            isinstance(base, ast.Call)
            and isinstance(base.func, ast.Attribute)
            and base.func.attr in ("resolve", "absolute")
        ):
            base = base.func.value
        if (
            isinstance(base, ast.Call)
            and getattr(base.func, "id", getattr(base.func, "attr", "")) == "Path"
            and base.args
            and isinstance(base.args[0], ast.Name)
            and base.args[0].id == "__file__"
        ):
            return 0
        inner = _file_dir_parts(base)
        return None if inner is None else inner + 1
    return None


def file_relative_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) of paths a module builds from its own location:
    ``os.path.join(os.path.dirname(__file__), "..", "data")``, ``Path(__file__).parent /
    ".." / "data"``, ``Path(__file__).resolve().parents[1] / "data"``; the path is
    relative to the module's folder (``../data``)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        ups: int | None = None
        rest: list[ast.AST] = []
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "join":
                ups, rest = _file_dir_parts(node.args[0]), list(node.args[1:])
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts: list[ast.AST] = []
            left: ast.AST = node
            while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Div):
                parts.insert(0, left.right)
                left = left.left
            ups, rest = _file_dir_parts(left), parts
            if (
                ups is None
                and isinstance(left, ast.Subscript)
                and isinstance(left.value, ast.Attribute)
                and left.value.attr == "parents"
                and isinstance(left.slice, ast.Constant)
                and isinstance(left.slice.value, int)
            ):
                base = _file_dir_parts(ast.Attribute(value=left.value.value, attr="parent"))
                ups = None if base is None else base + left.slice.value
        if ups is None or not rest:
            continue
        words = [r.value for r in rest if isinstance(r, ast.Constant) and isinstance(r.value, str)]
        if len(words) != len(rest):
            continue
        path = os.path.normpath(os.path.join(*([".."] * ups), *words))
        out.append((getattr(node, "lineno", 0), path))
    # a / b / c is also seen as its part a / b: keep the whole path of each line
    found = sorted(set(out))
    return [
        (line, path)
        for line, path in found
        if not any(o != path and ol == line and o.startswith(path + "/") for ol, o in found)
    ]
