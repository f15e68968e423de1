"""``ketch mcp``: ketch as an MCP server, and the MCP servers ketch uses.

::

    ketch mcp serve [--http [--port N]]      serve the built-in tools and ketch_agent
    ketch mcp list [-o json]                 configured servers, their status and tools
    ketch mcp add NAME -- COMMAND ARGS...    add a stdio server
    ketch mcp add NAME --url URL [--header K:V]   add a streamable HTTP server
    ketch mcp remove NAME                    remove a server

Servers are configured in the common ``.mcp.json`` shape (``{"mcpServers": {NAME:
{"command", "args", "env"} | {"type": "http", "url", "headers"}}}``): the user's
``.mcp.json`` in the user config directory (``~/.config/ketch/.mcp.json``) and the
project's ``.mcp.json`` in the project root. Project servers are used only when the
project is trusted (see :mod:`ketch.cli._config`). ``add`` and ``remove`` take ``--scope
user|project`` (``add`` defaults to ``user``).

``ketch mcp serve`` works in the current directory (or ``--workspace``) with the
command's settings: every call of a built-in tool goes through the permission engine
(``--permission-mode``, ``--allow``, ``--deny``, the configured rules); a call that needs
approval is denied (there is nobody to ask) with a message saying how to allow it.
``ketch_agent`` runs a whole agent as ``ketch run`` builds it (``--no-agent``: not
offered). Over stdio by default; ``--http`` serves streamable HTTP on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._args import OneLineParser
from ._args import add_permission_options
from ._args import finite_non_negative
from ._args import positive_int
from ._config import TRUST_ENV
from ._config import ConfigError
from ._config import Settings
from ._config import directory
from ._config import finish_settings
from ._config import load_settings
from ._config import project_mcp_json
from ._config import read_mcp_json
from ._config import user_mcp_json
from ._config import write_config_file
from ._mcp_servers import LOG_LEVELS
from ._mcp_servers import entry_type
from ._mcp_servers import load_servers
from ._mcp_servers import manager_for
from ._mcp_servers import warn_once
from ._wire import EXIT_INTERRUPTED
from ._wire import EXIT_USAGE

SCOPES = ("user", "project")

SERVE_DENIAL = (
    "Permission denied: {tool} needs approval, but ketch mcp serve has nobody to ask "
    "(permission mode {mode}). Start the server with an allow rule (--allow), "
    "--permission-mode accept_edits (file edits) or bypass (everything) to allow it."
)
"""The error result of a tool call that would need the user's approval."""

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


# -- where servers are configured -----------------------------------------------------------
def _write_mcp_json(path: Path, data: dict[str, Any]) -> None:
    write_config_file(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _scope_path(scope: str, cwd: Path) -> Path:
    return user_mcp_json() if scope == "user" else project_mcp_json(cwd)


# -- ketch mcp login ----------------------------------------------------------------------------
def _login_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="ketch mcp login", description="Authorize ketch (OAuth) for an HTTP MCP server and store its tokens."
    )
    parser.add_argument("name", help="the server's name in .mcp.json")
    parser.add_argument("-C", "--cwd", help="the directory whose project to use")
    parser.add_argument(
        "--trust-project", action="store_true", help=f"also the project's servers (untrusted otherwise); also {TRUST_ENV}=1"
    )
    parser.add_argument("--no-browser", action="store_true", help="only print the authorization URL, open no browser")
    return parser


