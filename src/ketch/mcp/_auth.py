"""OAuth 2.1 for HTTP MCP servers, on the ``mcp`` SDK's client auth.

A server that answers 401 is one that wants OAuth: the SDK's
:class:`~mcp.client.auth.OAuthClientProvider` discovers its protected-resource and
authorization-server metadata, registers ketch as a client (dynamic client
registration), runs the authorization-code flow with PKCE and refreshes tokens. ketch
adds where the tokens live and who may open a browser:

* :class:`TokenFile` keeps one server's tokens, client registration and discovered
  metadata in ``<auth_dir>/<server>.json`` (mode 0600, in a 0700 folder; the default
  folder is :func:`default_auth_dir`), bound to the server's URL: a file written for
  another URL is not used.
* :func:`~ketch.mcp._login.login` is the interactive flow (``ketch mcp login NAME``): a
  loopback listener on ``127.0.0.1`` takes the redirect, ``open_url`` shows the
  authorization URL.
* In a session (:class:`MCPManager`) nobody is sent to a browser. Stored tokens are
  refreshed a minute before they expire; a 401 with tokens that looked valid triggers
  one refresh; when that fails, or there were no tokens, the connection fails with
  :class:`LoginRequired`, whose message names ``ketch mcp login NAME``.

Tokens are never logged, shown in a repr or put in an error message.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncGenerator
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientInformationFull
    from mcp.shared.auth import OAuthToken

    from ._config import MCPServerConfig

REFRESH_MARGIN = 60.0
"""Seconds before a token's expiry at which it is refreshed (at most half its lifetime)."""


def _margin(lifetime: float | None) -> float:
    """How long before expiry a token of ``lifetime`` seconds is refreshed: a minute, or
    half of a shorter lifetime (a token is never stale the moment it is issued)."""
    return REFRESH_MARGIN if lifetime is None else min(REFRESH_MARGIN, float(lifetime) / 2)

LOGIN_TIMEOUT = 300.0
"""Seconds :func:`login` waits for the browser to come back."""

CALLBACK_PATH = "/callback"


def default_auth_dir(environ: Any = None) -> Path:
    """Where tokens live: ``$XDG_DATA_HOME/ketch/mcp-auth`` (an absolute path), else
    ``~/.local/share/ketch/mcp-auth``."""
    from ketch._paths import xdg_dir

    return xdg_dir("XDG_DATA_HOME", ".local/share", os.environ if environ is None else environ) / "ketch" / "mcp-auth"


def login_hint(server: str) -> str:
    """The command that authorizes ketch for ``server``."""
    return f"ketch mcp login {server}"


class LoginRequired(ConnectionError):
    """The HTTP server ``server`` wants OAuth and ketch holds no usable token for it."""

    def __init__(self, server: str, why: str = "needs authorization") -> None:
        super().__init__(f"MCP server {server!r} {why}: run `{login_hint(server)}`")
        self.server = server


