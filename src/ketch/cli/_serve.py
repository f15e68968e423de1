"""``ketch serve``: the HTTP/SSE server and web page (:mod:`ketch.server`) for the
sessions of a directory, with agents built as ``ketch run`` builds them (model, tools,
permission engine, sandbox, hooks, MCP servers and settings from the same files, flags
and environment). A tool call that needs approval pauses the run; the page (or
``POST /api/sessions/{id}/approvals``) decides it.

The bearer token is ``--token``, else ``KETCH_SERVER_TOKEN``, else generated; a generated
one is printed once, inside the page's URL (``http://127.0.0.1:8765/?token=…``: opening
it sets an HttpOnly, SameSite=Strict cookie and redirects to ``/``). The server binds to
127.0.0.1 unless ``--host`` says otherwise. SIGINT/SIGTERM stop it: runs are aborted and
sessions closed.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import secrets
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..loop import AgentEvent
from ._args import OneLineParser
from ._config import ConfigError
from ._config import Settings
from ._signals import handle_signals
from ._wire import EXIT_INTERRUPTED
from ._wire import EXIT_USAGE
from ._wire import encode_event
from ._wire import encode_line

TOKEN_ENV = "KETCH_SERVER_TOKEN"
PROXY_TOKENS_ENV = "KETCH_PROXY_TOKENS"
DEFAULT_PORT = 8765


def encode_wire(event: AgentEvent) -> bytes:
    """An event's JSON as ``ketch run -o stream-json`` writes it (one line, no newline);
    a subagent's events nested in ``tool_execution_update`` are slimmed the same way."""
    return bytes(encode_line(encode_event(event), bytearray())[:-1])


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="ketch serve",
        description="Serve the sessions of this directory over HTTP (JSON + Server-Sent Events) with a web page.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument("--token", help=f"the bearer token (default: {TOKEN_ENV}, else a generated one, printed once)")
    parser.add_argument(
        "--cors-origin", action="append", metavar="ORIGIN", help="allow browser calls from this origin (repeatable; default none)"
    )
    parser.add_argument(
        "--name",
        default="ketch",
        help="the served agent's name: its model id at /v1 (OpenAI-compatible) and its A2A card's name (default ketch)",
    )
    parser.add_argument(
        "--proxy-model",
        action="append",
        metavar="MODEL",
        help=f"serve the model proxy at /proxy for this provider:model (repeatable; the allow-list); client tokens from {PROXY_TOKENS_ENV}",
    )
    from ._main import add_agent_options
    from ._main import add_agent_settings

    add_agent_options(parser)
    parser.add_argument("--deny", action="append", metavar="RULE", help="deny rule, e.g. 'Bash(rm:*)' (repeatable)")
    add_agent_settings(parser)
    return parser


def _factory(settings: Settings, root: Path, tool_choice: str | None) -> Any:
    from ..server import Hosted
    from ._factory import build_agent
    from ._factory import build_model
    from ._factory import mcp_manager
    from ._sessions import use_recorded_model

    async def factory(session: Any) -> Hosted:
        own = copy.deepcopy(settings)
        use_recorded_model(own, session)
        mcp = mcp_manager(own, root)
        built = build_agent(own, root, approver=None, tool_choice=tool_choice, session=session, no_approver="pause", mcp=mcp)
        for line in await built.attach_mcp():
            sys.stderr.write(f"ketch: warning: {line}\n")
        await session.record_permission_mode(built.permissions.mode)
        await built.session_start("resume" if session.messages else "startup")

        from ._commands import load_custom_commands
        from ._commands import run_command
        from ._commands import split_line

        commands, warnings = load_custom_commands(own)
        for line in warnings:
            sys.stderr.write(line + "\n")

        async def prompt(text: str) -> Any:
            built.arm()
            name, arguments = split_line(text) if text.startswith("/") else ("", "")
            command = commands.get(name)
            if command is not None:  # a custom slash command (ketch.cli._commands), expanded
                return await run_command(built, own, command, command.expand(arguments))
            return await built.prompt(text)

        def set_model(spec: str) -> None:
            try:
                built.agent.model = build_model(spec, own)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
            own.model = spec
            built.fit_context(own)

        async def close() -> None:
            try:
                await built.session_end("other")
            finally:
                if mcp is not None:
                    await mcp.aclose()

        listed = tuple(
            {"name": c.name, "usage": c.usage, "description": c.description, "origin": c.origin} for c in commands.values()
        )
        def bind_elicitation(ask: Any) -> None:
            """The MCP servers' questions (a -32042 URL to open, a form) go to the page."""
            from ..mcp import ElicitationResponse

            async def elicitation(request: Any) -> Any:
                answer = await ask(
                    {
                        "server": request.server,
                        "message": request.message,
                        "mode": request.mode,
                        "url": request.url,
                        "requested_schema": request.requested_schema,
                    }
                )
                return ElicitationResponse(answer["action"], answer.get("content"))

            mcp.elicitation = elicitation

        return Hosted(
            agent=built.agent,
            prompt=prompt,
            set_model=set_model,
            context=built.context,
            close=close,
            commands=listed,
            bind_elicitation=bind_elicitation if mcp is not None else None,
        )

    return factory


