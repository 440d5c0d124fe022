"""Round-trip YAML (and JSON) documents: the only module of trainee that imports ruamel.

A :class:`YamlDocument` keeps the user's comments, key order, quoting, indentation,
line endings and a missing trailing newline when it is changed and saved. Every
failure to read a file becomes a :class:`ConfigError` naming the file and line.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import io
import json
import math
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any, Literal

import msgspec
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError, YAMLWarning
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

from trainee.errors import ConfigError
from trainee.spec.files import (
    FieldPath,
    LineMap,
    ProjectFileSpec,
    TuningFileSpec,
    config_error,
    decode_file,
    struct_to_yaml_data,
)
from trainee.spec.kinds import kind_words

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_SPEC_BYTES",
    "YamlDocument",
    "atomic_write",
    "load_spec_data",
    "read_config_value",
    "save_project_files",
]

MAX_SPEC_BYTES = 1 << 20
"""project.yaml / tuning.yaml larger than this are refused."""
MAX_CONFIG_BYTES = 16 << 20
"""Baseline configs larger than this are refused."""
MAX_NODES = 200_000
"""Cap on values produced when a document is turned into plain data (alias bombs)."""

_MISSING: Any = object()


class YamlDocument:
    """One YAML or JSON file whose top level is a mapping, edited in place.

    ``get``/``has``/``set``/``delete`` take dotted keys (``optimizer.lr``; a
    numeric segment indexes a list). ``get`` returns plain Python values.
    """

    def __init__(
        self,
        root: Any,
        *,
        path: Path | None,
        kind: Literal["yaml", "json"],
        indent: tuple[int, int, int] = (2, 4, 2),
        newline: str = "\n",
        final_newline: bool = True,
        bom: bool = False,
        explicit_start: bool = False,
        preamble: str = "",
    ) -> None:
        self.root = root
        self._preamble = preamble
        self.path = path
        self.kind = kind
        self._indent = indent
        self._newline = newline
        self._final_newline = final_newline
        self._bom = bom
        self._explicit_start = explicit_start

    # -- construction ------------------------------------------------------------

    @classmethod
    def load(
        cls, path: Path | str, *, max_bytes: int = MAX_CONFIG_BYTES, allow_aliases: bool = True
    ) -> YamlDocument:
        """Read ``path`` (JSON when it ends in ``.json``, else YAML)."""
        path = Path(path)
        text = _read_text(path, max_bytes)
        kind: Literal["yaml", "json"] = "json" if path.suffix.lower() == ".json" else "yaml"
        return cls.from_text(text, path=path, kind=kind, allow_aliases=allow_aliases)

    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        path: Path | str | None = None,
        kind: Literal["yaml", "json"] = "yaml",
        allow_aliases: bool = True,
    ) -> YamlDocument:
        """Parse ``text``; ``path`` names the file in errors and is where ``save`` writes."""
        file = str(path) if path is not None else "<text>"
        target = Path(path) if path is not None else None
        bom = text.startswith("\ufeff")
        body = text[1:] if bom else text
        newline = "\r\n" if "\r\n" in body.split("\n", 1)[0] + "\n" else "\n"
        body = body.replace("\r\n", "\n")
        final_newline = body.endswith("\n") or body == ""
        if kind == "json":
            root = _parse_json(body, file)
            indent = (2, 4, 2)
        else:
            root = _parse_yaml(body, file, allow_aliases)
            indent = _guess_indent(body)
        if root is None:
            raise config_error(file, 1, "", "the file is empty")
        if not isinstance(root, dict):
            raise config_error(
                file, 1, "", f"the top level must be a mapping, got {kind_words(root)}"
            )
        return cls(
            root,
            path=target,
            kind=kind,
            indent=indent,
            newline=newline,
            final_newline=final_newline,
            bom=bom,
            explicit_start=kind == "yaml" and _has_explicit_start(body),
            preamble=_split_preamble(body)[0] if kind == "yaml" else "",
        )

    @classmethod
    def new(
        cls, data: dict[str, Any], *, path: Path | str | None = None, kind: str | None = None
    ) -> YamlDocument:
        """A fresh document holding ``data`` (block style, readme indentation)."""
        target = Path(path) if path is not None else None
        if kind is None:
            kind = "json" if target is not None and target.suffix.lower() == ".json" else "yaml"
        if kind == "json":
            return cls(_to_json_value(data), path=target, kind="json")
        return cls(_to_node(data), path=target, kind="yaml")

    # -- access ------------------------------------------------------------------

    def has(self, dotted: str) -> bool:
        found, _ = self._lookup(dotted)
        return found

    def get(self, dotted: str, default: Any = _MISSING) -> Any:
        """The plain value at ``dotted``; ``KeyError`` when missing and no default."""
        found, node = self._lookup(dotted)
        if not found:
            if default is _MISSING:
                raise KeyError(dotted)
            return default
        return _plain(node, file=self._file(), lines=None, path=(), budget=[MAX_NODES])

    def set(self, dotted: str, value: Any) -> None:
        """Set ``dotted`` to ``value``, creating intermediate mappings when needed.

        An equal value leaves the document untouched; a new string keeps the quoting
        style of the one it replaces.
        """
        segments = _segments(dotted)
        parent = self.root
        for i, seg in enumerate(segments[:-1]):
            key = _child_key(parent, seg)
            if key is None:
                if not isinstance(parent, dict):
                    raise self._not_container(segments[:i], parent)
                child: Any = {} if self.kind == "json" else CommentedMap()
                parent[seg] = child
                key = seg
            nxt = parent[key]
            if not isinstance(nxt, dict | list):
                raise self._not_container(segments[: i + 1], nxt)
            parent = nxt
        last = segments[-1]
        key = _child_key(parent, last)
        new = _to_json_value(value) if self.kind == "json" else _to_node(value)
        if key is None:
            if not isinstance(parent, dict):
                raise self._not_container(segments[:-1], parent)
            parent[last] = new
        elif not _same_value(parent[key], value):
            parent[key] = new

    def delete(self, dotted: str) -> bool:
        """Remove ``dotted``; returns whether it was there."""
        segments = _segments(dotted)
        found, parent = (
            self._lookup(".".join(segments[:-1])) if segments[:-1] else (True, self.root)
        )
        key = _child_key(parent, segments[-1]) if found else None
        if key is None:
            return False
        if isinstance(parent, CommentedMap):
            _delete_key(parent, key)
        else:
            del parent[key]
        return True

    def to_plain(self, *, str_keys: bool = False) -> tuple[Any, LineMap]:
        """Plain Python data of the whole document and the line of every key/item.

        With ``str_keys`` a non-string mapping key is an error (user spec files).
        """
        lines: LineMap = {(): 1}
        data = _plain(
            self.root,
            file=self._file(),
            lines=lines,
            path=(),
            budget=[MAX_NODES],
            str_keys=str_keys,
        )
        return data, lines

    # -- output ------------------------------------------------------------------

    def dump(self) -> str:
        """The document's text, as ``save`` would write it."""
        if self.kind == "json":
            text = json.dumps(self.root, indent=2, ensure_ascii=False) + "\n"
        else:
            stream = io.StringIO()
            _yaml(self._indent, self._explicit_start).dump(self.root, stream)
            text = stream.getvalue()
            if self._preamble:
                text = self._preamble + _split_preamble(text)[1]
        if not self._final_newline and text.endswith("\n"):
            text = text[:-1]
        if self._newline != "\n":
            text = text.replace("\n", self._newline)
        return ("\ufeff" if self._bom else "") + text

    def save(self, path: Path | str | None = None) -> None:
        """Write atomically (temp file + ``os.replace``) to ``path`` or where it was loaded."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("YamlDocument.save needs a path for a document built from text")
        atomic_write(target, self.dump().encode("utf-8"))
        self.path = target

    # -- helpers -----------------------------------------------------------------

    def _file(self) -> str:
        return str(self.path) if self.path is not None else "<text>"

    def _lookup(self, dotted: str) -> tuple[bool, Any]:
        node = self.root
        for seg in _segments(dotted):
            key = _child_key(node, seg)
            if key is None:
                return False, None
            node = node[key]
        return True, node

    def _not_container(self, prefix: list[str], node: Any) -> ConfigError:
        where = ".".join(prefix) or "<top level>"
        return config_error(
            self._file(),
            None,
            where,
            f"is {kind_words(node)}, not a mapping; cannot set a key below it",
        )


# -- spec files ---------------------------------------------------------------------


def load_spec_data(path: Path | str) -> tuple[YamlDocument, Any, LineMap]:
    """Read a user spec file: size-capped, aliases refused, string keys only."""
    doc = YamlDocument.load(path, max_bytes=MAX_SPEC_BYTES, allow_aliases=False)
    data, lines = doc.to_plain(str_keys=True)
    return doc, data, lines


def read_config_value(path: Path | str, dotted: str) -> Any:
    """The plain value at ``dotted`` in a YAML/JSON config; ConfigError when missing."""
    doc = YamlDocument.load(path)
    found, _ = doc._lookup(dotted)
    if not found:
        raise config_error(str(path), None, dotted, "not found in this config file")
    return doc.get(dotted)


def save_project_files(root: Path | str, project: ProjectFileSpec, tuning: TuningFileSpec) -> None:
    """Write both spec files under ``<root>/.trainee/``, merged into the existing
    documents so comments and key order survive.

    Everything is validated (schema and cross-field) on the text about to be
    written before any file is touched; only files whose text changes are written.
    """
    from trainee.spec.compile import Source, compile_project

    root_path = Path(root)
    try:
        root_path = root_path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise config_error(str(root), None, "", f"project root not found ({exc})") from None
    trainee_dir = root_path / ".trainee"
    pfile = trainee_dir / "project.yaml"
    tfile = trainee_dir / "tuning.yaml"
    planned: list[tuple[Path, str, bool]] = []
    sources: list[Source] = []
    for file, struct in ((pfile, project), (tfile, tuning)):
        old_text, doc = _existing(file)
        full = struct_to_yaml_data(struct, omit_defaults=False)
        mini = struct_to_yaml_data(struct)
        if isinstance(struct, TuningFileSpec):
            mini.setdefault("params", [])
        if doc is None:
            doc = YamlDocument.new(mini, path=file, kind="yaml")
        else:
            _merge_map(doc.root, full, mini)
        text = doc.dump()
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise config_error(
                str(file),
                None,
                "",
                f"a value holds {exc.object[exc.start]!r}, not writable as UTF-8",
            ) from None
        check = YamlDocument.from_text(text, path=file, allow_aliases=False)
        data, lines = check.to_plain(str_keys=True)
        decoded = decode_file(data, type(struct), file=str(file), lines=lines)
        if decoded != struct:
            raise config_error(
                str(file), None, "", "the values cannot be written so that they read back the same"
            )
        sources.append(Source(str(file), lines))
        planned.append((file, text, text != old_text))
    compile_project(root_path, project, tuning, sources[0], sources[1])
    for file, text, changed in planned:
        if changed:
            file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(file, text.encode("utf-8"))


def _existing(file: Path) -> tuple[str | None, YamlDocument | None]:
    """The current text of ``file`` and its document, if it reads as a mapping."""
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise config_error(str(file), None, "", f"cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, None
    if len(raw) > MAX_SPEC_BYTES:
        return text, None
    try:
        return text, YamlDocument.from_text(text, path=file, allow_aliases=False)
    except ConfigError:
        return text, None


# -- merging new values into an existing document -------------------------------------


def _merge_map(target: Any, full: dict[str, Any], mini: dict[str, Any]) -> None:
    """Make ``target`` hold ``full``: keep keys the user wrote, add non-default new keys
    after their predecessor in field order, drop keys that became null/unknown.

    Comment lines that follow a block (they usually introduce the next key) move
    with the position, not with the value: they stay in front of what comes next.
    """
    tail = _take(_last_slot(target))
    for key in list(target.keys()):
        if key not in full or full[key] is None:
            _delete_key(target, key)
        elif isinstance(full[key], dict):
            sub_mini = mini.get(key, {})
            if isinstance(target[key], dict):
                _merge_map(target[key], full[key], sub_mini)
                if not target[key] and key not in mini:
                    _delete_key(target, key)
            elif key in mini:
                _replace(target, key, _to_node(sub_mini))
            else:
                _delete_key(target, key)
        elif isinstance(full[key], list):
            moved = _take(_slot(target, key))
            new = _merge_list(target[key], full[key], mini.get(key))
            if new is not target[key]:
                target[key] = new
            _put(_slot(target, key), moved)
        elif not _same_value(target[key], full[key]):
            target[key] = _to_node(full[key])
    order = list(full)
    for key in order:
        if key in target or key not in mini:
            continue
        before = [k for k in target if k in full and order.index(k) < order.index(key)]
        pos = (list(target.keys()).index(before[-1]) + 1) if before else 0
        moved = _take(_slot(target, before[-1])) if before else None
        if isinstance(target, CommentedMap):
            target.insert(pos, key, _to_node(mini[key]))
        else:
            target[key] = _to_node(mini[key])
        _put(_slot(target, key), moved)
    _put(_last_slot(target), tail)


def _delete_key(target: Any, key: Any) -> None:
    """Delete ``key``; the comment lines after its block go to the block before it."""
    keys = list(target.keys())
    moved = _take(_slot(target, key))
    del target[key]
    if isinstance(target, CommentedMap):
        target.ca.items.pop(key, None)
        index = keys.index(key)
        if index > 0:
            _put(_slot(target, keys[index - 1]), moved)


def _replace(target: Any, key: Any, node: Any) -> None:
    """Set ``target[key]`` to a new node, keeping the comment lines after the old block."""
    moved = _take(_slot(target, key))
    target[key] = node
    _put(_slot(target, key), moved)


# A comment slot: (the ca.items entry list, index in it). ruamel keeps the comment
# after a mapping value at index 2 of its key's entry, after a sequence item at index 0.
_Slot = tuple[list[Any], int] | None


def _slot(parent: Any, key: Any) -> _Slot:
    """The slot after the last line of ``parent[key]`` (inside it, for a block container)."""
    inner = _last_slot(parent[key])
    if inner is not None:
        return inner
    if isinstance(parent, CommentedMap):
        return parent.ca.items.setdefault(key, [None, None, None, None]), 2
    if isinstance(parent, CommentedSeq):
        return parent.ca.items.setdefault(key, [None, None, None, None]), 0
    return None


def _last_slot(node: Any) -> _Slot:
    if isinstance(node, CommentedMap | CommentedSeq) and len(node) and not node.fa.flow_style():
        last = list(node.keys())[-1] if isinstance(node, CommentedMap) else len(node) - 1
        return _slot(node, last)
    return None


def _take(slot: _Slot) -> Any:
    """Remove and return the full comment lines held in ``slot`` (an end-of-line comment
    on the value's own line stays)."""
    if slot is None:
        return None
    entry, index = slot
    token = entry[index] if index < len(entry) else None
    if token is None or not isinstance(getattr(token, "value", None), str):
        return None
    value: str = token.value
    if value.startswith("#"):
        eol, sep, rest = value.partition("\n")
        if not rest:
            return None
        moved = copy.copy(token)
        moved.value = "\n" + rest
        token.value = eol + sep
        return moved
    entry[index] = None
    return token


def _put(slot: _Slot, token: Any) -> None:
    if slot is None or token is None:
        return
    entry, index = slot
    existing = entry[index]
    text = getattr(existing, "value", None)
    if isinstance(text, str) and text.startswith("#") and text.endswith("\n"):
        existing.value = text + token.value[1:]
        return
    entry[index] = token


def _identity(item: Any) -> Any:
    if isinstance(item, dict):
        for key in ("name", "path", "flag", "type"):
            if key in item:
                return (key, _hashable(item[key]))
    return None


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, list | dict) else (type(value) is bool, value)


