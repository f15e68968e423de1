"""``ketch models``: the registry's models, and which providers have a key.

Plain text by default (one row per model; providers without a key are summarised at the
end unless ``--all``), or ``--json`` for programs. Keys are never shown, only where one
was found.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ._args import OneLineParser
from ._config import ConfigError
from ._config import load_settings
from ._factory import key_source
from ._factory import register_providers
from ._render import format_tokens
from ._wire import EXIT_USAGE


class ModelRow(msgspec.Struct, kw_only=True):
    """One model as ``ketch models --json`` lists it."""

    model: str
    name: str
    context_window: int
    max_output_tokens: int
    input_price: float
    output_price: float
    reasoning: bool
    key: str | None
    available: bool


def model_rows(provider: str | None = None) -> list[ModelRow]:
    """Every registered model (or ``provider``'s), with where its key comes from."""
    from ..llm._registry import get_provider
    from ..llm._registry import list_models

    settings = load_settings(Path.cwd())
    register_providers(settings.providers)
    rows: list[ModelRow] = []
    cache: dict[str, str | None] = {}
    for info in list_models(provider):
        if info.provider not in cache:
            cache[info.provider] = key_source(info.provider, settings, os.environ)
        source = cache[info.provider]
        prov = get_provider(info.provider)
        needs_key = prov.requires_key if prov is not None else True
        rows.append(
            ModelRow(
                model=f"{info.provider}:{info.id}",
                name=info.name or info.id,
                context_window=info.context_window,
                max_output_tokens=info.max_output_tokens,
                input_price=info.pricing.input,
                output_price=info.pricing.output,
                reasoning=info.reasoning,
                key=source if needs_key else "not needed",
                available=source is not None or not needs_key,
            )
        )
    return rows


def models_command(argv: Sequence[str]) -> int:
    """Run ``ketch models``; returns the exit code."""
    parser = OneLineParser(prog="ketch models", description="List known models and which have keys.")
    parser.add_argument("--provider", help="only this provider's models")
    parser.add_argument("--all", action="store_true", help="list models of providers without a key too")
    parser.add_argument("--json", action="store_true", help="one JSON array of every model")
    args = parser.parse_args(argv)
    try:
        rows = model_rows(args.provider)
    except ConfigError as exc:
        sys.stderr.write(f"ketch: {exc}\n")
        return EXIT_USAGE
    out = sys.stdout
    if args.json:
        out.write(msgspec.json.encode(rows).decode() + "\n")
        return 0
    shown = rows if args.all or args.provider else [r for r in rows if r.available]
    hidden = sorted({r.model.split(":", 1)[0] for r in rows if r not in shown})
    if shown:
        width = max(len(r.model) for r in shown)
        out.write(f"{'MODEL':<{width}}  {'CONTEXT':>7}  {'$IN/M':>7}  {'$OUT/M':>7}  KEY\n")
        for r in shown:
            key = r.key if r.key is not None else "no key"
            if r.key == "not needed":
                key = "no key needed"
            elif r.key not in (None, "config"):
                key = f"{r.key} set"
            elif r.key == "config":
                key = "key in config"
            out.write(
                f"{r.model:<{width}}  {format_tokens(r.context_window):>7}  {r.input_price:>7.2f}  "
                f"{r.output_price:>7.2f}  {key}\n"
            )
    else:
        out.write("No models with a key. Set a provider's API key variable, or use the local model: --model local\n")
    if hidden:
        out.write(f"\nWithout a key (ketch models --all lists them): {', '.join(hidden)}\n")
    return 0
