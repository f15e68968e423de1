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
    public = ("GET", "/.well-known/agent-card.json")  # A2A discovery: the card says a token is needed
    assert public in ROUTES
    for method, path in [r for r in ROUTES if r != public]:
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
        if not (credentials == "token in query" and path == "/") and (method, path) != public
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


async def test_a_page_of_another_port_or_site_cannot_change_state(servers: Any) -> None:
    """Every port of 127.0.0.1 is one site for the browser: the page's SameSite cookie goes
    with a no-cors POST from a page on another port. What such a request carries that the
    page's own do not: another Origin, a Sec-Fetch-Site other than same-origin, a body
    that is not JSON (no-cors sends text/plain)."""
    server = await servers(_hello)
    cookie = {"Cookie": f"ketch_token={TOKEN}"}
    own = server.url
    other_port = "http://127.0.0.1:8799"
    attempts = {
        "other port": {**cookie, "Origin": other_port, "Content-Type": "application/json"},
        "other site": {**cookie, "Origin": "http://evil.example", "Content-Type": "application/json"},
        "null origin": {**cookie, "Origin": "null", "Content-Type": "application/json"},
        "same-site fetch": {**cookie, "Sec-Fetch-Site": "same-site", "Content-Type": "application/json"},
        "cross-site fetch": {**cookie, "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
        "text/plain": {**cookie, "Origin": own, "Content-Type": "text/plain"},
        "form": {**cookie, "Content-Type": "application/x-www-form-urlencoded"},
        "bytes": {**cookie},  # the client says application/octet-stream
    }
    seen = {}
    for name, headers in attempts.items():
        async with server.client.post(f"{server.url}/api/sessions", data=b"{}", headers=headers) as response:
            seen[name] = (response.status, (await response.json())["error"])
    assert seen == {
        "other port": (403, f"origin {other_port!r} may not change this server's state (only pages of {own} may)"),
        "other site": (403, f"origin 'http://evil.example' may not change this server's state (only pages of {own} may)"),
        "null origin": (403, f"origin 'null' may not change this server's state (only pages of {own} may)"),
        "same-site fetch": (403, "a request from another origin (same-site) may not change this server's state"),
        "cross-site fetch": (403, "a request from another origin (cross-site) may not change this server's state"),
        "text/plain": (415, "Content-Type 'text/plain': expected application/json"),
        "form": (415, "Content-Type 'application/x-www-form-urlencoded': expected application/json"),
        "bytes": (415, "Content-Type 'application/octet-stream': expected application/json"),
    }
    assert (await server.call("GET", "/api/sessions"))[1]["sessions"] == []
    # the page's own requests, and clients that send no Origin, go through
    for headers in (
        {**cookie, "Origin": own, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"},
        {**server.headers(), "Content-Type": "application/json; charset=utf-8"},
    ):
        async with server.client.post(f"{server.url}/api/sessions", data=b"{}", headers=headers) as response:
            assert response.status == 201
    allowed = await servers(_hello, cors_origins=["http://editor.example"])
    async with allowed.client.post(
        f"{allowed.url}/api/sessions",
        data=b"{}",
        headers={**allowed.headers(), "Origin": "http://editor.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
    ) as response:
        assert response.status == 201
