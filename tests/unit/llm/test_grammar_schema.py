"""The schema a grammar-building server (llama.cpp) gets for a plan."""

from __future__ import annotations

import re

import jsonschema
import pytest

from tests.unit.research.helpers import TUNABLES
from trainee.llm.client import _strict_schema, grammar_schema
from trainee.research.decision import plan_json_schema, plans_json_schema


@pytest.mark.parametrize(
    ("text", "allowed"),
    [
        ("<why>", False),
        ("<the change>", False),
        ("{hypothesis}", False),
        ("...", False),
        ("", False),
        ("a smaller step trains more stably", True),
        ("[S2] take the optimizer's second point", True),
        ("val_loss < 0.25 after 200 epochs", True),
        ("(lr 1e-3 -> 3e-4) fewer oscillations", True),
    ],
)
def test_required_texts_cannot_be_a_copied_slot(text: str, allowed: bool) -> None:
    schema = grammar_schema(plan_json_schema(TUNABLES))
    for name in ("hypothesis", "change_summary", "expected"):
        field = schema["properties"][name]
        ok = len(text) >= field["minLength"] and re.fullmatch(field["pattern"], text) is not None
        assert ok is allowed, (name, text)
    # stop_reason stays free: a change has none
    assert "pattern" not in schema["properties"]["stop_reason"]


def test_the_batch_schema_reaches_the_plans_and_strict_schemas_carry_no_hints() -> None:
    batch = grammar_schema(plans_json_schema(TUNABLES, 2))
    item = batch["properties"]["plans"]["items"]
    assert "pattern" in item["properties"]["hypothesis"] and "x-non-empty" not in item
    strict = _strict_schema(plans_json_schema(TUNABLES, 2))
    text = repr(strict)
    assert "x-non-empty" not in text and "minLength" not in text and "pattern" not in text
    jsonschema.Draft202012Validator.check_schema(grammar_schema(plan_json_schema(TUNABLES)))