def _merge_list(old: Any, full: list[Any], mini: list[Any] | None) -> Any:
    minis = mini if mini is not None else full
    if not isinstance(old, list):
        return _to_node(minis)
    return _merge_items(old, full, minis)


def _merge_items(old: Any, full: list[Any], minis: list[Any]) -> Any:
    """Merge a block sequence item by item.

    Items are matched by identity (name/path/flag/type for mappings, position for
    scalars; a renamed item falls back to its old position). The comment lines
    between two items introduce the next one, so they travel with that item; the
    lines after the last item stay at the end.
    """
    if not full:
        return old if not old else CommentedSeq()
    chosen = _match_items(old, full)
    headers: list[Any] = [None] + [_take(_slot(old, i - 1)) for i in range(1, len(old))]
    tail = _take(_slot(old, len(old) - 1)) if len(old) else None
    in_place = chosen[: len(old)] == list(range(min(len(old), len(chosen))))
    result = old if in_place else CommentedSeq()
    for pos, (value, small, index) in enumerate(zip(full, minis, chosen, strict=True)):
        if index is not None and isinstance(old[index], dict) and isinstance(value, dict):
            _merge_map(old[index], value, small)
            node = old[index]
        elif index is not None and _same_value(old[index], value):
            node = old[index]
        else:
            node = _to_node(small)
        if result is not old:
            result.append(node)
        elif pos < len(old):
            if node is not old[pos]:
                old[pos] = node
        else:
            old.append(node)
    while len(result) > len(full):
        del result[len(result) - 1]
    for pos in range(1, len(result)):
        index = chosen[pos]
        if index is not None and index >= 1:
            _put(_slot(result, pos - 1), headers[index])
    _put(_slot(result, len(result) - 1), tail)
    return result


