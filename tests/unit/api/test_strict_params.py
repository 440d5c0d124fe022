"""Method params are decoded strictly by the one registry, for every transport."""

from __future__ import annotations

import msgspec
import pytest

from trainee.api.table import registry
from trainee.errors import InvalidParams


def test_an_unknown_param_is_refused_naming_every_unknown_one() -> None:
    method = registry.get("logs_tail")
    with pytest.raises(InvalidParams) as info:
        method.decode_params({"session": "1", "round": 1, "lenght": 10, "ofset": 0})
    assert "'lenght'" in info.value.message and "'ofset'" in info.value.message
    assert "length" in info.value.message  # the names it does take
    assert info.value.data["unknown"] == ["lenght", "ofset"]


def test_every_methods_schema_closes_its_params() -> None:
    for method in registry:
        schema = method.params_schema()
        assert schema.get("additionalProperties") is False, method.name


@pytest.mark.parametrize("value", [32.0, True, "32"])
def test_an_int_param_takes_only_a_json_integer(value: object) -> None:
    with pytest.raises(InvalidParams, match="Expected `int`"):
        registry.get("logs_tail").decode_params({"session": "1", "round": 1, "length": value})


@pytest.mark.parametrize("form", [2, "2", "0002", "round-0002"])
def test_a_round_param_takes_every_id_form_and_arrives_an_int(form: object) -> None:
    params = registry.get("logs_tail").decode_params({"session": "1", "round": form})
    assert params.round == 2 and type(params.round) is int


@pytest.mark.parametrize("bad", [0, -1, 32.0, True, "1;ls", "round-", "\uff12", "1" * 13])
def test_a_bad_round_is_invalid_params_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidParams) as info:
        registry.get("round_metrics").decode_params({"session": "1", "round": bad})
    assert info.value.data["field"] == "round"
    assert "round" in info.value.message and len(info.value.message) < 400


@pytest.mark.parametrize("form", ["1", "0001", "session-0001"])
def test_a_session_param_arrives_canonical(form: str) -> None:
    params = registry.get("logs_tail").decode_params({"session": form, "round": 2})
    assert params.session == "session-0001" and type(params.session) is str
    assert msgspec.json.encode(params)  # plain str: encodes everywhere


@pytest.mark.parametrize("bad", ["session-0001\n", "\uff11", "+1", "session-0000", "x" * 5000])
def test_a_bad_session_id_is_invalid_params_naming_the_field(bad: str) -> None:
    with pytest.raises(InvalidParams) as info:
        registry.get("loop_get").decode_params({"session": bad})
    assert info.value.data["field"] == "session"
    assert len(info.value.message) < 400


def test_huge_numbers_in_params_are_refused_cleanly() -> None:
    with pytest.raises(InvalidParams):
        registry.get("logs_tail").decode_params({"session": "1", "round": 10**400})
