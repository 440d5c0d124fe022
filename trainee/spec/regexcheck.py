"""Metric regexes that would backtrack catastrophically, refused when the config is loaded.

The extractor runs every custom pattern with a time budget (see
:mod:`trainee.metrics.extract`), so no pattern can stall the daemon; this check
tells the user at once, naming the construct, for the shapes that are known to
explode on a non-matching line:

- an unbounded (or 16+ times) repeat around a body made only of variable-width parts where one
  part can follow another (or itself, round the repeat) on the same characters:
  ``(a+)+``, ``(a{1,2})+``, ``(.*)*``, ``(x+x+)+``, ``(\\w+\\s?)+``;
- an unbounded repeat around an alternation two of whose branches can start on
  the same character: ``(a|a)*``, ``(a|aa)+``, ``(a|b|ab)+``, ``(\\d|\\d\\d)+``.

``(\\d+\\.)+`` or ``(foo|bar)+`` are fine: a fixed part or disjoint branches leave
one way to match. Other slow patterns are caught by the budget at run time.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import regex

__all__ = ["check_pattern"]

_p: Any
_c: Any
try:  # the parser re uses (private, stable since 3.11)
    _p = importlib.import_module("re._parser")
    _c = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - a Python without them: only the engine's check
    _p = _c = None


def check_pattern(pattern: str) -> str | None:
    """Why ``pattern`` is refused as a metric regex, or None."""
    try:
        regex.compile(pattern, regex.MULTILINE | regex.VERSION0)
    except (regex.error, OverflowError, RecursionError, ValueError) as exc:
        return f"invalid regex: {exc}"
    if _p is None:
        return None
    try:
        parsed = _p.parse(pattern, re.MULTILINE)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        return f"invalid regex: {exc}"
    try:
        problem = _walk(list(parsed))
    except RecursionError:
        return "regex nested too deeply"
    if problem is not None:
        return (
            f"the regex backtracks catastrophically ({problem}): a line that almost "
            "matches would take seconds to minutes; make the repeated part match one "
            r"way only, e.g. (\d+\.)+ rather than (\d+)+"
        )
    return None


def _flat(items: list[Any]) -> list[Any]:
    """A sequence with plain groups opened (``(x)`` is ``x`` for this check)."""
    out: list[Any] = []
    for op, av in items:
        if op is _c.SUBPATTERN:
            out.extend(_flat(list(av[3])))
        else:
            out.append((op, av))
    return out


def _width(items: list[Any]) -> tuple[int, int]:
    sub = _p.SubPattern(_p.State(), list(items))
    lo, hi = sub.getwidth()
    return int(lo), int(hi)


def _ambiguous_branch(body: list[Any]) -> bool:
    for op, av in body:
        if op is not _c.BRANCH:
            continue
        alts = [_flat(list(b)) for b in av[1]]
        shown = [repr(a) for a in alts]
        if len(set(shown)) < len(shown):
            return True  # two branches alike: (a|a)
        firsts = [_first(a) for a in alts if a]
        for i, one in enumerate(firsts):
            for other in firsts[i + 1 :]:
                if any(_overlap(x, y) for x in one for y in other):
                    return True  # two branches can start alike: (a|b|ab), (\d|\d\d)
        # the prefix factored out of the branches, then "nothing" or more of it: (a|aa)
        if any(not a for a in alts) and any(
            a and _overlap(_atom(body[0]), _atom(a[0])) for a in alts
        ):
            return True
    return False


_MANY = 16
"""A repeat up to this many times is checked like an unbounded one: (a|aa){1,60} explodes too."""
_CATEGORY_RE = {
    "CATEGORY_DIGIT": re.compile(r"\d"),
    "CATEGORY_WORD": re.compile(r"\w"),
    "CATEGORY_SPACE": re.compile(r"\s"),
}
_SAMPLE = [chr(c) for c in range(32, 127)] + ["\t", "\u00e9", "\u0661", "\u3000"]


def _atom(part: Any) -> list[Any] | None:
    """The characters a repeated single-character part matches, as set items
    (``LITERAL``/``RANGE``/``CATEGORY``); None when unknown or anything goes."""
    op, av = part
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        inner = _flat(list(av[2]))
        return _atom(inner[0]) if len(inner) == 1 else None
    if op is _c.LITERAL:
        return [(op, av)]
    if op is _c.IN:
        items = list(av)
        return None if any(i[0] is _c.NEGATE for i in items) else items
    return None  # ANY, NOT_LITERAL, groups...: could be anything


def _matches(item: Any, ch: str) -> bool:
    op, av = item
    if op is _c.LITERAL:
        return ch == chr(av)
    if op is _c.RANGE:
        return bool(av[0] <= ord(ch) <= av[1])
    if op is _c.CATEGORY:
        rx = _CATEGORY_RE.get(str(av))
        return True if rx is None else rx.match(ch) is not None
    return True


def _overlap(a: list[Any] | None, b: list[Any] | None) -> bool:
    if a is None or b is None:
        return True
    chars = [chr(av) for op, av in (*a, *b) if op is _c.LITERAL] + _SAMPLE
    return any(any(_matches(x, ch) for x in a) and any(_matches(y, ch) for y in b) for ch in chars)


def _first(seq: list[Any]) -> list[list[Any] | None]:
    """What the first character of ``seq`` may be: the atoms of its leading parts up
    to the first that cannot match nothing."""
    out: list[list[Any] | None] = []
    for part in seq:
        out.append(_atom(part))
        if _width([part])[0] > 0:
            break
    return out


def _adjacent_overlap(body: list[Any]) -> bool:
    """Whether, going round the repeated body, a part can be followed (skipping the
    parts that may match nothing) by one matching the same characters."""
    n = len(body)
    if n == 1:
        return True
    atoms = [_atom(part) for part in body]
    optional = [bool(_width([part])[0] == 0) for part in body]
    for i in range(n):
        for step in range(1, n + 1):
            j = (i + step) % n
            if _overlap(atoms[i], atoms[j]):
                return True
            if not optional[j]:
                break
    return False


def _walk(items: list[Any]) -> str | None:
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            body = _flat(list(av[2]))
            many = av[1] is _c.MAXREPEAT or av[1] >= _MANY
            if op is not _c.POSSESSIVE_REPEAT and many and body:
                if all(_width([part])[0] != _width([part])[1] for part in body) and (
                    _adjacent_overlap(body)
                ):
                    return "a repeat of a repeat"
                if _ambiguous_branch(body):
                    return "a repeat of alternatives that match the same text"
            found = _walk(list(av[2]))
        elif op is _c.SUBPATTERN:
            found = _walk(list(av[3]))
        elif op is _c.BRANCH:
            found = next((f for b in av[1] if (f := _walk(list(b))) is not None), None)
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            found = _walk(list(av[1]))
        elif op is _c.ATOMIC_GROUP:
            found = None  # no backtracking into it
        else:
            found = None
        if found is not None:
            return found
    return None