class TokenFile:
    """One server's OAuth state in ``directory/<server>.json`` (the SDK's ``TokenStorage``).

    Holds the tokens with their absolute expiry, the client registration, the discovered
    metadata (so a refresh after a restart reaches the right token endpoint) and the
    loopback port of the last login; all bound to ``url``. Written atomically with mode
    0600 (the folder 0700).
    """

    def __init__(self, directory: str | os.PathLike[str], server: str, url: str) -> None:
        self.path = Path(directory) / f"{server}.json"
        self.server = server
        self.url = url

    def __repr__(self) -> str:
        return f"TokenFile(server={self.server!r}, path={str(self.path)!r})"

    # -- the file ---------------------------------------------------------------------------
    def read(self) -> dict[str, Any]:
        """The stored state for this URL (``{}`` when there is none, or it is for another URL)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("url") != self.url:
            return {}
        return data

    def write(self, data: dict[str, Any]) -> None:
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o700)
        tmp = directory / f".{self.path.name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({**data, "url": self.url}, f)
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def update(self, **values: Any) -> None:
        data = self.read()
        data.update(values)
        self.write({k: v for k, v in data.items() if v is not None})

    def forget_tokens(self) -> None:
        """Drop the tokens (keep the registration)."""
        data = self.read()
        if data:
            data.pop("tokens", None)
            data.pop("expires_at", None)
            self.write(data)

    @property
    def expires_at(self) -> float | None:
        value = self.read().get("expires_at")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def has_tokens(self) -> bool:
        return isinstance(self.read().get("tokens"), dict)

    # -- mcp.client.auth.TokenStorage ----------------------------------------------------------
    async def get_tokens(self) -> OAuthToken | None:
        from mcp.shared.auth import OAuthToken

        raw = self.read().get("tokens")
        if not isinstance(raw, dict):
            return None
        try:
            return OAuthToken.model_validate(raw)
        except ValueError:
            return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires = time.time() + float(tokens.expires_in) if tokens.expires_in is not None else None
        self.update(tokens=tokens.model_dump(mode="json", exclude_none=True), expires_at=expires)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        raw = self.read().get("client")
        if not isinstance(raw, dict):
            return None
        try:
            return OAuthClientInformationFull.model_validate(raw)
        except ValueError:
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.update(client=client_info.model_dump(mode="json", exclude_none=True))


def _client_metadata(redirect_uri: str) -> Any:
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientMetadata.model_validate(
        {
            "client_name": "ketch",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
    )


def provider(
    config: MCPServerConfig,
    store: TokenFile,
    *,
    redirect_uri: str | None = None,
    redirect_handler: Callable[[str], Awaitable[None]] | None = None,
    callback_handler: Callable[[], Awaitable[Any]] | None = None,
) -> OAuthClientProvider:
    """The SDK's OAuth provider for ``config``'s URL with ketch's rules: tokens in ``store``,
    refreshed :data:`REFRESH_MARGIN` seconds early (half a shorter lifetime); with ``redirect_handler`` and
    ``callback_handler`` (a login) the full authorization flow, without them at most one
    refresh per 401 and then :class:`LoginRequired`."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthMetadata
    from mcp.shared.auth import ProtectedResourceMetadata

    interactive = redirect_handler is not None
    server = config.name
    port = store.read().get("port")
    uri = redirect_uri or f"http://127.0.0.1:{port if isinstance(port, int) else 0}{CALLBACK_PATH}"

    class _Provider(OAuthClientProvider):
        _refreshed = False  # a refresh was tried for the current 401
        login_required: LoginRequired | None = None  # why the last request failed, once it has

        def _needs_login(self, why: str) -> LoginRequired:
            self.login_required = LoginRequired(server, why)
            return self.login_required

        async def _initialize(self) -> None:
            await super()._initialize()
            saved = store.read()
            expires = saved.get("expires_at")
            tokens = self.context.current_tokens
            if tokens is not None and isinstance(expires, (int, float)):
                self.context.token_expiry_time = float(expires) - _margin(tokens.expires_in)
            with contextlib.suppress(ValueError, TypeError):
                if isinstance(saved.get("metadata"), dict) and self.context.oauth_metadata is None:
                    self.context.oauth_metadata = OAuthMetadata.model_validate(saved["metadata"])
                if isinstance(saved.get("resource"), dict) and self.context.protected_resource_metadata is None:
                    self.context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(saved["resource"])
                    servers = self.context.protected_resource_metadata.authorization_servers
                    if servers and self.context.auth_server_url is None:
                        self.context.auth_server_url = str(servers[0])

        def _remember(self) -> None:
            tokens = self.context.current_tokens
            if self.context.token_expiry_time is not None:
                self.context.token_expiry_time -= _margin(tokens.expires_in if tokens is not None else None)
            metadata = self.context.oauth_metadata
            resource = self.context.protected_resource_metadata
            store.update(
                metadata=metadata.model_dump(mode="json", exclude_none=True) if metadata is not None else None,
                resource=resource.model_dump(mode="json", exclude_none=True) if resource is not None else None,
            )

        async def _handle_token_response(self, response: httpx2.Response) -> None:
            await super()._handle_token_response(response)
            self._remember()

        async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
            ok = await super()._handle_refresh_response(response)
            if ok:
                self._remember()
            return ok

        async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
            if interactive:
                flow = super()._auth_flow(request)
                try:
                    outgoing = await flow.__anext__()
                    while True:
                        response = yield outgoing
                        outgoing = await flow.asend(response)
                except StopAsyncIteration:
                    return
                finally:
                    await flow.aclose()
            # A session: the stored token, refreshed when it is about to expire; a 401 gets
            # one refresh, then the user is told to log in (no browser is opened here).
            async with self.context.lock:
                if not self._initialized:
                    await self._initialize()
                from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

                self.context.protocol_version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
                if not self.context.is_token_valid() and self.context.can_refresh_token():
                    refreshed = yield await self._refresh_token()
                    if not await self._handle_refresh_response(refreshed):
                        self._initialized = False
                if self.context.is_token_valid():
                    self._add_auth_header(request)
            response = yield request
            if response.status_code != 401:
                self._refreshed = False
                return
            async with self.context.lock:
                if self._refreshed or not self.context.can_refresh_token():
                    had = self.context.current_tokens is not None
                    raise self._needs_login("rejected the stored authorization" if had else "needs authorization")
                self._refreshed = True
                refreshed = yield await self._refresh_token()
                if not await self._handle_refresh_response(refreshed):
                    raise self._needs_login("rejected the stored authorization")
                self._add_auth_header(request)
            response = yield request
            if response.status_code == 401:
                raise self._needs_login("rejected the stored authorization")
            self._refreshed = False

    assert config.url is not None
    return _Provider(
        config.url,
        _client_metadata(uri),
        store,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
