"""The JSON-RPC dispatcher, driven with exact messages (no transport)."""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from typing import Any

import msgspec
import pytest

from trainee import errors
from trainee.rpc.framing import FrameBuffer, FrameTooLarge
from trainee.rpc.protocol import (
    Dispatcher,
    as_trainee_error,
    decode_frame,
    encode_error,
    encode_notification,
    encode_result,
)

from .cases import CASES, Case, check_response, demo_call, mask_incidents, oversized_case


def _frame(dispatcher: Dispatcher, frame: bytes | FrameTooLarge, context: Any = None) -> Any:
    return asyncio.run(dispatcher.handle_frame(frame, context))


def _message(dispatcher: Dispatcher, message: Any, context: Any = None) -> Any:
    return asyncio.run(dispatcher.handle_message(message, context))


# -- the shared case table ---------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    check_response(case, _frame(Dispatcher(demo_call), case.request))


def test_case_table_is_usable_by_every_transport() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert len([n for n in names if n.startswith("spec_")]) == 15
    assert len(CASES) >= 20
    for case in CASES:
        assert b"\n" not in case.request and b"\r" not in case.request, case.name
        assert isinstance(case.request, bytes)


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.name.startswith(("spec_", "id_", "params_", "jsonrpc_"))],
    ids=lambda c: c.name,
)
def test_handle_message_answers_like_handle_frame(case: Case) -> None:
    try:
        message = decode_frame(case.request)
    except errors.ParseError:
        return  # nothing to hand over decoded
    response = _message(Dispatcher(demo_call), message)
    check_response(case, None if response is None else json.dumps(response).encode())


def test_check_response_catches_a_wrong_answer() -> None:
    case = CASES[0]
    with pytest.raises(AssertionError):
        check_response(case, b'{"jsonrpc":"2.0","result":18,"id":1}')
    with pytest.raises(AssertionError):
        check_response(case, None)
    with pytest.raises(AssertionError):
        check_response(CASES[4], b'{"jsonrpc":"2.0","result":null,"id":null}')


def test_mask_incidents_only_masks_well_formed_internal_errors() -> None:
    good = json.loads(_frame(Dispatcher(demo_call), b'{"jsonrpc":"2.0","method":"broken","id":1}'))
    assert mask_incidents(good)["error"]["message"] == "Internal error (incident XXXXXXXX)"
    forged = json.loads(json.dumps(good))
    forged["error"]["data"]["details"]["incident"] = "00000000"
    assert mask_incidents(forged) == forged


# -- frames over the limit ---------------------------------------------------------------------


@pytest.mark.parametrize("max_frame", [1024, 16 * 2**20])
def test_oversized_frame_is_answered_and_the_next_frame_still_served(max_frame: int) -> None:
    case = oversized_case(max_frame)
    assert len(case.request) == max_frame + 1
    buffer = FrameBuffer(max_frame)
    frames = buffer.feed(case.request + b"\n" + CASES[0].request + b"\n")
    assert frames == [FrameTooLarge(max_frame), CASES[0].request]
    dispatcher = Dispatcher(demo_call)
    check_response(case, _frame(dispatcher, frames[0]))
    check_response(CASES[0], _frame(dispatcher, frames[1]))


def test_frame_of_exactly_max_size_is_served() -> None:
    over = oversized_case(1024).request
    exact = over.replace(b"xx", b"x", 1)
    assert len(exact) == 1024
    [frame] = FrameBuffer(1024).feed(exact + b"\r\n")
    response = json.loads(_frame(Dispatcher(demo_call), frame))
    assert response["id"] == 1
    assert response["result"] == [exact.decode()[44:-10]]


# -- errors ----------------------------------------------------------------------------------