def _login(argv: list[str]) -> int:
    from ..mcp import TokenFile
    from ..mcp import default_auth_dir
    from ..mcp import login

    args = _login_parser().parse_args(argv)
    name = args.name
    cwd = directory(args.cwd)
    loaded = load_servers(load_settings(cwd, trust=args.trust_project))
    for line in loaded.lines:
        warn_once(line)
    config = loaded.configs.get(name)
    if config is None:
        if name in loaded.invalid:
            raise ConfigError(f"mcp login {name}: {loaded.invalid[name][1]}")
        known = ", ".join(sorted(n for n, c in loaded.configs.items() if c.type != "stdio")) or "none"
        raise ConfigError(f"mcp login {name}: no MCP server {name!r} is configured (HTTP servers: {known})")
    if config.type == "stdio" or config.url is None:
        raise ConfigError(f"mcp login {name}: {name!r} is a stdio server; OAuth is for http and sse servers")
    auth_dir = default_auth_dir()

    async def open_url(url: str) -> None:
        sys.stderr.write(f"ketch: to authorize ketch for MCP server {name!r}, open this URL:\n  {url}\n")
        sys.stderr.flush()
        if not args.no_browser:
            import webbrowser

            # in a thread: a browser command may wait, and the redirect comes back to this loop
            with contextlib.suppress(Exception):
                await asyncio.to_thread(webbrowser.open, url)

    try:
        tools = asyncio.run(login(config, open_url=open_url, auth_dir=auth_dir, errlog=sys.stderr))
    except ConnectionError as exc:
        sys.stderr.write(f"ketch: mcp login {name}: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    store = TokenFile(auth_dir, name, config.url)
    if store.has_tokens:
        sys.stderr.write(f"ketch: authorized for MCP server {name!r} ({len(tools)} tools); tokens stored in {store.path}\n")
    else:
        sys.stderr.write(f"ketch: MCP server {name!r} did not ask for authorization ({len(tools)} tools); nothing stored\n")
    return 0


# -- add / remove -------------------------------------------------------------------------------
def _add_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="ketch mcp add",
        description="Add an MCP server: ketch mcp add NAME -- COMMAND ARGS... | ketch mcp add NAME --url URL",
    )
    parser.add_argument("name", help="the server's name (letters, digits, '_', '-', '.')")
    parser.add_argument("--url", help="a streamable HTTP (or, with --transport sse, SSE) server's URL")
    parser.add_argument("--transport", choices=("http", "sse"), default="http", help="with --url: http (default) or sse")
    parser.add_argument("--header", action="append", metavar="K:V", help="with --url: an HTTP header (repeatable)")
    parser.add_argument("-e", "--env", action="append", metavar="K=V", help="a stdio server's environment variable (repeatable)")
    parser.add_argument("-s", "--scope", choices=SCOPES, default="user", help="user (default) or project (.mcp.json in the project root)")
    parser.add_argument("-C", "--cwd", help="the directory whose project to use")
    return parser


def _check_name(name: str) -> None:
    if not _NAME.match(name) or "__" in name:
        raise ConfigError(f"server name {name!r}: expected letters, digits, '_', '-' or '.' (and no '__')")


def _add(argv: list[str]) -> int:
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    args = _add_parser().parse_args(argv)
    _check_name(args.name)
    if command and args.url:
        raise ConfigError("give either -- COMMAND ARGS... (a stdio server) or --url URL, not both")
    entry: dict[str, Any]
    if args.url:
        if not re.match(r"^https?://[^/\s]+", args.url):
            raise ConfigError(f"--url {args.url!r}: expected an http:// or https:// URL")
        if args.env:
            raise ConfigError("--env is for stdio servers; an HTTP server takes --header K:V")
        entry = {"type": args.transport, "url": args.url}
        headers: dict[str, str] = {}
        for text in args.header or ():
            key, sep, value = text.partition(":")
            if not sep or not key.strip():
                raise ConfigError(f"--header {text!r}: expected NAME:VALUE")
            headers[key.strip()] = value.strip()
        if headers:
            entry["headers"] = headers
    elif command:
        if not command[0].strip():
            raise ConfigError("-- COMMAND: the command is empty")
        if args.header:
            raise ConfigError("--header is for HTTP servers; a stdio server takes --env K=V")
        entry = {"command": command[0], "args": command[1:]}
        env: dict[str, str] = {}
        for text in args.env or ():
            key, sep, value = text.partition("=")
            if not sep or not key:
                raise ConfigError(f"--env {text!r}: expected NAME=VALUE")
            env[key] = value
        if env:
            entry["env"] = env
    else:
        raise ConfigError("ketch mcp add NAME needs -- COMMAND ARGS... (a stdio server) or --url URL")
    cwd = directory(args.cwd)
    path = _scope_path(args.scope, cwd)
    data = read_mcp_json(path)
    servers = data.setdefault("mcpServers", {})
    if args.name in servers:
        raise ConfigError(f"MCP server {args.name!r} already exists in {path}; remove it first (ketch mcp remove {args.name})")
    servers[args.name] = entry
    _write_mcp_json(path, data)
    sys.stderr.write(f"ketch: added MCP server {args.name} to {path}\n")
    return 0


