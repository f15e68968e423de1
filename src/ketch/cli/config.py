"""Settings for the ``ketch`` command: user config < project config < environment < flags.

The user config is ``$XDG_CONFIG_HOME/ketch/config.toml`` (``~/.config/ketch/config.toml``
when the variable is unset); the project config is the nearest ``.ketch/config.toml`` in
the working directory or a parent. Both are TOML::

    model = "anthropic:claude-sonnet-4-5"
    thinking = "low"
    max_turns = 40
    max_budget_usd = 2.0
    max_tokens = 4096                      # output limit per model call
    temperature = 0.2
    system_prompt = "Be brief."
    tools = ["read", "grep", "find", "ls"]
    compaction = true                      # false: no automatic context management
    context_window = 200000                # override the model's context window (tokens)

    [permissions]
    mode = "accept-edits"                  # default | accept-edits | bypass | plan
    allow = ["bash(git status*)", "edit"]
    deny = ["bash(rm -rf*)"]

    [providers.openai]                     # override a known provider
    api_key_env = "WORK_OPENAI_KEY"

    [providers.groq]                       # a custom OpenAI-compatible provider
    base_url = "https://api.groq.com/openai/v1"
    api_key_env = "GROQ_API_KEY"

Scalars and ``tools`` from a later layer replace earlier ones; ``allow`` and ``deny``
rules accumulate; providers merge field by field. Environment variables: ``KETCH_MODEL``,
``KETCH_THINKING``, ``KETCH_MAX_TURNS``, ``KETCH_MAX_BUDGET_USD``, ``KETCH_MAX_TOKENS``,
``KETCH_TEMPERATURE``, ``KETCH_PERMISSION_MODE``, ``KETCH_TOOLS`` (comma list),
``KETCH_CONTEXT_WINDOW`` and ``KETCH_SYSTEM_PROMPT``.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..llm.model import THINKING_LEVELS
from ..permissions import PERMISSION_MODES, Rule

__all__ = [
    "ConfigError",
    "ProviderConfig",
    "Settings",
    "config_dir",
    "find_project_config",
    "load_settings",
    "redact",
    "redact_url",
]


class ConfigError(Exception):
    """A configuration file, variable or flag is invalid; the message says which and why."""


class ProviderConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A provider's endpoint and credentials from configuration.

    ``api`` is the wire protocol for custom providers (default ``openai-chat``);
    ``api_key`` is a literal key (prefer ``api_key_env``; never printed);
    ``default_model`` is the model a bare provider name selects.
    """

    base_url: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None
    api: str | None = None
    default_model: str | None = None

    def __repr__(self) -> str:
        key = "***" if self.api_key else None
        url = None if self.base_url is None else redact_url(self.base_url)
        return (
            f"ProviderConfig(base_url={url!r}, api_key_env={self.api_key_env!r}, "
            f"api_key={key!r}, api={self.api!r})"
        )


class _Permissions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    mode: str | None = None
    allow: list[str] = msgspec.field(default_factory=list)
    deny: list[str] = msgspec.field(default_factory=list)


