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


def test_the_grammar_leaves_out_the_baseline_and_tried_single_changes() -> None:
    """A small model echoed the baseline's batch_size (a no-op plan) twice in a row; under
    this grammar it cannot: a plan changing one tunable alone takes neither its baseline
    value nor a value already tried alone. Values a combination tried stay allowed."""
    from tests.unit.research.helpers import BASELINE
    from trainee.research.decision import single_change_exclusions, value_grid

    grid = value_grid(next(t for t in TUNABLES if t.name == "batch_size"))
    assert grid is not None and 32 in grid
    alone, combined = grid[3], grid[4]
    tried = [
        BASELINE,
        {**BASELINE, "batch_size": alone},  # batch_size alone
        {**BASELINE, "batch_size": combined, "lr": 0.01},  # a combination: excludes nothing
        {**BASELINE, "optimizer": "sgd"},
    ]
    exclude = single_change_exclusions(TUNABLES, BASELINE, tried)
    assert exclude["batch_size"] == [32, alone] and exclude["optimizer"] == ["adam", "sgd"]
    schema = grammar_schema(plan_json_schema(TUNABLES, exclude=exclude))
    params = schema["properties"]["params"]["properties"]
    assert 32 not in params["batch_size"]["enum"] and alone not in params["batch_size"]["enum"]
    assert combined in params["batch_size"]["enum"]
    assert params["optimizer"]["enum"] == ["adamw"]
    assert 0.001 not in params["lr"]["enum"]
    # nothing left to leave out alone: the whole list stays (the grammar must stay satisfiable)
    every = {"batch_size": list(grid)}
    assert grammar_schema(plan_json_schema(TUNABLES, exclude=every))["properties"]["params"][
        "properties"
    ]["batch_size"]["enum"] == list(grid)
    # the k-plan schema carries the same lists
    batch = grammar_schema(plans_json_schema(TUNABLES, 2, exclude=exclude))
    item = batch["properties"]["plans"]["items"]["properties"]["params"]["properties"]
    assert item["batch_size"]["enum"] == params["batch_size"]["enum"]
