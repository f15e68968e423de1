"""The model registry: providers, context windows, output limits, prices, thinking.

:class:`ModelInfo` describes one model and :class:`ProviderInfo` one provider (its
wire API, default base URL and API-key environment variables). The registry ships data
for mainstream models (the package file ``models.json``, read on the first lookup) and
accepts :func:`register_model` and :func:`register_provider` at run time. Unknown
models get :func:`default_info` through :func:`get_info`: cost 0, a 128k window, no
crash.

Base URLs end before the endpoint path (``https://api.openai.com/v1``); adapters append
their own (``/chat/completions``, ``/responses``, ``/messages``, ``/models/…``).

``compat`` holds flags for an adapter, named as that adapter names them (for the Chat
Completions adapter, the fields of its ``Compat``: ``max_tokens_field``,
``system_role`` …). The adapter's own preset for a provider is the starting point;
provider flags here override it and a model's flags override the provider's.

Thinking levels are mapped per model by :func:`clamp_thinking`; token budgets for
budget-style providers come from :func:`thinking_budget_tokens`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import Literal

import msgspec

from ._messages import Usage
from ._model import DEFAULT_CONTEXT_WINDOW
from ._model import THINKING_LEVELS
from ._model import ThinkingLevel


class Pricing(msgspec.Struct, kw_only=True, frozen=True):
    """US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0

    def apply(self, usage: Usage) -> None:
        """Recompute ``usage.cost`` from its token counts."""
        c = usage.cost
        c.input = self.input * usage.input / 1e6
        c.output = self.output * usage.output / 1e6
        c.cache_read = self.cache_read * usage.cache_read / 1e6
        c.cache_write = self.cache_write * usage.cache_write / 1e6
        c.total = c.input + c.output + c.cache_read + c.cache_write


class ModelInfo(msgspec.Struct, kw_only=True, frozen=True):
    """What ketch knows about one model.

    ``thinking`` maps each supported level to the provider's value for it (a reasoning
    effort string, or a token budget as an int); levels absent from the map are
    clamped to the nearest supported one. An empty map means no reasoning support.
    ``thinking_style`` says how the value is sent: ``effort`` (OpenAI
    ``reasoning_effort``), ``budget`` (Anthropic/Gemini token budgets) or ``adaptive``
    (Anthropic adaptive thinking with an effort). An ``off`` entry gives the value that
    turns reasoning off where the provider needs one (a Gemini budget of 0).

    ``reasoning`` is true when the model produces reasoning at all, including models
    that always reason and take no control (``deepseek-reasoner``). ``aliases`` are
    other names :func:`lookup` accepts for the model. ``compat`` holds adapter flags
    (see the module documentation).
    """

    id: str
    provider: str
    api: str
    base_url: str = ""
    name: str = ""
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_output_tokens: int = 16_384
    input_modalities: tuple[Literal["text", "image"], ...] = ("text",)
    pricing: Pricing = Pricing()
    thinking: dict[ThinkingLevel, str | int] = msgspec.field(default_factory=dict)
    thinking_style: Literal["none", "effort", "budget", "adaptive"] = "none"
    reasoning: bool = False
    aliases: tuple[str, ...] = ()
    compat: dict[str, Any] = msgspec.field(default_factory=dict)


DOCUMENT_APIS = ("anthropic-messages", "gemini", "openai-responses")
"""The APIs ketch sends documents to natively (and OpenAI's own Chat Completions)."""


def takes_documents(provider: str, api: str) -> bool:
    """Whether ketch sends a :class:`~ketch.llm.DocumentContent` natively to a model of
    ``provider`` on ``api``: Anthropic, Gemini, the OpenAI Responses API and OpenAI's
    own Chat Completions (another server of that API gets a plain-text document as text
    and refuses a PDF)."""
    return api in DOCUMENT_APIS or (api == "openai-chat" and provider == "openai")


def takes_audio(provider: str, api: str) -> bool:
    """Whether ketch sends an :class:`~ketch.llm.AudioContent` to a model of ``provider``
    on ``api``: Gemini and OpenAI's own Chat Completions."""
    return api == "gemini" or (api == "openai-chat" and provider == "openai")


def default_info(provider: str, api: str, id: str, base_url: str = "") -> ModelInfo:
    """Info for a model the registry does not know: zero cost, 128k window."""
    return ModelInfo(id=id, provider=provider, api=api, base_url=base_url)