def _remove(argv: list[str]) -> int:
    parser = OneLineParser(prog="ketch mcp remove", description="Remove an MCP server from the user or project .mcp.json.")
    parser.add_argument("name", help="the server's name")
    parser.add_argument("-s", "--scope", choices=SCOPES, help="user or project (default: where it is)")
    parser.add_argument("-C", "--cwd", help="the directory whose project to use")
    args = parser.parse_args(argv)
    cwd = directory(args.cwd)
    scopes = [args.scope] if args.scope else list(SCOPES)
    found = [(scope, path) for scope in scopes for path in [_scope_path(scope, cwd)] if args.name in read_mcp_json(path).get("mcpServers", {})]
    if not found:
        where = " or ".join(str(_scope_path(s, cwd)) for s in scopes)
        raise ConfigError(f"no MCP server {args.name!r} in {where} (ketch mcp list shows the servers)")
    if len(found) > 1:
        raise ConfigError(f"MCP server {args.name!r} is in {found[0][1]} and {found[1][1]}: choose one with --scope user|project")
    _, path = found[0]
    data = read_mcp_json(path)
    del data["mcpServers"][args.name]
    _write_mcp_json(path, data)
    sys.stderr.write(f"ketch: removed MCP server {args.name} from {path}\n")
    return 0


# -- serve --------------------------------------------------------------------------------------
def _serve_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="ketch mcp serve",
        description="Serve ketch's built-in tools and the ketch_agent tool to MCP clients (stdio, or --http on 127.0.0.1).",
    )
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP on 127.0.0.1 instead of stdio")
    parser.add_argument("--port", type=int, default=0, help="with --http: the port (default 0: any free port; the URL is printed)")
    parser.add_argument("-w", "--workspace", "-C", "--cwd", dest="workspace", help="the tools' root (default: the current directory)")
    parser.add_argument("--tools", help="comma list of built-in tools to serve (read,write,edit,bash,grep,find,ls); '' for none")
    parser.add_argument("--no-agent", action="store_true", help="do not offer the ketch_agent tool")
    parser.add_argument("-m", "--model", help="ketch_agent's model, provider:model (default: as for ketch run)")
    parser.add_argument("--max-turns", type=positive_int, help="ketch_agent: stop after this many model calls")
    parser.add_argument("--max-budget-usd", type=finite_non_negative, help="ketch_agent: stop once a run cost this much")
    add_permission_options(parser)
    parser.add_argument("--deny", action="append", metavar="RULE", help="deny rule, e.g. 'Bash(rm:*)' (repeatable)")
    parser.add_argument(
        "--trust-project",
        action="store_true",
        help=f"apply this project's settings that widen permissions (and its .mcp.json servers); also {TRUST_ENV}=1",
    )
    return parser


def _serve_settings(args: Any) -> tuple[Settings, Path]:
    root = directory(args.workspace, "--workspace")
    flags: dict[str, Any] = {
        "model": args.model,
        "max_turns": args.max_turns,
        "max_budget_usd": args.max_budget_usd,
        "permission_mode": args.permission_mode,
    }
    if args.tools is not None:
        flags["tools"] = [t.strip() for t in args.tools.split(",") if t.strip()]
    settings = load_settings(root, flags, trust=args.trust_project)
    finish_settings(settings, getattr(args, "allow", None), getattr(args, "deny", None))
    return settings, root


