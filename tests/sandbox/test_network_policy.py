"""The library's :class:`NetworkPolicy` (its checks, one-line errors) and the proxy's decisions
on requests it gets on its Unix socket: refused names, private addresses reached only when
named, parse errors refused (fail closed), credentials added to plain HTTP only."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ketch.sandbox import Credential
from ketch.sandbox import NetworkPolicy
from ketch.sandbox import NetworkPolicyError
from ketch.sandbox import SandboxPolicy
from ketch.sandbox._proxy import NetworkProxy


def test_entries_are_parsed_and_shown() -> None:
    policy = NetworkPolicy(allow=["PyPI.org.", "*.github.com", "[::1]:8080", "10.0.0.1", "a.test:443"], deny=["x.github.com"])
    assert [str(e) for e in policy.allow] == ["pypi.org", "*.github.com", "[::1]:8080", "10.0.0.1", "a.test:443"]
    assert policy.refusal("pypi.org", 443) is None
    assert policy.refusal("api.github.com", 443) is None
    assert policy.refusal("github.com", 443) == (
        "ketch sandbox: host 'github.com' is not in [sandbox.network] allow; "
        "allowed: pypi.org, *.github.com, [::1]:8080, 10.0.0.1, a.test:443"
    )
    assert policy.refusal("x.github.com", 80) == (
        "ketch sandbox: host 'x.github.com' is denied by [sandbox.network] deny (x.github.com)"
    )
    assert policy.refusal("a.test", 80) is not None and policy.refusal("a.test", 443) is None
    assert policy.named("pypi.org") and not policy.named("api.github.com")
    assert SandboxPolicy(workspace=Path("/"), write=False, network=policy).network is policy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"allow": ["exa mple.com"]},
            "[sandbox.network] allow: 'exa mple.com' is not a host; give a name (pypi.org), *.suffix (*.github.com) "
            "or an IP address, with an optional :port",
        ),
        ({"allow": ["*"]}, "[sandbox.network] allow: '*' is not a host; give a name (pypi.org), *.suffix "
         "(*.github.com) or an IP address, with an optional :port"),
        ({"deny": ["a.test:0"]}, "[sandbox.network] deny: port 0 of 'a.test:0' is not in 1-65535"),
        ({"allow": "pypi.org"}, "[sandbox.network] allow and deny are lists of hosts, not one string"),
        (
            {"credentials": {"a.test": {"header": "Host", "env": "T"}}},
            "[sandbox.network.credentials] header 'Host' cannot be set; give another header than connection, "
            "content-length, host, proxy-authorization, transfer-encoding",
        ),
        (
            {"credentials": {"a.test": {"header": "X", "env": "T", "extra": "1"}}},
            "[sandbox.network.credentials] 'a.test': unknown key 'extra'; allowed: header, env, value",
        ),
        (
            {"credentials": {"a.test": {"header": "X", "env": "1T"}}},
            "[sandbox.network.credentials] env '1T' is not a variable name (letters, digits, _)",
        ),
    ],
)
def test_bad_values_are_one_line_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(NetworkPolicyError) as caught:
        NetworkPolicy(**kwargs)
    assert str(caught.value) == message


def test_a_credential_never_shows_its_value() -> None:
    cred = Credential("Authorization", "GH_TOKEN", "Bearer ${GH_TOKEN}")
    assert cred.render({"GH_TOKEN": "s3cret"}) == "Bearer s3cret"
    assert cred.render({}) is None
    assert cred.render({"GH_TOKEN": "a\r\nX-Evil: 1"}) is None  # no header injection from the value
    policy = NetworkPolicy(allow=["a.test"], credentials={"a.test": cred})
    assert "s3cret" not in repr(policy) and repr(cred) == "Credential(header='Authorization', env='GH_TOKEN')"
    assert policy.secret_names() == ("GH_TOKEN",)


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A loopback server that records the bytes of each request head and answers ``ok``."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], heads
    finally:
        server.close()
        await server.wait_closed()


async def _ask(policy: NetworkPolicy, request: bytes, **options: Any) -> bytes:
    folder = tempfile.mkdtemp(prefix="kt-")
    proxy = NetworkProxy(f"{folder}/p.sock", policy, **options)
    await proxy.start()
    try:
        reader, writer = await asyncio.open_unix_connection(proxy.path)
        writer.write(request)
        await writer.drain()
        answer = await reader.read()
        writer.close()
        return answer
    finally:
        proxy.close()
        os.rmdir(folder)


def _body(answer: bytes) -> str:
    return answer.split(b"\r\n\r\n", 1)[1].decode()


async def test_a_name_leading_to_a_private_address_needs_an_exact_entry(upstream: tuple[int, list[bytes]]) -> None:
    port, heads = upstream

    async def resolve(host: str, p: int, **_: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", p))]

    request = f"GET http://svc.corp.test:{port}/x HTTP/1.1\r\nHost: svc.corp.test\r\n\r\n".encode()
    answer = await _ask(NetworkPolicy(allow=["*.corp.test"]), request, resolve=resolve)
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert _body(answer) == (
        "ketch sandbox: host 'svc.corp.test' resolves to a private address (127.0.0.1); "
        "name it exactly in [sandbox.network] allow to reach it\n"
    )
    assert heads == []
    answer = await _ask(NetworkPolicy(allow=["svc.corp.test"]), request, resolve=resolve)
    assert answer.endswith(b"\r\n\r\nok")
    assert heads == [b"GET /x HTTP/1.1\r\nHost: svc.corp.test\r\nConnection: close\r\n\r\n"]


async def test_credentials_replace_the_clients_header_on_plain_http(upstream: tuple[int, list[bytes]]) -> None:
    port, heads = upstream
    policy = NetworkPolicy(allow=["localhost"], credentials={"localhost": {"header": "Authorization", "env": "T"}})
    request = (
        f"GET http://localhost:{port}/p?q=1 HTTP/1.1\r\nHost: localhost\r\nAuthorization: forged\r\n"
        "Proxy-Authorization: x\r\nConnection: keep-alive\r\n\r\n"
    ).encode()
    answer = await _ask(policy, request, environ={"T": "tok"})
    assert answer.endswith(b"ok")
    assert heads == [b"GET /p?q=1 HTTP/1.1\r\nHost: localhost\r\nAuthorization: tok\r\nConnection: close\r\n\r\n"]


@pytest.mark.parametrize(
    ("request_bytes", "line"),
    [
        (b"GET /relative HTTP/1.1\r\nHost: localhost\r\n\r\n", "ketch sandbox: the proxy takes CONNECT and http:// requests, not '/relative'"),
        (b"GET https://localhost/ HTTP/1.1\r\n\r\n", "ketch sandbox: the proxy takes CONNECT and http:// requests, not 'https://localhost/'"),
        (b"CONNECT localhost:99999 HTTP/1.1\r\n\r\n", "ketch sandbox: 'localhost:99999' names no valid host"),
        (b"GET http://user@localhost/ HTTP/1.1\r\n\r\n", "ketch sandbox: 'http://user@localhost/' names no valid host"),
        (b"GET http://localhost/ HTTP/1.1\r\nBad Header: x\r\n\r\n", "ketch sandbox: the proxy could not parse the request"),
        (b"GARBAGE\r\n\r\n", "ketch sandbox: the proxy could not parse the request"),
        (
            b"GET http://localhost/ HTTP/1.1\r\nX: a\nAuthorization: forged\r\n\r\n",
            "ketch sandbox: the proxy could not parse the request",
        ),
        (b"CONNECT 2130706433:80 HTTP/1.1\r\n\r\n", "ketch sandbox: host '2130706433' is not in [sandbox.network] allow; allowed: localhost"),
    ],
)
async def test_what_cannot_be_parsed_is_refused(request_bytes: bytes, line: str) -> None:
    answer = await _ask(NetworkPolicy(allow=["localhost"]), request_bytes)
    assert _body(answer) == line + "\n"


@pytest.mark.parametrize(
    ("answer", "reached"),
    [("once", True), ("always", True), ("deny", False), ("yes", False), (RuntimeError("boom"), False)],
)
async def test_an_unlisted_host_is_asked_and_the_answer_decides(
    upstream: tuple[int, list[bytes]], answer: str | Exception, reached: bool
) -> None:
    port, heads = upstream
    asked: list[tuple[str, int]] = []

    async def ask(host: str, p: int) -> str:
        asked.append((host, p))
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def resolve(host: str, p: int, **_: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", p))]

    policy = NetworkPolicy(allow=["pypi.org"], deny=["bad.test"], ask=ask)
    request = f"GET http://svc.Ask.test:{port}/x HTTP/1.1\r\nHost: svc.ask.test\r\n\r\n".encode()
    got = await _ask(policy, request, resolve=resolve)
    assert asked == [("svc.ask.test", port)]
    if reached:  # a private address too: the user named the host
        assert got.endswith(b"\r\n\r\nok")
        assert heads == [b"GET /x HTTP/1.1\r\nHost: svc.ask.test\r\nConnection: close\r\n\r\n"]
    else:
        assert got.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert _body(got) == "ketch sandbox: host 'svc.ask.test' is not in [sandbox.network] allow; allowed: pypi.org\n"
        assert heads == []
    # a host on the deny list is never asked
    denied = await _ask(policy, f"GET http://bad.test:{port}/ HTTP/1.1\r\n\r\n".encode(), resolve=resolve)
    assert _body(denied) == "ketch sandbox: host 'bad.test' is denied by [sandbox.network] deny (bad.test)\n"
    assert asked == [("svc.ask.test", port)]


async def test_the_proxy_asks_once_per_host_and_without_ask_refuses(upstream: tuple[int, list[bytes]]) -> None:
    port, heads = upstream
    asked: list[tuple[str, int]] = []

    async def ask(host: str, p: int) -> str:
        asked.append((host, p))
        return "once"

    request = f"GET http://localhost:{port}/x HTTP/1.1\r\n\r\n".encode()
    refused = await _ask(NetworkPolicy(allow=["pypi.org"]), request)
    assert _body(refused) == "ketch sandbox: host 'localhost' is not in [sandbox.network] allow; allowed: pypi.org\n"
    policy = NetworkPolicy(allow=["pypi.org"]).with_ask(ask)
    folder = tempfile.mkdtemp(prefix="kt-")
    proxy = NetworkProxy(f"{folder}/p.sock", policy)
    await proxy.start()
    try:
        for _ in range(2):
            reader, writer = await asyncio.open_unix_connection(proxy.path)
            writer.write(request)
            await writer.drain()
            assert (await reader.read()).endswith(b"ok")
            writer.close()
    finally:
        proxy.close()
        os.rmdir(folder)
    assert asked == [("localhost", port)]
    assert len(heads) == 2
