"""Real litellm calls against the scripted fake server (tests/fakes/llm_server.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import REPO
from tests.support.llm import run
from trainee.errors import ProviderError
from trainee.llm import client
from trainee.llm.settings import LlmSettings, load_settings

pytestmark = pytest.mark.usefixtures("fresh_formats")

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-9876543210fedcba"
SCHEMA = {
    "title": "Decision",
    "type": "object",
    "properties": {"lr": {"type": "number"}, "stop": {"type": "boolean"}},
    "required": ["lr", "stop"],
    "additionalProperties": False,
}
ANSWER = '{"lr": 0.001, "stop": false}'
MESSAGES = [
    {"role": "system", "content": "You tune models."},
    {"role": "user", "content": "Propose the next learning rate."},
]


def settings_for(tmp_path: Path, **env: str) -> LlmSettings:
    return load_settings(env, tmp_path / "config.json")


def openai_env(fake: FakeLLM, **more: str) -> dict[str, str]:
    return {
        "TRAINEE_LLM_PROVIDER": "openai",
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_MODEL": "gpt-4o-mini",
        "OPENAI_BASE_URL": fake.openai_base_url,
        **more,
    }


def anthropic_env(fake: FakeLLM, **more: str) -> dict[str, str]:
    return {
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_MODEL": "claude-3-5-haiku-latest",
        "ANTHROPIC_BASE_URL": fake.url,
        **more,
    }


def local_env(fake: FakeLLM, model: str = "qwen-local") -> dict[str, str]:
    return {
        "TRAINEE_LLM_PROVIDER": "openai_compatible",
        "TRAINEE_LLM_MODEL": model,
        "TRAINEE_LLM_BASE_URL": fake.openai_base_url,
    }


def ask(settings: LlmSettings, schema: dict[str, Any] | None = SCHEMA, max_tokens: int = 200):
    return run(
        lambda: client.complete(MESSAGES, settings=settings, schema=schema, max_tokens=max_tokens)
    )


def provider_error(settings: LlmSettings, max_tokens: int = 200) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        ask(settings, max_tokens=max_tokens)
    return info.value


# -- normal replies -------------------------------------------------------------------


def test_openai_json_schema_reply(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"content": ANSWER, "usage": {"prompt_tokens": 1000, "completion_tokens": 100}})
    settings = settings_for(tmp_path, **openai_env(fake), TRAINEE_LLM_TEMPERATURE="0.3")
    got = ask(settings)
    assert json.loads(got.text) == {"lr": 0.001, "stop": False}
    assert (got.provider, got.model, got.response_format) == (
        "openai",
        "gpt-4o-mini",
        "json_schema",
    )
    assert (got.prompt_tokens, got.completion_tokens) == (1000, 100)
    assert got.cost_usd == pytest.approx(1000 * 0.15e-6 + 100 * 0.6e-6)
    assert got.raw["choices"][0]["message"]["content"] == ANSWER
    [req] = fake.requests
    assert req["wire"] == "openai" and req["path"] == "/v1/chat/completions"
    assert req["api_key"] == OPENAI_KEY
    assert req["model"] == "gpt-4o-mini"
    assert req["max_tokens"] == 200 and req["temperature"] == 0.3
    assert req["messages"] == MESSAGES
    fmt = req["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"] == {"name": "Decision", "schema": SCHEMA, "strict": True}


def test_anthropic_json_reply(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"content": ANSWER, "usage": {"input_tokens": 40, "output_tokens": 12}})
    settings = settings_for(tmp_path, TRAINEE_LLM_PROVIDER="anthropic", **anthropic_env(fake))
    got = ask(settings)
    assert json.loads(got.text) == {"lr": 0.001, "stop": False}
    assert (got.provider, got.response_format) == ("anthropic", "json_schema")
    assert (got.prompt_tokens, got.completion_tokens) == (40, 12)
    [req] = fake.requests
    assert req["wire"] == "anthropic" and req["path"] == "/v1/messages"
    assert req["headers"]["x-api-key"] == ANTHROPIC_KEY
    assert req["max_tokens"] == 200
    assert req["temperature"] == 1.0
    assert "You tune models." in json.dumps(req["system"])
    # litellm carries the schema as a forced tool or as Anthropic's output_format
    sent = json.dumps([req["tools"], req["output_format"]])
    assert '"lr"' in sent and '"stop"' in sent


def test_plain_text_without_schema(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"content": "hello"})
    got = ask(settings_for(tmp_path, **openai_env(fake)), schema=None)
    assert (got.text, got.response_format) == ("hello", "text")
    assert fake.requests[0]["response_format"] is None


# -- response-format negotiation -------------------------------------------------------


def test_negotiates_down_to_json_object_and_remembers(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"refuse_format": ["json_schema"]}, {"content": ANSWER}, {"content": ANSWER})
    settings = settings_for(tmp_path, **local_env(fake))
    got = ask(settings)
    assert got.response_format == "json_object" and json.loads(got.text)["lr"] == 0.001
    first, second = fake.requests
    assert first["response_format"]["type"] == "json_schema" and first["reply"] == "refused_format"
    # llama.cpp style: json_object with the schema as a key, and the schema in the prompt
    assert second["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert second["messages"][0]["role"] == "system"
    assert second["messages"][0]["content"].startswith("You tune models.")
    assert json.dumps(SCHEMA) in second["messages"][0]["content"]
    assert second["api_key"]  # a dummy key: the OpenAI client insists on one
    assert got.cost_usd is None  # a local server without a user price

    again = ask(settings)  # remembered: straight to json_object
    assert again.response_format == "json_object"
    assert [r["response_format"]["type"] for r in fake.requests] == [
        "json_schema",
        "json_object",
        "json_object",
    ]


def test_negotiates_down_to_plain_text(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"refuse_format": ["json_schema", "json_object"]}, {"content": ANSWER})
    settings = settings_for(tmp_path, **local_env(fake))
    got = ask(settings)
    assert got.response_format == "text"
    assert [r["reply"] for r in fake.requests] == ["refused_format", "refused_format", "content"]
    last = fake.requests[-1]
    assert last["response_format"] is None
    assert json.dumps(SCHEMA) in last["messages"][0]["content"]
    fake.push({"content": ANSWER})
    assert ask(settings).response_format == "text"
    assert len(fake.requests) == 4


def test_user_price_for_a_local_model(fake: FakeLLM, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"prices": {"qwen-local": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}})
    )
    fake.push(
        {"content": ANSWER, "usage": {"prompt_tokens": 500_000, "completion_tokens": 250_000}}
    )
    got = ask(settings_for(tmp_path, **local_env(fake)))
    assert got.cost_usd == pytest.approx(1.0)


# -- failures -------------------------------------------------------------------------


def test_server_error_fails_over_to_the_next_provider(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"status": 500, "body": {"error": {"message": "overloaded"}}}, {"content": ANSWER})
    settings = settings_for(tmp_path, **openai_env(fake), **anthropic_env(fake))
    attempts: list[client.ProviderAttempt] = []
    got = run(
        lambda: client.complete_with_failover(
            MESSAGES, settings=settings, schema=SCHEMA, max_tokens=100, attempts=attempts
        )
    )
    assert got.provider == "anthropic" and json.loads(got.text)["stop"] is False
    # every request is kept: the failure (with its URL) and the answer
    failed, answered = attempts
    assert (failed.provider, failed.kind, failed.status) == ("openai", "http", 500)
    assert "overloaded" in failed.error and failed.url == fake.openai_base_url
    assert (answered.provider, answered.ok, answered.response_format) == (
        "anthropic",
        True,
        "json_schema",
    )
    assert [r["wire"] for r in fake.requests] == ["openai", "anthropic"]


def test_all_providers_failing_lists_every_attempt(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push(
        {"status": 503, "body": "busy"},
        {"status": 401, "body": {"type": "error", "error": {"type": "authentication_error"}}},
    )
    settings = settings_for(tmp_path, **openai_env(fake), **anthropic_env(fake))
    with pytest.raises(ProviderError) as info:
        run(
            lambda: client.complete_with_failover(
                MESSAGES, settings=settings, schema=SCHEMA, max_tokens=100
            )
        )
    err = info.value
    assert err.message.startswith("all providers failed: ")
    attempts = err.data["attempts"]
    assert [(a["provider"], a["kind"], a["status"]) for a in attempts] == [
        ("openai", "http", 503),
        ("anthropic", "auth", 401),
    ]
    assert (
        "openai (gpt-4o-mini at http://127.0.0.1:" in err.message
        and "anthropic (claude-3-5-haiku-latest at http://127.0.0.1:" in err.message
    )


def test_timeout(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"delay": 30, "content": ANSWER})
    settings = settings_for(tmp_path, **openai_env(fake), TRAINEE_LLM_TIMEOUT_SEC="1")
    started = time.monotonic()
    err = provider_error(settings)
    elapsed = time.monotonic() - started
    assert err.data["kind"] == "timeout" and err.data["provider"] == "openai"
    assert elapsed < 20  # gave up at the timeout, not after the 30 s hang


def test_anthropic_timeout(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"delay": 30})
    env = anthropic_env(fake, TRAINEE_LLM_PROVIDER="anthropic", TRAINEE_LLM_TIMEOUT_SEC="1")
    err = provider_error(settings_for(tmp_path, **env))
    assert err.data["kind"] == "timeout"


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_connection_reset(fake: FakeLLM, tmp_path: Path, wire: str) -> None:
    fake.push({"reset": True})
    env = (
        openai_env(fake)
        if wire == "openai"
        else anthropic_env(fake, TRAINEE_LLM_PROVIDER="anthropic")
    )
    err = provider_error(settings_for(tmp_path, **env))
    assert err.data["kind"] == "connection", err.message
    assert err.data["status"] is None


def test_huge_reply_is_refused(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"huge": 3_000_000})
    err = provider_error(settings_for(tmp_path, **openai_env(fake)), max_tokens=100)
    assert err.data["kind"] == "other" and "too large" in err.message
    assert len(err.message) < 1000


def test_garbage_body(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"status": 200, "body": "<html>not json</html>"})
    err = provider_error(settings_for(tmp_path, **openai_env(fake)))
    assert err.data["kind"] == "other" and "invalid response body" in err.message
    assert err.data["provider"] == "openai"


def test_keys_never_leak(fake: FakeLLM, tmp_path: Path) -> None:
    echo = {"error": {"message": f"Incorrect API key provided: {OPENAI_KEY} / {ANTHROPIC_KEY}"}}
    fake.push(
        {"status": 401, "body": echo}, {"status": 500, "body": echo}, {"status": 400, "body": echo}
    )
    fake.push({"content": f'{{"lr": 1, "stop": true, "note": "{OPENAI_KEY}"}}'})
    settings = settings_for(tmp_path, **openai_env(fake), **anthropic_env(fake))

    err = provider_error(settings)
    assert err.data["kind"] == "auth"
    with pytest.raises(ProviderError) as info:
        run(
            lambda: client.complete_with_failover(
                MESSAGES, settings=settings, schema=SCHEMA, max_tokens=100
            )
        )
    got = ask(settings)
    stored = json.dumps(
        [err.message, err.data, info.value.message, info.value.data, got.text, got.raw]
    )
    assert OPENAI_KEY not in stored and ANTHROPIC_KEY not in stored
    assert "****cdef" in stored  # masked, still recognisable
    assert fake.requests[-1]["api_key"] == OPENAI_KEY  # the key did reach the server
    assert OPENAI_KEY not in fake.requests_json()


def test_provider_none_fails_at_once(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, OPENAI_API_KEY=OPENAI_KEY)
    for call in (
        lambda: client.complete(MESSAGES, settings=settings, schema=None, max_tokens=10),
        lambda: client.complete_with_failover(
            MESSAGES, settings=settings, schema=None, max_tokens=10
        ),
    ):
        with pytest.raises(ProviderError) as info:
            run(call)
        assert "no LLM provider configured" in info.value.message
        assert "TRAINEE_LLM_PROVIDER" in info.value.message
        assert "TRAINEE_LLM_PROVIDER" in info.value.data["hint"]


def test_missing_model_and_base_url_are_clear(tmp_path: Path) -> None:
    err = provider_error(settings_for(tmp_path, TRAINEE_LLM_PROVIDER="openai_compatible"))
    assert "TRAINEE_LLM_MODEL" in err.message
    settings = settings_for(
        tmp_path, TRAINEE_LLM_PROVIDER="openai_compatible", TRAINEE_LLM_MODEL="m"
    )
    assert "TRAINEE_LLM_BASE_URL" in provider_error(settings).message


# -- live test ------------------------------------------------------------------------


def test_live_test(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push({"content": "OK"}, {"status": 401, "body": {"error": {"message": "bad key"}}})
    settings = settings_for(tmp_path, **openai_env(fake), **anthropic_env(fake))
    good = run(lambda: client.live_test(settings))
    assert good["ok"] is True and good["provider"] == "openai" and good["reply"] == "OK"
    assert isinstance(good["latency_sec"], float)
    assert fake.requests[0]["max_tokens"] == client.LIVE_TEST_MAX_TOKENS
    bad = run(lambda: client.live_test(settings, "anthropic"))
    assert bad["ok"] is False and bad["kind"] == "auth" and "bad key" in bad["error"]
    none = run(lambda: client.live_test(settings_for(tmp_path)))
    assert none["ok"] is False and none["provider"] == "none"


# -- the fake itself and import costs ------------------------------------------------------


def test_fake_server_as_a_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"items": [{"content": "first"}], "default": {"content": "dflt"}}))
    with subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.llm_server", "--script", str(script)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("READY ")
            base = f"http://127.0.0.1:{int(line.split()[1])}"

            def post(path: str, body: Any) -> Any:
                req = urllib.request.Request(
                    base + path,
                    data=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return json.load(resp)

            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
            assert post("/v1/chat/completions", chat)["choices"][0]["message"]["content"] == "first"
            post("/_fake/push", [{"content": "pushed"}])
            assert post("/chat/completions", chat)["choices"][0]["message"]["content"] == "pushed"
            reply = post("/v1/messages", chat)
            assert reply["content"] == [{"type": "text", "text": "dflt"}]
            assert reply["usage"]["input_tokens"] >= 1
            with urllib.request.urlopen(base + "/_fake/requests", timeout=10) as resp:
                recorded = json.load(resp)
            assert [r["wire"] for r in recorded] == ["openai", "openai", "anthropic"]
            with urllib.request.urlopen(base + "/v1/models", timeout=10) as resp:
                assert json.load(resp)["data"][0]["id"]
        finally:
            proc.terminate()
    assert proc.returncode == 0


def test_settings_and_client_import_without_litellm() -> None:
    code = (
        "import sys, trainee.llm.settings, trainee.llm.client, trainee.llm.cost; "
        "assert 'litellm' not in sys.modules, 'litellm imported'; print('clean')"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINEE_")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"