def build_server(settings: Settings, root: Path, *, agent: bool = True) -> Any:
    """The :class:`ketch.mcp._server.KetchMCPServer` of ``ketch mcp serve``: the built-in
    tools of ``root`` gated by a permission engine from ``settings`` (nobody to ask), and
    with ``agent`` the ``ketch_agent`` tool running agents built as ``ketch run`` builds them."""
    from ..mcp import KetchMCPServer
    from ._factory import build_agent
    from ._factory import build_gated_tools
    from ._factory import mcp_manager

    tools, runner, engine = build_gated_tools(settings, root, no_approver_message=SERVE_DENIAL)

    async def run_agent(task: str, on_event: Any) -> Any:
        mcp = mcp_manager(settings, root)
        try:
            built = build_agent(settings, root, approver=None, mcp=mcp)
            for line in await built.attach_mcp():
                sys.stderr.write(f"ketch: warning: {line}\n")
            built.agent.subscribe(on_event)
            await built.session_start("startup")
            try:
                return await built.prompt(task)
            finally:
                await built.session_end("other")
        finally:
            if mcp is not None:
                await mcp.aclose()

    from ._headless import _version

    return KetchMCPServer(
        tools,
        gate=engine.before_tool_call,
        after=runner.after_tool_call if runner is not None else None,
        agent=run_agent if agent else None,
        name="ketch",
        version=_version(),
        instructions=f"ketch: coding tools and a coding agent working in {root}.",
        root=root,
    )


def _serve(argv: list[str]) -> int:
    args = _serve_parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: expected a port number from 0 to 65535")
    if args.port and not args.http:
        raise ConfigError(f"--port {args.port}: only with --http")
    settings, root = _serve_settings(args)
    if not args.no_agent:
        from ._precheck import check_model

        check_model(settings, None)
    server = build_server(settings, root, agent=not args.no_agent)

    def ready(url: str) -> None:
        sys.stderr.write(f"ketch: MCP server (streamable HTTP) at {url}\n")
        sys.stderr.flush()

    try:
        if args.http:
            try:
                asyncio.run(server.serve_http(args.port, on_ready=ready))
            except OSError as exc:
                raise ConfigError(f"--port {args.port}: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}") from None
        else:
            asyncio.run(_serve_stdio(server))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0


async def _serve_stdio(server: Any) -> None:
    """Serve until stdin closes; SIGTERM ends the server the same way (the tools'
    processes end with it)."""
    import signal

    from ._signals import handle_signals

    task = asyncio.current_task()
    assert task is not None
    handle_signals({signal.SIGTERM: task.cancel})
    with contextlib.suppress(asyncio.CancelledError):
        await server.serve_stdio()


# -- dispatch -----------------------------------------------------------------------------------
_USAGE = "ketch mcp serve|list|add|remove|login (see ketch mcp --help)"

_HELP = """\
usage: ketch mcp serve|list|add|remove|login ...

MCP: ketch as a server for MCP clients, and the MCP servers ketch uses.

  ketch mcp serve [--http [--port N]]        serve the built-in tools and ketch_agent (stdio by default)
  ketch mcp list [-o json]                   configured servers, their status and tools
  ketch mcp add NAME [-s user|project] -- COMMAND ARGS...    add a stdio server
  ketch mcp add NAME [-s user|project] --url URL [--header K:V]   add an HTTP server
  ketch mcp remove NAME [-s user|project]    remove a server
  ketch mcp login NAME [--no-browser]        authorize ketch (OAuth) for an HTTP server

Servers live in .mcp.json: the user's in the user config directory, the project's in the
project root (used once the project is trusted). OAuth tokens of `ketch mcp login` live in
the user data directory (ketch/mcp-auth, one 0600 file per server).
"""


def mcp_command(argv: Sequence[str]) -> int:
    """Run ``ketch mcp …``; returns the exit code."""
    argv = list(argv)
    action = argv[0] if argv else None
    if action in ("-h", "--help"):
        sys.stdout.write(_HELP)
        return 0
    if action is None:
        sys.stderr.write("ketch: mcp: a command is needed: serve, list, add, remove or login (see ketch mcp --help)\n")
        return EXIT_USAGE
    commands = {"serve": _serve, "add": _add, "remove": _remove, "list": _list, "login": _login}
    handler = commands.get(action)
    if handler is None:
        sys.stderr.write(f"ketch: mcp: unknown command {action!r}; expected one of serve, list, add, remove, login\n")
        return EXIT_USAGE
    try:
        return handler(argv[1:])
    except ConfigError as exc:
        sys.stderr.write(f"ketch: {exc}\n")
        return EXIT_USAGE