class ProviderInfo(msgspec.Struct, kw_only=True, frozen=True):
    """A provider: its wire ``api``, default ``base_url`` and where its key comes from.

    ``api_key_env`` lists environment variables tried in order; ``requires_key`` is
    false for servers that accept requests without one (local servers). ``compat``
    holds the adapter flags every model of this provider starts from.
    ``default_model`` is used when a spec names only the provider (``"local"``).
    """

    name: str
    api: str
    base_url: str = ""
    api_key_env: tuple[str, ...] = ()
    requires_key: bool = True
    compat: dict[str, Any] = msgspec.field(default_factory=dict)
    default_model: str = ""


DEFAULT_THINKING_BUDGETS: dict[ThinkingLevel, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
}
"""Token budgets per level for budget-style thinking when a model's map has no int."""

_LEVELS: tuple[ThinkingLevel, ...] = THINKING_LEVELS[1:]
_RANK: dict[str, int] = {level: i for i, level in enumerate(_LEVELS)}
_DATED = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")

# Loaded on first use: (provider, id) -> info, (provider, alias) -> id, name -> provider.
_models: dict[tuple[str, str], ModelInfo] = {}
_aliases: dict[tuple[str, str], str] = {}
_providers: dict[str, ProviderInfo] = {}
# Provider name -> the API its shipped models took from it: a model row that names no API
# follows its provider's API, also after the provider is registered again with another.
_inherited_api: dict[str, str] = {}
_loaded = False
# The order of a shipped model's "pricing" list.
_PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    # The shipped data is the package file models.json; its "_comment" says what the
    # fields hold (prices in US dollars per million tokens, the 200k-token tier for
    # tiered prices, thinking presets). pkgutil reads it also from a zip and imports in
    # about 0.5 ms, where importlib.resources takes about 8.
    import pkgutil

    raw = pkgutil.get_data("ketch.llm", "models.json")
    if raw is None:  # only a loader that cannot read package data
        raise RuntimeError("ketch.llm: the shipped model data (models.json) cannot be read")
    data = msgspec.json.decode(raw)
    # A null budget in a thinking preset is the default budget for its level.
    presets: dict[str, dict[str, str | int]] = {
        preset: {level: DEFAULT_THINKING_BUDGETS[level] if v is None else v for level, v in levels.items()}
        for preset, levels in data["presets"]["thinking"].items()
    }
    for name, row in data["providers"].items():
        _providers.setdefault(name, ProviderInfo(name=name, **_tuples(row)))
        _inherited_api[name] = row["api"]
    for row in data["models"]:
        fields = _tuples(row)
        provider = fields["provider"]
        fields.setdefault("api", _providers[provider].api)
        fields["pricing"] = Pricing(**dict(zip(_PRICE_FIELDS, row["pricing"], strict=True)))
        thinking = fields.get("thinking")
        if thinking:
            fields["thinking"] = dict(presets[thinking])
            fields.setdefault("reasoning", True)
        if (provider, fields["id"]) not in _models:
            _add(ModelInfo(**fields))
    _loaded = True


