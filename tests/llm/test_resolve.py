"""White-box test: imports ketch implementation modules (private) directly.

Resolving "provider:model" specs into model objects."""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Mapping
from typing import Any

import pytest

from ketch.llm import Request
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm._registry import ModelInfo
from ketch.llm._registry import get_info
from ketch.llm._registry import list_providers
from ketch.llm._registry import register_model
from ketch.llm._registry import register_provider
from ketch.llm._resolve import get_model
from ketch.llm._resolve import model_class
from ketch.llm._resolve import parse_spec
from ketch.llm._resolve import register_api
from ketch.testing import ScriptedModel


class FakeModel:
    """A model class with the agreed constructor shape."""

    def __init__(
        self,
        id: str,
        *,
        info: ModelInfo,
        provider: str = "fake",
        base_url: str | None = None,
        api_key: str | None = None,
        env_keys: tuple[str, ...] = (),
        requires_key: bool = True,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        self.id = id
        self.info = info
        self.provider = provider
        self.api = info.api
        self.base_url = base_url
        self.api_key = api_key
        self.env_keys = env_keys
        self.requires_key = requires_key
        self.headers = headers
        self.extra = extra

    @property
    def context_window(self) -> int:
        return self.info.context_window

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        raise NotImplementedError


class MinimalModel:
    """A class that takes only id and info (no env_keys): resolve reads the key for it."""

    def __init__(self, id: str, *, info: ModelInfo, api_key: str | None = None) -> None:
        self.id = id
        self.info = info
        self.api_key = api_key
        self.provider = info.provider
        self.api = info.api

    @property
    def context_window(self) -> int:
        return self.info.context_window

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        raise NotImplementedError


register_api("fake-api", FakeModel)
register_api("fake-lazy", f"{__name__}:FakeModel")
register_api("minimal-api", MinimalModel)
register_provider("fakeprov", api="fake-api", base_url="http://127.0.0.1:9/v1", api_key_env=("FAKEPROV_KEY",))
register_provider("minimalprov", api="minimal-api", api_key_env=("MINIMAL_A", "MINIMAL_B"))


def known() -> str:
    return ", ".join(p.name for p in list_providers())


def test_builds_with_registry_data() -> None:
    model = get_model("fakeprov:m-1")
    assert isinstance(model, FakeModel)
    assert (model.id, model.provider, model.api) == ("m-1", "fakeprov", "fake-api")
    assert model.base_url == "http://127.0.0.1:9/v1"
    assert (model.api_key, model.env_keys, model.requires_key, model.headers) == (None, ("FAKEPROV_KEY",), True, None)
    assert model.info == get_info("fakeprov", "m-1")
    assert model.extra == {}


def test_overrides_and_extra_keywords() -> None:
    model = get_model(
        "fakeprov:m-1", base_url="http://127.0.0.1:10/v1", api_key="sk-x", headers={"x-a": "1"}, timeout=5.0
    )
    assert isinstance(model, FakeModel)
    assert (model.base_url, model.api_key, model.headers) == ("http://127.0.0.1:10/v1", "sk-x", {"x-a": "1"})
    assert model.info.base_url == "http://127.0.0.1:10/v1"
    assert model.extra == {"timeout": 5.0}


def test_registered_model_info_is_used() -> None:
    info = register_model(ModelInfo(id="big", provider="fakeprov", api="fake-api", context_window=1_000_000))
    model = get_model("fakeprov:big")
    assert isinstance(model, FakeModel)
    assert model.info.context_window == 1_000_000
    assert model.info.base_url == "http://127.0.0.1:9/v1"
    own = ModelInfo(id="other", provider="fakeprov", api="fake-api", max_output_tokens=7)
    explicit = get_model("fakeprov:big", info=own)
    assert isinstance(explicit, FakeModel)
    assert (explicit.id, explicit.info) == ("other", own)
    assert info.context_window == 1_000_000


def test_api_override_picks_another_class() -> None:
    model = get_model("fakeprov:m", api="fake-lazy")
    assert isinstance(model, FakeModel)
    assert model.api == "fake-lazy"


def test_string_targets_are_imported_on_first_use() -> None:
    register_api("fake-lazy-2", f"{__name__}:MinimalModel")
    assert model_class("fake-lazy-2") is MinimalModel


def test_key_is_read_for_classes_without_env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINIMAL_A", raising=False)
    monkeypatch.setenv("MINIMAL_B", "key-b")
    model = get_model("minimalprov:m")
    assert isinstance(model, MinimalModel)
    assert model.api_key == "key-b"
    monkeypatch.setenv("MINIMAL_A", "key-a")
    assert get_model("minimalprov:m").api_key == "key-a"  # type: ignore[attr-defined]
    assert get_model("minimalprov:m", api_key="given").api_key == "given"  # type: ignore[attr-defined]


def test_unaccepted_registry_keywords_are_not_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINIMAL_A", raising=False)
    monkeypatch.delenv("MINIMAL_B", raising=False)
    model = get_model("minimalprov:m")
    assert isinstance(model, MinimalModel)
    assert model.api_key is None


def test_model_instances_pass_through() -> None:
    model = ScriptedModel([])
    assert get_model(model) is model
    with pytest.raises(TypeError) as e:
        get_model(model, api_key="x")
    assert str(e.value) == "get_model() takes keyword overrides only with a 'provider:model' string"


def test_model_ids_may_contain_colons_and_slashes() -> None:
    assert parse_spec("ollama:qwen3:8b") == ("ollama", "qwen3:8b")
    assert parse_spec("openrouter:anthropic/claude-sonnet-4.5") == ("openrouter", "anthropic/claude-sonnet-4.5")
    assert parse_spec("local:/models/x.gguf") == ("local", "/models/x.gguf")


def test_bare_ids_are_inferred_when_unique() -> None:
    assert parse_spec("gpt-5-mini") == ("openai", "gpt-5-mini")
    assert parse_spec("claude-sonnet-4-5") == ("anthropic", "claude-sonnet-4-5")
    assert parse_spec("gemini-2.5-flash") == ("google", "gemini-2.5-flash")
    assert parse_spec("claude-sonnet-4") == ("anthropic", "claude-sonnet-4")


def test_ambiguous_bare_id() -> None:
    register_provider("dup-a", base_url="http://127.0.0.1:1/v1")
    register_provider("dup-b", base_url="http://127.0.0.1:2/v1")
    register_model(ModelInfo(id="twin-model", provider="dup-a", api="openai-chat"))
    register_model(ModelInfo(id="twin-model", provider="dup-b", api="openai-chat"))
    with pytest.raises(ValueError) as e:
        parse_spec("twin-model")
    assert str(e.value) == (
        "Model 'twin-model' is offered by several providers (dup-a, dup-b); write it as 'provider:twin-model'"
    )


def test_unknown_bare_id() -> None:
    with pytest.raises(ValueError) as e:
        get_model("no-such-model")
    assert str(e.value) == f"Unknown model 'no-such-model': write it as 'provider:model' (known providers: {known()})"


def test_unknown_provider() -> None:
    with pytest.raises(ValueError) as e:
        get_model("nope:some-model")
    assert str(e.value) == (
        f"Unknown provider 'nope' in 'nope:some-model'. Known providers: {known()}. "
        "Register an OpenAI-compatible endpoint with "
        "ketch.llm.register_provider('nope', base_url=..., api_key_env=...)"
    )


def test_spec_errors() -> None:
    with pytest.raises(ValueError) as e:
        get_model("openai:")
    assert str(e.value) == "Missing model id in 'openai:': write it as 'openai:<model>'"
    with pytest.raises(ValueError) as e:
        get_model("anthropic")
    assert str(e.value) == "Provider 'anthropic' needs a model id: write it as 'anthropic:<model>'"
    with pytest.raises(ValueError) as e:
        get_model("")
    assert str(e.value) == "Empty model spec: write it as 'provider:model'"


def test_unknown_api() -> None:
    register_provider("noapi", api="no-such-api", base_url="http://127.0.0.1:1")
    with pytest.raises(ValueError) as e:
        get_model("noapi:m")
    assert str(e.value).startswith("No model class registered for api 'no-such-api'; known apis: ")
    assert str(e.value).endswith("Register one with ketch.llm.register_api(api, 'module:Class')")
    with pytest.raises(ValueError) as e:
        register_api("x", "no-colon")
    assert str(e.value) == "Expected 'module:Class' for api 'x', got 'no-colon'"


def test_default_model_for_a_provider_alone() -> None:
    register_provider("withdefault", api="fake-api", default_model="house-model")
    model = get_model("withdefault")
    assert isinstance(model, FakeModel)
    assert model.id == "house-model"


# -- the real adapters ---------------------------------------------------------------------


def test_openai_chat_providers() -> None:
    from ketch.llm._providers.openai_chat import PRESETS
    from ketch.llm._providers.openai_chat import Compat
    from ketch.llm._providers.openai_chat import OpenAIChatModel

    groq = get_model("groq:llama-3.3-70b-versatile")
    assert isinstance(groq, OpenAIChatModel)
    assert (groq.provider, groq.id, groq.base_url) == ("groq", "llama-3.3-70b-versatile", "https://api.groq.com/openai/v1")
    assert (groq.env_keys, groq.requires_key) == (("GROQ_API_KEY",), True)
    assert groq.compat == PRESETS["groq"]
    assert groq.info.pricing.input == 0.59

    ollama = get_model("ollama:qwen3")
    assert isinstance(ollama, OpenAIChatModel)
    assert (ollama.provider, ollama.base_url, ollama.requires_key) == ("ollama", "http://127.0.0.1:11434/v1", False)
    assert ollama.compat == PRESETS["ollama"]

    chat = get_model("openai:gpt-4o", api="openai-chat", compat={"tool_result_name": True})
    assert isinstance(chat, OpenAIChatModel)
    assert chat.compat == Compat(system_role="auto", tool_call_content="null", tool_result_name=True)


def test_registered_openai_compatible_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    from ketch.llm._providers.openai_chat import Compat
    from ketch.llm._providers.openai_chat import OpenAIChatModel

    register_provider(
        "myprovider", base_url="https://llm.example.com/v1", api_key_env="MYPROVIDER_API_KEY",
        compat={"max_tokens_field": "max_tokens"},
    )
    monkeypatch.setenv("MYPROVIDER_API_KEY", "secret-value")
    model = get_model("myprovider:some-model")
    assert isinstance(model, OpenAIChatModel)
    assert (model.provider, model.id, model.base_url) == ("myprovider", "some-model", "https://llm.example.com/v1")
    assert model.compat == Compat(max_tokens_field="max_tokens")
    assert model.resolve_api_key() == "secret-value"
    assert "secret-value" not in repr(model)
    # Without flags the endpoint has no quirks (not OpenAI's), built either way.
    register_provider("plainprovider", base_url="https://plain.example.com/v1")
    plain = get_model("plainprovider:m")
    assert isinstance(plain, OpenAIChatModel)
    assert plain.compat == Compat() == OpenAIChatModel("m", provider="plainprovider").compat
    assert OpenAIChatModel.compat_for("plainprovider", {"tool_result_name": True}) == Compat(tool_result_name=True)


def test_unknown_compat_flag() -> None:
    with pytest.raises(ValueError) as e:
        get_model("groq:llama-3.3-70b-versatile", compat={"no_such_flag": 1})
    assert str(e.value).startswith("Unknown compat flag(s) ['no_such_flag'] for api 'openai-chat'; known: ")


def test_openai_defaults_to_the_responses_api() -> None:
    from ketch.llm._providers.openai_responses import OpenAIResponsesModel

    model = get_model("openai:gpt-5-mini")
    assert isinstance(model, OpenAIResponsesModel)
    assert (model.provider, model.api, model.id, model.base_url) == (
        "openai", "openai-responses", "gpt-5-mini", "https://api.openai.com/v1"
    )
    assert model.info.context_window == 400_000


def test_local_specs() -> None:
    assert parse_spec("local") == ("local", "smollm2")
    assert parse_spec("local:/models/qwen.gguf") == ("local", "/models/qwen.gguf")
    info = get_info("local", "smollm2")
    assert (info.api, info.context_window, info.max_output_tokens) == ("local", 8_192, 2_048)
    path_info = get_info("local", "/models/qwen.gguf")
    assert (path_info.id, path_info.provider, path_info.api) == ("/models/qwen.gguf", "local", "local")


def test_a_provider_registered_with_another_api_takes_its_known_models_along(monkeypatch: pytest.MonkeyPatch) -> None:
    from ketch.llm import _registry as registry
    from ketch.llm._providers.openai_chat import OpenAIChatModel
    from ketch.llm._providers.openai_responses import OpenAIResponsesModel

    assert registry.get_provider("openai") is not None
    monkeypatch.setattr(registry, "_providers", dict(registry._providers))
    assert isinstance(get_model("openai:gpt-4o"), OpenAIResponsesModel)
    register_provider("openai", api="openai-chat", base_url="https://api.openai.com/v1", api_key_env="OPENAI_API_KEY")
    for spec in ("openai:gpt-4o", "openai:gpt-5-mini", "openai:gpt-4o-2024-08-06", "openai:not-in-the-registry"):
        model = get_model(spec)
        assert isinstance(model, OpenAIChatModel), spec
        assert model.api == "openai-chat"
    chat = get_model("openai:gpt-4o")
    assert (chat.info.context_window, chat.info.pricing.input) == (128_000, 2.5)
    # An explicit api still wins over the provider's.
    assert isinstance(get_model("openai:gpt-4o", api="openai-responses"), OpenAIResponsesModel)