def _scope_of(origin: str | None) -> str:
    if origin is None:
        return "?"
    return "user" if Path(origin) == user_mcp_json() else "project"


def status_lines(statuses: Sequence[Any], origins: dict[str, str]) -> list[str]:
    """The servers as the text lines of ``ketch mcp list`` and ``/mcp``: a header, then
    one line each: name, scope, transport, state, and the tools (or the error)."""
    rows = [("NAME", "SCOPE", "TYPE", "STATUS", "TOOLS")]
    for status in statuses:
        if status.state == "failed" or (status.error and not status.tools):
            detail = f"error: {status.error}"
        elif status.state == "disabled":
            detail = "not started: disabled in its .mcp.json entry"
        elif status.state == "untrusted":
            detail = "not started: the project is not trusted (--trust-project)"
        else:
            detail = ", ".join(status.tools) or "(no tools)"
        rows.append((status.name, _scope_of(origins.get(status.name)), status.type, status.state, detail))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] for row in rows]


@dataclass(frozen=True, slots=True)
class _Untrusted:
    name: str
    type: str
    state: str = "untrusted"
    tools: tuple[str, ...] = ()
    error: str | None = None
    protocol: str | None = None


def _list_parser() -> OneLineParser:
    parser = OneLineParser(prog="ketch mcp list", description="The configured MCP servers, their status and tools.")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    parser.add_argument("-C", "--cwd", help="the directory whose project to use")
    parser.add_argument(
        "--trust-project", action="store_true", help=f"also start the project's servers (untrusted otherwise); also {TRUST_ENV}=1"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="also show each server's protocol version and its log messages (on stderr, from --log-level up)",
    )
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, help="with -v: the lowest level of server log messages shown (default info)"
    )
    return parser


def _list(argv: list[str]) -> int:
    args = _list_parser().parse_args(argv)
    if args.log_level and not args.verbose:
        raise ConfigError(f"--log-level {args.log_level}: only with -v")
    cwd = directory(args.cwd)
    settings = load_settings(cwd, trust=args.trust_project)
    origins = dict(settings.mcp_origins)
    project_file = project_mcp_json(cwd)
    untrusted = [
        name for name in read_mcp_json(project_file).get("mcpServers", {}) if origins.get(name) != str(project_file)
    ] if project_file != user_mcp_json() else []
    level = (args.log_level or "info") if args.verbose else None
    statuses: list[Any] = asyncio.run(_statuses(settings, cwd, level))
    for name in untrusted:
        entry = read_mcp_json(project_file)["mcpServers"][name]
        statuses = [s for s in statuses if s.name != name] + [_Untrusted(name, entry_type(entry))]
        origins[name] = str(project_file)
    if args.output == "json":
        items = [
            {
                "name": s.name,
                "scope": _scope_of(origins.get(s.name)),
                "source": origins.get(s.name),
                "type": s.type,
                "status": s.state,
                "tools": list(s.tools),
                "error": s.error,
                "protocol": getattr(s, "protocol", None),
            }
            for s in statuses
        ]
        sys.stdout.write(json.dumps(items, ensure_ascii=False) + "\n")
    elif not statuses:
        sys.stderr.write("ketch: no MCP servers configured (ketch mcp add NAME -- COMMAND ARGS... adds one)\n")
    else:
        text = status_lines(statuses, origins)
        if args.verbose:
            text.append("")
            text.extend(f"{s.name}: protocol {getattr(s, 'protocol', None) or '-'}" for s in statuses)
        sys.stdout.write("\n".join(text) + "\n")
    return 0


async def _statuses(settings: Settings, root: Path, log_level: str | None = None) -> list[Any]:
    """Start every configured server, list its tools, stop it again; each one's status.
    With ``log_level``, the servers' log messages from that level up are written to
    stderr as they come; without, none are shown."""
    manager = manager_for(settings, root, log_level=log_level or "emergency", logs=log_level is not None)
    if manager is None:
        return []
    try:
        await manager.start()
        await manager.tools()
        return list(manager.status())
    finally:
        await manager.aclose()
