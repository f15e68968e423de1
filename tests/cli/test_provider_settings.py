"""White-box test: imports ketch implementation modules (private) directly.

Provider tables of the command's config reach the model: ``api`` and ``idle_timeout``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ketch.cli._config import ConfigError
from ketch.cli._config import load_settings
from ketch.cli._factory import build_model
from ketch.llm import _registry as registry


@pytest.fixture(autouse=True)
def _restore_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    assert registry.get_provider("openai") is not None  # loaded before the copy
    monkeypatch.setattr(registry, "_providers", dict(registry._providers))


def settings_with(tmp_path: Path, table: str):  # type: ignore[no-untyped-def]
    xdg = tmp_path / "xdg"
    (xdg / "ketch").mkdir(parents=True)
    (xdg / "ketch" / "config.toml").write_text(table)
    return load_settings(tmp_path, {}, {"XDG_CONFIG_HOME": str(xdg)})


def test_api_openai_chat_for_openai_is_honoured_for_known_models(tmp_path: Path) -> None:
    from ketch.llm._providers.openai_chat import OpenAIChatModel

    settings = settings_with(tmp_path, '[providers.openai]\napi = "openai-chat"\napi_key = "sk-test"\n')
    for spec in ("openai:gpt-5-mini", "openai:gpt-4o", "openai:some-new-model"):
        model = build_model(spec, settings)
        assert isinstance(model, OpenAIChatModel), spec
        assert model.base_url == "https://api.openai.com/v1"


def test_idle_timeout_from_a_provider_table(tmp_path: Path) -> None:
    settings = settings_with(tmp_path, '[providers.openai]\nidle_timeout = 45\napi_key = "sk-test"\n')
    model = build_model("openai:gpt-5-mini", settings)
    assert model.idle_timeout == 45.0  # type: ignore[attr-defined]
    assert build_model("anthropic:claude-sonnet-4-5", settings).idle_timeout == 90.0  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["0", "-1", '"soon"', "nan"])
def test_a_bad_idle_timeout_is_a_config_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="idle_timeout"):
        settings = settings_with(tmp_path, f"[providers.openai]\nidle_timeout = {value}\n")
        build_model("openai:gpt-5-mini", settings)