def _match_items(old: list[Any], full: list[Any]) -> list[int | None]:
    """For each new item, the index of the old item it updates (or None)."""
    if all(not isinstance(v, dict) for v in full):
        return [i if i < len(old) else None for i in range(len(full))]
    old_ids = [_identity(_plain_shallow(o)) for o in old]
    new_ids = [_identity(v) for v in full]
    unused = set(range(len(old)))
    chosen: list[int | None] = []
    for ident in new_ids:
        index = next((i for i in sorted(unused) if ident is not None and old_ids[i] == ident), None)
        if index is not None:
            unused.discard(index)
        chosen.append(index)
    for pos, index in enumerate(chosen):
        if index is None and pos in unused and new_ids[pos] not in old_ids:
            unused.discard(pos)
            chosen[pos] = pos
    return chosen


def _plain_shallow(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: v for k, v in node.items() if not isinstance(v, dict | list)}
    return node


# -- value conversion -----------------------------------------------------------------


def _same_value(old: Any, new: Any) -> bool:
    """Equal and of the same kind, so an unchanged field keeps its exact spelling."""
    if isinstance(new, enum.Enum):
        new = new.value
    if isinstance(old, dict) or isinstance(new, dict):
        if not (isinstance(old, dict) and isinstance(new, dict)) or set(old) != set(new):
            return False
        return all(_same_value(old[k], new[k]) for k in new)
    if isinstance(old, list) or isinstance(new, list | tuple):
        if not (isinstance(old, list) and isinstance(new, list | tuple)) or len(old) != len(new):
            return False
        return all(_same_value(a, b) for a, b in zip(old, new, strict=True))
    old_bool = isinstance(old, bool | ScalarBoolean)
    if old_bool or isinstance(new, bool):
        return old_bool and isinstance(new, bool) and bool(old) == new
    if isinstance(old, str) or isinstance(new, str):
        return isinstance(old, str) and isinstance(new, str) and str(old) == str(new)
    if old is None or new is None:
        return old is None and new is None
    if isinstance(old, int | float) and isinstance(new, int | float):
        return bool(old == new)
    return False


