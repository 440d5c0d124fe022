"""The project's own commands, as its README, docs and shell scripts show them.

Lines of README.md / README.rst / README.txt, of docs/ pages and of the ``*.sh``
scripts at the root, in scripts/ and bin/ are read as shell
words; a line that starts a Python program (``python x.py``, ``python -m pkg``,
``uv run``, ``torchrun``, ``accelerate launch``, ``deepspeed``, ``python -m
torch.distributed.run``) becomes a :class:`ReadmeCommand` naming the script or module
it runs and the words after it. Nothing is run; every file read is size-capped.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import msgspec

__all__ = ["ReadmeCommand", "parse_command", "readme_commands"]

MAX_DOC_BYTES = 256 << 10
MAX_DOC_FILES = 20
MAX_COMMANDS = 200

_README_NAMES = ("README.md", "README.rst", "README.txt", "README", "readme.md", "Readme.md")
_PYTHON = re.compile(r"^(?:python(?:\d+(?:\.\d+)?)?|py)$")
_LAUNCHERS = {"torchrun", "deepspeed", "horovodrun", "mpirun", "srun"}
_DISTRIBUTED = {"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch"}
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PROMPT = re.compile(r"^\s*(?:\$|>>>|>|%|!|#\s*\$)\s+")
# the words of a launcher's own options that take a value (torchrun --nproc_per_node 2)
_VALUE_OPTIONS = re.compile(r"^--?[A-Za-z][\w-]*$")


class ReadmeCommand(msgspec.Struct, kw_only=True):
    """One command of the docs. ``script`` is a path as written (``./train.py``),
    ``module`` a dotted module; ``args`` are the words after it; ``words`` the whole line."""

    file: str
    line: int
    words: list[str]
    script: str | None = None
    module: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    launcher: str = "python"


def _doc_files(root: Path) -> list[Path]:
    out = [root / n for n in _README_NAMES if (root / n).is_file()]
    for sh_dir in (root, root / "scripts", root / "bin"):
        if sh_dir.is_dir() and not (sh_dir != root and sh_dir.is_symlink()):
            out += sorted(p for p in sh_dir.glob("*.sh") if p.is_file())[:10]
    for folder in ("docs", "doc"):
        base = root / folder
        if not base.is_dir() or base.is_symlink():
            continue
        for ext in ("*.md", "*.rst"):
            out += sorted(p for p in base.glob(ext) if p.is_file())
            out += sorted(p for p in base.glob(f"*/{ext}") if p.is_file())
    seen: set[Path] = set()
    unique: list[Path] = []
    for p in out:
        try:
            real = p.resolve()
        except OSError:
            continue
        if real in seen or not real.is_relative_to(root):
            continue
        seen.add(real)
        unique.append(p)
    return unique[:MAX_DOC_FILES]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with ``\\`` continuations joined, numbered by their first line."""
    out: list[tuple[int, str]] = []
    buf = ""
    start = 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def _segments(line: str) -> list[list[str]]:
    """The shell words of each command of a line (``a && b; c | d`` gives four)."""
    line = _PROMPT.sub("", line.strip().strip("`").strip())
    out: list[list[str]] = []
    for part in re.split(r"&&|\|\||;|\|", line):
        part = _PROMPT.sub("", part.strip())
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            words = part.split()
        if words:
            out.append(words)
    return out


def parse_command(words: list[str]) -> tuple[str | None, str | None, list[str], str] | None:
    """(script, module, args, launcher) of a command line's words, or None when the
    words do not start a Python program."""
    i = 0
    while i < len(words) and _ENV_ASSIGN.match(words[i]):
        i += 1
    if i < len(words) and words[i] == "uv" and i + 1 < len(words) and words[i + 1] == "run":
        i += 2
        while i < len(words) and words[i].startswith("-"):
            i += 1
        launcher = "uv run"
    elif i < len(words) and words[i] in ("accelerate",) and i + 1 < len(words):
        if words[i + 1] != "launch":
            return None
        i += 2
        launcher = "accelerate launch"
    elif i < len(words) and words[i] in _LAUNCHERS:
        launcher = words[i]
        i += 1
    elif i < len(words) and _PYTHON.match(words[i]):
        launcher = "python"
    else:
        return None
    distributed = launcher != "python"
    while i < len(words):
        word = words[i]
        if _PYTHON.match(word):
            i += 1
            continue
        if word == "-m" and i + 1 < len(words):
            module = words[i + 1]
            if module in _DISTRIBUTED:
                distributed = True
                i += 2
                continue
            if not _MODULE.match(module):
                return None
            return None, module, words[i + 2 :], launcher
        if word.endswith(".py") and not word.startswith("-"):
            return word, None, words[i + 1 :], launcher
        if word.startswith("-"):
            # an option of python itself (-u, -O) or of the launcher (--nproc_per_node 2)
            if distributed and "=" not in word and _VALUE_OPTIONS.match(word):
                nxt = words[i + 1] if i + 1 < len(words) else ""
                if nxt and not nxt.startswith("-") and not nxt.endswith(".py"):
                    i += 1
            i += 1
            continue
        return None  # `uv run some-script` (a console script) or not a Python command
    return None


def readme_commands(root: Path) -> list[ReadmeCommand]:
    """Every Python command of the README and docs, in reading order."""
    out: list[ReadmeCommand] = []
    for path in _doc_files(root):
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_DOC_BYTES)
        except OSError:
            continue
        text = raw.decode("utf-8", "replace")
        rel = path.relative_to(root).as_posix()
        for number, line in _logical_lines(text):
            if "python" not in line and not any(
                w in line for w in ("torchrun", "accelerate", "deepspeed", "uv run")
            ):
                continue
            spans = re.findall(r"`([^`]+)`", line) if line.count("`") >= 2 else []
            pieces = [w for piece in (spans or [line]) for w in _segments(piece)]
            for words in pieces:
                parsed = parse_command(words)
                if parsed is None:
                    continue
                script, module, args, launcher = parsed
                out.append(
                    ReadmeCommand(
                        file=rel,
                        line=number,
                        words=words,
                        script=script,
                        module=module,
                        args=args,
                        launcher=launcher,
                    )
                )
                if len(out) >= MAX_COMMANDS:
                    return out
    return out
