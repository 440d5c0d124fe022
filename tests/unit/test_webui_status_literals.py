"""The page spells no status or stop reason itself: webui/js/states.js gets them from
``daemon_hello`` (``trainee.states.published()``) and is the only module that names one.

A literal is a quoted string ('…', "…", or a template without ``${}``) equal to a
published status or stop reason, or such a word as the key of a table of strings
(``{timed_out: "bad"}``); a field that happens to share the name (``{running: []}``,
``{max_rounds: 3}``) is not one. Words inside longer strings ("No round
running") are text, not a status, and are not counted.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.daemon import REPO
from trainee.states import published

JS = REPO / "webui" / "js"
ONE_MODULE = JS / "states.js"

_STRING = re.compile(r""""([^"\\\n]*)"|'([^'\\\n]*)'|`([^`\\$]*)`""")
_KEY = re.compile(r"""[{,]\s*([A-Za-z_]\w*)\s*:\s*["'`]""")


def _forbidden() -> set[str]:
    states = published()
    stop_reasons = states["stop_reasons"]
    assert isinstance(stop_reasons, dict)
    values: set[str] = set(stop_reasons)
    for key in ("round_statuses", "session_statuses"):
        listed = states[key]
        assert isinstance(listed, list)
        values.update(listed)
    return values


def literals_in(text: str, forbidden: set[str]) -> list[tuple[int, str]]:
    """(line, value) of each status / stop-reason literal in JavaScript ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("//"):
            continue
        for m in _STRING.finditer(line):
            value = next(g for g in m.groups() if g is not None)
            if value in forbidden:
                found.append((number, value))
        found += [(number, m.group(1)) for m in _KEY.finditer(line) if m.group(1) in forbidden]
    return found


def test_no_status_literal_outside_states_js() -> None:
    forbidden = _forbidden()
    scripts = sorted(JS.rglob("*.js"))
    assert ONE_MODULE in scripts and len(scripts) > 5
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {value!r}"
        for path in scripts
        if path != ONE_MODULE
        for line, value in literals_in(path.read_text(encoding="utf-8"), forbidden)
    ]
    assert offenders == [], "use webui/js/states.js:\n" + "\n".join(offenders)


def test_states_js_takes_the_values_from_daemon_hello() -> None:
    text = ONE_MODULE.read_text(encoding="utf-8")
    assert 'call("daemon_hello")' in text and "hello.states" in text


def test_the_check_catches_each_spelling() -> None:
    forbidden = _forbidden()
    snippet = "\n".join(
        [
            'if (r.status === "running") go();',
            "const done = s.status === 'finished';",
            "const why = `user_stop`;",
            "const kinds = { timed_out: 'bad', x: 1 }, p = { running: [], max_rounds: 3 };",
            "// a comment may say running",
            'h("h2", {}, "No round running"); const t = `${"x"}`;',
            'toast(msg, "ok"); const q = a ? b : c;',
        ]
    )
    assert literals_in(snippet, forbidden) == [
        (1, "running"),
        (2, "finished"),
        (3, "user_stop"),
        (4, "timed_out"),
    ]
    assert Path(ONE_MODULE).is_file()
