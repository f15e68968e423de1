"""OAuth for HTTP MCP servers, against a loopback authorization server and protected MCP
server built with the ``mcp`` SDK's server auth components (tests/mcp/oauth_server.py)."""

from __future__ import annotations

import json
import logging
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ketch import Agent
from ketch.mcp import LoginRequired
from ketch.mcp import MCPManager
from ketch.mcp import load_mcp_json
from ketch.mcp import login
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import served

SERVER = Path(__file__).with_name("oauth_server.py")
CANARY = "KETCHCANARY"


@pytest.fixture
def guarded() -> Iterator[str]:
    """The protected server on a free loopback port (fresh for each test); its base URL."""
    with served(SERVER, "Uvicorn running on", "the OAuth test server") as base:
        yield base


def configs(base: str) -> Any:
    return load_mcp_json({"mcpServers": {"o": {"type": "http", "url": f"{base}/mcp"}}})


async def browser(url: str) -> None:
    """A user who approves: follow the authorization URL's redirects to ketch's listener."""
    async with aiohttp.ClientSession() as session, session.get(url, allow_redirects=True) as response:
        assert response.status == 200, await response.text()


async def post(base: str, path: str) -> Any:
    async with aiohttp.ClientSession() as session:
        method = session.post if path != "/test/grants" else session.get
        async with method(f"{base}{path}") as response:
            return await response.json()


def files_with(root: Path, text: str) -> list[Path]:
    """The files under ``root`` that contain ``text``."""
    return [p for p in sorted(root.rglob("*")) if p.is_file() and text in p.read_text(errors="replace")]


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content]


async def test_login_stores_the_tokens_0600_and_a_session_uses_them(guarded: str, tmp_path: Path) -> None:
    auth = tmp_path / "auth"
    shown: list[str] = []

    async def open_url(url: str) -> None:
        shown.append(url)
        await browser(url)

    tools = await login(configs(guarded)["o"], open_url=open_url, auth_dir=auth)
    assert tools == ["mcp__o__whoami"]
    assert len(shown) == 1 and shown[0].startswith(f"{guarded}/authorize?")
    assert "code_challenge_method=S256" in shown[0]  # PKCE
    token_file = auth / "o.json"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(auth.stat().st_mode) == 0o700
    saved = json.loads(token_file.read_text())
    assert saved["url"] == f"{guarded}/mcp"
    assert saved["tokens"]["access_token"].startswith(CANARY)
    assert sorted(saved) == ["client", "expires_at", "metadata", "port", "resource", "tokens", "url"]

    async with MCPManager(configs(guarded), auth_dir=auth) as manager:
        result = await manager.call("o", "whoami")
        assert texts(result) == [f"hello {saved['client']['client_id']}"]
        assert manager.status()[0].state == "running"
    assert await post(guarded, "/test/grants") == ["authorization_code"]


async def test_a_401_mid_session_refreshes_once_and_the_call_goes_through(guarded: str, tmp_path: Path) -> None:
    auth = tmp_path / "auth"
    await login(configs(guarded)["o"], open_url=browser, auth_dir=auth)
    before = json.loads((auth / "o.json").read_text())["tokens"]
    async with MCPManager(configs(guarded), auth_dir=auth) as manager:
        assert not (await manager.call("o", "whoami")).is_error
        await post(guarded, "/test/expire")  # the server forgets the access token: next request is a 401
        result = await manager.call("o", "whoami")
        assert not result.is_error, texts(result)
        assert texts(result)[0].startswith("hello ")
    assert await post(guarded, "/test/grants") == ["authorization_code", "refresh_token"]
    after = json.loads((auth / "o.json").read_text())["tokens"]
    assert after["access_token"] != before["access_token"]  # the refreshed tokens were stored
    assert after["refresh_token"] != before["refresh_token"]


async def test_a_token_about_to_expire_is_refreshed_before_it_is_used(guarded: str, tmp_path: Path) -> None:
    auth = tmp_path / "auth"
    await login(configs(guarded)["o"], open_url=browser, auth_dir=auth)
    saved = json.loads((auth / "o.json").read_text())
    saved["expires_at"] = time.time() + 30  # as if an hour had passed: inside the one-minute margin
    (auth / "o.json").write_text(json.dumps(saved))
    async with MCPManager(configs(guarded), auth_dir=auth) as manager:
        assert not (await manager.call("o", "whoami")).is_error
        assert not (await manager.call("o", "whoami")).is_error
    # refreshed once, up front (the server would still have taken the old token: no 401)
    assert await post(guarded, "/test/grants") == ["authorization_code", "refresh_token"]
    assert json.loads((auth / "o.json").read_text())["tokens"]["access_token"] != saved["tokens"]["access_token"]


