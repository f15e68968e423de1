"""The MCP servers of the command's settings as a session uses them: read from the
``.mcp.json`` files the settings name (:func:`load_servers`) and run by an
:class:`ketch.mcp.MCPManager` (:func:`manager_for`). ``ketch mcp`` (:mod:`ketch.cli._mcp`)
lists and edits them."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from ._config import ConfigError
from ._config import Settings
from ._config import user_mcp_json

# -- the servers of the settings, as the command uses them --------------------------------------
LOG_LEVEL_ENV = "KETCH_MCP_LOG_LEVEL"
"""The level of the MCP servers' log messages a run shows (default ``warning``)."""

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

_warned: set[str] = set()  # each warning line once per process


def warn_once(line: str) -> None:
    if line not in _warned:
        _warned.add(line)
        sys.stderr.write(f"ketch: warning: {line}\n")
        sys.stderr.flush()


@dataclass(slots=True)
class LoadedServers:
    """The MCP servers of the settings as :func:`load_servers` read them: ``configs`` (the
    good entries, disabled ones included), ``invalid`` (name -> (type, why it was skipped))
    and the warning ``lines`` (unknown keys, skipped entries)."""

    configs: dict[str, Any]
    invalid: dict[str, tuple[str, str]]
    lines: list[str]


def entry_type(entry: Any) -> str:
    if not isinstance(entry, dict):
        return "?"
    kind = entry.get("type") or entry.get("transportType") or entry.get("transport")
    if isinstance(kind, str) and kind:
        return {"streamable-http": "http", "streamableHttp": "http", "streamable_http": "http"}.get(kind, kind)
    return "http" if "url" in entry and "command" not in entry else "stdio"


def load_servers(settings: Settings) -> LoadedServers:
    """Read the ``mcpServers`` entries of ``settings`` (each ``${VAR}`` expanded from the
    environment). An entry that does not parse is skipped: it is in ``invalid`` with the
    reason naming its file, which the manager reports as a server that failed to start;
    each unknown key gets one warning line naming the key, its file and the servers that
    use it. The servers' ``autoApprove`` /
    ``alwaysAllow`` lists become allow rules in ``settings``: those of the user's
    ``.mcp.json`` always, a project's only through the project trust gate
    (:meth:`ketch.cli._trust.Gate.admit`, setting ``mcpServers.autoApprove``)."""
    from ..mcp import MCPConfigError
    from ..mcp import server_config
    from ..permissions import Rule
    from ._trust import Gate
    from ._trust import Trust

    configs: dict[str, Any] = {}
    invalid: dict[str, tuple[str, str]] = {}
    lines: list[str] = []
    unknown: dict[tuple[str, str], list[str]] = {}
    user_file = user_mcp_json()
    gate = Gate(settings.trust if settings.trust is not None else Trust(settings.project_root or Path.cwd()))
    have = {str(rule) for rule in settings.allow}
    for name, entry in settings.mcp_servers.items():
        origin = settings.mcp_origins.get(name, ".mcp.json")
        try:
            config = server_config(name, entry)
        except MCPConfigError as exc:
            # skipped, and reported as a server that fails to start is (attach_mcp, ketch mcp list)
            invalid[name] = (entry_type(entry), f"{origin}: {exc}")
            continue
        configs[name] = config
        for key in config.ignored_keys:
            unknown.setdefault((origin, key), []).append(name)
        rules = [r for r in config.auto_approve_rules if r not in have]
        if not rules or config.disabled:
            continue
        user = Path(origin) == user_file
        label = f"mcpServers.{name}.autoApprove"
        if user or gate.admit("mcpServers.autoApprove", rules, Path(origin), label=label):
            for text in rules:
                settings.allow.append(Rule.parse(text, "user" if user else "project"))
                have.add(text)
    for (origin, key), names in unknown.items():
        lines.append(f"{origin}: unknown key {key!r} ignored (MCP server{'s' if len(names) > 1 else ''} {', '.join(names)})")
    if gate.ignored:  # not reached today: a project's servers are only here once it is trusted
        lines.append((gate.line() or "").removeprefix("ketch: "))
    return LoadedServers(configs, invalid, lines)


def _log_writer(errlog: Any) -> Any:
    """An ``on_log`` that writes each server log message as one line to ``errlog``."""

    def write(entry: Any) -> None:
        data = entry.data
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
        where = f"{entry.server}" + (f"/{entry.logger}" if entry.logger else "")
        try:
            out = errlog if errlog is not None else sys.stderr
            out.write(f"ketch: mcp {where} [{entry.level}] {' '.join(text.splitlines())}\n")
            out.flush()
        except (OSError, ValueError):
            pass

    return write


def run_log_level(environ: Any = None) -> str:
    """The level of server log messages a run shows: ``KETCH_MCP_LOG_LEVEL`` or ``warning``;
    a :class:`ConfigError` for a value that is not a level."""
    import os

    value = ((os.environ if environ is None else environ).get(LOG_LEVEL_ENV) or "warning").strip().lower()
    if value not in LOG_LEVELS:
        raise ConfigError(f"{LOG_LEVEL_ENV}={value!r}: expected one of {', '.join(LOG_LEVELS)}")
    return value


def manager_for(
    settings: Settings,
    root: Path,
    *,
    elicitation: Any = None,
    errlog: Any = None,
    log_level: str | None = None,
    logs: bool = True,
) -> Any:
    """The :class:`ketch.mcp.MCPManager` of the MCP servers in ``settings`` as the command
    runs them (lazy start, roots = ``root``, sampling through the agent's model and
    permission rules, server log messages at ``log_level`` -- default
    :func:`run_log_level` -- written to ``errlog``; dropped when not ``logs``), or None
    when there are none. The
    warnings of :func:`load_servers` go to stderr, each once per process."""
    if not settings.mcp_servers:
        return None
    import logging
    from typing import cast

    from ..mcp import MCPManager
    from ..mcp import default_auth_dir

    if TYPE_CHECKING:
        from mcp_types import LoggingLevel

    # the command reports failed servers itself (Built.attach_mcp, ketch mcp list)
    logging.getLogger("ketch.mcp").addHandler(logging.NullHandler())
    # a refused refresh is reported as the server's failure, naming `ketch mcp login`
    logging.getLogger("mcp.client.auth").addHandler(logging.NullHandler())
    loaded = load_servers(settings)
    for line in loaded.lines:
        warn_once(line)
    return MCPManager(
        loaded.configs,
        roots=[root],
        elicitation=elicitation,
        errlog=errlog,
        invalid=loaded.invalid,
        sample_with_agent=True,
        auth_dir=default_auth_dir(),
        log_level=cast("LoggingLevel", log_level or run_log_level()),
        on_log=_log_writer(errlog) if logs else _drop,
    )


def _drop(entry: Any) -> None:
    """An ``on_log`` that shows nothing."""