ROUND_TRIP = [
    errors.NotFound("no session 7", {"session": 7}),
    errors.InvalidState("session 3 is not running", {"state": "stopped"}),
    errors.LaunchError("command not found: python3.99"),
    errors.SandboxError("bwrap missing", {"hint": "apt install bubblewrap"}),
    errors.NotAvailable("loop_start is not available yet"),
    errors.ProviderError("rate limited", {"provider": "openai", "status": 429}),
    errors.BudgetExceeded("budget of 10 rounds reached"),
    errors.ShuttingDown("the daemon is shutting down"),
    errors.InvalidParams("runs_get: invalid params", {"reason": "missing field `id`"}),
    errors.MethodNotFound("Method not found: nope", {"method": "nope"}),
    errors.ConfigError("bad yaml", file="project.yaml", line=2, field="metric", reason="unknown"),
    errors.TraineeError("plain"),
]


@pytest.mark.parametrize("error", ROUND_TRIP, ids=lambda e: type(e).__name__)
def test_application_error_round_trips_to_the_same_class(error: errors.TraineeError) -> None:
    async def call(method: str, params: Any, context: Any) -> Any:
        raise error

    raw = _frame(Dispatcher(call), b'{"jsonrpc":"2.0","method":"x","id":"r"}')
    response = json.loads(raw)
    assert response["id"] == "r"
    assert response["error"]["code"] == error.code
    rebuilt = errors.error_from_wire(response["error"])
    assert type(rebuilt) is type(error)
    assert rebuilt == error  # same class, message and details
    assert rebuilt.data == error.data