async def test_a_short_lived_token_is_not_stale_when_issued(guarded: str, tmp_path: Path) -> None:
    auth = tmp_path / "auth"
    await post(guarded, "/test/short")  # 30 s tokens: shorter than the one-minute margin
    assert await login(configs(guarded)["o"], open_url=browser, auth_dir=auth) == ["mcp__o__whoami"]
    async with MCPManager(configs(guarded), auth_dir=auth) as manager:
        assert not (await manager.call("o", "whoami")).is_error
    assert await post(guarded, "/test/grants") == ["authorization_code"]


async def test_a_revoked_authorization_is_a_clear_error_naming_ketch_mcp_login(guarded: str, tmp_path: Path) -> None:
    auth = tmp_path / "auth"
    await login(configs(guarded)["o"], open_url=browser, auth_dir=auth)
    async with MCPManager(configs(guarded), auth_dir=auth) as manager:
        assert not (await manager.call("o", "whoami")).is_error
        await post(guarded, "/test/revoke")  # access and refresh tokens are gone
        result = await manager.call("o", "whoami")
    assert result.is_error
    assert texts(result) == [
        "MCP server 'o' rejected the stored authorization: run `ketch mcp login o`; the call to 'whoami' did not run"
    ]
    # one refresh was tried, then no more
    assert await post(guarded, "/test/grants") == ["authorization_code"]


