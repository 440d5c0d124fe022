"""The one id parser: the accepted forms, and everything it refuses."""

from __future__ import annotations

import pytest

from trainee.errors import InvalidParams
from trainee.ids import (
    IdError,
    canonical_session,
    parse_round,
    parse_session,
    round_name,
    session_id,
)


@pytest.mark.parametrize("value", ["1", "0001", "session-0001", "session-1", 1, "000000000001"])
def test_every_spec_form_names_session_one(value: object) -> None:
    assert parse_session(value) == 1
    assert canonical_session(value) == "session-0001"


@pytest.mark.parametrize(
    "value",
    [
        "\uff11",  # fullwidth 1
        "session-\uff10\uff10\uff10\uff11",
        "\u00b2"  # superscript 2,
        "session-0001\n",
        "1\n",
        " 1",
        "+1",
        "-1",
        "1_000",
        "0",
        "session-0000",
        "session-",
        "",
        "session-0001x",
        "sess-1",
        "1" * 13,
        "1" * 5000,  # longer than int() takes by default: still a clean refusal
        True,
        1.0,
        None,
        0,
        -3,
        10**400,
    ],
)
def test_anything_else_is_refused_as_invalid_params(value: object) -> None:
    with pytest.raises(IdError) as info:
        parse_session(value)
    assert isinstance(info.value, InvalidParams) and isinstance(info.value, ValueError)
    assert info.value.data == {"field": "session", "reason": "bad session id"}
    assert len(info.value.message) < 300


def test_rounds_take_the_same_forms() -> None:
    assert [parse_round(v) for v in ("7", "0007", "round-0007", 7)] == [7, 7, 7, 7]
    for bad in ("round-\uff17", "7\n", "session-0007", "0"):
        with pytest.raises(IdError, match="round"):
            parse_round(bad)


def test_formatting_is_the_inverse() -> None:
    assert session_id(7) == "session-0007" and round_name(12345) == "round-12345"
    assert parse_session(session_id(123456)) == 123456
