"""The schema a grammar-building server (llama.cpp) gets for a plan."""

from __future__ import annotations

import itertools
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


def test_bounded_numbers_become_a_list_the_grammar_can_enforce() -> None:
    """llama.cpp's grammars ignore minimum/maximum (weight_decay 4578692 for a max of 0.1)."""
    params = grammar_schema(plan_json_schema(TUNABLES))["properties"]["params"]["properties"]
    lr = params["lr"]["enum"]
    assert lr[0] == 1e-5 and lr[-1] == 1.0 and 0.001 in lr  # the bounds and the baseline
    assert all(1e-5 <= v <= 1.0 for v in lr) and lr == sorted(lr)
    ratios = [b / a for a, b in itertools.pairwise(lr)]
    assert max(ratios) < 3.0  # log-spaced: no decade skipped
    assert params["optimizer"]["enum"] == ["adam", "sgd", "adamw"]  # choices untouched
    assert "enum" not in params["use_amp"]
    strict = _strict_schema(plan_json_schema(TUNABLES))["properties"]["params"]["properties"]
    assert "enum" not in strict["lr"] and "x-grid" not in strict["lr"]


def test_every_int_of_a_small_range_is_offered() -> None:
    from tests.unit.research.helpers import tunable
    from trainee.research.decision import value_grid

    assert value_grid(tunable("layers", "int", baseline=4, lo=1, hi=12)) == list(range(1, 13))
    assert value_grid(tunable("free", "float", baseline=1.0)) is None