async def serve(
    settings: Settings,
    root: Path,
    *,
    host: str,
    port: int,
    token: str,
    show_token: bool,
    tool_choice: str | None = None,
    cors_origins: Sequence[str] = (),
    proxy_models: Sequence[str] = (),
    proxy_tokens: dict[str, float | None] | None = None,
    name: str = "ketch",
) -> int:
    """Run the server until SIGINT/SIGTERM; returns the exit code. ``proxy_models`` and
    ``proxy_tokens``: the model proxy at ``/proxy`` (its allow-list and client budgets)."""
    from aiohttp import web

    from ..server import create_app
    from ..server import is_loopback_host
    from ._sessions import store

    loopback = is_loopback_host(host)
    subapps = []
    if proxy_models:
        from ..server import proxy_app
        from ._factory import build_model

        subapps.append(
            ("/proxy", proxy_app(models=proxy_models, budgets=proxy_tokens or {}, resolve=lambda name: build_model(name, settings), secrets=[token]))
        )
    app = create_app(
        _factory(settings, root, tool_choice),
        store=store(),
        cwd=str(root),
        token=token,
        encode=encode_wire,
        cors_origins=cors_origins,
        loopback_only=loopback,
        subapps=subapps,
        name=name,
        description="A ketch coding agent: it reads, edits and runs code in the directory it serves",
    )
    # a client that goes away cancels its handler: the proxy then closes the upstream call
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        sys.stderr.write(f"ketch: cannot listen on {host}:{port}: {exc.strerror or exc}\n")
        return EXIT_USAGE
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    if show_token:
        sys.stderr.write(f"ketch: serving {root} on {url}\nketch: open {url}?token={token}  (the token is shown only this once)\n")
    else:
        sys.stderr.write(f"ketch: serving {root} on {url}  (token from --token or {TOKEN_ENV}; open {url}?token=<token>)\n")
    if not loopback:
        sys.stderr.write(f"ketch: warning: listening on {host}: other machines can reach this server (token required)\n")
    sys.stderr.flush()
    stop = asyncio.Event()
    handle_signals({signal.SIGINT: stop.set, signal.SIGTERM: stop.set})
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0


def proxy_budgets(text: str | None) -> dict[str, float | None]:
    """The proxy's client tokens from ``KETCH_PROXY_TOKENS``: comma-separated ``token`` (no
    limit) or ``token=usd`` (its budget in US dollars). Raises :class:`ConfigError`
    naming the bad entry by position (never the token)."""
    import math

    budgets: dict[str, float | None] = {}
    entries = [entry.strip() for entry in (text or "").split(",") if entry.strip()]
    if not entries:
        raise ConfigError(f"--proxy-model: set {PROXY_TOKENS_ENV} to the client tokens (comma-separated token or token=usd)")
    for number, entry in enumerate(entries, 1):
        token, has_budget, budget = entry.partition("=")
        token = token.strip()
        if len(token) < 16:
            raise ConfigError(f"{PROXY_TOKENS_ENV}: token {number} has {len(token)} characters; expected at least 16")
        if has_budget:
            try:
                usd = float(budget)
            except ValueError:
                usd = -1.0
            if not math.isfinite(usd) or usd < 0:
                raise ConfigError(f"{PROXY_TOKENS_ENV}: token {number}'s budget {budget.strip()!r} is not a non-negative number of US dollars")
            budgets[token] = usd
        else:
            budgets[token] = None
    return budgets


def _check_model_spec(settings: Settings) -> None:
    """A model that cannot be built is a usage error now, not at the first session (the
    embedded model is not loaded here: that takes seconds)."""
    from ._factory import LOCAL_MODEL
    from ._factory import build_model
    from ._factory import choose_model

    spec, _ = choose_model(settings)
    if spec != LOCAL_MODEL and not spec.startswith("local:"):
        build_model(spec, settings)


def serve_command(argv: Sequence[str]) -> int:
    """Run ``ketch serve …``; returns the exit code."""
    from ._main import _clean_args
    from ._main import _settings
    from ._precheck import check_model

    args = _parser().parse_args(argv)
    _clean_args(args)
    args.resume = None
    args.continue_session = False
    token = args.token or os.environ.get(TOKEN_ENV) or None
    show = token is None
    if token is not None and len(token) < 16:
        sys.stderr.write("ketch: --token: expected at least 16 characters (or leave it out for a generated one)\n")
        return EXIT_USAGE
    try:
        settings, root = _settings(args)
        check_model(settings, args.tool_choice)
        _check_model_spec(settings)
        proxy_models = tuple(args.proxy_model or ())
        proxy_tokens = proxy_budgets(os.environ.get(PROXY_TOKENS_ENV)) if proxy_models else None
        if proxy_models:
            from ._factory import build_model

            for name in proxy_models:
                build_model(name, settings)
    except ConfigError as exc:
        sys.stderr.write(f"ketch: {exc}\n")
        return EXIT_USAGE
    try:
        return asyncio.run(
            serve(
                settings,
                root,
                host=args.host,
                port=args.port,
                token=token or secrets.token_urlsafe(24),
                show_token=show,
                tool_choice=args.tool_choice,
                cors_origins=tuple(args.cors_origin or ()),
                proxy_models=proxy_models,
                proxy_tokens=proxy_tokens,
                name=args.name,
            )
        )
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
