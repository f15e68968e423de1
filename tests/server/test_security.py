"""Authentication on every route, the OpenAPI document, CORS, Host checks, the page's cookie."""

from __future__ import annotations

from typing import Any

import pytest
from serverhelp import TOKEN

from ketch.server import ROUTES
from ketch.server import openapi_document


def _hello() -> list[Any]:
    return ["hi"]


def _concrete(path: str) -> str:
    return path.replace("{id}", "0123abcd").replace("{name}", "app.js")


@pytest.mark.parametrize("credentials", ["none", "wrong header", "wrong cookie", "not bearer", "token in query"])
async def test_every_route_needs_the_token(servers: Any, credentials: str) -> None:
    server = await servers(_hello)
    headers = {
        "none": {},
        "wrong header": {"Authorization": "Bearer " + TOKEN[:-1] + "X"},
        "wrong cookie": {"Cookie": "ketch_token=" + TOKEN[:-1] + "X"},
        "not bearer": {"Authorization": "Basic " + TOKEN},
        "token in query": {},
    }[credentials]
    seen = []
    for method, path in ROUTES:
        url = server.url + _concrete(path)
        if credentials == "token in query" and path != "/":
            url += f"?token={TOKEN}"  # only GET / takes it, to set the page's cookie
        async with server.client.request(method, url, headers=headers, json={"text": "x"}, allow_redirects=False) as response:
            seen.append((method, path, response.status, response.headers.get("WWW-Authenticate"), await response.json()))
    expected = [
        (
            method,
            path,
            401,
            "Bearer",
            {"error": "missing or wrong token: send 'Authorization: Bearer <token>' (the token ketch serve printed)"},
        )
        for method, path in ROUTES
        if not (credentials == "token in query" and path == "/")
    ]
    if credentials == "token in query":
        seen = [s for s in seen if s[1] != "/"]
    assert seen == expected
    status, _ = await server.call("GET", "/api/sessions/0123abcd/nothing-here", token=None)
    assert status == 401  # unknown paths too: nothing is told before the token


async def test_the_openapi_document_lists_every_route(servers: Any) -> None:
    server = await servers(_hello)
    status, doc = await server.call("GET", "/openapi.json")
    assert status == 200 and doc == openapi_document()
    registered = {
        (route.method.lower(), route.resource.canonical)
        for route in server.app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert registered == documented
    assert registered == {(m.lower(), p) for m, p in ROUTES}


async def test_the_printed_url_sets_an_http_only_cookie_and_drops_the_token_from_the_address(servers: Any) -> None:
    server = await servers(_hello)
    async with server.client.get(f"{server.url}/?token={TOKEN}", allow_redirects=False) as response:
        assert response.status == 303
        assert response.headers["Location"] == "/"
        cookie = response.headers["Set-Cookie"]
    assert cookie.startswith(f"ketch_token={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    async with server.client.get(f"{server.url}/", headers={"Cookie": f"ketch_token={TOKEN}"}) as response:
        assert response.status == 200
        assert response.headers["Content-Security-Policy"].startswith("default-src 'self'")
    async with server.client.get(f"{server.url}/?token=wrong", allow_redirects=False) as response:
        assert response.status == 401


async def test_cors_is_off_unless_configured(servers: Any) -> None:
    plain = await servers(_hello)
    async with plain.client.get(
        f"{plain.url}/api/sessions", headers={**plain.headers(), "Origin": "http://evil.example"}
    ) as response:
        assert response.status == 200 and "Access-Control-Allow-Origin" not in response.headers
    async with plain.client.options(
        f"{plain.url}/api/sessions", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    ) as response:
        assert response.status == 401 and "Access-Control-Allow-Origin" not in response.headers

    allowed = await servers(_hello, cors_origins=["http://editor.example"])
    async with allowed.client.options(
        f"{allowed.url}/api/sessions", headers={"Origin": "http://editor.example", "Access-Control-Request-Method": "POST"}
    ) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == "http://editor.example"
        assert "Authorization" in response.headers["Access-Control-Allow-Headers"]
    async with allowed.client.get(
        f"{allowed.url}/api/sessions", headers={**allowed.headers(), "Origin": "http://editor.example"}
    ) as response:
        assert response.headers["Access-Control-Allow-Origin"] == "http://editor.example"
    async with allowed.client.options(
        f"{allowed.url}/api/sessions", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    ) as response:
        assert response.status == 403 and "Access-Control-Allow-Origin" not in response.headers


async def test_a_foreign_host_header_is_refused_on_loopback(servers: Any) -> None:
    server = await servers(_hello)
    async with server.client.get(
        f"{server.url}/api/sessions", headers={**server.headers(), "Host": "attacker.example:8765"}
    ) as response:
        assert response.status == 421
        assert await response.json() == {"error": "Host 'attacker.example:8765' is not this server's loopback address"}
    async with server.client.get(f"{server.url}/api/sessions", headers={**server.headers(), "Host": "localhost:1"}) as response:
        assert response.status == 200
    for host in ("[::1]:8765", "127.0.0.1"):
        async with server.client.get(f"{server.url}/api/sessions", headers={**server.headers(), "Host": host}) as response:
            assert response.status == 200, host
    for host in ("[::2]:8765", "127.0.0.2:80", "localhost.example"):
        async with server.client.get(f"{server.url}/api/sessions", headers={**server.headers(), "Host": host}) as response:
            assert response.status == 421, host


def test_loopback_hosts_are_one_list() -> None:
    from ketch.server import is_loopback_host

    assert [h for h in ("127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0", "::", "example.com") if is_loopback_host(h)] == [
        "127.0.0.1",
        "localhost",
        "::1",
        "[::1]",
    ]
