"""From ``"provider:model"`` to a :class:`~ketch.llm.Model`.

:func:`get_model` looks the provider up in :mod:`ketch.llm._registry`, takes the
model's :class:`~ketch.llm.ModelInfo` (or a default for unknown models),
imports the adapter class registered for the model's API (only then, so an unused
adapter costs nothing) and builds it::

    get_model("anthropic:claude-sonnet-4-5")
    get_model("ollama:qwen3")
    get_model("myprovider:some-model")          # after register_provider("myprovider", ...)
    get_model("openai:gpt-4o", api="openai-chat", base_url="http://127.0.0.1:8000/v1")
    get_model("local:/models/qwen.gguf")

Adapter classes are registered per API with :func:`register_api`. They are built as::

    Cls(id, *, info: ModelInfo, provider: str, base_url: str, api_key: str | None,
        env_keys: tuple[str, ...], requires_key: bool, headers: Mapping[str, str] | None,
        **extra)

``info`` is always passed. ``provider``, ``base_url``, ``env_keys`` and
``requires_key`` come from the registry and are passed when the constructor accepts
them (a class that takes no ``env_keys`` gets the key read from the environment as
``api_key``). Keywords given to :func:`get_model` (``api_key``, ``headers`` and any
other) are always passed through. An adapter with endpoint quirks implements
:class:`TakesCompatFlags`: the ``compat`` flags (the registry's, then a ``compat``
mapping given to :func:`get_model`) are passed as its one ``compat`` value,
``Cls.compat_for(provider, flags)``; any other adapter gets the mapping as given.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from collections.abc import Mapping
from functools import cache
from typing import Any
from typing import Protocol
from typing import cast
from typing import runtime_checkable

from ._model import Model
from ._registry import ModelInfo
from ._registry import get_info
from ._registry import get_provider
from ._registry import list_providers
from ._registry import lookup

ModelClass = Callable[..., Model]

_APIS: dict[str, str | ModelClass] = {
    "openai-chat": "ketch.llm._providers.openai_chat:OpenAIChatModel",
    "openai-responses": "ketch.llm._providers.openai_responses:OpenAIResponsesModel",
    "anthropic-messages": "ketch.llm._providers.anthropic:AnthropicModel",
    "gemini": "ketch.llm._providers.gemini:GeminiModel",
    "local": "ketch.llm._providers.local:LocalModel",
}


def register_api(api: str, target: str | ModelClass) -> None:
    """Make ``api`` build models with ``target``: a ``"module:Class"`` path (imported on
    first use) or the class (or any factory with the constructor shape above)."""
    if isinstance(target, str) and target.count(":") != 1:
        raise ValueError(f"Expected 'module:Class' for api {api!r}, got {target!r}")
    _APIS[api] = target


def model_class(api: str) -> ModelClass:
    """The class that builds models of ``api``, importing its module if needed."""
    try:
        target = _APIS[api]
    except KeyError:
        raise ValueError(
            f"No model class registered for api {api!r}; known apis: {', '.join(sorted(_APIS))}. "
            "Register one with ketch.llm.register_api(api, 'module:Class')"
        ) from None
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    cls = cast(ModelClass, getattr(module, attr))
    _APIS[api] = cls
    return cls


def _unknown_provider(name: str, spec: str) -> ValueError:
    known = ", ".join(p.name for p in list_providers())
    return ValueError(
        f"Unknown provider {name!r} in {spec!r}. Known providers: {known}. "
        f"Register an OpenAI-compatible endpoint with "
        f"ketch.llm.register_provider({name!r}, base_url=..., api_key_env=...)"
    )


def _infer_provider(id: str, spec: str) -> str:
    found = [p.name for p in list_providers() if lookup(p.name, id) is not None]
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(
            f"Model {id!r} is offered by several providers ({', '.join(found)}); "
            f"write it as 'provider:{id}'"
        )
    known = ", ".join(p.name for p in list_providers())
    raise ValueError(f"Unknown model {spec!r}: write it as 'provider:model' (known providers: {known})")


def parse_spec(spec: str) -> tuple[str, str]:
    """``(provider, model id)`` for a spec: ``"provider:model"``, a provider alone
    (its default model) or a bare model id the registry knows under one provider."""
    spec = spec.strip()
    name, sep, id = spec.partition(":")
    if sep:
        if get_provider(name) is not None:
            if not id:
                raise ValueError(f"Missing model id in {spec!r}: write it as '{name}:<model>'")
            return name, id
        try:
            return _infer_provider(spec, spec), spec
        except ValueError:
            raise _unknown_provider(name, spec) from None
    provider = get_provider(spec)
    if provider is not None:
        if provider.default_model:
            return spec, provider.default_model
        raise ValueError(f"Provider {spec!r} needs a model id: write it as '{spec}:<model>'")
    if not spec:
        raise ValueError("Empty model spec: write it as 'provider:model'")
    return _infer_provider(spec, spec), spec


@cache
def _accepted(cls: ModelClass) -> frozenset[str] | None:
    """Keyword names the constructor accepts (None: it takes ``**kwargs``)."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params)


