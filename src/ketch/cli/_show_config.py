"""``ketch config``: the effective settings, where each comes from, keys redacted (and
the credentials of a ``base_url``: ``https://***@host/v1``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..llm import redact_url
from ._args import OneLineParser
from ._config import ConfigError
from ._config import directory
from ._config import load_settings
from ._config import redact
from ._dirs import config_dir
from ._factory import api_key_for
from ._factory import choose_model
from ._factory import key_source
from ._wire import EXIT_USAGE

_SHOWN = (
    "thinking",
    "max_turns",
    "max_budget_usd",
    "tools",
    "compaction",
    "context_window",
    "web_fetch",
    "web_search",
    "hosted_tools",
    "permission_mode",
    "allow",
    "ask",
    "deny",
    "sandbox",
    "sandbox_network",
    "sandbox_env_allow",
)


def config_command(argv: Sequence[str]) -> int:
    """Run ``ketch config``; returns the exit code."""
    parser = OneLineParser(prog="ketch config", description="Show the effective settings.")
    parser.add_argument("-C", "--cwd", help="working directory (for the project config)")
    args = parser.parse_args(argv)
    try:
        root = directory(args.cwd)
        settings = load_settings(root)
    except ConfigError as exc:
        sys.stderr.write(f"ketch: {exc}\n")
        return EXIT_USAGE
    out = sys.stdout
    user = config_dir() / "config.toml"
    out.write(f"user config:    {user}{'' if user.is_file() else ' (not found)'}\n")
    project = next((f for f in settings.files if f != user), None)
    out.write(f"project config: {project if project is not None else '(none)'}\n")
    if settings.ignored:
        why = (
            "config files in sub-folders not trusted by name yet; answer yes in an interactive session to apply them"
            if settings.trusted
            else "untrusted project; KETCH_TRUST_PROJECT=1 applies them"
        )
        out.write(f"ignored ({why}): {'; '.join(settings.ignored)}\n")
    out.write("\n")
    spec, reason = choose_model(settings)
    out.write(f"model           {spec}  ({reason})\n")
    for name in _SHOWN:
        value = getattr(settings, name)
        if isinstance(value, list):
            shown = ", ".join(str(v) for v in value) or "(none)"
        else:
            shown = "(unset)" if value is None else ("true" if value else "false") if isinstance(value, bool) else str(value)
        out.write(f"{name:<15} {shown}  ({settings.sources.get(name, 'default')})\n")
    search = settings.web_search_api
    if search is not None:  # the endpoint without credentials, the key's variable by name
        key = f", key from {search.api_key_env}" if search.api_key_env else ""
        origin = settings.sources.get("web_search_api", "default")
        out.write(f"{'web_search_api':<15} {redact_url(search.endpoint)}{key}  ({origin})\n")
    prompt = settings.system_prompt
    out.write(f"{'system_prompt':<15} {'(built-in)' if prompt is None else repr(prompt[:60])}\n")
    from ..llm._registry import list_providers

    out.write("\nproviders:\n")
    known = {p.name: p for p in list_providers()}
    names = [*known, *(n for n in settings.providers if n not in known)]
    for name in names:
        cfg = settings.providers.get(name)
        source = key_source(name, settings, os.environ)
        secret = api_key_for(name, settings, os.environ)
        prov = known.get(name)
        if secret is None and prov is not None and not prov.requires_key:
            line = f"  {name:<12} no key needed"
        else:
            line = f"  {name:<12} key {redact(secret)}" + (f" from {source}" if source else "")
        if cfg is not None and cfg.base_url:
            line += f"  base_url {redact_url(cfg.base_url)}"
        out.write(line + "\n")
    return 0
