"""Properties of the JSON-RPC decoder, dispatcher and framing, for any input (hypothesis).

- any bytes at all: the dispatcher answers with one well-formed Response (or nothing for
  notifications), never raises, never leaks a traceback, uses only the known codes;
- any JSON value round-trips through ``decode_frame``;
- a valid Request gets a Response with its own id; a notification gets none;
- frames come out the same whatever the chunking of the stream, and a line longer than
  the limit becomes exactly one ``FrameTooLarge`` without losing the frames around it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainee.errors import ParseError
from trainee.rpc.framing import FrameBuffer, FrameTooLarge
from trainee.rpc.protocol import Dispatcher, decode_frame

from .cases import DEMO_METHODS, demo_call

KNOWN_CODES = {-32700, -32600, -32601, -32602, -32603, 1001, 1002}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=30,
)
ids = st.none() | st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=20)
methods = st.sampled_from(sorted(DEMO_METHODS)) | st.text(max_size=20)
params = st.lists(json_values, max_size=4) | st.dictionaries(
    st.text(max_size=10), json_values, max_size=4
)


def _dispatch(frame: bytes) -> Any:
    raw = asyncio.run(Dispatcher(demo_call).handle_frame(frame))
    return None if raw is None else json.loads(raw)


def _well_formed(response: Any) -> None:
    assert isinstance(response, dict), response
    assert response["jsonrpc"] == "2.0"
    assert "id" in response
    assert ("result" in response) != ("error" in response), response
    if "error" in response:
        error = response["error"]
        assert error["code"] in KNOWN_CODES, error
        assert isinstance(error["message"], str) and error["message"]
        assert "Traceback" not in error["message"]
        assert "secret internals" not in json.dumps(error)


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_get_one_well_formed_answer(frame: bytes) -> None:
    response = _dispatch(frame)
    if response is None:
        return  # only a valid notification (or a batch of them) gets no answer
    for one in response if isinstance(response, list) else [response]:
        _well_formed(one)


@SETTINGS
@given(json_values)
def test_any_json_value_round_trips_through_the_decoder(value: Any) -> None:
    assert decode_frame(json.dumps(value).encode()) == value


@SETTINGS
@given(st.text(max_size=100))
def test_text_that_is_not_json_is_a_parse_error(text: str) -> None:
    frame = text.encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(text)
        frame.decode("utf-8")
    except (ValueError, RecursionError):
        with pytest.raises(ParseError, match=r"^Parse error: "):
            decode_frame(frame)
        return
    if expected != expected or any(w in text for w in ("NaN", "Infinity")):
        return  # Python's json reads NaN/Infinity, JSON (and msgspec) does not
    assert decode_frame(frame) == expected


@SETTINGS
@given(methods, params, ids, st.booleans())
def test_a_request_gets_its_own_id_and_a_notification_nothing(
    method: str, args: Any, rid: Any, notification: bool
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": args}
    if not notification:
        message["id"] = rid
    response = _dispatch(json.dumps(message).encode())
    if notification:
        assert response is None
        return
    _well_formed(response)
    assert response["id"] == rid


@SETTINGS
@given(
    st.lists(st.binary(min_size=1, max_size=30).filter(lambda b: b"\n" not in b), max_size=8),
    st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=20),
)
def test_frames_do_not_depend_on_how_the_stream_is_cut(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    whole = FrameBuffer(max_frame=64).feed(stream)
    buffer = FrameBuffer(max_frame=64)
    pieces: list[bytes | FrameTooLarge] = []
    at = 0
    for size in cuts * (len(stream) // max(1, sum(cuts)) + 1):
        pieces += buffer.feed(stream[at : at + size])
        at += size
        if at >= len(stream):
            break
    pieces += buffer.feed(stream[at:])
    assert pieces == whole
    expected = [line.removesuffix(b"\r") for line in lines]
    assert whole == [line for line in expected if line]


@SETTINGS
@given(
    st.binary(max_size=20).filter(lambda b: b"\n" not in b and b"\r" not in b),
    st.integers(min_value=9, max_value=200),
    st.binary(max_size=20).filter(lambda b: b"\n" not in b and b"\r" not in b),
    st.integers(min_value=1, max_value=7),
)
def test_an_oversized_line_is_one_marker_and_its_neighbours_survive(
    before: bytes, extra: int, after: bytes, chunk: int
) -> None:
    limit = 8
    before, after = before[:limit], after[:limit]
    stream = before + b"\n" + b"x" * (limit + extra) + b"\n" + after + b"\n"
    buffer = FrameBuffer(max_frame=limit)
    out: list[bytes | FrameTooLarge] = []
    for at in range(0, len(stream), chunk):
        out += buffer.feed(stream[at : at + chunk])
    expected: list[bytes | FrameTooLarge] = [
        *([before] if before else []),
        FrameTooLarge(limit),
        *([after] if after else []),
    ]
    assert out == expected
    assert buffer.pending == 0