async def test_without_a_login_the_server_fails_to_start_naming_ketch_mcp_login(
    guarded: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with MCPManager(configs(guarded), auth_dir=tmp_path / "auth") as manager:
        assert await manager.tools() == []
        status = manager.status()[0]
        result = await manager.call("o", "whoami")
    assert (status.state, status.error) == ("failed", "needs authorization: run `ketch mcp login o`")
    assert [r.getMessage() for r in caplog.records if r.name == "ketch.mcp"] == [
        "MCP server 'o' needs authorization: run `ketch mcp login o`"
    ]
    assert texts(result) == ["MCP server 'o' needs authorization: run `ketch mcp login o`; the call to 'whoami' did not run"]
    assert not (tmp_path / "auth").exists()  # nothing registered behind the user's back


async def test_a_token_file_of_another_url_is_not_used(guarded: str, tmp_path: Path) -> None:
    auth = tmp_path / "auth"
    await login(configs(guarded)["o"], open_url=browser, auth_dir=auth)
    moved = load_mcp_json({"mcpServers": {"o": {"type": "http", "url": f"{guarded}/mcp/"}}})
    async with MCPManager(moved, auth_dir=auth) as manager:
        result = await manager.call("o", "whoami")
    assert texts(result) == ["MCP server 'o' needs authorization: run `ketch mcp login o`; the call to 'whoami' did not run"]


async def test_tokens_never_appear_in_logs_events_errors_or_reprs(
    guarded: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = tmp_path / "auth"
    errlog = (tmp_path / "errlog").open("w")
    await login(configs(guarded)["o"], open_url=browser, auth_dir=auth, errlog=errlog)
    seen: list[str] = []
    async with MCPManager(configs(guarded), auth_dir=auth, errlog=errlog) as manager:
        model = ScriptedModel([reply(tool_call("mcp__o__whoami")), reply(tool_call("mcp__o__whoami")), "done"])
        agent: Agent[None] = Agent(model)
        await manager.attach(agent)
        agent.subscribe(lambda event: seen.append(repr(event)))
        await agent.prompt("go")
        await post(guarded, "/test/expire")  # a refresh mid-session
        model.add(reply(tool_call("mcp__o__whoami")))
        model.add("done again")
        await agent.prompt("again")
        await post(guarded, "/test/revoke")  # and a failure naming the login
        model.add(reply(tool_call("mcp__o__whoami")))
        model.add("done at last")
        await agent.prompt("once more")
        seen.extend([repr(manager), repr(manager.status()), repr(agent.messages), repr(model.requests)])
    errlog.close()
    results = [m for m in agent.messages if m.role == "tool_result"]
    assert "ketch mcp login o" in str(results[-1].content)
    assert await post(guarded, "/test/grants") == ["authorization_code", "refresh_token"]
    everything = "\n".join([*seen, caplog.text, (tmp_path / "errlog").read_text()])
    assert "hello " in everything  # the test looks where the traffic shows
    assert CANARY not in everything
    assert files_with(tmp_path, CANARY) == [auth / "o.json"]
    assert CANARY in (auth / "o.json").read_text()


async def test_login_refuses_a_stdio_server(tmp_path: Path) -> None:
    config = load_mcp_json({"mcpServers": {"s": {"command": "true"}}})["s"]
    with pytest.raises(ValueError, match="stdio server: OAuth is for http and sse servers"):
        await login(config, open_url=browser, auth_dir=tmp_path)


def test_login_required_names_the_command() -> None:
    assert str(LoginRequired("remote")) == "MCP server 'remote' needs authorization: run `ketch mcp login remote`"


# -- the same over the HTTP+SSE transport ----------------------------------------------------------
@pytest.fixture
def guarded_sse() -> Iterator[str]:
    """The protected server over HTTP+SSE (``/sse``) on a free loopback port; its base URL."""
    with served(SERVER, "Uvicorn running on", "the OAuth test server (sse)", "sse") as base:
        yield base


def sse_configs(base: str) -> Any:
    return load_mcp_json({"mcpServers": {"o": {"type": "sse", "url": f"{base}/sse"}}})


async def test_over_sse_login_refresh_and_a_revoked_login_and_no_token_leaks(
    guarded_sse: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = tmp_path / "auth"
    errlog = (tmp_path / "errlog").open("w")
    shown: list[str] = []

    async def open_url(url: str) -> None:
        shown.append(url)
        await browser(url)

    assert await login(sse_configs(guarded_sse)["o"], open_url=open_url, auth_dir=auth, errlog=errlog) == ["mcp__o__whoami"]
    assert len(shown) == 1 and shown[0].startswith(f"{guarded_sse}/authorize?") and "code_challenge_method=S256" in shown[0]
    token_file = auth / "o.json"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    saved = json.loads(token_file.read_text())
    assert saved["url"] == f"{guarded_sse}/sse"
    seen: list[str] = []
    async with MCPManager(sse_configs(guarded_sse), auth_dir=auth, errlog=errlog) as manager:
        model = ScriptedModel([reply(tool_call("mcp__o__whoami")), "done"])
        agent: Agent[None] = Agent(model)
        await manager.attach(agent)
        agent.subscribe(lambda event: seen.append(repr(event)))
        await agent.prompt("go")
        await post(guarded_sse, "/test/expire")  # a 401 mid-session: one refresh, then the call goes through
        model.add(reply(tool_call("mcp__o__whoami")))
        model.add("done again")
        await agent.prompt("again")
        await post(guarded_sse, "/test/revoke")  # the refresh is refused too: an error naming the login
        model.add(reply(tool_call("mcp__o__whoami")))
        model.add("done at last")
        await agent.prompt("once more")
        seen.extend([repr(manager), repr(manager.status()), repr(agent.messages), repr(model.requests)])
    errlog.close()
    results = [m for m in agent.messages if m.role == "tool_result"]
    assert [texts(r) for r in results[:2]] == [[f"hello {saved['client']['client_id']}"]] * 2
    assert results[2].is_error
    assert "run `ketch mcp login o`" in texts(results[2])[0]
    assert await post(guarded_sse, "/test/grants") == ["authorization_code", "refresh_token"]
    everything = "\n".join([*seen, caplog.text, (tmp_path / "errlog").read_text()])
    assert "hello " in everything
    assert CANARY not in everything
    assert files_with(tmp_path, CANARY) == [token_file]


async def test_over_sse_without_a_login_the_server_fails_naming_ketch_mcp_login(guarded_sse: str, tmp_path: Path) -> None:
    async with MCPManager(sse_configs(guarded_sse), auth_dir=tmp_path / "auth") as manager:
        assert await manager.tools() == []
        (status,) = manager.status()
        result = await manager.call("o", "whoami")
    assert (status.state, status.error) == ("failed", "needs authorization: run `ketch mcp login o`")
    assert texts(result) == ["MCP server 'o' needs authorization: run `ketch mcp login o`; the call to 'whoami' did not run"]
