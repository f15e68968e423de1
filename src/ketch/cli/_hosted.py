"""Web search and provider-hosted tools for the command (``web_search``, ``[web_search]``,
``hosted_tools``; ``--web-search``, ``--hosted-tools``).

Checked when the agent is built, against the model it will call: a kind its provider
does not run, or web search where the provider has none and no search API is
configured, is a :class:`~ketch.cli._config.ConfigError` naming the kind, the provider
and what it runs (or the setting to add), before any request is sent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..llm import Model
from ..llm import hosted_kinds
from ._config import ConfigError
from ._config import Settings
from ._config import WebSearchAPI


def _who(model: Model) -> str:
    return f"provider {model.provider!r} ({model.api})"


def hosted_capabilities(settings: Settings, model: Model, environ: Mapping[str, str] | None = None) -> list[Any]:
    """The capabilities of ``settings.web_search`` and ``settings.hosted_tools`` for
    ``model`` (none when both are off); a :class:`ConfigError` when its provider cannot
    serve them."""
    out: list[Any] = []
    if not (settings.web_search or settings.hosted_tools):
        return out
    kinds = hosted_kinds(model)
    if settings.hosted_tools:
        runs = sorted(k for k in kinds or () if k != "web_search")
        for kind in settings.hosted_tools:
            if kinds is not None and kind not in kinds:
                source = settings.sources.get("hosted_tools", "settings")
                raise ConfigError(
                    f"{source}: hosted tool {kind!r} is not run by {_who(model)}; "
                    f"it runs: {', '.join(runs) or 'none'}"
                )
        from ..tools import HostedTools

        out.append(HostedTools(*dict.fromkeys(settings.hosted_tools)))
    if settings.web_search:
        out.append(_web_search(settings, model, kinds is None or "web_search" in kinds, environ))
    return out


def _web_search(settings: Settings, model: Model, hosted: bool, environ: Mapping[str, str] | None) -> Any:
    from ..web import WebSearch

    table = settings.web_search_api
    if table is None:
        if not hosted:
            source = settings.sources.get("web_search", "settings")
            raise ConfigError(
                f"{source}: web_search: {_who(model)} has no hosted web search; "
                'add a search API to the config: [web_search] endpoint = "https://..." (and api_key_env)'
            )
        return WebSearch()
    api = search_api(table, settings.sources.get("web_search_api", "settings"), environ)
    options: dict[str, Any] = {"hosted": hosted and table.hosted}
    if table.max_results is not None:
        options["max_results"] = table.max_results
    return WebSearch(api, **options)


def search_api(table: WebSearchAPI, origin: str, environ: Mapping[str, str] | None = None) -> Any:
    """The :class:`ketch.web.HTTPSearchAPI` of a ``[web_search]`` table (from ``origin``);
    a :class:`ConfigError` when its key variable is not set."""
    from ..web import HTTPSearchAPI

    env = os.environ if environ is None else environ
    key = None
    if table.api_key_env is not None:
        key = env.get(table.api_key_env) or None
        if key is None:
            raise ConfigError(f"{origin}: [web_search] api_key_env: {table.api_key_env} is not set")
    kwargs: dict[str, Any] = {"api_key": key, "params": table.params, "results_path": table.results_path}
    if table.key_header is not None:
        kwargs["key_header"] = table.key_header
    if table.query_param is not None:
        kwargs["query_param"] = table.query_param
    if table.count_param is not None:
        kwargs["count_param"] = table.count_param or None
    try:
        return HTTPSearchAPI(table.endpoint, **kwargs)
    except ValueError as exc:
        raise ConfigError(f"{origin}: [web_search] {exc}") from None
