"""Provider settings: config.json + environment precedence, saving, masking."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from trainee.errors import ConfigError, InvalidParams
from trainee.llm import settings as s

KEY = "sk-proj-abcdefghijklmnop1234"


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return tmp_path / "config.json"


# -- precedence ------------------------------------------------------------------------

FILE = {
    "provider": "anthropic",
    "providers": {
        "anthropic": {"model": "claude-file", "api_key": "ant-file-key-123"},
        "openai": {"model": "gpt-file", "api_key": "sk-file-key-123"},
    },
    "llm_timeout_sec": 120,
    "llm_temperature": 0.5,
}

PRECEDENCE = [
    # (file, env, (provider, active model, active key, timeout, temperature))
    ({}, {}, ("none", None, None, 600.0, 1.0)),
    (FILE, {}, ("anthropic", "claude-file", "ant-file-key-123", 120.0, 0.5)),
    (FILE, {"TRAINEE_LLM_PROVIDER": "openai"}, ("openai", "gpt-file", "sk-file-key-123", 120, 0.5)),
    (FILE, {"LLM_PROVIDER": "openai"}, ("openai", "gpt-file", "sk-file-key-123", 120.0, 0.5)),
    (
        FILE,
        {
            "TRAINEE_LLM_PROVIDER": "moonshot",
            "LLM_PROVIDER": "openai",
            "MOONSHOT_API_KEY": "ms-k-123",
        },
        ("moonshot", "kimi-k2.6", "ms-k-123", 120.0, 0.5),
    ),
    (
        FILE,
        {"ANTHROPIC_MODEL": "claude-env", "ANTHROPIC_API_KEY": "ant-env-key-9"},
        ("anthropic", "claude-env", "ant-env-key-9", 120.0, 0.5),
    ),
    (
        FILE,
        {"TRAINEE_LLM_TIMEOUT_SEC": "30", "TRAINEE_LLM_TEMPERATURE": "0"},
        ("anthropic", "claude-file", "ant-file-key-123", 30.0, 0.0),
    ),
    ({}, {"TRAINEE_LLM_PROVIDER": "openai"}, ("openai", "gpt-4o-mini", None, 600.0, 1.0)),
    (
        {},
        {
            "TRAINEE_LLM_PROVIDER": "openai_compatible",
            "TRAINEE_LLM_MODEL": "qwen",
            "TRAINEE_LLM_BASE_URL": "http://127.0.0.1:8080/v1",
        },
        ("openai_compatible", "qwen", None, 600.0, 1.0),
    ),
    (
        {},
        {"TRAINEE_LLM_PROVIDER": "litellm", "TRAINEE_LLM_MODEL": "gemini/gemini-2.0-flash"},
        ("litellm", "gemini/gemini-2.0-flash", None, 600.0, 1.0),
    ),
    (
        {"provider": "openai"},
        {"TRAINEE_LLM_PROVIDER": "  "},
        ("openai", "gpt-4o-mini", None, 600, 1),
    ),
]


@pytest.mark.parametrize(("file", "env", "expected"), PRECEDENCE)
def test_precedence(cfg: Path, file: dict[str, Any], env: dict[str, str], expected: tuple) -> None:
    if file:
        write(cfg, file)
    got = s.load_settings(env, cfg)
    active = got.active
    assert (
        got.provider,
        active.model if active else None,
        active.api_key if active else None,
        got.timeout_sec,
        got.temperature,
    ) == expected


def test_env_values_reach_every_provider(cfg: Path) -> None:
    env = {
        "TRAINEE_LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "MOONSHOT_API_KEY": "moon-key-1",
        "MOONSHOT_BASE_URL": "https://example.test/v1",
        "TRAINEE_LLM_BASE_URL": "http://127.0.0.1:8080/v1",
        "TRAINEE_LLM_MODEL": "local",
    }
    got = s.load_settings(env, cfg)
    assert got.providers["openai"].base_url == "http://127.0.0.1:9/v1"
    assert got.providers["moonshot"] == s.ProviderConfig(
        name="moonshot", model="kimi-k2.6", api_key="moon-key-1", base_url="https://example.test/v1"
    )
    # TRAINEE_LLM_* configure openai_compatible unless litellm is the active provider
    assert got.providers["openai_compatible"].model == "local"
    assert got.providers["litellm"].model is None


def test_moonshot_base_url_is_not_stored_by_default(cfg: Path) -> None:
    got = s.load_settings({"TRAINEE_LLM_PROVIDER": "moonshot"}, cfg)
    assert got.providers["moonshot"].base_url is None  # the client supplies MOONSHOT_BASE_URL


# -- bad values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "var"),
    [
        ({"TRAINEE_LLM_TEMPERATURE": "abc"}, "TRAINEE_LLM_TEMPERATURE"),
        ({"TRAINEE_LLM_TEMPERATURE": "2.5"}, "TRAINEE_LLM_TEMPERATURE"),
        ({"TRAINEE_LLM_TEMPERATURE": "nan"}, "TRAINEE_LLM_TEMPERATURE"),
        ({"TRAINEE_LLM_TIMEOUT_SEC": "0"}, "TRAINEE_LLM_TIMEOUT_SEC"),
        ({"TRAINEE_LLM_TIMEOUT_SEC": "-3"}, "TRAINEE_LLM_TIMEOUT_SEC"),
        ({"TRAINEE_LLM_TIMEOUT_SEC": "inf"}, "TRAINEE_LLM_TIMEOUT_SEC"),
        ({"TRAINEE_LLM_PROVIDER": "gemini"}, "TRAINEE_LLM_PROVIDER"),
        ({"LLM_PROVIDER": "gpt"}, "LLM_PROVIDER"),
        ({"OPENAI_BASE_URL": "localhost:8080"}, "OPENAI_BASE_URL"),
        ({"TRAINEE_LLM_BASE_URL": "ftp://x"}, "TRAINEE_LLM_BASE_URL"),
    ],
)
def test_bad_environment_names_the_variable(cfg: Path, env: dict[str, str], var: str) -> None:
    with pytest.raises(ConfigError) as info:
        s.load_settings(env, cfg)
    assert info.value.field == var
    assert var in info.value.message
    assert info.value.reason


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"provider": "gemini"}, "provider"),
        ({"llm_temperature": "hot"}, "llm_temperature"),
        ({"llm_temperature": 3}, "llm_temperature"),
        ({"llm_timeout_sec": 0}, "llm_timeout_sec"),
        ({"llm_timeout_secs": 10}, "llm_timeout_secs"),
        ({"providers": {"openai": {"modle": "x"}}}, "providers.openai.modle"),
        ({"providers": {"openai": {"base_url": "nope"}}}, "providers.openai.base_url"),
        ({"providers": {"gemini": {}}}, "providers.gemini"),
        (
            {"prices": {"m": {"input_per_mtok": -1, "output_per_mtok": 1}}},
            "prices.m.input_per_mtok",
        ),
        ({"debug": "yes"}, "debug"),
    ],
)
def test_bad_file_names_the_key(cfg: Path, data: dict[str, Any], field: str) -> None:
    write(cfg, data)
    with pytest.raises(ConfigError) as info:
        s.load_settings({}, cfg)
    assert info.value.file == str(cfg)
    assert info.value.field == field
    assert field in info.value.message


def test_malformed_json_gives_the_line(cfg: Path) -> None:
    write(cfg, '{\n  "provider": "openai",\n  oops\n}')
    with pytest.raises(ConfigError) as info:
        s.load_settings({}, cfg)
    assert info.value.line == 3
    assert info.value.file == str(cfg)


def test_not_an_object(cfg: Path) -> None:
    write(cfg, "[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        s.load_settings({}, cfg)


# -- saving ---------------------------------------------------------------------------


def test_save_creates_private_home_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    got = s.save_settings({"provider": "openai", "api_key": KEY}, env={})
    path = tmp_path / ".trainee" / "config.json"
    assert s.config_file() == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {
        "provider": "openai",
        "providers": {"openai": {"api_key": KEY}},
    }
    assert got.provider == "openai" and got.providers["openai"].api_key == KEY
    assert [p.name for p in tmp_path.joinpath(".trainee").iterdir()] == ["config.json"]


def test_save_keeps_0600_when_the_file_was_wider(cfg: Path) -> None:
    write(cfg, {"provider": "openai"})
    os.chmod(cfg, 0o644)
    s.save_settings({"llm_temperature": 0.2}, cfg, env={})
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600


def test_save_merges_and_never_writes_environment(cfg: Path) -> None:
    env = {
        "TRAINEE_LLM_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": "ant-env-key-123",
        "TRAINEE_LLM_TIMEOUT_SEC": "5",
    }
    s.save_settings({"provider": "openai", "model": "gpt-4o", "api_key": KEY}, cfg, env=env)
    got = s.save_settings({"llm_timeout_sec": 42, "system_prompt": "Be terse."}, cfg, env=env)
    assert got.provider == "anthropic"  # the environment wins ...
    assert got.timeout_sec == 5
    data = json.loads(cfg.read_text())  # ... but only saved values reach the file
    assert data == {
        "provider": "openai",
        "providers": {"openai": {"model": "gpt-4o", "api_key": KEY}},
        "llm_timeout_sec": 42,
        "system_prompt": "Be terse.",
    }
    assert "ant-env-key-123" not in cfg.read_text()


def test_save_clears_with_empty_string_and_keeps_with_none(cfg: Path) -> None:
    s.save_settings({"provider": "openai", "model": "gpt-4o", "api_key": KEY}, cfg, env={})
    s.save_settings({"provider": "openai", "model": None, "api_key": ""}, cfg, env={})
    assert json.loads(cfg.read_text())["providers"] == {"openai": {"model": "gpt-4o"}}
    got = s.save_settings({"providers": {"openai": {"model": ""}}}, cfg, env={})
    assert "providers" not in json.loads(cfg.read_text())
    assert got.providers["openai"].model == "gpt-4o-mini"


def test_save_system_prompt_presets_prices_debug(cfg: Path) -> None:
    got = s.load_settings({}, cfg)
    assert got.system_prompt == s.DEFAULT_SYSTEM_PROMPT and got.debug is False
    got = s.save_settings(
        {
            "system_prompt": "Custom.",
            "debug": True,
            "presets": {"fast": {"prompt": "Go fast.", "kind": "tuning"}, "plain": "Plain."},
            "prices": {"local": {"input_per_mtok": 0.1, "output_per_mtok": 0.2}},
        },
        cfg,
        env={},
    )
    assert got.system_prompt == "Custom." and got.debug is True
    assert got.presets == {
        "fast": s.PromptPreset(prompt="Go fast.", kind="tuning"),
        "plain": s.PromptPreset(prompt="Plain.", kind="system"),
    }
    assert got.prices == {"local": s.ModelPrice(input_per_mtok=0.1, output_per_mtok=0.2)}
    got = s.save_settings({"presets": {"fast": None}, "system_prompt": ""}, cfg, env={})
    assert list(got.presets) == ["plain"]
    assert got.system_prompt == s.DEFAULT_SYSTEM_PROMPT


@pytest.mark.parametrize(
    ("update", "match"),
    [
        ({"llm_temperature": 9}, "llm_temperature"),
        ({"provider": "gemini"}, "unknown provider"),
        ({"api_key": "sk-x"}, "pass provider"),
        ({"colour": "red"}, "colour"),
        ({"providers": {"openai": {"base_url": "not a url"}}}, "base_url"),
        ({"providers": {"nope": {}}}, "nope"),
        ({"prices": {"m": {"input_per_mtok": 1}}}, "output_per_mtok"),
    ],
)
def test_bad_update_changes_nothing(cfg: Path, update: dict[str, Any], match: str) -> None:
    write(cfg, {"provider": "none", "llm_temperature": 0.7})
    before = cfg.read_bytes()
    with pytest.raises(InvalidParams, match=match):
        s.save_settings(update, cfg, env={})
    assert cfg.read_bytes() == before


def test_save_refuses_to_overwrite_a_broken_file(cfg: Path) -> None:
    write(cfg, "{broken")
    with pytest.raises(ConfigError):
        s.save_settings({"provider": "openai"}, cfg, env={})
    assert cfg.read_text() == "{broken"


# -- masking ---------------------------------------------------------------------------


def test_mask() -> None:
    assert s.mask(None) is None
    assert s.mask("") == ""
    assert s.mask(KEY) == "****1234"
    assert s.mask("abcdefgh") == "****gh"
    assert s.mask("abc") == "****"
    assert KEY not in (s.mask(KEY) or "")


def test_redact() -> None:
    other = "ant-api03-zzzzyyyyxxxx"
    text = f"error: bad key {KEY} (also {other}); x=x"
    out = s.redact(text, [KEY, other, None, "x"])
    assert KEY not in out and other not in out
    assert "****1234" in out and "x=x" in out  # short placeholders are left alone


def test_active_overrides_masks_keys() -> None:
    env = {
        "TRAINEE_LLM_PROVIDER": "openai",
        "LLM_PROVIDER": "anthropic",
        "OPENAI_API_KEY": KEY,
        "OPENAI_MODEL": "gpt-4o",
        "TRAINEE_LLM_TEMPERATURE": "0.3",
        "UNRELATED": "1",
        "ANTHROPIC_MODEL": "",
    }
    assert s.active_overrides(env) == {
        "TRAINEE_LLM_PROVIDER": "openai",
        "OPENAI_API_KEY": "****1234",
        "OPENAI_MODEL": "gpt-4o",
        "TRAINEE_LLM_TEMPERATURE": "0.3",
    }
    assert s.active_overrides({"LLM_PROVIDER": "anthropic"}) == {"LLM_PROVIDER": "anthropic"}


def test_masked_view_has_no_secret(cfg: Path) -> None:
    write(cfg, {"provider": "openai", "providers": {"openai": {"api_key": KEY}}})
    env = {
        "ANTHROPIC_API_KEY": "ant-env-key-5678",
        "TRAINEE_LLM_BASE_URL": "http://user:hunter22@127.0.0.1:8080/v1",
        "TRAINEE_LLM_MODEL": "qwen",
    }
    settings = s.load_settings(env, cfg)
    view = s.masked_view(settings, env)
    text = json.dumps(view)
    assert KEY not in text and "ant-env-key-5678" not in text and "hunter22" not in text
    assert view["providers"]["openai"]["api_key"] == "****1234"
    assert view["providers"]["openai"]["api_key_set"] is True
    assert view["overrides"]["ANTHROPIC_API_KEY"] == "****5678"
    assert view["failover_order"] == ["openai", "anthropic", "openai_compatible"]
    assert view["provider"] == "openai" and view["llm_timeout_sec"] == 600.0
    assert (
        view["providers"]["openai_compatible"]["base_url"] == "http://user:****@127.0.0.1:8080/v1"
    )
    assert set(s.secret_values(settings)) == {KEY, "ant-env-key-5678"}


# -- failover order -------------------------------------------------------------------


def test_candidates_order(cfg: Path) -> None:
    env = {
        "TRAINEE_LLM_PROVIDER": "moonshot",
        "OPENAI_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "TRAINEE_LLM_MODEL": "m",  # openai_compatible without a base URL: not a candidate
    }
    names = [p.name for p in s.candidates(s.load_settings(env, cfg))]
    assert names == ["moonshot", "openai", "anthropic"]


def test_no_candidates_for_provider_none(cfg: Path) -> None:
    assert s.candidates(s.load_settings({"OPENAI_API_KEY": KEY}, cfg)) == []
