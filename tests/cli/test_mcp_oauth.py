"""``ketch mcp login NAME`` and the command's sessions with an OAuth-protected HTTP MCP
server (tests/mcp/oauth_server.py: a loopback authorization server + protected MCP
server built from the ``mcp`` SDK's server auth components)."""

from __future__ import annotations

import json
import stat
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from clihelp import Env
from clihelp import FakeServer
from clihelp import call_reply
from clihelp import lines

from support import served

SERVER = Path(__file__).parents[1] / "mcp" / "oauth_server.py"
CANARY = "KETCHCANARY"  # in every token the test server issues

# the "browser" of BROWSER=...: a user who approves (follows the redirects back to ketch)
BROWSER = """\
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1]) as response:
    assert response.status == 200
"""


@pytest.fixture
def guarded() -> Iterator[str]:
    """The protected server on a free loopback port (fresh for each test); its base URL."""
    with served(SERVER, "Uvicorn running on", "the OAuth test server") as base:
        yield base


def _setup(env: Env, base: str) -> dict[str, str]:
    (env.xdg / "ketch").mkdir(parents=True, exist_ok=True)
    (env.xdg / "ketch" / ".mcp.json").write_text(json.dumps({"mcpServers": {"o": {"type": "http", "url": f"{base}/mcp"}}}))
    browser = env.home / "browser.py"
    browser.write_text(BROWSER)
    return {"BROWSER": f"{sys.executable} {browser} %s"}


def _post(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(url, method="POST")).close()


def _files_with(roots: list[Path], text: str) -> list[Path]:
    return [p for root in roots for p in sorted(root.rglob("*")) if p.is_file() and text in p.read_text(errors="replace")]


def test_login_then_runs_use_the_token_and_it_shows_nowhere(env: Env, guarded: str, fake_server: FakeServer) -> None:
    extra = _setup(env, guarded)
    done = env.run("mcp", "login", "o", extra=extra)
    token_file = env.home / ".local" / "share" / "ketch" / "mcp-auth" / "o.json"
    err = done.stderr.splitlines()
    assert done.returncode == 0, done.stderr
    assert err[0] == "ketch: to authorize ketch for MCP server 'o', open this URL:"
    assert err[1].startswith(f"  {guarded}/authorize?response_type=code&client_id=")
    assert err[2:] == [f"ketch: authorized for MCP server 'o' (1 tools); tokens stored in {token_file}"]
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

    outputs = [done.stdout, done.stderr]
    script = env.script([call_reply(("c1", "mcp__o__whoami", {})), "done"])
    run = ["run", "--model", f"scripted:{script}", "-o", "stream-json", "--allow", "mcp__o__whoami",
           "--otel-endpoint", fake_server.base_url]
    first = env.run(*run, "go", extra={"KETCH_MCP_LOG_LEVEL": "debug"})
    assert first.returncode == 0, first.stderr
    ends = [e for e in lines(first.stdout) if e["type"] == "tool_execution_end"]
    assert [(e["is_error"], e["result"]["content"][0]["text"].split(" ")[0]) for e in ends] == [(False, "hello")]
    outputs += [first.stdout, first.stderr]

    _post(f"{guarded}/test/revoke")  # the authorization is withdrawn: the next run is told to log in
    script = env.script([call_reply(("c1", "mcp__o__whoami", {})), "done"], name="again.json")
    run[2] = f"scripted:{script}"
    second = env.run(*run, "again")
    assert second.returncode == 0, second.stderr
    # (the fake collector answers 401 to the exporter: its complaint is the other line)
    assert [line for line in second.stderr.splitlines() if "MCP" in line] == [
        "ketch: warning: MCP server o failed to start: rejected the stored authorization: run `ketch mcp login o`"
    ]
    assert "mcp__o__whoami" not in lines(second.stdout)[0]["tools"]
    outputs += [second.stdout, second.stderr]

    assert CANARY not in "\n".join(outputs)
    assert CANARY not in fake_server.received()  # the traces
    assert "mcp__o__whoami" in fake_server.received()  # (where the tool calls do show)
    assert _files_with([env.home, env.xdg, env.work], CANARY) == [token_file]  # sessions and all


def test_login_names_what_is_wrong(env: Env, guarded: str) -> None:
    (env.xdg / "ketch").mkdir(parents=True, exist_ok=True)
    (env.xdg / "ketch" / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"o": {"type": "http", "url": f"{guarded}/mcp"}, "s": {"command": "true"}}})
    )
    assert env.run("mcp", "login", "nope").stderr == (
        "ketch: mcp login nope: no MCP server 'nope' is configured (HTTP servers: o)\n"
    )
    done = env.run("mcp", "login", "s")
    assert (done.returncode, done.stderr) == (2, "ketch: mcp login s: 's' is a stdio server; OAuth is for http and sse servers\n")


def test_the_token_folder_is_out_of_the_file_tools_reach(env: Env) -> None:
    tokens = env.home / ".local" / "share" / "ketch" / "mcp-auth"
    tokens.mkdir(parents=True)
    (tokens / "o.json").write_text('{"tokens": {"access_token": "KETCHCANARY-x"}}')
    script = env.script(
        [call_reply(("c1", "read", {"path": str(tokens / "o.json")}), ("c2", "bash", {"command": f"cat {tokens}/o.json"})), "done"]
    )
    done = env.run("run", "--model", f"scripted:{script}", "-o", "stream-json", "--permission-mode", "bypass", "go")
    assert done.returncode == 0, done.stderr
    ends = [e for e in lines(done.stdout) if e["type"] == "tool_execution_end"]
    read, cat = (e["result"]["content"][0]["text"] for e in ends)
    # a deny rule of source ketch, as for the config folder (the sandbox hides it from bash too)
    assert read.startswith("Permission denied: the call matches the deny rule Read(/")
    assert read.endswith("/home/.local/share/ketch/mcp-auth).")
    assert "No such file or directory" in cat
    assert CANARY not in done.stdout
