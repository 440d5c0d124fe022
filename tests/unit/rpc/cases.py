"""JSON-RPC 2.0 compliance cases as plain data, shared by every transport's tests.

Each :class:`Case` is one request frame (bytes, no newline) and the parsed JSON
response expected for it, or None when nothing must be sent back. Serve
:func:`demo_call` behind a ``Dispatcher`` on the transport under test, send
``case.request``, and hand what came back to :func:`check_response`.

Cases whose response holds a -32603 internal error have ``internal=True``:
their expected message reads ``Internal error (incident XXXXXXXX)`` and the
real, random incident id is masked before comparing. Batch responses are
compared as multisets (the spec lets a server answer a batch in any order).
The first cases are the examples of section 7 of the JSON-RPC 2.0
specification, with the spec's requests byte for byte.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from trainee import errors

__all__ = [
    "CASES",
    "DEMO_METHODS",
    "Case",
    "check_response",
    "demo_call",
    "mask_incidents",
    "oversized_case",
]


class Case(NamedTuple):
    name: str
    request: bytes
    expected: Any  # parsed JSON response; None: no response at all
    internal: bool = False  # compare -32603 errors with the incident id masked


# -- the methods the cases call ------------------------------------------------------


async def _subtract(params: Any) -> Any:
    if isinstance(params, list) and len(params) == 2:
        minuend, subtrahend = params
    elif isinstance(params, dict) and set(params) == {"minuend", "subtrahend"}:
        minuend, subtrahend = params["minuend"], params["subtrahend"]
    else:
        raise errors.InvalidParams(
            "subtract: expected [minuend, subtrahend] or {minuend, subtrahend}",
            {"method": "subtract"},
        )
    if not all(type(v) in (int, float) for v in (minuend, subtrahend)):
        raise errors.InvalidParams("subtract: operands must be numbers", {"method": "subtract"})
    return minuend - subtrahend


async def _sum(params: Any) -> Any:
    return sum(params)


async def _nothing(params: Any) -> Any:
    return None


async def _get_data(params: Any) -> Any:
    return ["hello", 5]


async def _echo(params: Any) -> Any:
    return params


async def _find_run(params: Any) -> Any:
    raise errors.NotFound("no run 42 in session 3", {"session": 3, "round": 42})


async def _bad_config(params: Any) -> Any:
    raise errors.ConfigError(
        "tuning.yaml: lr must be > 0",
        file="tuning.yaml",
        line=4,
        field="params.lr.low",
        reason="must be > 0",
    )


async def _broken(params: Any) -> Any:
    raise ValueError("secret internals: /home/user/.trainee/config.json")


async def _unencodable(params: Any) -> Any:
    return {"handle": object()}


DEMO_METHODS = {
    "subtract": _subtract,
    "sum": _sum,
    "update": _nothing,
    "notify_hello": _nothing,
    "notify_sum": _nothing,
    "get_data": _get_data,
    "echo": _echo,
    "find_run": _find_run,
    "bad_config": _bad_config,
    "broken": _broken,
    "unencodable": _unencodable,
}


async def demo_call(method: str, params: Any, context: Any) -> Any:
    """The ``call`` the cases expect: the spec's example methods and a few failing ones."""
    handler = DEMO_METHODS.get(method)
    if handler is None:
        raise errors.MethodNotFound(f"Method not found: {method}", {"method": method})
    return await handler(params)


# -- expected responses ----------------------------------------------------------------


def _ok(result: Any, id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result, "id": id}


def _err(code: int, message: str, type_: str, id: Any, details: Any = None) -> dict[str, Any]:
    data: dict[str, Any] = {"type": type_}
    if details is not None:
        data["details"] = details
    return {"jsonrpc": "2.0", "error": {"code": code, "message": message, "data": data}, "id": id}


def _parse_error(reason: str) -> dict[str, Any]:
    return _err(-32700, f"Parse error: {reason}", "ParseError", None)


def _invalid(reason: str, id: Any = None) -> dict[str, Any]:
    return _err(-32600, f"Invalid Request: {reason}", "InvalidRequest", id)


