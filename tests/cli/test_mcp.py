"""``ketch mcp list/add/remove``, and MCP servers from settings in the command's agent."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from clihelp import Env
from clihelp import Terminal
from clihelp import call_reply
from clihelp import lines

TIME = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]

ECHO_SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")


@server.tool()
def echo(text: str) -> str:
    """Say it back."""
    return f"echo: {text}"


server.run()
'''

ASKING_SERVER = """
from pydantic import BaseModel
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("asker")


class Person(BaseModel):
    name: str
    age: int


@server.tool()
async def ask(ctx: Context) -> str:
    \"\"\"Ask the user who they are.\"\"\"
    answer = await ctx.elicit("Who are you?", Person)
    if answer.action != "accept":
        return f"the user chose {answer.action}"
    return f"{answer.data.name} is {answer.data.age}"


server.run()
"""


URL_SERVER = """
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import ElicitRequestURLParams

server = MCPServer("linker")
calls = 0


@server.tool()
def connect() -> str:
    \"\"\"Connect the account (the first call asks the user to open a page).\"\"\"
    global calls
    calls += 1
    if calls == 1:
        raise UrlElicitationRequiredError(
            [ElicitRequestURLParams(mode="url", message="Sign in to Acme", url="https://acme.example/connect?c=1", elicitation_id="e1")]
        )
    return f"connected on call {calls}"


