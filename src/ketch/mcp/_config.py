# COORDINATION: two helpers work in this worktree -- read /work/wt/wt-j/COORDINATION.md (helper A)
"""MCP server configuration: the common ``.mcp.json`` shape.

::

    {"mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        "docs": {"type": "http", "url": "https://example.com/mcp",
                 "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
        "old":  {"type": "sse", "url": "http://127.0.0.1:3001/sse"}}}

``type`` is ``stdio`` (the default when ``command`` is given), ``http`` (streamable HTTP,
the default when ``url`` is given) or ``sse`` (legacy HTTP+SSE). As in Claude Code,
``${VAR}`` and ``${VAR:-default}`` are expanded from the environment in ``command``,
``args``, ``env``, ``url`` and ``headers``; a variable that is unset and has no default
is an error. Errors are :class:`MCPConfigError`, one line naming the bad value.

The keys other clients write into the same shape are read too (see
:func:`server_config`): ``disabled``, ``timeout``, ``autoApprove`` / ``alwaysAllow``,
``disabledTools``, ``transportType``. A key nobody defined is not an error: it is
kept in :attr:`MCPServerConfig.ignored_keys` and logged once as a warning naming it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import Literal
from typing import TypeAlias
from typing import cast

log = logging.getLogger("ketch.mcp")

Transport: TypeAlias = Literal["stdio", "http", "sse"]
_TRANSPORTS: tuple[str, ...] = ("stdio", "http", "sse")
_TYPE_ALIASES = {"streamable-http": "http", "streamable_http": "http", "streamableHttp": "http"}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_TYPE_ALIASES.update({"stdio": "stdio", "http": "http", "sse": "sse", "streamable": "http"})
_KNOWN_KEYS = frozenset(
    {
        "type", "transport", "transportType", "command", "args", "env", "cwd", "url", "headers",
        "trustAnnotations", "disabled", "timeout", "networkTimeout", "autoApprove", "alwaysAllow", "disabledTools",
    }
)
_TIMEOUT_SECONDS_UP_TO = 3600
"""``timeout`` values up to this are seconds (Cline, Kilo Code); larger ones milliseconds (Claude Code, Kiro)."""


class MCPConfigError(ValueError):
    """A bad MCP server configuration (the message is one line naming the bad value)."""


# An option that takes a credential: --api-key, --token, --auth-token=..., -password (a
# name part is the word: --keyboard is none).
_CREDENTIAL_OPTION = re.compile(
    r"^(--?(?:[A-Za-z0-9]+[-_])*(?:key|apikey|token|secret|password|passwd|pass|pwd|credentials?|auth|bearer)"
    r"(?:[-_][A-Za-z0-9]+)*)(?:=(.*))?$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class MCPServerConfig:
    """One MCP server: how to start or reach it.

    ``stdio`` servers are started as ``command args...`` with ``env`` added to a minimal
    inherited environment (the SDK's: ``HOME``, ``PATH``, ``USER`` …) in ``cwd``;
    ``http`` and ``sse`` servers are reached at ``url`` with ``headers``. The values of
    ``env`` and ``headers`` (tokens, often) never appear in the repr, nor does the value
    of a credential option written into ``args`` (``--api-key VALUE``, ``--token=VALUE``)
    or a URL's password.

    ``trust_annotations`` (``"trustAnnotations": true`` in ``.mcp.json``): a tool's
    ``readOnlyHint`` makes it ``read_only``, so permission modes run it unasked. Off by
    default: the hint is the server's claim, not something ketch can check, so an MCP
    tool is not read-only unless the user trusts the server's word.

    From the other clients' keys: ``disabled`` (the server is not started; its
    ``${VAR}`` are not expanded), ``timeout`` (seconds; bounds each call instead of the
    manager's ``call_timeout``), ``auto_approve`` (the tools ``autoApprove`` or
    ``alwaysAllow`` name: the caller may turn them into allow rules, see
    :attr:`auto_approve_rules`; the library itself does not) and ``disabled_tools``
    (tools not offered to the model).
    """

    name: str
    type: Transport = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    trust_annotations: bool = False
    disabled: bool = False
    timeout: float | None = None
    auto_approve: tuple[str, ...] = ()
    disabled_tools: tuple[str, ...] = ()
    ignored_keys: tuple[str, ...] = field(default=(), compare=False)
    """Keys of the entry ketch does not know (warned about, not applied)."""
    from_environment: tuple[str, ...] = field(default=(), repr=False, compare=False)
    """The values ``${VAR}`` expansion put in (tokens, often): never shown."""

    def __post_init__(self) -> None:
        if self.type not in _TRANSPORTS:
            raise MCPConfigError(
                f"MCP server {self.name!r}: unknown type {self.type!r} (allowed: stdio, http, sse)"
            )
        if self.disabled:  # never started: its command and url are not checked
            return
        if self.type == "stdio" and not self.command:
            raise MCPConfigError(f"MCP server {self.name!r}: a stdio server needs a non-empty 'command'")
        if self.type != "stdio" and not self.url:
            raise MCPConfigError(f"MCP server {self.name!r}: an {self.type} server needs a 'url'")
        if self.url and not re.match(r"^https?://", self.url):
            raise MCPConfigError(
                f"MCP server {self.name!r}: url {self._shown(self.url)!r} must start with http:// or https://"
            )

    @property
    def auto_approve_rules(self) -> tuple[str, ...]:
        """``auto_approve`` as permission rules (``mcp__<server>__<tool>``; ``*`` names every tool
        of the server, ``mcp__<server>``)."""
        from ._tools import server_rule
        from ._tools import tool_name

        return tuple(dict.fromkeys(server_rule(self.name) if t == "*" else tool_name(self.name, t) for t in self.auto_approve))

    def _shown(self, text: str) -> str:
        """``text`` without the values of ``env``, ``headers`` and the environment, and
        without a URL's password."""
        from ..llm import redact_text
        from ..llm import redact_url

        hidden = (*self.from_environment, *self.env.values(), *self.headers.values())
        return redact_url(redact_text(text, tuple(sorted((v for v in hidden if len(v) >= 4), key=len, reverse=True))))

    def _shown_args(self) -> list[str]:
        """``args`` as :meth:`_shown` shows them, and the value of a credential option
        written literally (``--api-key VALUE``, ``--token=VALUE``) as ``***``."""
        shown: list[str] = []
        mask_next = False
        for arg in self.args:
            text = self._shown(arg)
            if mask_next and not text.startswith("-"):
                shown.append("***")
                mask_next = False
                continue
            match = _CREDENTIAL_OPTION.match(text)
            mask_next = match is not None and match.group(2) is None
            if match is not None and match.group(2) is not None:
                text = f"{match.group(1)}=***"
            shown.append(text)
        return shown

    def __repr__(self) -> str:
        if self.type == "stdio":
            where = f"command={self.command!r}, args={self._shown_args()!r}"
        else:
            where = f"url={self._shown(self.url or '')!r}"
        secrets = []
        if self.env:
            secrets.append(f"env=<{len(self.env)} hidden>")
        if self.headers:
            secrets.append(f"headers=<{len(self.headers)} hidden>")
        if self.disabled:
            secrets.append("disabled")
        extra = "".join(", " + s for s in secrets)
        return f"MCPServerConfig(name={self.name!r}, type={self.type!r}, {where}{extra})"