def _not_found(method: str, id: Any) -> dict[str, Any]:
    return _err(-32601, f"Method not found: {method}", "MethodNotFound", id, {"method": method})


_INTERNAL = _err(
    -32603,
    "Internal error (incident XXXXXXXX)",
    "InternalError",
    None,
    {"incident": "XXXXXXXX"},
)


def _internal(id: Any) -> dict[str, Any]:
    return {**_INTERNAL, "id": id}


_MIXED_BATCH = (
    b'[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},'
    b' {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},'
    b' {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},'
    b' {"foo": "boo"},'
    b' {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},'
    b' {"jsonrpc": "2.0", "method": "get_data", "id": "9"}]'
)

CASES: list[Case] = [
    # -- JSON-RPC 2.0 specification, section 7 ------------------------------------
    Case(
        "spec_positional_params_1",
        b'{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}',
        _ok(19, 1),
    ),
    Case(
        "spec_positional_params_2",
        b'{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}',
        _ok(-19, 2),
    ),
    Case(
        "spec_named_params_1",
        b'{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}',
        _ok(19, 3),
    ),
    Case(
        "spec_named_params_2",
        b'{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}',
        _ok(19, 4),
    ),
    Case(
        "spec_notification",
        b'{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}',
        None,
    ),
    Case("spec_notification_unknown_method", b'{"jsonrpc": "2.0", "method": "foobar"}', None),
    Case(
        "spec_method_not_found",
        b'{"jsonrpc": "2.0", "method": "foobar", "id": "1"}',
        _not_found("foobar", "1"),
    ),
    Case(
        "spec_invalid_json",
        b'{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]',
        _parse_error("JSON is malformed: expected ',' or '}' (byte 39)"),
    ),
    Case(
        "spec_invalid_request_object",
        b'{"jsonrpc": "2.0", "method": 1, "params": "bar"}',
        _invalid("'method' must be a string, got number"),
    ),
    Case(
        "spec_batch_invalid_json",
        b'[  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},'
        b'  {"jsonrpc": "2.0", "method"]',
        _parse_error("JSON is malformed: expected ':' (byte 98)"),
    ),
    Case("spec_empty_array", b"[]", _invalid("empty batch")),
    Case("spec_invalid_batch_one", b"[1]", [_invalid("expected an object, got number")]),
    Case(
        "spec_invalid_batch_three",
        b"[1,2,3]",
        [_invalid("expected an object, got number")] * 3,
    ),
    Case(
        "spec_mixed_batch",
        _MIXED_BATCH,
        [
            _ok(7, "1"),
            _ok(19, "2"),
            _invalid("'jsonrpc' must be \"2.0\""),
            _not_found("foo.get", "5"),
            _ok(["hello", 5], "9"),
        ],
    ),
    Case(
        "spec_batch_all_notifications",
        b'[{"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},'
        b' {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}]',
        None,
    ),
    # -- ids of every allowed type, and of disallowed ones -------------------------
    Case(
        "id_string",
        b'{"jsonrpc":"2.0","method":"get_data","id":"abc-1"}',
        _ok(["hello", 5], "abc-1"),
    ),
    Case(
        "id_unicode_string",
        '{"jsonrpc":"2.0","method":"sum","params":[1],"id":"é✓"}'.encode(),
        _ok(1, "é✓"),
    ),
    Case("id_empty_string", b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":""}', _ok(1, "")),
    Case("id_zero", b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":0}', _ok(1, 0)),
    Case("id_negative", b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":-7}', _ok(1, -7)),
    Case(
        "id_big_integer",
        b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":1180591620717411303424}',
        _ok(1, 2**70),
    ),
    Case("id_float", b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":1.5}', _ok(1, 1.5)),
    Case("id_null", b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":null}', _ok(1, None)),
    Case(
        "id_object",
        b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":{"a":1}}',
        _invalid("'id' must be a string, a number or null, got object"),
    ),
    Case(
        "id_array",
        b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":[1]}',
        _invalid("'id' must be a string, a number or null, got array"),
    ),
    Case(
        "id_boolean",
        b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":true}',
        _invalid("'id' must be a string, a number or null, got boolean"),
    ),
    # -- the Request object ---------------------------------------------------------
    Case(
        "jsonrpc_1_0",
        b'{"jsonrpc":"1.0","method":"sum","params":[1],"id":5}',
        _invalid("'jsonrpc' must be \"2.0\"", 5),
    ),
    Case(
        "jsonrpc_number",
        b'{"jsonrpc":2.0,"method":"sum","params":[1],"id":5}',
        _invalid("'jsonrpc' must be \"2.0\"", 5),
    ),
    Case(
        "jsonrpc_missing",
        b'{"method":"sum","params":[1],"id":5}',
        _invalid("'jsonrpc' must be \"2.0\"", 5),
    ),
    Case(
        "method_missing",
        b'{"jsonrpc":"2.0","params":[1],"id":5}',
        _invalid("'method' must be a string, missing", 5),
    ),
    Case(
        "params_string",
        b'{"jsonrpc":"2.0","method":"sum","params":"1,2","id":6}',
        _invalid("'params' must be an object or an array, got string", 6),
    ),
    Case(
        "params_number",
        b'{"jsonrpc":"2.0","method":"sum","params":3,"id":6}',
        _invalid("'params' must be an object or an array, got number", 6),
    ),
    Case(
        "params_null",
        b'{"jsonrpc":"2.0","method":"echo","params":null,"id":6}',
        _invalid("'params' must be an object or an array, got null", 6),
    ),
    Case(
        "params_absent",
        b'{"jsonrpc":"2.0","method":"echo","id":6}',
        _ok(None, 6),
    ),
    Case(
        "params_passed_through",
        b'{"jsonrpc":"2.0","method":"echo","params":{"a":[1,{"b":null}],"c":"d"},"id":6}',
        _ok({"a": [1, {"b": None}], "c": "d"}, 6),
    ),
    Case(
        "unknown_members_ignored",
        b'{"jsonrpc":"2.0","method":"get_data","id":8,"extra":{"x":1}}',
        _ok(["hello", 5], 8),
    ),
    Case(
        "invalid_request_notification_still_answered",
        b'{"jsonrpc":"2.0","method":"update","params":"x"}',
        _invalid("'params' must be an object or an array, got string"),
    ),
    Case("message_number", b"42", _invalid("expected an object, got number")),
    Case("message_string", b'"hello"', _invalid("expected an object, got string")),
    Case("message_null", b"null", _invalid("expected an object, got null")),
    Case("nested_batch", b"[[]]", [_invalid("expected an object, got array")]),
    # -- bytes that are not one JSON text ---------------------------------------------
    Case(
        "trailing_garbage",
        b'{"jsonrpc":"2.0","method":"get_data","id":1} {}',
        _parse_error("JSON is malformed: trailing characters (byte 46)"),
    ),
    Case(
        "invalid_utf8_in_string",
        b'{"jsonrpc":"2.0","method":"echo","params":["caf\xc3\x28"],"id":1}',
        _parse_error("invalid UTF-8 at byte 47"),
    ),
    Case("invalid_utf8_byte", b"\xff\xfe{}", _parse_error("invalid UTF-8 at byte 0")),
    Case(
        "overlong_utf8",
        b'{"jsonrpc":"2.0","method":"echo","params":["\xc0\xaf"],"id":1}',
        _parse_error("invalid UTF-8 at byte 44"),
    ),
    Case("deep_nesting", b"[" * 100_000, _parse_error("JSON nested too deeply")),
    Case(
        "deep_nesting_closed",
        b'{"jsonrpc":"2.0","method":"echo","params":' + b"[" * 20_000 + b"]" * 20_000 + b',"id":1}',
        _parse_error("JSON nested too deeply"),
    ),
    # -- application and internal errors ----------------------------------------------
    Case(
        "invalid_params",
        b'{"jsonrpc":"2.0","method":"subtract","params":["a", 1],"id":10}',
        _err(
            -32602,
            "subtract: operands must be numbers",
            "InvalidParams",
            10,
            {"method": "subtract"},
        ),
    ),
    Case(
        "application_error",
        b'{"jsonrpc":"2.0","method":"find_run","id":11}',
        _err(1002, "no run 42 in session 3", "NotFound", 11, {"session": 3, "round": 42}),
    ),
    Case(
        "config_error_details",
        b'{"jsonrpc":"2.0","method":"bad_config","id":12}',
        _err(
            1001,
            "tuning.yaml: lr must be > 0",
            "ConfigError",
            12,
            {"file": "tuning.yaml", "line": 4, "field": "params.lr.low", "reason": "must be > 0"},
        ),
    ),
    Case(
        "internal_error_hidden",
        b'{"jsonrpc":"2.0","method":"broken","id":13}',
        _internal(13),
        internal=True,
    ),
    Case(
        "unencodable_result",
        b'{"jsonrpc":"2.0","method":"unencodable","id":14}',
        _internal(14),
        internal=True,
    ),
    Case("failing_notification_silent", b'{"jsonrpc":"2.0","method":"broken"}', None),
    Case(
        "batch_mixed_errors",
        b'[{"jsonrpc":"2.0","method":"broken","id":1},'
        b'{"jsonrpc":"2.0","method":"find_run","id":2},'
        b'{"jsonrpc":"2.0","method":"broken"},'
        b'{"jsonrpc":"2.0","method":"sum","params":[2,3],"id":3},'
        b'{"jsonrpc":"2.0","method":"sum","params":[2,3],"id":{}}]',
        [
            _internal(1),
            _err(1002, "no run 42 in session 3", "NotFound", 2, {"session": 3, "round": 42}),
            _ok(5, 3),
            _invalid("'id' must be a string, a number or null, got object"),
        ],
        internal=True,
    ),
]


def oversized_case(max_frame: int) -> Case:
    """A frame one byte over ``max_frame`` (valid JSON were it not too long)."""
    body = b'{"jsonrpc":"2.0","method":"echo","params":["'
    tail = b'"],"id":1}'
    request = body + b"x" * (max_frame + 1 - len(body) - len(tail)) + tail
    return Case(
        "oversized_frame",
        request,
        _invalid(f"frame too large ({max_frame} bytes max)"),
    )


# -- comparing -------------------------------------------------------------------------

_INCIDENT = re.compile(r"Internal error \(incident ([0-9a-f]{8})\)")


def mask_incidents(response: Any) -> Any:
    """``response`` with each well-formed internal error's incident id replaced by XXXXXXXX."""
    if isinstance(response, list):
        return [mask_incidents(r) for r in response]
    error = response.get("error") if isinstance(response, dict) else None
    if not isinstance(error, dict) or error.get("code") != -32603:
        return response
    match = _INCIDENT.fullmatch(str(error.get("message")))
    data = error.get("data")
    if match is None or data != {"type": "InternalError", "details": {"incident": match[1]}}:
        return response  # left as is: the comparison fails and shows why
    masked = {
        **error,
        "message": "Internal error (incident XXXXXXXX)",
        "data": _INTERNAL["error"]["data"],
    }
    return {**response, "error": masked}


def _canonical(response: Any) -> Any:
    if isinstance(response, list):
        return sorted(response, key=lambda r: json.dumps(r, sort_keys=True))
    return response


def check_response(case: Case, raw: bytes | None) -> None:
    """Assert that ``raw`` (the bytes sent back, None if nothing) is what ``case`` expects."""
    if case.expected is None:
        assert raw is None, f"{case.name}: expected no response, got {raw!r}"
        return
    assert raw is not None, f"{case.name}: expected a response, got none"
    actual = json.loads(raw)
    if case.internal:
        actual = mask_incidents(actual)
    assert _canonical(actual) == _canonical(case.expected), (
        f"{case.name}:\n  got      {json.dumps(actual)}\n  expected {json.dumps(case.expected)}"
    )
