"""A scripted LLM server on 127.0.0.1: OpenAI chat-completions and Anthropic messages.

Every request takes the next item of a queue (the script); an empty queue answers with
the default item. Items:

    {"content": "text"}                   200, the assistant says ``text``
    {"content": ..., "usage": {...}}      ... with these token counts (OpenAI or Anthropic names)
    {"usage": {...}}                      the default content with these token counts
    {"status": 500, "body": ...}          that status; ``body`` is sent as is (str) or as JSON
    {"delay": 5}                          wait 5 s first, then answer with the rest of the item
    {"reset": true}                       close the connection abruptly (TCP RST), no answer
    {"huge": 1000000}                     200, the assistant text is that many bytes
    {"refuse_format": ["json_schema"]}    400 like llama.cpp while the request's
                                          ``response_format.type`` is listed; the first request
                                          it lets through pops it and takes the next item
    {"refuse_format": [...], "status": 500}   ... with HTTP 500 and the body of
                                          llama-cpp-python's server (its answer to json_schema)
    {"fail_structured": true}             500 with a generic body (no word about formats) while
                                          the request has a ``response_format``; the first
                                          plain request pops it and takes the next item
    {"copy_min_of": "lr"}                 200, a plan setting ``lr`` to its lower bound as the
                                          prompt's search-space table writes it, passed through
                                          llama.cpp's JSON number grammar (an exponent with a
                                          leading zero is cut: ``1e-05`` becomes ``1e-0``), as a
                                          small model copying the prompt under that grammar does

Endpoints: POST /v1/chat/completions (also /chat/completions), POST /v1/messages (also
/messages), GET /v1/models, and for a server run as a script GET /_fake/requests (what was
recorded) and POST /_fake/push (a JSON item or list of items).

In-process::

    with FakeLLM([{"content": '{"a": 1}'}]) as fake:
        fake.openai_base_url; fake.requests; fake.push({"status": 500})

As a process: ``python -m tests.fakes.llm_server --script script.json`` prints
``READY <port>`` and serves until SIGTERM. The script file is a list of items or
``{"items": [...], "default": {...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_CONTENT = '{"ok": true}'
MAX_BODY = 64 * 1024 * 1024

OPENAI_PATHS = ("/v1/chat/completions", "/chat/completions")
ANTHROPIC_PATHS = ("/v1/messages", "/messages")


def _llama_refusal(kind: str) -> dict[str, Any]:
    """The body llama.cpp's server sends for a response_format it does not support."""
    return {
        "error": {
            "code": 400,
            "message": (
                'response_format type must be one of "text" or "json_object", but got: ' + kind
            ),
            "type": "invalid_request_error",
        }
    }