def _expand(value: str, server: str, key: str, environ: Mapping[str, str], used: list[str]) -> str:
    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None and found != "":
            used.append(found)
            return found
        if default is not None:
            return default
        raise MCPConfigError(
            f"MCP server {server!r}: {key} uses ${{{name}}}, which is not set (set it, or write ${{{name}:-default}})"
        )

    return _VAR.sub(sub, value)


def _string(value: Any, server: str, key: str) -> str:
    if not isinstance(value, str):
        raise MCPConfigError(f"MCP server {server!r}: {key} must be a string, got {json.dumps(value)}")
    return value


def _string_map(value: Any, server: str, key: str, environ: Mapping[str, str], used: list[str]) -> dict[str, str]:
    """``env`` or ``headers``: their values are tokens, often, so an error names only the
    kind of value found."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MCPConfigError(f"MCP server {server!r}: {key} must be an object of strings, got {_kind(value)}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = str(v)
        if not isinstance(v, str):
            raise MCPConfigError(f"MCP server {server!r}: {key}.{k} must be a string, got {_kind(v)}")
        out[str(k)] = _expand(v, server, f"{key}.{k}", environ, used)
    return out


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true or false"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _names(value: Any, server: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MCPConfigError(f"MCP server {server!r}: {key} must be a list of tool names, got {json.dumps(value)}")
    return tuple(value)


def _timeout(entry: Mapping[str, Any], server: str) -> float | None:
    """``timeout`` in seconds: up to 3600 it is seconds (Cline, Kilo Code write seconds),
    above that milliseconds (Claude Code, Kiro write milliseconds); ``networkTimeout``
    (Cline) is milliseconds."""
    for key, scale in (("timeout", None), ("networkTimeout", 1000.0)):
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
            raise MCPConfigError(f"MCP server {server!r}: {key} must be a positive number, got {json.dumps(value)}")
        if scale is None:
            scale = 1.0 if value <= _TIMEOUT_SECONDS_UP_TO else 1000.0
        return float(value) / scale
    return None


def server_config(name: str, entry: Mapping[str, Any], *, environ: Mapping[str, str] | None = None) -> MCPServerConfig:
    """One ``mcpServers`` entry as a :class:`MCPServerConfig` (``${VAR}`` expanded from ``environ``,
    ``os.environ`` when None).

    Besides ketch's own keys it reads those Cline, Kilo Code, Kiro and Claude Code write:
    ``disabled`` (true: not started, nothing expanded), ``timeout`` (seconds up to 3600,
    milliseconds above: Cline and Kilo Code write seconds, Claude Code and Kiro
    milliseconds), ``networkTimeout`` (milliseconds), ``autoApprove`` and ``alwaysAllow``
    (tool names, ``*`` for all), ``disabledTools``, ``transportType`` and ``transport``
    (old spellings of ``type``; ``streamable-http`` and ``streamableHttp`` mean ``http``).
    Any other key is listed in ``ignored_keys``."""
    env_source: Mapping[str, str] = os.environ if environ is None else environ
    if not isinstance(name, str) or not name or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise MCPConfigError(f"MCP server name {name!r} must be letters, digits, '_', '-' or '.'")
    if "__" in name:
        raise MCPConfigError(f"MCP server name {name!r} must not contain '__' (it separates names in mcp__server__tool)")
    if not isinstance(entry, Mapping):
        raise MCPConfigError(f"MCP server {name!r}: the entry must be an object, got {_kind(entry)}")
    ignored = tuple(sorted(str(k) for k in entry if k not in _KNOWN_KEYS))
    raw_type = entry.get("type", entry.get("transportType", entry.get("transport")))
    if raw_type is None:
        raw_type = "http" if "url" in entry and "command" not in entry else "stdio"
    kind = _TYPE_ALIASES.get(_string(raw_type, name, "type"), raw_type)
    if kind not in _TRANSPORTS:
        raise MCPConfigError(f"MCP server {name!r}: unknown type {raw_type!r} (allowed: stdio, http, sse)")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise MCPConfigError(f"MCP server {name!r}: disabled must be true or false, got {json.dumps(disabled)}")
    command = entry.get("command")
    args = entry.get("args", [])
    if not isinstance(args, list):
        raise MCPConfigError(f"MCP server {name!r}: args must be a list of strings, got {json.dumps(args)}")
    url = entry.get("url")
    cwd = entry.get("cwd")
    trust = entry.get("trustAnnotations", False)
    if not isinstance(trust, bool):
        raise MCPConfigError(
            f"MCP server {name!r}: trustAnnotations must be true or false, got {json.dumps(trust)}"
        )
    approve = (*_names(entry.get("autoApprove"), name, "autoApprove"), *_names(entry.get("alwaysAllow"), name, "alwaysAllow"))
    common: dict[str, Any] = {
        "trust_annotations": trust,
        "disabled": disabled,
        "timeout": _timeout(entry, name),
        "auto_approve": tuple(dict.fromkeys(approve)),
        "disabled_tools": _names(entry.get("disabledTools"), name, "disabledTools"),
        "ignored_keys": ignored,
    }
    if disabled:  # not started: nothing is expanded (a variable it names may well be unset)
        return MCPServerConfig(
            name=name,
            type=cast(Transport, kind),
            command=command if isinstance(command, str) else None,
            url=url if isinstance(url, str) else None,
            **common,
        )
    used: list[str] = []  # values from the environment: never shown
    return MCPServerConfig(
        name=name,
        type=cast(Transport, kind),
        command=_expand(_string(command, name, "command"), name, "command", env_source, used)
        if command is not None
        else None,
        args=tuple(
            _expand(_string(a, name, f"args[{i}]"), name, f"args[{i}]", env_source, used) for i, a in enumerate(args)
        ),
        env=_string_map(entry.get("env"), name, "env", env_source, used),
        cwd=_expand(_string(cwd, name, "cwd"), name, "cwd", env_source, used) if cwd is not None else None,
        url=_expand(_string(url, name, "url"), name, "url", env_source, used) if url is not None else None,
        headers=_string_map(entry.get("headers"), name, "headers", env_source, used),
        from_environment=tuple(used),
        **common,
    )


def load_mcp_json(
    source: str | os.PathLike[str] | Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> dict[str, MCPServerConfig]:
    """Read the ``mcpServers`` of a ``.mcp.json`` file (a path) or of an already parsed
    mapping, in file order. ``${VAR}`` and ``${VAR:-default}`` are expanded from
    ``environ`` (``os.environ`` when None). Raises :class:`MCPConfigError`."""
    where = "MCP config"
    if isinstance(source, Mapping):
        data: Any = source
    else:
        path = Path(source)
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise MCPConfigError(f"{where}: cannot read ({exc.strerror or exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MCPConfigError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, Mapping):
        raise MCPConfigError(f"{where}: must be a JSON object with an \"mcpServers\" object")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, Mapping):
        raise MCPConfigError(f"{where}: \"mcpServers\" must be an object, got {_kind(servers)}")
    configs = {name: server_config(name, entry, environ=environ) for name, entry in servers.items()}
    for config in configs.values():
        for key in config.ignored_keys:
            log.warning("%s: MCP server %r: unknown key %r ignored", where, config.name, key)
    return configs
