"""The page names event kinds by ``Kind.NAME`` (webui/js/states.js builds ``Kind`` from the
``events_schema`` the daemon serves), never as a string, and every name it uses is a kind
of trainee/events.py."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.daemon import REPO
from trainee.events import KINDS

JS = REPO / "webui" / "js"
_USE = re.compile(r"\bKind\.([A-Z][A-Z0-9_]*)\b")
_LITERAL = re.compile(
    r"""(?:\bcase\s+|\.kind\s*[!=]==?\s*)["'`]([a-z.]+)["'`]"""
    r"""|["'`]([a-z.]+)["'`]\s*[!=]==?\s*[\w.]*\.kind\b"""
)


def _kinds_spelled(line: str) -> list[str]:
    return [a or b for a, b in _LITERAL.findall(line)]


def js_name(kind: str) -> str:
    """The name states.js gives ``kind``: ``round.started`` is ``ROUND_STARTED``."""
    return kind.upper().replace(".", "_")


def _scripts() -> list[Path]:
    scripts = sorted(JS.rglob("*.js"))
    assert len(scripts) > 5
    return scripts


def test_every_kind_the_page_names_is_one_of_the_union() -> None:
    names = {js_name(k): k for k in KINDS}
    assert len(names) == len(KINDS), "two kinds would share a name in the page"
    used = {m.group(1) for p in _scripts() for m in _USE.finditer(p.read_text(encoding="utf-8"))}
    assert used, "the page dispatches on Kind.NAME"
    assert used <= set(names), sorted(used - set(names))
    # what the session view shows live
    for kind in ("round.started", "round.finished", "output", "metric", "session.finished"):
        assert js_name(kind) in used, kind


def test_no_script_spells_an_event_kind() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {kind!r}"
        for path in _scripts()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for kind in _kinds_spelled(line)
        if kind in KINDS
    ]
    assert not offenders, offenders


def test_the_literal_check_finds_what_it_looks_for() -> None:
    for line in ('case "round.started":', "if (e.kind === 'output')", 'x = "metric" === e.kind'):
        found = _kinds_spelled(line)
        assert found and found[0] in KINDS, line
    assert not _kinds_spelled('const name = "metric";')


def test_states_js_builds_the_names_the_way_this_test_does() -> None:
    states = (JS / "states.js").read_text(encoding="utf-8")
    assert 'v.toUpperCase().replaceAll(".", "_")' in states
    assert 'call("events_schema")' in states and "discriminator.mapping" in states
