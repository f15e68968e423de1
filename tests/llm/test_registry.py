"""White-box test: imports ketch implementation modules (private) directly.

The model registry: shipped data, lookups, run-time registration, costs, thinking levels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ketch.llm import Cost
from ketch.llm import Usage
from ketch.llm._registry import DEFAULT_THINKING_BUDGETS
from ketch.llm._registry import ModelInfo
from ketch.llm._registry import Pricing
from ketch.llm._registry import ProviderInfo
from ketch.llm._registry import clamp_thinking
from ketch.llm._registry import default_info
from ketch.llm._registry import get_info
from ketch.llm._registry import get_provider
from ketch.llm._registry import list_models
from ketch.llm._registry import list_providers
from ketch.llm._registry import lookup
from ketch.llm._registry import register_model
from ketch.llm._registry import register_provider
from ketch.llm._registry import thinking_budget_tokens

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_cost_at_sonnet_prices() -> None:
    info = lookup("anthropic", "claude-sonnet-4-5")
    assert info is not None
    usage = Usage(input=1_000_000, output=500_000, cache_read=2_000_000, cache_write=100_000)
    info.pricing.apply(usage)
    c = usage.cost
    assert (c.input, c.output, c.cache_read, c.cache_write) == pytest.approx((3.0, 7.5, 0.6, 0.375), abs=1e-12)
    assert c.total == pytest.approx(11.475, abs=1e-12)


def test_zero_usage_costs_nothing() -> None:
    usage = Usage()
    Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75).apply(usage)
    assert usage.cost == Cost()


def test_shipped_sonnet_4_5() -> None:
    assert lookup("anthropic", "claude-sonnet-4-5") == ModelInfo(
        id="claude-sonnet-4-5",
        provider="anthropic",
        api="anthropic-messages",
        name="Claude Sonnet 4.5",
        context_window=200_000,
        max_output_tokens=64_000,
        input_modalities=("text", "image"),
        pricing=Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75),
        thinking={"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768},
        thinking_style="budget",
        reasoning=True,
    )


def test_shipped_gpt_5_mini() -> None:
    info = lookup("openai", "gpt-5-mini")
    assert info is not None
    assert (info.api, info.context_window, info.max_output_tokens) == ("openai-responses", 400_000, 128_000)
    assert info.pricing == Pricing(input=0.25, output=2.0, cache_read=0.025)
    assert info.thinking == {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high"}
    assert (info.thinking_style, info.reasoning) == ("effort", True)


@pytest.mark.parametrize(
    ("provider", "ids"),
    [
        ("openai", ["gpt-5", "gpt-5-mini", "gpt-5-nano", "gpt-4.1", "gpt-4.1-mini", "gpt-4o", "gpt-4o-mini", "o3", "o4-mini"]),
        ("anthropic", ["claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-sonnet-4", "claude-3-5-haiku"]),
        ("google", ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"]),
        ("deepseek", ["deepseek-chat", "deepseek-reasoner"]),
        ("groq", ["llama-3.3-70b-versatile", "openai/gpt-oss-120b"]),
        ("xai", ["grok-4", "grok-3-mini"]),
        ("mistral", ["mistral-large-latest", "codestral-latest"]),
    ],
)
def test_mainstream_models_are_known(provider: str, ids: list[str]) -> None:
    for id in ids:
        info = lookup(provider, id)
        assert info is not None, id
        assert info.provider == provider
        assert info.pricing.input > 0 and info.pricing.output > 0
        assert info.api == get_provider(provider).api  # type: ignore[union-attr]


def test_non_reasoning_and_always_reasoning_models() -> None:
    gpt4o = lookup("openai", "gpt-4o")
    reasoner = lookup("deepseek", "deepseek-reasoner")
    assert gpt4o is not None and reasoner is not None
    assert (gpt4o.thinking, gpt4o.thinking_style, gpt4o.reasoning) == ({}, "none", False)
    assert (reasoner.thinking, reasoner.thinking_style, reasoner.reasoning) == ({}, "none", True)


def test_alias_resolves_to_the_wire_id() -> None:
    info = lookup("anthropic", "claude-sonnet-4")
    assert info is not None
    assert info.id == "claude-sonnet-4-0"
    assert lookup("anthropic", "claude-3-5-haiku").id == "claude-3-5-haiku-latest"  # type: ignore[union-attr]


def test_dated_snapshot_inherits_the_base_model_under_its_own_id() -> None:
    base = lookup("anthropic", "claude-sonnet-4-5")
    dated = lookup("anthropic", "claude-sonnet-4-5-20250929")
    assert base is not None and dated is not None
    assert dated.id == "claude-sonnet-4-5-20250929"
    assert dated.pricing == base.pricing
    assert dated.context_window == base.context_window
    old = lookup("anthropic", "claude-sonnet-4-20250514")
    assert old is not None and old.id == "claude-sonnet-4-20250514" and old.max_output_tokens == 64_000
    assert lookup("openai", "gpt-4o-2024-08-06").pricing == Pricing(input=2.5, output=10.0, cache_read=1.25)  # type: ignore[union-attr]


def test_unknown_lookups() -> None:
    assert lookup("openai", "gpt-nonexistent") is None
    assert lookup("nobody", "gpt-5") is None
    assert lookup("anthropic", "gpt-5") is None


def test_get_info_known_model_gets_the_provider_base_url() -> None:
    info = get_info("openai", "gpt-5")
    assert info.base_url == "https://api.openai.com/v1"
    assert info.pricing == Pricing(input=1.25, output=10.0, cache_read=0.125)


def test_get_info_unknown_model_is_a_default() -> None:
    info = get_info("ollama", "qwen3")
    assert info == ModelInfo(
        id="qwen3",
        provider="ollama",
        api="openai-chat",
        base_url="http://127.0.0.1:11434/v1",
    )
    assert (info.context_window, info.max_output_tokens, info.pricing) == (128_000, 16_384, Pricing())


def test_get_info_unknown_provider_does_not_crash() -> None:
    assert get_info("nowhere", "m1") == default_info("nowhere", "openai-chat", "m1")
    assert get_info("nowhere", "m1", api="gemini", base_url="http://h/v1") == ModelInfo(
        id="m1", provider="nowhere", api="gemini", base_url="http://h/v1"
    )


def test_get_info_overrides() -> None:
    info = get_info("openai", "gpt-4o", api="openai-chat", base_url="http://127.0.0.1:9/v1")
    assert (info.api, info.base_url, info.pricing.input) == ("openai-chat", "http://127.0.0.1:9/v1", 2.5)
    assert lookup("openai", "gpt-4o").api == "openai-responses"  # type: ignore[union-attr]


def test_register_model_adds_and_replaces() -> None:
    info = ModelInfo(id="m-1", provider="test-reg", api="openai-chat", context_window=8_000, aliases=("m1",))
    assert register_model(info) is info
    assert lookup("test-reg", "m-1") is info
    assert lookup("test-reg", "m1") is info
    replacement = ModelInfo(id="m-1", provider="test-reg", api="openai-chat", context_window=16_000)
    register_model(replacement)
    assert lookup("test-reg", "m-1") is replacement
    register_model(ModelInfo(id="m-2", provider="test-reg", api="openai-chat"))
    assert [m.id for m in list_models("test-reg")] == ["m-1", "m-2"]


def test_register_model_overrides_shipped_data() -> None:
    custom = ModelInfo(id="grok-3", provider="xai", api="openai-chat", pricing=Pricing(input=1.0, output=2.0))
    original = lookup("xai", "grok-3")
    try:
        register_model(custom)
        assert get_info("xai", "grok-3").pricing == Pricing(input=1.0, output=2.0)
    finally:
        assert original is not None
        register_model(original)


def test_list_models() -> None:
    ids = [m.id for m in list_models("google")]
    assert ids[:3] == ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"]
    everything = list_models()
    assert {m.provider for m in everything} >= {"openai", "anthropic", "google", "deepseek", "groq", "xai", "mistral"}
    assert len(everything) == len({(m.provider, m.id) for m in everything})


def test_shipped_providers() -> None:
    table = {p.name: (p.api, p.base_url, p.api_key_env, p.requires_key) for p in list_providers()}
    assert table["openai"] == ("openai-responses", "https://api.openai.com/v1", ("OPENAI_API_KEY",), True)
    assert table["anthropic"] == ("anthropic-messages", "https://api.anthropic.com/v1", ("ANTHROPIC_API_KEY",), True)
    assert table["google"] == (
        "gemini",
        "https://generativelanguage.googleapis.com/v1beta",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        True,
    )
    assert table["ollama"] == ("openai-chat", "http://127.0.0.1:11434/v1", ("OLLAMA_API_KEY",), False)
    assert table["local"] == ("local", "", (), False)
    for name, env in [
        ("groq", "GROQ_API_KEY"),
        ("deepseek", "DEEPSEEK_API_KEY"),
        ("openrouter", "OPENROUTER_API_KEY"),
        ("together", "TOGETHER_API_KEY"),
        ("mistral", "MISTRAL_API_KEY"),
        ("xai", "XAI_API_KEY"),
    ]:
        assert table[name][0] == "openai-chat"
        assert table[name][2] == (env,)
        assert table[name][1].startswith("https://")
    assert {"vllm", "lmstudio", "llamacpp"} <= set(table)


def test_register_provider() -> None:
    info = register_provider("test-prov", base_url="https://llm.example.com/v1", api_key_env="TEST_PROV_KEY",
                             compat={"max_tokens_field": "max_tokens"})
    assert info == ProviderInfo(
        name="test-prov",
        api="openai-chat",
        base_url="https://llm.example.com/v1",
        api_key_env=("TEST_PROV_KEY",),
        requires_key=True,
        compat={"max_tokens_field": "max_tokens"},
    )
    assert get_provider("test-prov") is info
    assert get_info("test-prov", "any-model") == ModelInfo(
        id="any-model",
        provider="test-prov",
        api="openai-chat",
        base_url="https://llm.example.com/v1",
        compat={"max_tokens_field": "max_tokens"},
    )
    keyless = register_provider("test-keyless", base_url="http://127.0.0.1:1/v1")
    assert (keyless.api_key_env, keyless.requires_key) == ((), False)


def test_model_compat_overrides_provider_compat() -> None:
    register_provider("test-compat", base_url="http://x/v1", compat={"a": 1, "b": 1})
    register_model(ModelInfo(id="m", provider="test-compat", api="openai-chat", compat={"b": 2}))
    assert get_info("test-compat", "m").compat == {"a": 1, "b": 2}


@pytest.mark.parametrize("name", ["", "a:b"])
def test_register_provider_rejects_bad_names(name: str) -> None:
    with pytest.raises(ValueError) as e:
        register_provider(name, base_url="http://x")
    assert str(e.value) == f"Invalid provider name {name!r}: it must be non-empty and contain no ':'"


# -- thinking levels ------------------------------------------------------------------


def _info(thinking: dict[str, str | int], max_output: int = 64_000) -> ModelInfo:
    return ModelInfo(id="t", provider="t", api="t", thinking=thinking, max_output_tokens=max_output)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "level", "expected"),
    [
        (("openai", "gpt-5"), "minimal", ("minimal", "minimal")),
        (("openai", "gpt-5"), "high", ("high", "high")),
        (("openai", "gpt-5"), "xhigh", ("high", "high")),
        (("openai", "o3"), "minimal", ("low", "low")),
        (("xai", "grok-3-mini"), "medium", ("high", "high")),
        (("xai", "grok-3-mini"), "minimal", ("low", "low")),
        (("xai", "grok-3-mini"), "xhigh", ("high", "high")),
        (("anthropic", "claude-sonnet-4-5"), "xhigh", ("xhigh", 32768)),
        (("anthropic", "claude-opus-4-1"), "xhigh", ("high", 16384)),
        (("anthropic", "claude-opus-4-1"), "off", ("off", None)),
        (("google", "gemini-2.5-flash"), "off", ("off", 0)),
        (("google", "gemini-2.5-flash"), "xhigh", ("xhigh", 24576)),
        (("google", "gemini-2.5-pro"), "off", ("off", None)),
        (("openai", "gpt-4o"), "high", ("off", None)),
        (("deepseek", "deepseek-reasoner"), "high", ("off", None)),
        (("openai", "gpt-5"), "max", ("off", None)),
    ],
)
def test_clamp_thinking_shipped(model: tuple[str, str], level: str, expected: tuple[str, object]) -> None:
    info = lookup(*model)
    assert info is not None
    assert clamp_thinking(info, level) == expected


def test_clamp_steps_up_before_down() -> None:
    info = _info({"low": "L", "high": "H"})
    assert clamp_thinking(info, "minimal") == ("low", "L")
    assert clamp_thinking(info, "medium") == ("high", "H")
    assert clamp_thinking(info, "xhigh") == ("high", "H")
    only_off = _info({"off": 0})
    assert clamp_thinking(only_off, "high") == ("off", 0)


def test_default_budgets() -> None:
    assert DEFAULT_THINKING_BUDGETS == {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768}


def test_thinking_budget_tokens() -> None:
    sonnet = lookup("anthropic", "claude-sonnet-4-5")
    opus = lookup("anthropic", "claude-opus-4-1")
    assert sonnet is not None and opus is not None
    # base = min(64000, 32000); max = min(32000 + 8192, 64000)
    assert thinking_budget_tokens(sonnet, "medium") == (8192, 40192)
    assert thinking_budget_tokens(sonnet, "xhigh", 50_000) == (32768, 64_000)
    assert thinking_budget_tokens(sonnet, "low", 1000) == (2048, 3048)
    # Opus 4.1 has no xhigh: clamped to high; limit is the model's 32000
    assert thinking_budget_tokens(opus, "xhigh") == (16384, 32_000)
    assert thinking_budget_tokens(opus, "off") == (0, 32_000)
    assert thinking_budget_tokens(opus, "off", 500) == (0, 500)


def test_thinking_budget_shrinks_when_the_limit_leaves_no_room() -> None:
    small = _info({"high": 16384}, max_output=4096)
    assert thinking_budget_tokens(small, "high") == (3072, 4096)
    tiny = _info({"high": 16384}, max_output=1000)
    assert thinking_budget_tokens(tiny, "high") == (0, 1000)


def test_thinking_budget_overrides_and_effort_models() -> None:
    sonnet = lookup("anthropic", "claude-sonnet-4-5")
    assert sonnet is not None
    assert thinking_budget_tokens(sonnet, "medium", 10_000, budgets={"medium": 5000}) == (5000, 15_000)
    effort = _info({"low": "low", "high": "high"})
    assert thinking_budget_tokens(effort, "medium", 10_000) == (16384, 26_384)
    flash = lookup("google", "gemini-2.5-flash")
    assert flash is not None
    assert thinking_budget_tokens(flash, "off", 2000) == (0, 2000)


def test_data_is_loaded_lazily() -> None:
    code = (
        "import ketch.llm._registry as r; "
        "print(r._loaded, bool(r._models)); "
        "r.lookup('openai', 'gpt-5'); print(r._loaded, bool(r._models))"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False", "True", "True"]
