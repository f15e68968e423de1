"""Settings for the ``ketch`` command: user config < project config < environment < flags.

The user config is ``$XDG_CONFIG_HOME/ketch/config.toml`` (``~/.config/ketch/config.toml``
when the variable is unset). Project settings come from ``.ketch/config.toml`` and
``.ketch/config.local.toml`` (for settings you keep out of version control) in the project
root (the nearest directory above the working directory containing ``.git``, else the
working directory) and in each directory between it and the working directory, never
above; deeper files win. All are TOML::

    model = "anthropic:claude-sonnet-4-5"
    thinking = "low"
    max_turns = 40
    max_budget_usd = 2.0
    max_tokens = 4096                      # output limit per model call
    temperature = 0.2
    system_prompt = "Be brief."
    tools = ["read", "grep", "find", "ls"]
    compaction = true                      # false: no automatic context management
    memory = true                          # long-term memory (ketch.memory), per user and project
    web_fetch = true                       # the web_fetch tool (ketch.web), off by default
    web_search = true                      # web search: the provider's own (ketch.web), off by default
    hosted_tools = ["code_execution"]      # more tools the provider runs itself, off by default
    context_window = 200000                # override the model's context window (tokens)

    [[hooks.PreToolUse]]                   # lifecycle hooks, Claude Code's shape (ketch.hooks)
    matcher = "bash"
    [[hooks.PreToolUse.hooks]]
    type = "command"
    command = "./scripts/check-command.sh"
    timeout = 5

    [permissions]
    mode = "accept_edits"                  # default | accept_edits | plan | bypass
    allow = ["Bash(git status)", "Bash(npm run test:*)", "Edit(src/**)"]
    ask = ["Bash(git push:*)"]
    deny = ["Bash(rm -rf:*)", "Read(./.env)"]

    [web_search]                           # web search with a search API where the provider has none
    endpoint = "https://api.search.brave.com/res/v1/web/search"
    api_key_env = "BRAVE_API_KEY"

    [providers.openai]                     # override a known provider
    api_key_env = "WORK_OPENAI_KEY"
    api = "openai-chat"                    # its wire protocol, for every model of it
    idle_timeout = 60                      # seconds without a byte before a request fails

    [providers.groq]                       # a custom OpenAI-compatible provider
    base_url = "https://api.groq.com/openai/v1"
    api_key_env = "GROQ_API_KEY"

Scalars and ``tools`` from a later layer replace earlier ones; ``allow``, ``ask`` and
``deny`` rules accumulate, and so do hooks; providers merge field by field.

MCP servers: the ``mcpServers`` of ``.mcp.json`` in the user config directory and in
the project root (the project's win on a name clash; see :mod:`ketch.cli._mcp`).

Trust: every project setting passes the gate of :mod:`ketch.cli._trust`. Until the user
trusts the project (``--trust-project`` or ``KETCH_TRUST_PROJECT=1`` for one run, or a yes
to the question of an interactive session, remembered per project root in
``trusted_projects.json`` in the user config directory) only the settings that can make
ketch stricter apply (deny and ask rules, ``mode = "default"``, fewer tools, lower
limits, ...); the rest is left out and listed in :attr:`Settings.ignored`. User settings
are always trusted. Environment variables: ``KETCH_MODEL``,
``KETCH_THINKING``, ``KETCH_MAX_TURNS``, ``KETCH_MAX_BUDGET_USD``, ``KETCH_MAX_TOKENS``,
``KETCH_TEMPERATURE``, ``KETCH_PERMISSION_MODE``, ``KETCH_TOOLS`` (comma list),
``KETCH_CONTEXT_WINDOW`` and ``KETCH_SYSTEM_PROMPT``.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import sys
import tempfile
import tomllib
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated
from typing import Any

import msgspec

from ..hooks import HookConfigError
from ..hooks import HookSpec
from ..hooks import parse_hooks
from ..llm import redact_url
from ..llm._model import THINKING_LEVELS
from ..permissions import Rule
from ..permissions import parse_mode
from ..sandbox import NetworkPolicy
from ..sandbox import NetworkPolicyError
from ..sandbox import SandboxLimits
from ..sandbox import merge_limits
from ._dirs import config_dir
from ._plugins import PluginError
from ._plugins import plugin_hooks
from ._plugins import plugin_mcp_servers
from ._trust import TRUST_ENV as TRUST_ENV
from ._trust import TRUST_FILE as TRUST_FILE
from ._trust import Gate
from ._trust import Trust
from ._trust import decide
from ._trust import remembered_text


class ConfigError(Exception):
    """A configuration file, variable or flag is invalid; the message says which and why."""


class ProviderConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A provider's endpoint and credentials from configuration.

    ``api`` is the wire protocol for custom providers (default ``openai-chat``);
    ``api_key`` is a literal key (prefer ``api_key_env``; never printed);
    ``default_model`` is the model a bare provider name selects; ``idle_timeout`` the
    seconds a request may wait for the next byte (the default is the adapter's).
    """

    base_url: str | None = None
    # a variable's name: a key pasted here by mistake is rejected without being echoed
    api_key_env: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    api_key: str | None = None
    api: str | None = None
    default_model: str | None = None
    idle_timeout: Annotated[float, msgspec.Meta(gt=0, le=86400)] | None = None

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
    ask: list[str] = msgspec.field(default_factory=list)
    deny: list[str] = msgspec.field(default_factory=list)