def test_internal_error_logs_the_traceback_and_sends_only_the_incident(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test.rpc.internal")
    with caplog.at_level(logging.ERROR, logger=logger.name):
        raw = _frame(
            Dispatcher(demo_call, logger=logger), b'{"jsonrpc":"2.0","method":"broken","id":1}'
        )
    assert raw is not None
    assert b"secret" not in raw and b"ValueError" not in raw and b"Traceback" not in raw
    error = json.loads(raw)["error"]
    incident = error["data"]["details"]["incident"]
    assert error["message"] == f"Internal error (incident {incident})"
    [record] = caplog.records
    assert incident in record.getMessage() and "'broken'" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ValueError
    assert "secret internals" in caplog.text  # the traceback is in the log


def test_failing_notification_is_logged_but_not_answered(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.rpc.notification")
    with caplog.at_level(logging.ERROR, logger=logger.name):
        raw = _frame(Dispatcher(demo_call, logger=logger), b'{"jsonrpc":"2.0","method":"broken"}')
    assert raw is None
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None


def test_incident_ids_differ() -> None:
    dispatcher = Dispatcher(demo_call)
    request = b'{"jsonrpc":"2.0","method":"broken","id":1}'
    a, b = (json.loads(_frame(dispatcher, request))["error"]["data"] for _ in range(2))
    assert a != b


def test_error_with_unencodable_data_becomes_internal_error() -> None:
    async def call(method: str, params: Any, context: Any) -> Any:
        raise errors.NotFound("gone", {"handle": object()})

    raw = _frame(Dispatcher(call), b'{"jsonrpc":"2.0","method":"x","id":2}')
    response = mask_incidents(json.loads(raw))
    assert response["id"] == 2
    assert response["error"]["code"] == -32603


def test_base_exceptions_are_not_swallowed() -> None:
    class Stop(BaseException):
        pass

    async def call(method: str, params: Any, context: Any) -> Any:
        raise Stop

    with pytest.raises(Stop):
        _frame(Dispatcher(call), b'{"jsonrpc":"2.0","method":"x","id":2}')


def test_as_trainee_error_keeps_trainee_errors() -> None:
    error = errors.InvalidState("no")
    assert as_trainee_error(error) is error
    wrapped = as_trainee_error(KeyError("k"), logger=logging.getLogger("test.rpc.quiet"))
    assert isinstance(wrapped, errors.InternalError)
    assert wrapped.data == {"incident": wrapped.message[-9:-1]}


# -- dispatch details ----------------------------------------------------------------------


def test_params_and_context_are_passed_through_untouched() -> None:
    seen: list[tuple[str, Any, Any]] = []

    async def call(method: str, params: Any, context: Any) -> Any:
        seen.append((method, params, context))
        return "ok"

    dispatcher = Dispatcher(call)
    context = object()
    _frame(dispatcher, b'{"jsonrpc":"2.0","method":"a","params":[1,[2]],"id":1}', context)
    _frame(dispatcher, b'{"jsonrpc":"2.0","method":"b","params":{"k":{"v":1}},"id":1}', context)
    _frame(dispatcher, b'{"jsonrpc":"2.0","method":"c"}', context)
    assert seen == [
        ("a", [1, [2]], context),
        ("b", {"k": {"v": 1}}, context),
        ("c", None, context),
    ]


def test_batch_is_processed_in_order_and_answered_in_order() -> None:
    order: list[int] = []

    async def call(method: str, params: Any, context: Any) -> Any:
        order.append(params[0])
        return params[0]

    requests = [{"jsonrpc": "2.0", "method": "n", "params": [i], "id": i} for i in range(6)]
    raw = _frame(Dispatcher(call), json.dumps(requests).encode())
    assert order == list(range(6))
    assert [r["result"] for r in json.loads(raw)] == list(range(6))


def test_struct_and_enum_results_are_encoded() -> None:
    class Colour(enum.StrEnum):
        RED = "red"

    class Point(msgspec.Struct):
        x: int
        colour: Colour

    async def call(method: str, params: Any, context: Any) -> Any:
        return [Point(1, Colour.RED)]

    raw = _frame(Dispatcher(call), b'{"jsonrpc":"2.0","method":"p","id":1}')
    assert json.loads(raw) == {"jsonrpc": "2.0", "result": [{"x": 1, "colour": "red"}], "id": 1}


def test_handle_message_validates_python_objects_too() -> None:
    dispatcher = Dispatcher(demo_call)
    assert _message(dispatcher, {"jsonrpc": "2.0", "method": "sum", "params": [1, 2], "id": 1}) == {
        "jsonrpc": "2.0",
        "result": 3,
        "id": 1,
    }
    response = _message(dispatcher, {"jsonrpc": "2.0", "method": "sum", "id": (1,)})
    assert response["error"]["code"] == -32600 and response["id"] is None
    assert _message(dispatcher, {"jsonrpc": "2.0", "method": "update"}) is None


# -- encoders and decoder --------------------------------------------------------------------


def test_encoders_write_exact_messages() -> None:
    assert encode_notification("event", {"id": 3}) == (
        b'{"jsonrpc":"2.0","method":"event","params":{"id":3}}'
    )
    assert encode_notification("ping") == b'{"jsonrpc":"2.0","method":"ping"}'
    assert encode_result("a", [1]) == b'{"jsonrpc":"2.0","result":[1],"id":"a"}'
    assert encode_error(None, errors.ParseError("Parse error: x")) == (
        b'{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error: x",'
        b'"data":{"type":"ParseError"}},"id":null}'
    )
    with pytest.raises(TypeError):
        encode_result(1, object())


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "Parse error: empty message"),
        (b"  \t ", "Parse error: empty message"),
        (b"{", "Parse error: Input data was truncated"),
        (b'"\\ud800"', "Parse error: Input data was truncated"),
        (b'["ok", "\xed\xa0\x80"]', "Parse error: invalid UTF-8 at byte 8"),
    ],
)
def test_decode_frame_names_the_reason(frame: bytes, message: str) -> None:
    with pytest.raises(errors.ParseError) as info:
        decode_frame(frame)
    assert info.value.message == message
    assert info.value.code == -32700


def test_decode_frame_accepts_every_valid_json_text() -> None:
    text = {"s": "é✓😀", "n": [0, -1, 1.5, 2**70], "b": [True, False, None], "o": {}}
    assert decode_frame(json.dumps(text, ensure_ascii=False).encode()) == text
    assert decode_frame(json.dumps(text).encode()) == text  # \u escapes, surrogate pairs