def _to_node(value: Any) -> Any:
    """Plain data -> ruamel nodes (block mappings/sequences, literal multi-line text)."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, msgspec.Struct):
        value = struct_to_yaml_data(value)
    if isinstance(value, dict):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _to_node(v)
        return out
    if isinstance(value, list | tuple):
        return CommentedSeq(_to_node(v) for v in value)
    if isinstance(value, str):
        text = str(value)
        if "\n" in text and _literal_ok(text):
            return LiteralScalarString(text)
        if any(c in "\x85\u2028\u2029" or (c != "\n" and not c.isprintable()) for c in text):
            return DoubleQuotedScalarString(text)  # escaped; other styles mangle these
        return text
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _literal_ok(text: str) -> bool:
    return all(c == "\n" or (c.isprintable() and c != "\t") for c in text) and not any(
        line != line.rstrip(" ") for line in text.split("\n")
    )


def _to_json_value(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        value = struct_to_yaml_data(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json_value(v) for v in value]
    return value


def _plain(
    node: Any,
    *,
    file: str,
    lines: LineMap | None,
    path: FieldPath,
    budget: list[int],
    str_keys: bool = False,
) -> Any:
    """ruamel nodes -> plain dict/list/str/int/float/bool/None, recording lines."""
    budget[0] -= 1
    if budget[0] < 0:
        raise config_error(
            file, _line(lines, path), path, f"more than {MAX_NODES} values (alias expansion?)"
        )
    if node is None or isinstance(node, bool):
        return node
    if isinstance(node, ScalarBoolean):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, dict):
        out: dict[Any, Any] = {}
        for key, value in node.items():
            if str_keys and not isinstance(key, str):
                raise config_error(
                    file,
                    _key_line(node, key, lines, path),
                    path,
                    f"keys must be strings, got {key!r}",
                )
            plain_key = str(key) if isinstance(key, str) else key
            sub = (*path, plain_key)
            if lines is not None:
                lines[sub] = _key_line(node, key, lines, path)
            out[plain_key] = _plain(
                value, file=file, lines=lines, path=sub, budget=budget, str_keys=str_keys
            )
        return out
    if isinstance(node, list):
        items: list[Any] = []
        for i, value in enumerate(node):
            sub = (*path, i)
            if lines is not None:
                lines[sub] = _item_line(node, i, lines, path)
            items.append(
                _plain(value, file=file, lines=lines, path=sub, budget=budget, str_keys=str_keys)
            )
        return items
    if isinstance(node, date):
        reason = "dates and timestamps are not supported here; quote the value"
    else:
        reason = (
            f"unsupported YAML value of type {type(node).__name__} (tags and sets are not allowed)"
        )
    raise config_error(file, _line(lines, path), path, reason)


def _line(lines: LineMap | None, path: FieldPath) -> int | None:
    if lines is None:
        return None
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 1


def _key_line(node: Any, key: Any, lines: LineMap | None, path: FieldPath) -> int:
    data = getattr(getattr(node, "lc", None), "data", None)
    if isinstance(data, dict) and key in data:
        return int(data[key][0]) + 1
    return _line(lines, path) or 1


def _item_line(node: Any, index: int, lines: LineMap | None, path: FieldPath) -> int:
    data = getattr(getattr(node, "lc", None), "data", None)
    if isinstance(data, dict) and index in data:
        return int(data[index][0]) + 1
    return _line(lines, path) or 1


def _segments(dotted: str) -> list[str]:
    segments = dotted.split(".")
    if not dotted or any(not s for s in segments):
        raise ValueError(f"invalid dotted key {dotted!r}")
    return segments


def _child_key(node: Any, seg: str) -> Any:
    """The real key/index of ``seg`` inside ``node``, or None."""
    if isinstance(node, dict):
        if seg in node:
            return seg
        for candidate in _scalar_keys(seg):
            if candidate in node:
                return candidate
        return None
    if isinstance(node, list) and re.fullmatch(r"\d+", seg):
        index = int(seg)
        return index if index < len(node) else None
    return None


def _scalar_keys(seg: str) -> Iterator[Any]:
    if re.fullmatch(r"-?\d+", seg):
        yield int(seg)
    if seg in ("true", "false"):
        yield seg == "true"


# -- reading ----------------------------------------------------------------------------


def _read_text(path: Path, max_bytes: int) -> str:
    file = str(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise config_error(file, None, "", "file not found") from None
    except IsADirectoryError:
        raise config_error(file, None, "", "is a directory, not a file") from None
    except OSError as exc:
        raise config_error(file, None, "", f"cannot read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        raise config_error(file, None, "", f"larger than {max_bytes} bytes; refusing to read it")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise config_error(
            file, line, "", f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None


class _Representer(RoundTripRepresenter):  # type: ignore[misc]
    """Writes new floats so YAML 1.1 readers (PyYAML) also see floats: ``1.0e-05``."""

    def represent_float(self, data: Any) -> Any:
        if math.isfinite(data):
            text = repr(data).lower()
            if "e" in text and "." not in text:
                text = text.replace("e", ".0e", 1)
            return self.represent_scalar("tag:yaml.org,2002:float", text)
        return super().represent_float(data)


_Representer.add_representer(float, _Representer.represent_float)


def _yaml(indent: tuple[int, int, int] = (2, 4, 2), explicit_start: bool = False) -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.Representer = _Representer
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=indent[0], sequence=indent[1], offset=indent[2])
    yaml.explicit_start = explicit_start or None
    return yaml


def _parse_yaml(text: str, file: str, allow_aliases: bool) -> Any:
    yaml = _yaml()
    with warnings.catch_warnings():
        # ruamel only warns of some mistakes (an anchor defined twice): an error here
        warnings.simplefilter("error", YAMLWarning)
        return _parse_yaml_strict(yaml, text, file, allow_aliases)


def _parse_yaml_strict(yaml: Any, text: str, file: str, allow_aliases: bool) -> Any:
    try:
        if not allow_aliases and "*" in text:  # no "*", no alias: skip the extra pass
            for event in yaml.parse(text):
                if isinstance(event, AliasEvent):
                    line = event.start_mark.line + 1 if event.start_mark else None
                    raise config_error(
                        file, line, "", "YAML aliases (*name) are not allowed in this file"
                    )
            yaml = _yaml()
        return yaml.load(text)
    except ConfigError:
        raise
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        last = text.count("\n") + (0 if text.endswith("\n") else 1)
        if line is not None and line > last >= 1:
            line = last  # "found <stream end>": the last line, not one past it
        reason = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        if type(exc).__name__ == "DuplicateKeyError":
            reason = exc.problem or "duplicate key"
        raise config_error(file, line, "", f"invalid YAML: {reason}") from None
    except ReaderError as exc:
        line = text[: exc.position].count("\n") + 1 if isinstance(exc.position, int) else None
        raise config_error(
            file, line, "", f"invalid YAML: unacceptable character #x{exc.character:04x}"
        ) from None
    except RecursionError:
        raise config_error(file, None, "", "invalid YAML: nested too deeply") from None
    except YAMLWarning as exc:
        first = str(exc).strip().splitlines()
        found = re.search(r"second occurrence.*?line (\d+)", str(exc), re.S)
        line = int(found.group(1)) if found else None
        raise config_error(file, line, "", f"invalid YAML: {first[0] if first else exc}") from None
    except (YAMLError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise config_error(file, None, "", f"invalid YAML: {exc}") from None


def _parse_json(text: str, file: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise config_error(file, None, key, "duplicate key")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs) if text.strip() else None
    except json.JSONDecodeError as exc:
        raise config_error(file, exc.lineno, "", f"invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise config_error(file, None, "", "invalid JSON: nested too deeply") from None


def _has_explicit_start(text: str) -> bool:
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("%"):
            continue
        return stripped == "---" or stripped.startswith("--- ")
    return False


def _split_preamble(text: str) -> tuple[str, str]:
    """Leading blank/comment/directive lines (through a ``---`` line) and the rest.

    ruamel drops leading blank lines and comments above ``---``; the original
    preamble is put back verbatim on dump.
    """
    pos = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped == "---" or stripped.startswith("--- #"):
            return text[: pos + len(line)], text[pos + len(line) :]
        if stripped and not stripped.startswith(("#", "%")):
            break
        pos += len(line)
    return text[:pos], text[pos:]


_KEY_ONLY = re.compile(r"^[^#\s-][^#]*:\s*(#.*)?$|^-\s*$")


def _guess_indent(text: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) as ruamel's ``YAML.indent`` wants them."""
    mapping: int | None = None
    sequence: int | None = None
    offset: int | None = None
    parent: int | None = None
    for line in text.split("\n"):
        content = line.lstrip(" ")
        if not content or content.startswith("#"):
            continue
        ind = len(line) - len(content)
        if parent is not None and (ind > parent or content.startswith("-")):
            if content.startswith("- ") or content == "-":
                if offset is None:
                    offset = ind - parent
                    rest = content[1:]
                    gap = len(rest) - len(rest.lstrip(" "))
                    sequence = offset + 1 + gap if rest.strip() else offset + 2
            elif mapping is None and ind > parent:
                mapping = ind - parent
        parent = ind if _KEY_ONLY.match(content) else None
        if mapping is not None and offset is not None:
            break
    mapping = mapping if mapping and mapping > 0 else 2
    if offset is None or offset < 0:
        offset = mapping
        sequence = mapping + 2
    assert sequence is not None
    sequence = max(sequence, offset + 2)
    return mapping, sequence, offset


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
