"""A loopback OAuth 2.1 authorization server and protected MCP server in one process,
built from the ``mcp`` SDK's server auth components (run as ``python oauth_server.py PORT``
for streamable HTTP at ``/mcp``, ``python oauth_server.py PORT sse`` for HTTP+SSE at ``/sse``).

The authorization server registers any client (dynamic client registration) and approves
every authorization request at once (the "browser" of a test only follows redirects).
Every token it issues contains ``KETCHCANARY`` so a test can look for leaks. Routes for
the tests (no authorization needed):

* ``POST /test/expire`` -- forget every access token (the next call gets a 401; a refresh works)
* ``POST /test/revoke`` -- forget every access and refresh token (only a new login helps)
* ``POST /test/short`` -- tokens issued from now on expire in 30 s (within ketch's refresh margin)
* ``GET /test/grants`` -- the grants issued so far, e.g. ``["authorization_code", "refresh_token"]``

Its one tool ``whoami`` answers ``hello <client_id>``.
"""

from __future__ import annotations

import secrets
import sys
import time
from typing import Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.provider import AuthorizationCode
from mcp.server.auth.provider import AuthorizationParams
from mcp.server.auth.provider import RefreshToken
from mcp.server.auth.provider import construct_redirect_uri
from mcp.server.auth.settings import AuthSettings
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.server.mcpserver import Context
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull
from mcp.shared.auth import OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response

CANARY = "KETCHCANARY"


def _token(kind: str) -> str:
    return f"{CANARY}-{kind}-{secrets.token_hex(16)}"


class Provider:
    """An in-memory authorization server that approves everything."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.grants: list[str] = []
        self.lifetime = 3600

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_hex(16)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str) -> Any:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, grant: str) -> OAuthToken:
        self.grants.append(grant)
        access, refresh = _token("access"), _token("refresh")
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=int(time.time()) + 3600, resource=resource
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.lifetime, refresh_token=refresh)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull, authorization_code: Any) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(authorization_code.client_id, authorization_code.scopes, authorization_code.resource, "authorization_code")

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> Any:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: Any, scopes: list[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource, "refresh_token")

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access.get(token)

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


def build(port: int, path: str = "/mcp") -> MCPServer:
    base = f"http://127.0.0.1:{port}"
    provider = Provider()
    server = MCPServer(
        "guarded",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}{path}",
            client_registration_options=ClientRegistrationOptions(enabled=True),
            validate_token_resource=False,
        ),
    )

    @server.tool()
    async def whoami(ctx: Context) -> str:
        """Who the caller is."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        token = get_access_token()
        return f"hello {token.client_id if token is not None else '?'}"

    @server.custom_route("/test/expire", methods=["POST"])
    async def expire(request: Request) -> Response:
        provider.access.clear()
        return JSONResponse({"ok": True})

    @server.custom_route("/test/revoke", methods=["POST"])
    async def revoke(request: Request) -> Response:
        provider.access.clear()
        provider.refresh.clear()
        return JSONResponse({"ok": True})

    @server.custom_route("/test/short", methods=["POST"])
    async def short(request: Request) -> Response:
        provider.lifetime = 30
        return JSONResponse({"ok": True})

    @server.custom_route("/test/grants", methods=["GET"])
    async def grants(request: Request) -> Response:
        return JSONResponse(provider.grants)

    return server


if __name__ == "__main__":
    port = int(sys.argv[1])
    print(f"oauth server on port {port}", flush=True)
    if sys.argv[2:] == ["sse"]:
        build(port, "/sse").run("sse", host="127.0.0.1", port=port)
    else:
        build(port).run("streamable-http", host="127.0.0.1", port=port)