server.run()
"""


def _user_mcp(env: Env) -> Path:
    return env.xdg / "ketch" / ".mcp.json"


def _echo(env: Env) -> list[str]:
    script = env.home / "echo_server.py"
    script.write_text(ECHO_SERVER)
    return [sys.executable, str(script)]


# -- add / remove -----------------------------------------------------------------------------
def test_add_a_stdio_server_to_the_user_settings(env: Env) -> None:
    done = env.run("mcp", "add", "time", "-e", "TZ=UTC", "--", "uvx", "mcp-server-time", "--local-timezone", "UTC")
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == f"ketch: added MCP server time to {_user_mcp(env)}\n"
    assert json.loads(_user_mcp(env).read_text()) == {
        "mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone", "UTC"], "env": {"TZ": "UTC"}}
        }
    }


def test_add_an_http_server_to_the_project_keeps_what_the_file_had(env: Env) -> None:
    (env.work / ".mcp.json").write_text(json.dumps({"other": 1, "mcpServers": {"a": {"command": "x"}}}))
    done = env.run(
        "mcp", "add", "docs", "--scope", "project", "--url", "https://example.com/mcp", "--header", "Authorization: Bearer ${T}"
    )
    assert (done.returncode, done.stderr) == (0, f"ketch: added MCP server docs to {env.work / '.mcp.json'}\n")
    assert json.loads((env.work / ".mcp.json").read_text()) == {
        "other": 1,
        "mcpServers": {
            "a": {"command": "x"},
            "docs": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${T}"}},
        },
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a b", "--", "x"], "server name 'a b': expected letters, digits, '_', '-' or '.' (and no '__')"),
        (["a__b", "--", "x"], "server name 'a__b': expected letters, digits, '_', '-' or '.' (and no '__')"),
        (["a"], "ketch mcp add NAME needs -- COMMAND ARGS... (a stdio server) or --url URL"),
        (["a", "--url", "http://h/mcp", "--", "x"], "give either -- COMMAND ARGS... (a stdio server) or --url URL, not both"),
        (["a", "--url", "ftp://h/mcp"], "--url 'ftp://h/mcp': expected an http:// or https:// URL"),
        (["a", "--url", "http://h/mcp", "--header", "nocolon"], "--header 'nocolon': expected NAME:VALUE"),
        (["a", "-e", "NOEQUALS", "--", "x"], "--env 'NOEQUALS': expected NAME=VALUE"),
    ],
)
def test_bad_add_input_is_one_line_and_exit_2(env: Env, args: list[str], message: str) -> None:
    done = env.run("mcp", "add", *args)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].removeprefix("ketch: ").removesuffix(" (see ketch mcp add --help)") == message
    assert len(done.stderr.splitlines()) == 1
    assert not _user_mcp(env).exists()


def test_a_bad_scope_is_one_line_and_exit_2(env: Env) -> None:
    done = env.run("mcp", "add", "a", "--scope", "global", "--", "x")
    assert done.returncode == 2
    assert done.stderr.startswith("ketch: argument -s/--scope: invalid choice: 'global' (choose from ")
    assert done.stderr.endswith("project') (see ketch mcp add --help)\n")
    assert len(done.stderr.splitlines()) == 1


def test_add_refuses_a_name_already_there(env: Env) -> None:
    assert env.run("mcp", "add", "t", "--", "x").returncode == 0
    done = env.run("mcp", "add", "t", "--", "y")
    assert (done.returncode, done.stderr) == (
        2,
        f"ketch: MCP server 't' already exists in {_user_mcp(env)}; remove it first (ketch mcp remove t)\n",
    )
    assert json.loads(_user_mcp(env).read_text())["mcpServers"]["t"]["command"] == "x"


def test_remove_finds_the_server_and_asks_for_a_scope_when_both_have_it(env: Env) -> None:
    assert env.run("mcp", "add", "t", "--", "x").returncode == 0
    assert env.run("mcp", "add", "t", "-s", "project", "--", "y").returncode == 0
    both = env.run("mcp", "remove", "t")
    assert (both.returncode, both.stderr) == (
        2,
        f"ketch: MCP server 't' is in {_user_mcp(env)} and {env.work / '.mcp.json'}: choose one with --scope user|project\n",
    )
    done = env.run("mcp", "remove", "t", "--scope", "project")
    assert (done.returncode, done.stderr) == (0, f"ketch: removed MCP server t from {env.work / '.mcp.json'}\n")
    assert json.loads((env.work / ".mcp.json").read_text()) == {"mcpServers": {}}
    done = env.run("mcp", "remove", "t")
    assert (done.returncode, done.stderr) == (0, f"ketch: removed MCP server t from {_user_mcp(env)}\n")
    missing = env.run("mcp", "remove", "t")
    assert (missing.returncode, missing.stderr) == (
        2,
        f"ketch: no MCP server 't' in {_user_mcp(env)} or {env.work / '.mcp.json'} (ketch mcp list shows the servers)\n",
    )


def test_a_broken_mcp_json_is_named(env: Env) -> None:
    _user_mcp(env).parent.mkdir(parents=True)
    _user_mcp(env).write_text('{"mcpServers": [1]}')
    done = env.run("mcp", "add", "t", "--", "x")
    assert (done.returncode, done.stderr) == (2, f'ketch: {_user_mcp(env)}: "mcpServers" must be an object of server objects\n')


def test_unknown_mcp_command(env: Env) -> None:
    done = env.run("mcp", "frob")
    assert (done.returncode, done.stderr) == (2, "ketch: mcp: unknown command 'frob'; expected one of serve, list, add, remove, login\n")


# -- list ---------------------------------------------------------------------------------------
def test_list_starts_each_server_and_shows_its_status_and_tools(env: Env) -> None:
    assert env.run("mcp", "add", "time", "--", *TIME).returncode == 0
    assert env.run("mcp", "add", "gone", "--", "/nonexistent/mcp-server").returncode == 0
    done = env.run("mcp", "list")
    assert (done.returncode, done.stderr) == (0, "")
    error = "failed to start (FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server')"
    assert done.stdout.splitlines() == [
        "NAME  SCOPE  TYPE   STATUS   TOOLS",
        "time  user   stdio  running  mcp__time__get_current_time, mcp__time__convert_time",
        f"gone  user   stdio  failed   error: {error}",
    ]
    as_json = env.run("mcp", "list", "-o", "json")
    assert json.loads(as_json.stdout) == [
        {
            "name": "time",
            "scope": "user",
            "source": str(_user_mcp(env)),
            "type": "stdio",
            "status": "running",
            "tools": ["mcp__time__get_current_time", "mcp__time__convert_time"],
            "error": None,
            "protocol": "2026-07-28",
        },
        {
            "name": "gone",
            "scope": "user",
            "source": str(_user_mcp(env)),
            "type": "stdio",
            "status": "failed",
            "tools": [],
            "error": error,
            "protocol": None,
        },
    ]


def test_list_with_no_servers(env: Env) -> None:
    done = env.run("mcp", "list")
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == "ketch: no MCP servers configured (ketch mcp add NAME -- COMMAND ARGS... adds one)\n"
    assert env.run("mcp", "list", "-o", "json").stdout == "[]\n"


def test_project_servers_wait_for_trust(env: Env) -> None:
    (env.work / ".mcp.json").write_text(json.dumps({"mcpServers": {"echo": {"command": _echo(env)[0], "args": _echo(env)[1:]}}}))
    untrusted = env.run("mcp", "list")
    assert untrusted.stdout.splitlines() == [
        "NAME  SCOPE    TYPE   STATUS     TOOLS",
        "echo  project  stdio  untrusted  not started: the project is not trusted (--trust-project)",
    ]
    assert untrusted.stderr == ""
    trusted = env.run("mcp", "list", "--trust-project")
    assert trusted.stdout.splitlines() == [
        "NAME  SCOPE    TYPE   STATUS   TOOLS",
        "echo  project  stdio  running  mcp__echo__echo",
    ]


# -- the command's agent ----------------------------------------------------------------------------
def test_the_agent_calls_a_tool_of_a_configured_server(env: Env) -> None:
    echo = _echo(env)
    assert env.run("mcp", "add", "echo", "--", *echo).returncode == 0
    script = env.script([call_reply(("c1", "mcp__echo__echo", {"text": "hi"})), "done"])
    done = env.run("run", "--model", f"scripted:{script}", "--permission-mode", "bypass", "-o", "stream-json", "--no-session", "say hi")
    assert (done.returncode, done.stderr) == (0, "")
    events = lines(done.stdout)
    assert events[0]["tools"] == ["read", "write", "edit", "bash", "grep", "find", "ls", "mcp__echo__echo"]
    end = next(e for e in events if e["type"] == "tool_execution_end")
    assert (end["tool_name"], end["is_error"], end["result"]["content"]) == (
        "mcp__echo__echo",
        False,
        [{"type": "text", "text": "echo: hi"}],
    )
    assert events[-1]["text"] == "done"


def test_an_untrusted_projects_servers_are_named_in_one_warning(env: Env) -> None:
    echo = _echo(env)
    (env.work / ".mcp.json").write_text(json.dumps({"mcpServers": {"echo": {"command": echo[0], "args": echo[1:]}}}))
    script = env.script(["ok"])
    done = env.run("run", "--model", f"scripted:{script}", "-o", "json", "--no-session", "hi")
    assert done.returncode == 0
    assert done.stderr == (
        f"ketch: ignored settings of the untrusted project {env.work}: mcpServers echo ({env.work / '.mcp.json'}) "
        "(trust it with --trust-project or KETCH_TRUST_PROJECT=1)\n"
    )
    trusted = env.run("run", "--model", f"scripted:{script}", "-o", "stream-json", "--no-session", "--trust-project", "hi")
    assert (trusted.returncode, trusted.stderr) == (0, "")
    assert lines(trusted.stdout)[0]["tools"][-1] == "mcp__echo__echo"


# -- the interactive session ------------------------------------------------------------------------
def test_slash_mcp_shows_the_servers_status_and_tools(env: Env, terminals: list[Terminal]) -> None:
    assert env.run("mcp", "add", "echo", "--", *_echo(env)).returncode == 0
    assert env.run("mcp", "add", "gone", "--", "/nonexistent/mcp-server").returncode == 0
    term = Terminal(env, "--model", f"scripted:{env.script(['ok'])}")
    terminals.append(term)
    term.expect("warning: MCP server gone failed to start: failed to start")
    term.expect("›")
    term.sendline("/mcp")
    term.expect("NAME  SCOPE  TYPE   STATUS   TOOLS")
    term.expect(re.escape("echo  user   stdio  running  mcp__echo__echo"))
    term.expect(re.escape("gone  user   stdio  failed   error: failed to start (FileNotFoundError"))
    term.sendline("/tools")
    term.expect("mcp__echo__echo")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_slash_mcp_without_servers(env: Env, terminals: list[Terminal]) -> None:
    term = Terminal(env, "--model", f"scripted:{env.script(['ok'])}")
    terminals.append(term)
    term.expect("/help for commands")
    term.sendline("/mcp")
    term.expect(re.escape("no MCP servers configured (ketch mcp add NAME -- COMMAND ARGS... adds one)"))
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_a_servers_elicitation_is_asked_in_the_session(env: Env, terminals: list[Terminal]) -> None:
    script = env.home / "asking_server.py"
    script.write_text(ASKING_SERVER)
    assert env.run("mcp", "add", "asker", "--", sys.executable, str(script)).returncode == 0
    replies = env.script([call_reply(("c1", "mcp__asker__ask", {})), "thanks", call_reply(("c2", "mcp__asker__ask", {})), "ok"])
    term = Terminal(env, "--model", f"scripted:{replies}", "--permission-mode", "bypass")
    terminals.append(term)
    term.expect("/help for commands")
    term.sendline("who am I?")
    term.expect(re.escape("⚠ MCP server asker asks: Who are you?"))
    term.expect(re.escape("Answer it? [y] yes  [n] decline  [c] cancel ›"))
    term.sendline("y")
    term.expect(re.escape("Name (string) ›"))
    term.sendline("Ann")
    term.expect(re.escape("Age (integer) ›"))
    term.sendline("seven")
    term.expect(re.escape("'seven': expected an integer"))
    term.sendline("7")
    term.expect("Ann is 7")
    term.expect("thanks")
    term.sendline("again")
    term.expect(re.escape("Answer it? [y] yes  [n] decline  [c] cancel ›"))
    term.sendline("n")
    term.expect("the user chose decline")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_a_url_elicitation_required_is_shown_confirmed_and_the_call_retried(env: Env, terminals: list[Terminal]) -> None:
    script = env.home / "url_server.py"
    script.write_text(URL_SERVER)
    assert env.run("mcp", "add", "linker", "--", sys.executable, str(script)).returncode == 0
    replies = env.script(
        [call_reply(("c1", "mcp__linker__connect", {})), "linked", call_reply(("c2", "mcp__linker__connect", {})), "ok"]
    )
    term = Terminal(env, "--model", f"scripted:{replies}", "--permission-mode", "bypass")
    terminals.append(term)
    term.expect("/help for commands")
    term.sendline("connect me")
    # the -32042 error's URL is shown; the user confirms; the call is made again and goes through
    term.expect(re.escape("⚠ MCP server linker asks: Sign in to Acme"))
    term.expect(re.escape("it wants you to open https://acme.example/connect?c=1"))
    term.expect(re.escape("Answer it? [y] yes  [n] decline  [c] cancel ›"))
    term.sendline("y")
    term.expect("connected on call 2")
    term.expect("linked")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_a_declined_url_elicitation_is_not_retried_and_names_the_url(env: Env, terminals: list[Terminal]) -> None:
    script = env.home / "url_server.py"
    script.write_text(URL_SERVER)
    assert env.run("mcp", "add", "linker", "--", sys.executable, str(script)).returncode == 0
    replies = env.script([call_reply(("c1", "mcp__linker__connect", {})), "not linked"])
    term = Terminal(env, "--model", f"scripted:{replies}", "--permission-mode", "bypass")
    terminals.append(term)
    term.expect("/help for commands")
    term.sendline("connect me")
    term.expect(re.escape("it wants you to open https://acme.example/connect?c=1"))
    term.expect(re.escape("Answer it? [y] yes  [n] decline  [c] cancel ›"))
    term.sendline("n")
    term.expect(re.escape("'connect' needs you to open https://acme.example/connect?c=1 (Sign in to Acme); the user chose"))
    term.expect("decline")
    term.expect("not linked")
    term.sendline("/exit")
    assert term.wait_exit() == 0
