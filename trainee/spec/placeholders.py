"""The ``{name}`` template variables of project.yaml's command fields, and their expansion.

One rule for every place they are allowed (``launch.args`` / ``run.fixed_args`` /
``data[]`` values, ``output.flag``'s folder, ``launch.env`` values and
``advanced.shell_command``):

- ``{name}`` of a known variable is replaced by its value;
- ``{{name}}`` of a known variable is the literal text ``{name}``;
- every other ``{...}`` and every ``${...}`` (a shell variable, a Hydra/OmegaConf
  interpolation such as ``${oc.env:HOME}``, nested braces included) is kept byte
  for byte, so JSON values and interpolations pass untouched.

Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["ARG_PLACEHOLDERS", "SHELL_PLACEHOLDERS", "expand", "placeholders_in"]

ARG_PLACEHOLDERS: tuple[str, ...] = (
    "project_root",
    "working_dir",
    "trainee_dir",
    "session_id",
    "round_index",
    "session_dir",
    "round_dir",
    "outputs_dir",
    "config_path",
)
"""The variables of argument values and ``launch.env`` values."""

SHELL_PLACEHOLDERS: tuple[str, ...] = (*ARG_PLACEHOLDERS, "extra_args")
"""The variables ``advanced.shell_command`` may use (``{extra_args}`` is required)."""

_NAME = re.compile(r"\{(\{)?([A-Za-z_][A-Za-z0-9_]*)\}(\})?")


def _interpolation_end(text: str, start: int) -> int:
    """The index after the ``}`` closing the ``${`` at ``start`` (nested braces
    counted); the end of ``text`` when it is never closed."""
    depth = 0
    for i in range(start + 1, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _scan(text: str, values: Mapping[str, str] | None, found: list[str]) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        brace = text.find("{", i)
        if brace < 0:
            out.append(text[i:])
            break
        if brace > 0 and text[brace - 1] == "$":
            end = _interpolation_end(text, brace - 1)
            out.append(text[i:end])
            i = end
            continue
        out.append(text[i:brace])
        m = _NAME.match(text, brace)
        if m is None:
            out.append("{")
            i = brace + 1
            continue
        escaped_open, name, escaped_close = m.group(1), m.group(2), m.group(3)
        known = values is None or name in values
        if escaped_open and escaped_close and known:
            out.append("{" + name + "}")  # {{name}}: the literal {name}
            i = m.end()
        elif escaped_open:
            out.append("{")  # "{{x" - the inner {x...} is looked at on its own
            i = brace + 1
        elif known:
            found.append(name)
            out.append(values[name] if values is not None else "")
            i = m.end(2) + 1
        else:
            out.append("{")
            i = brace + 1
    return "".join(out)


def expand(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each known ``{name}`` replaced by ``values[name]`` (see the module)."""
    if "{" not in text:
        return text
    return _scan(text, values, [])


def placeholders_in(text: str) -> list[str]:
    """The ``{name}`` variables ``text`` uses (any identifier; ``{{name}}`` and
    ``${...}`` excluded), in order."""
    found: list[str] = []
    if "{" in text:
        _scan(text, None, found)
    return found