def _llama_cpp_python_500(kind: str) -> dict[str, Any]:
    """The body llama-cpp-python's OpenAI-compatible server sends, with HTTP 500, for a
    ``response_format`` other than text / json_object (copied from its 0.3 server)."""
    return {
        "error": {
            "message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
            "'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", "
            f"'input': '{kind}', 'ctx': {{'expected': \"'text' or 'json_object'\"}}}}\n\n"
            '  File "llama_cpp/server/app.py", line 376, in create_chat_completion\n'
            "    POST /v1/chat/completions",
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }


_LLAMA_EXPONENT = re.compile(r"([eE][-+]?0)\d+")


def llama_number(text: str) -> str:
    """What llama.cpp's JSON grammar lets a model write when it copies the number ``text``:
    an exponent may not start with 0, so generation ends the number at that 0."""
    return _LLAMA_EXPONENT.sub(r"\1", text)


def _copied_plan(prompt: str, name: str) -> str:
    """A plan setting ``name`` to the lower bound the prompt's table shows, llama-cut."""
    m = re.search(r"^\| " + re.escape(name) + r" \| \w+ \| \[([^,\]]+),", prompt, re.M)
    low = llama_number(m.group(1).strip()) if m else "0"
    return (
        '{"hypothesis": "the lower bound of '
        + name
        + ' may train more stably", "change_summary": "'
        + name
        + ' to its minimum", "params": {"'
        + name
        + '": '
        + low
        + '}, "expected": "the metric improves", "stop": false, "stop_reason": ""}'
    )


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _text_of(content: Any) -> str:
    """Flatten OpenAI/Anthropic message content (a string or a list of parts) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class _Script:
    """The queue of items and the record of requests, shared by the handler threads."""

    def __init__(self, items: Iterable[dict[str, Any]], default: dict[str, Any] | None) -> None:
        self.lock = threading.Lock()
        self.items: deque[dict[str, Any]] = deque(items)
        self.default: dict[str, Any] = dict(default or {"content": DEFAULT_CONTENT})
        self.requests: list[dict[str, Any]] = []
        self.stopping = threading.Event()

    def take(self, response_format_type: str | None) -> tuple[dict[str, Any], bool]:
        """The item for a request; ``(item, True)`` when it is a format refusal."""
        with self.lock:
            while self.items:
                head = self.items[0]
                if "refuse_format" in head:
                    if response_format_type in set(head["refuse_format"]):
                        return head, True
                    self.items.popleft()
                    continue
                if head.get("fail_structured"):
                    if response_format_type is not None:
                        return {"status": 500, "body": {"error": {"message": "internal"}}}, False
                    self.items.popleft()
                    continue
                return self.items.popleft(), False
            return self.default, False


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def setup(self) -> None:
        super().setup()
        with self.server.conn_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server.conn_lock:
            self.server.connections.discard(self.connection)

    # -- plumbing ---------------------------------------------------------------

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _reset(self) -> None:
        """Close with SO_LINGER 0: the peer sees a TCP RST instead of a response."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _read_body(self) -> tuple[Any, str]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError(f"request body too large: {length} bytes")
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            return json.loads(raw) if raw else {}, raw
        except json.JSONDecodeError:
            return None, raw

    # -- endpoints --------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/v1/models", "/models"):
            model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
            self._send(200, {"object": "list", "data": [model]})
        elif path == "/_fake/requests":
            self._send(200, self.server.script_requests())
        else:
            self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            body, raw = self._read_body()
        except ValueError as exc:
            self._send(413, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return
        if path == "/_fake/push":
            items = body if isinstance(body, list) else [body]
            self.server.push(*items)
            self._send(200, {"queued": len(self.server.script.items)})
            return
        if path in OPENAI_PATHS:
            wire = "openai"
        elif path in ANTHROPIC_PATHS:
            wire = "anthropic"
        else:
            self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        self._answer(wire, path, body, raw)

    def _answer(self, wire: str, path: str, body: Any, raw: str) -> None:
        req = body if isinstance(body, dict) else {}
        rf = req.get("response_format")
        rf_type = rf.get("type") if isinstance(rf, dict) else None
        item, refused = self.server.script.take(rf_type)
        record = self._record(wire, path, req, raw)
        if refused:
            record["reply"] = "refused_format"
            if int(item.get("status", 400)) == 500:
                self._send(500, _llama_cpp_python_500(str(rf_type)))
            else:
                self._send(400, _llama_refusal(str(rf_type)))
            return
        if "delay" in item:
            record["reply"] = "delay"
            if self.server.script.stopping.wait(float(item["delay"])):
                self._reset()
                return
        if item.get("reset"):
            record["reply"] = "reset"
            self._reset()
            return
        if "status" in item:
            record["reply"] = f"status {item['status']}"
            body_out = item.get("body", {"error": {"message": "scripted error"}})
            self._send(int(item["status"]), body_out)
            return
        prompt_all = "".join(
            _text_of(m.get("content")) for m in req.get("messages", []) if isinstance(m, dict)
        )
        if "huge" in item:
            content = "x" * int(item["huge"])
        elif "copy_min_of" in item:
            content = _copied_plan(prompt_all, str(item["copy_min_of"]))
        else:
            content = str(item.get("content", self.server.script.default.get("content", "")))
        record["reply"] = "content"
        prompt_text = _text_of(req.get("system")) + "".join(
            _text_of(m.get("content")) for m in req.get("messages", []) if isinstance(m, dict)
        )
        usage = dict(item.get("usage") or self.server.script.default.get("usage") or {})
        prompt_tokens = int(
            usage.get("prompt_tokens", usage.get("input_tokens", _estimate_tokens(prompt_text)))
        )
        completion_tokens = int(
            usage.get("completion_tokens", usage.get("output_tokens", _estimate_tokens(content)))
        )
        record["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        model = str(req.get("model") or "fake-model")
        if wire == "openai":
            self._send(200, _openai_reply(model, content, prompt_tokens, completion_tokens))
        else:
            self._send(200, _anthropic_reply(req, model, content, prompt_tokens, completion_tokens))

    def _record(self, wire: str, path: str, req: dict[str, Any], raw: str) -> dict[str, Any]:
        headers = {k.lower(): v for k, v in self.headers.items()}
        auth = headers.get("authorization", "")
        api_key = auth[7:] if auth.lower().startswith("bearer ") else headers.get("x-api-key")
        record: dict[str, Any] = {
            "wire": wire,
            "path": path,
            "headers": headers,
            "api_key": api_key,
            "model": req.get("model"),
            "messages": req.get("messages"),
            "system": req.get("system"),
            "response_format": req.get("response_format"),
            "max_tokens": req.get("max_tokens", req.get("max_completion_tokens")),
            "temperature": req.get("temperature"),
            "tools": req.get("tools"),
            "tool_choice": req.get("tool_choice"),
            "output_format": req.get("output_format"),
            "body": req if req else raw,
            "time": time.time(),
            "reply": None,
        }
        with self.server.script.lock:
            self.server.script.requests.append(record)
        return record


def _openai_reply(model: str, content: str, prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _anthropic_reply(
    req: dict[str, Any], model: str, content: str, prompt: int, completion: int
) -> dict[str, Any]:
    """A messages reply; a forced tool (litellm's JSON mode) gets a ``tool_use`` block."""
    block: dict[str, Any] = {"type": "text", "text": content}
    stop_reason = "end_turn"
    choice = req.get("tool_choice")
    tools = req.get("tools") or []
    forced = (
        choice.get("name") if isinstance(choice, dict) and choice.get("type") == "tool" else None
    )
    if forced is None and isinstance(choice, dict) and choice.get("type") == "any" and tools:
        forced = tools[0].get("name")
    if forced is not None:
        try:
            parsed = json.loads(content)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            block = {"type": "tool_use", "id": "toolu_fake", "name": forced, "input": parsed}
            stop_reason = "tool_use"
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, script: _Script) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script
        self.conn_lock = threading.Lock()
        self.connections: set[socket.socket] = set()

    def push(self, *items: dict[str, Any]) -> None:
        with self.script.lock:
            self.script.items.extend(items)

    def script_requests(self) -> list[dict[str, Any]]:
        with self.script.lock:
            return list(self.script.requests)

    def drop_connections(self) -> None:
        with self.conn_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class FakeLLM:
    """The scripted server in a background thread; a context manager."""

    def __init__(
        self,
        script: Iterable[dict[str, Any]] = (),
        *,
        default: dict[str, Any] | None = None,
    ) -> None:
        self._script = _Script(script, default)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FakeLLM:
        self._server = _Server(self._script)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._script.stopping.set()
        self._server.shutdown()
        self._server.drop_connections()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeLLM is not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the Anthropic base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: the OpenAI-compatible base URL."""
        return self.url + "/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request received so far (headers raw, so a test can see the key sent)."""
        with self._script.lock:
            return list(self._script.requests)

    def requests_json(self) -> str:
        """The recorded requests as JSON with the Authorization / x-api-key headers masked."""
        out = []
        for rec in self.requests:
            rec = dict(rec)
            rec["headers"] = {
                k: ("***" if k in ("authorization", "x-api-key") else v)
                for k, v in rec["headers"].items()
            }
            rec["api_key"] = "***" if rec.get("api_key") else None
            out.append(rec)
        return json.dumps(out, indent=2)

    def push(self, *items: dict[str, Any]) -> None:
        """Append items to the script."""
        with self._script.lock:
            self._script.items.extend(items)

    @property
    def pending(self) -> int:
        """How many scripted items are still queued."""
        with self._script.lock:
            return len(self._script.items)


def _load_script(path: str | None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    if path is None:
        return [], None
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if isinstance(data, list):
        return data, None
    if isinstance(data, dict):
        return list(data.get("items", [])), data.get("default")
    raise SystemExit(f"{path}: expected a list of items or an object with 'items'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--script", help="JSON file: a list of items or {items, default}")
    args = parser.parse_args(argv)
    items, default = _load_script(args.script)
    fake = FakeLLM(items, default=default).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sys.stdout.write(f"READY {fake.port}\n")
    sys.stdout.flush()
    while not stop.wait(3600):
        pass
    fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
