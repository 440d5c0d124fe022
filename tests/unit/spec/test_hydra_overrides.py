"""Override values as Hydra's own parser reads them: every string comes back as written
(quoted only where needed), interpolations pass unquoted, numbers and bools stay typed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.extras import require
from trainee.spec.args import render_override_value

require("hydra")

from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: E402

PARSER = OverridesParser.create()


def parsed(text: str) -> object:
    return PARSER.parse_override("key=" + text).value()


@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1))
@settings(database=None, max_examples=300)
def test_any_string_reads_back_as_itself(value: str) -> None:
    assert parsed(render_override_value(value)) == value


@pytest.mark.parametrize(
    "value", ["${oc.env:TRAINEE_ROUND_DIR}", "${oc.env:HOME}/out", ".trainee/logs/hydra", "./o"]
)
def test_interpolations_and_relative_paths_are_not_quoted(value: str) -> None:
    assert render_override_value(value) == value
    assert parsed(value) == value


def test_typed_values_keep_their_type() -> None:
    assert parsed(render_override_value(1e-05, "float")) == 1e-05
    assert parsed(render_override_value(3, "int")) == 3
    assert parsed(render_override_value(True, "bool")) is True
    assert parsed(render_override_value(".5")) == ".5"  # a string, not 0.5