class _Limits(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``[sandbox.limits]``: each command's bounds (:class:`ketch.sandbox.SandboxLimits`);
    a project's file may only make them stricter (trusted or not)."""

    processes: int | None = None
    memory: int | str | None = None
    cpu_seconds: int | None = None
    file_size: int | str | None = None


class _Credential(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``[sandbox.network.credentials] "host" = { header, env, value }``."""

    header: str
    env: str
    value: str = ""


class _Network(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``[sandbox.network]``: the hosts a command may reach through ketch's proxy
    (:class:`ketch.sandbox.NetworkPolicy`)."""

    allow: list[str] = msgspec.field(default_factory=list)
    deny: list[str] = msgspec.field(default_factory=list)
    credentials: dict[str, _Credential] = msgspec.field(default_factory=dict)


class _Sandbox(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool | None = None
    network: bool | _Network | None = None
    env_allow: list[str] = msgspec.field(default_factory=list)
    limits: _Limits = msgspec.field(default_factory=_Limits)


class WebSearchAPI(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """``[web_search]``: the search API of the ``web_search`` tool
    (:class:`ketch.web.HTTPSearchAPI`), used where the model's provider has no hosted
    search (or everywhere with ``hosted = false``). ``api_key_env`` names the variable
    holding its key (sent in ``key_header``); ``count_param = ""`` sends no count;
    ``params`` are added to every query (SearXNG: ``{ format = "json" }``)."""

    endpoint: Annotated[str, msgspec.Meta(pattern=r"^https?://")]
    api_key_env: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    key_header: str | None = None
    query_param: str | None = None
    count_param: str | None = None
    params: dict[str, str] = msgspec.field(default_factory=dict)
    results_path: str | None = None
    max_results: Annotated[int, msgspec.Meta(ge=1, le=50)] | None = None
    hosted: bool = True

    def __repr__(self) -> str:
        return f"WebSearchAPI(endpoint={redact_url(self.endpoint)!r}, api_key_env={self.api_key_env!r})"


class _Scalars(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The config file's top-level values, each applied to the :class:`Settings` field of
    its name (None: not set). :class:`Settings` declares them by extending this struct."""

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
    memory: bool | None = None
    web_fetch: bool | None = None
    hosted_tools: list[str] | None = None


class _File(_Scalars, kw_only=True, forbid_unknown_fields=True):
    web_search: bool | WebSearchAPI | None = None
    permissions: _Permissions = msgspec.field(default_factory=_Permissions)
    providers: dict[str, ProviderConfig] = msgspec.field(default_factory=dict)
    hooks: dict[str, Any] | None = None
    sandbox: _Sandbox = msgspec.field(default_factory=_Sandbox)


class Settings(_Scalars, kw_only=True):
    """The effective settings, and where each came from (``sources``: field -> origin).

    The first fields are the config file's top-level values (:class:`_Scalars`), here
    with their defaults: unset (None) but ``thinking`` ``off`` and ``compaction`` on.
    ``compaction`` turns the agent's context manager on (the default) or off;
    ``context_window`` replaces the model's context window in tokens; ``memory`` gives the
    agent long-term memory (:mod:`ketch.memory`, kept per user and project in the user's
    data directory); ``web_fetch`` gives it the ``web_fetch`` tool (:mod:`ketch.web`);
    ``web_search`` web search (the provider's hosted search, else the search API of
    ``web_search_api``, the ``[web_search]`` table); ``hosted_tools`` the kinds of
    other tools the provider runs itself (:class:`ketch.tools.HostedTools`). ``allow``, ``ask``
    and ``deny`` are parsed rules carrying their source (``user``, ``project``, ``local``,
    ``flag``). ``hooks`` are the lifecycle hooks of every config file, user file first
    (each spec's ``origin`` names its file). ``sandbox`` (default on) runs bash in the OS
    sandbox, with the network when ``sandbox_network``, or only the hosts of
    ``sandbox_network_policy`` (``[sandbox.network]``), and the extra variables named by
    ``sandbox_env_allow``. ``mcp_servers`` are the ``mcpServers`` entries of the user's
    and (when trusted) the project's ``.mcp.json``, ``mcp_origins`` the file each came
    from. ``trust`` is the user's word on the project (:class:`ketch.cli._trust.Trust`;
    ``trusted`` says whether it was given); ``ignored`` lists the project settings that
    were left out, ``ignored_line`` the one stderr line saying so (None: nothing left out).
    ``files`` are the config files read, ``key_files`` those that set a literal
    ``api_key`` (the agent's tools may not read them).
    """

    thinking: str = "off"
    compaction: bool = True
    memory: bool = False
    web_fetch: bool = False
    web_search: bool = False
    web_search_api: WebSearchAPI | None = None
    permission_mode: str = "default"
    allow: list[Rule] = msgspec.field(default_factory=list)
    ask: list[Rule] = msgspec.field(default_factory=list)
    deny: list[Rule] = msgspec.field(default_factory=list)
    providers: dict[str, ProviderConfig] = msgspec.field(default_factory=dict)
    hooks: list[HookSpec] = msgspec.field(default_factory=list)
    sandbox: bool = True
    sandbox_network: bool = False
    sandbox_network_policy: NetworkPolicy | None = None
    sandbox_env_allow: list[str] = msgspec.field(default_factory=list)
    sandbox_limits: SandboxLimits | None = None
    mcp_servers: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    mcp_origins: dict[str, str] = msgspec.field(default_factory=dict)
    sources: dict[str, str] = msgspec.field(default_factory=dict)
    files: list[Path] = msgspec.field(default_factory=list)
    key_files: list[Path] = msgspec.field(default_factory=list)
    project_root: Path | None = None
    trusted: bool = False
    trust: Trust | None = None
    ignored: list[str] = msgspec.field(default_factory=list)
    ignored_line: str | None = None


def directory(text: str | None, flag: str = "--cwd") -> Path:
    """The directory a command works in: ``text`` (``~`` expanded) or the current one,
    resolved; a :class:`ConfigError` naming ``flag`` when it is not a directory."""
    root = Path(text).expanduser() if text else Path.cwd()
    if not root.is_dir():
        raise ConfigError(f"{flag} {text}: not a directory")
    return root.resolve()


def write_config_file(path: Path, text: str) -> None:
    """Write one of the command's own files (``config.toml``, ``.mcp.json``, the trusted
    projects) atomically: a temporary file of its own beside it, renamed over it (and
    removed when that fails). A :class:`ConfigError` names the path when it cannot be
    written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror or exc}") from None


def project_root(cwd: Path) -> Path:
    """The nearest directory at or above ``cwd`` containing ``.git``, else ``cwd``."""
    current = cwd.resolve()
    for directory in (current, *current.parents):
        if (directory / ".git").exists():
            return directory
    return current


def project_config_files(cwd: Path) -> list[tuple[Path, str]]:
    """The existing project files, outermost first, with their kind (``project`` or
    ``local``): ``.ketch/config.toml`` then ``.ketch/config.local.toml`` in the project root
    and each directory down to ``cwd``."""
    current = cwd.resolve()
    root = project_root(current)
    chain = [current]
    while chain[-1] != root:
        chain.append(chain[-1].parent)
    found: list[tuple[Path, str]] = []
    for directory in reversed(chain):
        for name, kind in (("config.toml", "project"), ("config.local.toml", "local")):
            candidate = directory / ".ketch" / name
            if candidate.is_file():
                found.append((candidate, kind))
    return found


def find_project_config(start: Path) -> Path | None:
    """The innermost project ``.ketch/config.toml`` that applies in ``start``."""
    files = [path for path, kind in project_config_files(start) if kind == "project"]
    return files[-1] if files else None


MCP_JSON = ".mcp.json"


def user_mcp_json(environ: Mapping[str, str] | None = None) -> Path:
    """The user's ``.mcp.json``, in the user config directory."""
    return config_dir(environ) / MCP_JSON


def project_mcp_json(cwd: Path) -> Path:
    """The project's ``.mcp.json``, in the project root."""
    return project_root(cwd) / MCP_JSON


def read_mcp_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (``{}`` when there is no file); :class:`ConfigError`
    when it cannot be read or is not an object whose ``mcpServers`` is an object of objects."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return {}  # a folder: the sandbox's placeholder while a command runs (it cannot be made)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ConfigError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f'{path}: expected a JSON object with "mcpServers"')
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict) or not all(isinstance(v, dict) for v in servers.values()):
        raise ConfigError(f'{path}: "mcpServers" must be an object of server objects')
    return data


def trust_project(root: Path, environ: Mapping[str, str] | None = None, files: Sequence[Path] = ()) -> None:
    """Remember that the user trusts the project at ``root``, and its config ``files``
    (see :mod:`ketch.cli._trust`)."""
    directory = config_dir(environ)
    write_config_file(directory / TRUST_FILE, remembered_text(directory, root, files))


def _admitted(data: _File, path: Path, settings: Settings, gate: Gate) -> _File:
    """The settings of the project file ``data`` (at ``path``) that ``gate`` admits,
    each checked against the value so far in ``settings``."""
    scalars: dict[str, Any] = {}
    for name in _FILE_SCALARS:
        value = getattr(data, name)
        if value is not None and gate.admit(name, value, path, current=getattr(settings, name)):
            scalars[name] = value
    perms = data.permissions
    mode = perms.mode if perms.mode is not None and gate.admit("permissions.mode", perms.mode, path) else None
    allow = list(perms.allow) if perms.allow and gate.admit("permissions.allow", perms.allow, path) else []
    ask = list(perms.ask) if perms.ask and gate.admit("permissions.ask", perms.ask, path) else []
    deny = list(perms.deny) if perms.deny and gate.admit("permissions.deny", perms.deny, path) else []
    providers: dict[str, ProviderConfig] = {}
    for name, provider in data.providers.items():
        kept = {}
        for attr in provider.__struct_fields__:
            value = getattr(provider, attr)
            label = f"providers.{name}.{attr}"  # never the value: a URL or a key may be secret
            if value is not None and gate.admit(label, value, path, label=label):
                kept[attr] = value
        if kept:
            providers[name] = ProviderConfig(**kept)
    hooks = data.hooks if data.hooks and gate.admit("hooks", data.hooks, path, label="hooks") else None
    search = data.web_search
    if search is not None and not gate.admit(
        "web_search", search, path, current=settings.web_search, label=None if isinstance(search, bool) else "[web_search]"
    ):
        search = None
    box = data.sandbox
    sandbox = _Sandbox(
        enabled=box.enabled if box.enabled is not None and gate.admit("sandbox.enabled", box.enabled, path) else None,
        network=box.network
        if box.network is not None and gate.admit(
            "sandbox.network", box.network, path, label=None if isinstance(box.network, bool) else "[sandbox.network]"
        )
        else None,
        env_allow=list(box.env_allow)
        if box.env_allow and gate.admit("sandbox.env_allow", box.env_allow, path, label="sandbox.env_allow")
        else [],
        limits=box.limits,  # only ever made stricter by a project's file (see _apply_file)
    )
    return _File(
        **scalars,
        web_search=search,
        permissions=_Permissions(mode=mode, allow=allow, ask=ask, deny=deny),
        providers=providers,
        hooks=hooks,
        sandbox=sandbox,
    )


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


_FILE_SCALARS = _Scalars.__struct_fields__
_FLAG_NAMES = {"compaction": "--no-compaction", "memory": "--memory", "web_fetch": "--web-fetch", "web_search": "--web-search"}


def _holds_key(data: _File) -> bool:
    """Whether a config file sets a literal ``api_key`` (the agent's tools may not read it)."""
    return any(p.api_key for p in data.providers.values())


def _network_policy(current: NetworkPolicy | None, table: _Network, origin: str) -> NetworkPolicy:
    """``current`` with a file's ``[sandbox.network]`` added (lists extended, credentials
    by host replaced); a :class:`ConfigError` names the file and the bad value."""
    credentials: dict[str, Any] = dict(current.credentials) if current is not None else {}
    credentials.update({host: msgspec.structs.asdict(c) for host, c in table.credentials.items()})
    try:
        return NetworkPolicy(
            allow=[*(str(e) for e in (current.allow if current is not None else ())), *table.allow],
            deny=[*(str(e) for e in (current.deny if current is not None else ())), *table.deny],
            credentials=credentials,
        )
    except NetworkPolicyError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def _apply_file(settings: Settings, data: _File, origin: str, kind: str) -> None:
    box = data.sandbox
    if box.enabled is not None:
        settings.sandbox = box.enabled
        settings.sources["sandbox"] = origin
    if isinstance(box.network, bool):
        settings.sandbox_network = box.network
        settings.sandbox_network_policy = None
        settings.sources["sandbox_network"] = origin
    elif box.network is not None:
        settings.sandbox_network = False
        settings.sandbox_network_policy = _network_policy(settings.sandbox_network_policy, box.network, origin)
        settings.sources["sandbox_network"] = origin
    if box.env_allow:
        settings.sandbox_env_allow.extend(n for n in box.env_allow if n not in settings.sandbox_env_allow)
        settings.sources["sandbox_env_allow"] = origin
    try:  # a project's file may only make them stricter
        limits = msgspec.structs.asdict(box.limits)
        settings.sandbox_limits = merge_limits(
            settings.sandbox_limits, limits, origin, only_stricter=kind != "user", ignored=settings.ignored
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if isinstance(data.web_search, bool):
        settings.web_search = data.web_search
        settings.sources["web_search"] = origin
    elif data.web_search is not None:  # the table turns web search on, with its search API
        settings.web_search = True
        settings.web_search_api = data.web_search
        settings.sources["web_search"] = settings.sources["web_search_api"] = origin
    if data.hooks is not None:
        try:
            settings.hooks.extend(parse_hooks(data.hooks, origin))
        except HookConfigError as exc:
            raise ConfigError(str(exc)) from None
    for name in _FILE_SCALARS:
        value = getattr(data, name)
        if value is not None:
            setattr(settings, name, value)
            settings.sources[name] = origin
    perms = data.permissions
    if perms.mode is not None:
        settings.permission_mode = perms.mode
        settings.sources["permission_mode"] = origin
    for name in ("allow", "ask", "deny"):
        texts: list[str] = getattr(perms, name)
        if texts:
            rules: list[Rule] = getattr(settings, name)
            for text in texts:
                try:
                    rules.append(Rule.parse(text, kind))
                except ValueError as exc:
                    raise ConfigError(f"{origin}: {exc}") from None
            settings.sources[name] = origin
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


TrustPrompt = Callable[[Path, list[str]], bool]
"""Asked when an untrusted project has settings that need trust: (project root, the
settings) -> whether the user trusts it now (then it is remembered)."""


def _apply_project(
    settings: Settings,
    files: list[tuple[Path, str, _File]],
    servers: dict[str, Any],
    mcp_path: Path,
    gate: Gate,
) -> None:
    """Apply the project's config files, ``.mcp.json`` servers, agent files, skills and commands to
    ``settings`` through ``gate`` (the ignored ones are left in ``gate.ignored``, also
    the looser ``[sandbox.limits]`` a file named)."""
    settings.ignored = gate.ignored
    for path, kind, data in files:
        origin = f"{'project' if kind == 'project' else 'local'} config {path}"
        _apply_file(settings, _admitted(data, path, settings, gate), origin, kind)
        settings.files.append(path)
        if _holds_key(data):
            settings.key_files.append(path)
    if servers and gate.admit("mcpServers", servers, mcp_path, label=f"mcpServers {', '.join(servers)}"):
        for name, entry in servers.items():  # they run commands: a project's MCP servers need trust
            settings.mcp_servers[name] = entry
            settings.mcp_origins[name] = str(mcp_path)
    if settings.project_root is not None:
        from ._project import project_agents

        project_agents(settings.project_root, gate)
        from ._project import project_skills

        project_skills(settings.project_root, gate)
        from ._project import project_commands

        project_commands(settings.project_root, gate)


def load_settings(
    cwd: Path,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    trust: bool = False,
    ask_trust: TrustPrompt | None = None,
) -> Settings:
    """Merge user config, project files, environment and ``flags`` (non-None values win).

    Every project setting passes the gate of :mod:`ketch.cli._trust`: it applies when the
    project is trusted -- ``trust`` (``--trust-project``), ``KETCH_TRUST_PROJECT=1``, a
    remembered trust, or ``ask_trust`` answering yes -- or when it can only make ketch
    stricter; the rest is listed in :attr:`Settings.ignored`. Raises
    :class:`ConfigError` for unreadable files and invalid values.
    """
    env = os.environ if environ is None else environ
    settings = Settings()
    user = config_dir(env) / "config.toml"
    if user.is_file():
        data = _read(user)
        _apply_file(settings, data, f"user config {user}", "user")
        settings.files.append(user)
        if _holds_key(data):
            settings.key_files.append(user)
    try:
        plugged = plugin_hooks(env)
    except PluginError as exc:
        raise ConfigError(str(exc)) from None
    for hooks, origin_text in plugged:  # trusted plugins' hooks: after the user's, before the project's
        try:
            settings.hooks.extend(parse_hooks(hooks, origin_text))
        except HookConfigError as exc:
            raise ConfigError(str(exc)) from None
    for name, entry, origin in plugin_mcp_servers(read_mcp_json, env):  # trusted plugins' servers; the user's win
        settings.mcp_servers[name] = entry
        settings.mcp_origins[name] = str(origin)
    user_mcp = user_mcp_json(env)
    for name, entry in read_mcp_json(user_mcp).get("mcpServers", {}).items():
        settings.mcp_servers[name] = entry
        settings.mcp_origins[name] = str(user_mcp)
    root = project_root(cwd)
    settings.project_root = root
    project_files = [(path, kind, _read(path)) for path, kind in project_config_files(cwd) if path != user]
    project_mcp = root / MCP_JSON
    project_servers: dict[str, Any] = read_mcp_json(project_mcp).get("mcpServers", {}) if project_mcp != user_mcp else {}
    decision = decide(root, config_dir(env), flag=trust, environ=env)
    if ask_trust is not None:
        preview = Gate(decision)
        _apply_project(copy.deepcopy(settings), project_files, project_servers, project_mcp, preview)
        if preview.ignored and ask_trust(root, list(preview.ignored)):
            files = [path for path, _, _ in project_files]
            trust_project(root, env, files)
            decision = decide(root, config_dir(env), environ={})  # as remembered now
            decision = Trust(root, "answered", decision.known)
    gate = Gate(decision)
    _apply_project(settings, project_files, project_servers, project_mcp, gate)
    settings.trust = decision
    settings.trusted = decision.trusted
    settings.ignored = gate.ignored
    settings.ignored_line = gate.line()
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
    settings.permission_mode = parse_mode(settings.permission_mode)
    return settings


def finish_settings(
    settings: Settings, allow: Sequence[str] | None, deny: Sequence[str] | None, *, keep_bad_deny: bool = False
) -> None:
    """The command-line part of loading settings: warn (one line on stderr) about the
    ignored settings of the project, and add the ``--allow``/``--deny`` rules.
    A rule that does not parse is a :class:`ConfigError`, except a ``--deny`` value when
    ``keep_bad_deny`` (a resumed run's ``CALL_ID:reason`` decision, matched later)."""
    if settings.ignored_line:
        sys.stderr.write(settings.ignored_line + "\n")
    for kind, texts in (("allow", allow or ()), ("deny", deny or ())):
        for text in texts:
            try:
                getattr(settings, kind).append(Rule.parse(text, "flag"))
            except ValueError as exc:
                if kind == "deny" and keep_bad_deny:
                    continue
                raise ConfigError(f"--{kind}: {exc}") from None
        if texts:
            settings.sources[kind] = f"flag --{kind}"


HOSTED_TOOL_KINDS = ("code_execution", "web_fetch")
"""The kinds ``hosted_tools`` may name (web search is the ``web_search`` setting; the
kinds that need options, ``file_search`` and ``mcp``, are for the library)."""


def _validate(settings: Settings) -> None:
    def where(name: str) -> str:
        return settings.sources.get(name, "default")

    if settings.thinking not in THINKING_LEVELS:
        raise ConfigError(
            f"{where('thinking')}: unknown thinking level {settings.thinking!r}; "
            f"expected one of {', '.join(THINKING_LEVELS)}"
        )
    try:
        parse_mode(settings.permission_mode)
    except ValueError as exc:
        text = str(exc)
        raise ConfigError(f"{where('permission_mode')}: {text[:1].lower()}{text[1:]}") from None
    for name in ("max_turns", "max_tokens", "context_window"):
        number = getattr(settings, name)
        if number is not None and number < 1:
            raise ConfigError(f"{where(name)}: {name} must be a positive integer, got {number!r}")
    for name in ("max_budget_usd", "temperature"):
        number = getattr(settings, name)
        if number is not None and not (math.isfinite(number) and number >= 0):
            raise ConfigError(f"{where(name)}: {name} must be a finite number >= 0, got {number!r}")
    for kind in settings.hosted_tools or ():
        if kind == "web_search":
            raise ConfigError(
                f"{where('hosted_tools')}: hosted tool 'web_search' is the web_search setting: "
                "use web_search = true (or --web-search) instead"
            )
        if kind not in HOSTED_TOOL_KINDS:
            raise ConfigError(
                f"{where('hosted_tools')}: unknown hosted tool {kind!r}; allowed: {', '.join(HOSTED_TOOL_KINDS)}"
            )
    if settings.web_fetch and "web_fetch" in (settings.hosted_tools or ()):
        raise ConfigError(
            f"{where('hosted_tools')}: hosted tool 'web_fetch' and web_fetch = true ({where('web_fetch')}) "
            "both give the model a tool named web_fetch: keep one"
        )


def _array_end(text: str, start: int) -> int:
    """The index just past the TOML array opening at ``text[start] == "["``, or -1."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c in "\"'":
            quote = c
            i += 1
            while i < len(text) and text[i] != quote:
                i += 2 if quote == '"' and text[i] == "\\" else 1
        elif c == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


SAVE_RULE_PROMPT = "Save the rule: [s] this session only  [u] user  [p] project  [l] local"
"""The question after an "always" answer: where the allow rule goes."""


def save_target(choice: str, project_root: Path) -> Path | None:
    """The file the answer ``choice`` to :data:`SAVE_RULE_PROMPT` names (``u`` the user
    config, ``p`` the project's ``.ketch/config.toml``, ``l`` its ``.ketch/config.local.toml``),
    or None for this session only."""
    targets = {
        "u": config_dir() / "config.toml",
        "p": project_root / ".ketch" / "config.toml",
        "l": project_root / ".ketch" / "config.local.toml",
    }
    return targets.get(choice.strip().lower()[:1])


def save_allow_rules(choice: str, rules: list[str], project_root: Path) -> tuple[str, bool]:
    """Save ``rules`` where the answer ``choice`` to :data:`SAVE_RULE_PROMPT` says (``u``
    the user config, ``p`` the project's ``.ketch/config.toml``, ``l`` its
    ``.ketch/config.local.toml``; anything else: this session only). Returns the line to
    show the user, and whether it reports a failure (the rules then hold for the session)."""
    path = save_target(choice, project_root)
    if path is None:
        return f"allowed for this session: {', '.join(rules)}", False
    try:
        add_permission_rules(path, "allow", rules)
    except ConfigError as exc:
        return f"{exc} (allowed for this session only)", True
    return f"saved allow rule {', '.join(rules)} to {path}", False


def add_permission_rules(path: Path, kind: str, rules: list[str]) -> None:
    """Add ``rules`` to the ``[permissions] kind`` list of the TOML file at ``path``
    (created when missing), keeping the rest of the file as it is. Raises
    :class:`ConfigError` when the file cannot be read, parsed or updated."""
    add_to_config_list(path, "permissions", kind, rules)


def save_network_allow(choice: str, entry: str, project_root: Path) -> tuple[str, bool]:
    """Add ``entry`` to ``[sandbox.network] allow`` where the answer ``choice`` to
    :data:`SAVE_RULE_PROMPT` says (the files of :func:`save_allow_rules`; anything else:
    this session only). Returns the line to show the user, and whether it reports a failure."""
    path = save_target(choice, project_root)
    if path is None:
        return f"allowed for this session: {entry}", False
    try:
        add_to_config_list(path, "sandbox.network", "allow", [entry])
    except ConfigError as exc:
        return f"{exc} (allowed for this session only)", True
    return f"saved {entry} to [sandbox.network] allow in {path}", False


def add_to_config_list(path: Path, table: str, key: str, items: list[str]) -> None:
    """Add ``items`` to the ``[table] key`` list (``table`` dotted, as in its header) of the
    TOML file at ``path`` (created when missing), keeping the rest of the file as it is.
    Raises :class:`ConfigError` when the file cannot be read, parsed or updated."""
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot update: {exc}") from None

    def lookup(doc: Any) -> Any:
        for part in table.split("."):
            doc = doc.get(part, {}) if isinstance(doc, dict) else None
        return doc

    section_data = lookup(data)
    current = section_data.get(key, []) if isinstance(section_data, dict) else None
    if not isinstance(current, list):
        raise ConfigError(f"{path}: cannot update: [{table}] {key} is not a list")
    wanted = current + [r for r in items if r not in current]
    if wanted == current:
        return
    rendered = f"{key} = [" + ", ".join(json.dumps(r) for r in wanted) + "]"
    lines = text.splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines) if line.strip() == f"[{table}]"), None)
    if header is None:
        if isinstance(section_data, dict) and key in section_data:
            raise ConfigError(f"{path}: cannot update: write [{table}] as a table to add to {key}")
        sep = "" if not text else "\n" if text.endswith("\n") else "\n\n"
        new = text + sep + f"[{table}]\n{rendered}\n"
    else:
        offset = sum(len(line) for line in lines[: header + 1])
        end_of_table = len(text)
        for i in range(header + 1, len(lines)):
            if lines[i].lstrip().startswith("["):
                end_of_table = sum(len(line) for line in lines[:i])
                break
        section = text[offset:end_of_table]
        m = re.search(rf"(?m)^[ \t]*{key}[ \t]*=[ \t]*", section)
        if m is None:
            new = text[:offset] + rendered + "\n" + text[offset:]
        else:
            start = offset + m.end()
            end = _array_end(text, start) if text[start : start + 1] == "[" else -1
            if end < 0:
                raise ConfigError(f"{path}: cannot update: [{table}] {key} is not an inline list")
            new = text[: offset + m.start()] + rendered + text[end:]
    try:
        check = tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: cannot update: {exc}") from None
    checked = lookup(check)
    if not isinstance(checked, dict) or checked.get(key) != wanted:
        raise ConfigError(f"{path}: cannot update the [{table}] {key} list")
    write_config_file(path, new)


def redact(secret: str | None) -> str:
    """A secret shown safely: ``set (…abcd)`` (the last four characters of a long key only),
    ``set`` for short ones, or ``not set``."""
    if not secret:
        return "not set"
    if len(secret) < 16:
        return "set"
    return f"set (…{secret[-4:]})"