def _tuples(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its JSON arrays as the structs' tuples (api_key_env, aliases, modalities)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}


def _add(info: ModelInfo) -> None:
    _models[(info.provider, info.id)] = info
    for alias in info.aliases:
        _aliases[(info.provider, alias)] = info.id


def lookup(provider: str, id: str) -> ModelInfo | None:
    """The registered info for ``provider``'s model ``id``, or None.

    ``id`` may be an alias, or a dated snapshot of a known model
    (``gpt-4o-2024-08-06``, ``claude-sonnet-4-5-20250929``): the known model's info
    is returned under the requested id.
    """
    _ensure_loaded()
    info = _models.get((provider, id))
    if info is not None:
        return info
    canonical = _aliases.get((provider, id))
    if canonical is not None:
        return _models.get((provider, canonical))
    base = _DATED.sub("", id)
    if base != id:
        found = lookup(provider, base)
        if found is not None:
            return msgspec.structs.replace(found, id=id, aliases=())
    return None


def get_info(provider: str, id: str, *, api: str | None = None, base_url: str | None = None) -> ModelInfo:
    """Everything needed to build ``provider``'s model ``id``; never fails.

    Known models come from the registry, unknown ones from :func:`default_info`. The
    provider fills in the API, base URL and compat flags the model does not set (a
    shipped model that names no API of its own follows its provider's, also when the
    provider is registered again with another API: ``api = "openai-chat"`` for
    ``openai`` in the command's config); ``api`` and ``base_url`` override both.
    """
    prov = get_provider(provider)
    info = lookup(provider, id)
    if info is None:
        info = default_info(provider, api or (prov.api if prov else "openai-chat"), id)
    elif api is None and prov is not None and prov.api != info.api and info.api == _inherited_api.get(provider):
        api = prov.api
    changes: dict[str, Any] = {}
    if api and api != info.api:
        changes["api"] = api
    url = base_url or info.base_url or (prov.base_url if prov else "")
    if url != info.base_url:
        changes["base_url"] = url
    if prov is not None and prov.compat:
        changes["compat"] = {**prov.compat, **info.compat}
    return msgspec.structs.replace(info, **changes) if changes else info


def register_model(info: ModelInfo) -> ModelInfo:
    """Add or replace a model (keyed by provider and id); returns it."""
    _ensure_loaded()
    _add(info)
    return info


def list_models(provider: str | None = None) -> list[ModelInfo]:
    """Every registered model, or only ``provider``'s, in registration order."""
    _ensure_loaded()
    if provider is None:
        return list(_models.values())
    return [m for (p, _), m in _models.items() if p == provider]


def register_provider(
    name: str,
    *,
    api: str = "openai-chat",
    base_url: str = "",
    api_key_env: str | Iterable[str] = (),
    requires_key: bool | None = None,
    compat: Mapping[str, Any] | None = None,
    default_model: str = "",
) -> ProviderInfo:
    """Add or replace a provider, typically an OpenAI-compatible endpoint::

        register_provider("myprovider", base_url="https://llm.example.com/v1",
                          api_key_env="MYPROVIDER_API_KEY")
        model = get_model("myprovider:some-model")

    ``requires_key`` defaults to whether any ``api_key_env`` is given.
    """
    if not name or ":" in name:
        raise ValueError(f"Invalid provider name {name!r}: it must be non-empty and contain no ':'")
    _ensure_loaded()
    envs = (api_key_env,) if isinstance(api_key_env, str) else tuple(api_key_env)
    info = ProviderInfo(
        name=name,
        api=api,
        base_url=base_url,
        api_key_env=envs,
        requires_key=bool(envs) if requires_key is None else requires_key,
        compat=dict(compat) if compat else {},
        default_model=default_model,
    )
    _providers[name] = info
    return info


def get_provider(name: str) -> ProviderInfo | None:
    """The registered provider called ``name``, or None."""
    _ensure_loaded()
    return _providers.get(name)


def list_providers() -> list[ProviderInfo]:
    """Every registered provider, in registration order."""
    _ensure_loaded()
    return list(_providers.values())


def clamp_thinking(info: ModelInfo, level: str) -> tuple[ThinkingLevel, str | int | None]:
    """The level ``info``'s model supports for ``level``, and the provider value for it.

    A supported level maps to itself. An unsupported one steps up to the nearest
    supported level, then down when nothing higher is supported. ``off``, an unknown
    level and any level on a model without thinking control give ``("off", v)``, where
    ``v`` is the model's ``off`` value (None when it has none).
    """
    levels = info.thinking
    rank = _RANK.get(level)
    if rank is None or not levels:
        return "off", levels.get("off")
    name = _LEVELS[rank]
    if name in levels:
        return name, levels[name]
    for candidate in _LEVELS[rank + 1 :]:
        if candidate in levels:
            return candidate, levels[candidate]
    for candidate in reversed(_LEVELS[:rank]):
        if candidate in levels:
            return candidate, levels[candidate]
    return "off", levels.get("off")


def output_limit(info: ModelInfo, max_tokens: int | None) -> int:
    """The request's output limit before thinking: ``max_tokens``, else the model's
    maximum capped at 32000 (APIs that require a limit, such as Anthropic's, get this)."""
    return max_tokens if max_tokens else min(info.max_output_tokens, 32_000)


def thinking_budget_tokens(
    info: ModelInfo,
    level: str,
    max_tokens: int | None = None,
    *,
    budgets: Mapping[str, int] | None = None,
) -> tuple[int, int]:
    """``(budget, max_tokens)`` for budget-style thinking at ``level``.

    The level is clamped first; its budget comes from ``budgets``, else the model's
    map, else :data:`DEFAULT_THINKING_BUDGETS`. With ``base`` the
    :func:`output_limit`, the request's output limit becomes
    ``min(base + budget, model max)``; when that leaves no room beyond the budget, the
    budget shrinks to ``max(0, limit - 1024)``. ``off`` gives ``(off value or 0, base)``.
    """
    model_max = info.max_output_tokens
    base = output_limit(info, max_tokens)
    clamped, value = clamp_thinking(info, level)
    if clamped == "off":
        return (value if isinstance(value, int) else 0), base
    if budgets is not None and clamped in budgets:
        budget = budgets[clamped]
    elif isinstance(value, int):
        budget = value
    else:
        budget = DEFAULT_THINKING_BUDGETS[clamped]
    limit = min(base + budget, model_max)
    if limit <= budget:
        budget = max(0, limit - 1024)
    return budget, limit