@runtime_checkable
class TakesCompatFlags(Protocol):
    """An adapter class whose endpoints differ in quirks it keeps as one ``compat`` value."""

    @classmethod
    def compat_for(cls, provider: str, flags: Mapping[str, Any]) -> Any:
        """The ``compat`` value for ``provider`` with ``flags`` (name -> value) applied; a
        one-line ``ValueError`` names flags it does not know."""
        ...


def _compat(cls: ModelClass, provider: str, info: ModelInfo, override: Any) -> Any:
    if not (isinstance(cls, type) and issubclass(cls, TakesCompatFlags)):
        return override
    if override is not None and not isinstance(override, Mapping):
        return override  # already the adapter's own value
    return cls.compat_for(provider, {**info.compat, **(override or {})})


def get_model(spec: str | Model, **overrides: Any) -> Model:
    """The model a spec names, built by the adapter of its API.

    ``spec`` is ``"provider:model"``, a provider alone when it has a default model
    (``"local"``), a bare model id known under exactly one provider, or a
    :class:`Model` (returned as is). Keywords: ``api``, ``base_url``, ``api_key``,
    ``headers``, ``compat`` (a mapping of adapter flags), ``info`` (a
    :class:`ModelInfo` replacing the registry's); anything else goes to the
    adapter's constructor.
    """
    if not isinstance(spec, str):
        if overrides:
            raise TypeError("get_model() takes keyword overrides only with a 'provider:model' string")
        return spec
    provider, id = parse_spec(spec)
    prov = get_provider(provider)
    assert prov is not None
    api = overrides.pop("api", None)
    base_url = overrides.pop("base_url", None)
    info = overrides.pop("info", None)
    if info is None:
        info = get_info(provider, id, api=api, base_url=base_url)
    elif not isinstance(info, ModelInfo):
        raise TypeError(f"info must be a ModelInfo, got {type(info).__name__}")
    cls = model_class(info.api)
    accepted = _accepted(cls)

    def takes(name: str) -> bool:
        return accepted is None or name in accepted

    compat = _compat(cls, provider, info, overrides.pop("compat", None))
    if compat is not None:
        overrides["compat"] = compat
    implied: dict[str, Any] = {"provider": provider, "env_keys": prov.api_key_env, "requires_key": prov.requires_key}
    if info.base_url:
        implied["base_url"] = info.base_url
    if not takes("env_keys") and "api_key" not in overrides:
        key = next((os.environ[k] for k in prov.api_key_env if os.environ.get(k)), None)
        if key is not None:
            implied["api_key"] = key
    kwargs = {k: v for k, v in implied.items() if takes(k)}
    if base_url:
        kwargs["base_url"] = base_url
    kwargs.update(overrides)
    return cls(info.id, info=info, **kwargs)
