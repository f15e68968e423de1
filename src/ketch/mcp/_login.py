"""``ketch mcp login NAME``: authorize ketch for an HTTP MCP server that wants OAuth
(see :mod:`ketch.mcp._auth` for where the tokens live and how a session uses them)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from ._auth import CALLBACK_PATH
from ._auth import LOGIN_TIMEOUT
from ._auth import TokenFile
from ._auth import default_auth_dir
from ._auth import provider
from ._client import MCPManager
from ._values import describe

if TYPE_CHECKING:
    from ._config import MCPServerConfig


class _Callback:
    """The loopback listener that takes the authorization server's redirect."""

    def __init__(self) -> None:
        self.result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.runner: Any = None
        self.port = 0

    async def start(self, port: int) -> None:
        from aiohttp import web

        async def handle(request: web.Request) -> web.Response:
            from mcp.shared.auth import AuthorizationCodeResult

            query = request.query
            if not self.result.done():
                if "error" in query:
                    detail = query.get("error_description") or query["error"]
                    self.result.set_exception(ConnectionError(f"the authorization server refused: {detail}"))
                elif "code" in query:
                    self.result.set_result(
                        AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))
                    )
                else:
                    return web.Response(status=400, text="ketch: this page expects an OAuth authorization response.\n")
            return web.Response(text="ketch: authorization received; you can close this page.\n")

        app = web.Application()
        app.router.add_get(CALLBACK_PATH, handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port, reuse_address=False)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or ()
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def login(
    config: MCPServerConfig,
    *,
    open_url: Callable[[str], Awaitable[None] | None],
    auth_dir: str | os.PathLike[str] | None = None,
    wait_for: float = LOGIN_TIMEOUT,
    errlog: Any = None,
) -> list[str]:
    """Authorize ketch for the HTTP server ``config`` (``ketch mcp login``): drop its
    stored tokens, connect, and when the server asks for OAuth send the user to the
    authorization URL (``open_url(url)``), take the redirect on a loopback port, store
    the tokens. Returns the server's tool names. Raises :class:`ConnectionError` (with
    the reason) when the flow fails or nobody came back within ``wait_for`` seconds."""
    if config.type == "stdio" or config.url is None:
        raise ValueError(f"MCP server {config.name!r} is a stdio server: OAuth is for http and sse servers")
    store = TokenFile(auth_dir if auth_dir is not None else default_auth_dir(), config.name, config.url)
    stored = store.read()
    callback = _Callback()
    port = stored.get("port")
    try:
        await callback.start(port if isinstance(port, int) else 0)
    except OSError:
        await callback.start(0)
    try:
        redirect_uri = f"http://127.0.0.1:{callback.port}{CALLBACK_PATH}"
        client = stored.get("client")
        uris = client.get("redirect_uris") if isinstance(client, dict) else None
        if isinstance(uris, list) and redirect_uri not in uris:  # registered for another port: register again
            stored.pop("client", None)
        stored.pop("tokens", None)
        stored.pop("expires_at", None)
        stored["port"] = callback.port
        store.write(stored)

        async def redirect(url: str) -> None:
            shown = open_url(url)
            if asyncio.iscoroutine(shown):
                await shown

        async def wait() -> Any:
            try:
                async with asyncio.timeout(wait_for):
                    return await asyncio.shield(callback.result)
            except TimeoutError:
                raise ConnectionError(f"nobody completed the authorization within {wait_for:g} s") from None

        auth = provider(config, store, redirect_uri=redirect_uri, redirect_handler=redirect, callback_handler=wait)
        manager = MCPManager({config.name: config}, startup_timeout=wait_for + 30, errlog=errlog, _auth=auth)
        try:
            try:
                tools = await manager.tools()
            except Exception as exc:
                raise ConnectionError(describe(exc)) from None
            status = manager.status()[0]
            if status.state != "running":
                raise ConnectionError(status.error or "did not connect")
            if not store.has_tokens:
                # the server did not ask for OAuth: nothing to store
                return [t.name for t in tools]
            return [t.name for t in tools]
        finally:
            await manager.aclose()
    finally:
        await callback.close()