class _File(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    model: str | None = None
    thinking: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    system_prompt: str | None = None
    tools: list[str] | None = None
    compaction: bool | None = None
    context_window: int | None = None
    permissions: _Permissions = msgspec.field(default_factory=_Permissions)
    providers: dict[str, ProviderConfig] = msgspec.field(default_factory=dict)


@dataclass(slots=True)
class Settings:
    """The effective settings, and where each came from (``sources``: field -> origin).

    ``compaction`` turns the agent's context manager on (the default) or off;
    ``context_window`` replaces the model's context window in tokens.
    """

    model: str | None = None
    thinking: str = "off"
    max_turns: int | None = None
    max_budget_usd: float | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    system_prompt: str | None = None
    tools: list[str] | None = None
    compaction: bool = True
    context_window: int | None = None
    permission_mode: str = "default"
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The user config directory: ``$XDG_CONFIG_HOME/ketch`` or ``~/.config/ketch``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or ""
    if not base:
        home = env.get("HOME") or str(Path.home())
        base = os.path.join(home, ".config")
    return Path(base) / "ketch"


def find_project_config(start: Path) -> Path | None:
    """The nearest ``.ketch/config.toml`` in ``start`` or one of its parents."""
    current = start.resolve()
    for directory in (current, *current.parents):
        candidate = directory / ".ketch" / "config.toml"
        if candidate.is_file():
            return candidate
    return None


def _read(path: Path) -> _File:
    try:
        with path.open("rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return msgspec.convert(raw, _File)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: values nested too deeply") from None


_FILE_SCALARS = (
    "model",
    "thinking",
    "max_turns",
    "max_budget_usd",
    "max_tokens",
    "temperature",
    "system_prompt",
    "tools",
    "compaction",
    "context_window",
)
_FLAG_NAMES = {"compaction": "--no-compaction"}


def _apply_file(settings: Settings, data: _File, origin: str) -> None:
    for name in _FILE_SCALARS:
        value = getattr(data, name)
        if value is not None:
            setattr(settings, name, value)
            settings.sources[name] = origin
    perms = data.permissions
    if perms.mode is not None:
        settings.permission_mode = perms.mode
        settings.sources["permission_mode"] = origin
    if perms.allow:
        settings.allow.extend(perms.allow)
        settings.sources["allow"] = origin
    if perms.deny:
        settings.deny.extend(perms.deny)
        settings.sources["deny"] = origin
    for name, provider in data.providers.items():
        current = settings.providers.get(name)
        if current is None:
            settings.providers[name] = provider
            continue
        merged = {f: getattr(current, f) for f in current.__struct_fields__}
        merged.update({f: getattr(provider, f) for f in provider.__struct_fields__ if getattr(provider, f) is not None})
        settings.providers[name] = ProviderConfig(**merged)


def _number(value: str, kind: type[int] | type[float], origin: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"{origin}: expected {'an integer' if kind is int else 'a number'}, got {value!r}") from None


def _tools_list(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


_ENV: dict[str, tuple[str, Any]] = {
    "KETCH_MODEL": ("model", str),
    "KETCH_THINKING": ("thinking", str),
    "KETCH_MAX_TURNS": ("max_turns", int),
    "KETCH_MAX_BUDGET_USD": ("max_budget_usd", float),
    "KETCH_MAX_TOKENS": ("max_tokens", int),
    "KETCH_TEMPERATURE": ("temperature", float),
    "KETCH_PERMISSION_MODE": ("permission_mode", str),
    "KETCH_TOOLS": ("tools", _tools_list),
    "KETCH_CONTEXT_WINDOW": ("context_window", int),
    "KETCH_SYSTEM_PROMPT": ("system_prompt", str),
}


def load_settings(
    cwd: Path,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge user config, project config, environment and ``flags`` (non-None values win).

    Raises :class:`ConfigError` for unreadable files and invalid values.
    """
    env = os.environ if environ is None else environ
    settings = Settings()
    user = config_dir(env) / "config.toml"
    if user.is_file():
        _apply_file(settings, _read(user), f"user config {user}")
        settings.files.append(user)
    project = find_project_config(cwd)
    if project is not None and project != user:
        _apply_file(settings, _read(project), f"project config {project}")
        settings.files.append(project)
    for var, (name, kind) in _ENV.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        value = _number(raw, kind, var) if kind in (int, float) else kind(raw)
        setattr(settings, name, value)
        settings.sources[name] = f"environment {var}"
    for name, value in (flags or {}).items():
        if value is None:
            continue
        setattr(settings, name, value)
        settings.sources[name] = f"flag {_FLAG_NAMES.get(name, '--' + name.replace('_', '-'))}"
    _validate(settings)
    return settings


def _validate(settings: Settings) -> None:
    def where(name: str) -> str:
        return settings.sources.get(name, "default")

    if settings.thinking not in THINKING_LEVELS:
        raise ConfigError(
            f"{where('thinking')}: unknown thinking level {settings.thinking!r}; "
            f"expected one of {', '.join(THINKING_LEVELS)}"
        )
    if settings.permission_mode not in PERMISSION_MODES:
        raise ConfigError(
            f"{where('permission_mode')}: unknown permission mode {settings.permission_mode!r}; "
            f"expected one of {', '.join(PERMISSION_MODES)}"
        )
    for name in ("max_turns", "max_tokens", "context_window"):
        number = getattr(settings, name)
        if number is not None and number < 1:
            raise ConfigError(f"{where(name)}: {name} must be a positive integer, got {number!r}")
    for name in ("max_budget_usd", "temperature"):
        number = getattr(settings, name)
        if number is not None and not (math.isfinite(number) and number >= 0):
            raise ConfigError(f"{where(name)}: {name} must be a finite number >= 0, got {number!r}")
    for kind in ("allow", "deny"):
        for text in getattr(settings, kind):
            try:
                Rule.parse(text)
            except ValueError as exc:
                raise ConfigError(f"{where(kind)}: {exc}") from None


_USERINFO = re.compile(r"(//)[^/?#]*@")


def redact_url(url: str) -> str:
    """``url`` with the credentials of its authority (``user:password@``) shown as ``***@``."""
    return _USERINFO.sub(r"\1***@", url, count=1)


def redact(secret: str | None) -> str:
    """A secret shown safely: ``set (…abcd)`` (the last four characters of a long key only),
    ``set`` for short ones, or ``not set``."""
    if not secret:
        return "not set"
    if len(secret) < 16:
        return "set"
    return f"set (…{secret[-4:]})"
