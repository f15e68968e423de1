"""``ketch mcp serve`` as a real subprocess, driven by the official ``mcp`` client SDK."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from collections.abc import Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import TextIO

import pytest
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from ketch.cli._mcp import SERVE_DENIAL
from ketch.permissions import HOOK_DENIED
from ketch.permissions import PLAN_DENIED
from ketch.permissions import RULE_DENIED
from mcp import ClientSession
from mcp import StdioServerParameters

SRC = str(Path(__file__).resolve().parents[2] / "src")
TOOLS = ["read", "write", "edit", "bash", "grep", "find", "ls", "ketch_agent"]


@dataclass
class Home:
    """An isolated HOME and config directory, and a workspace with ``notes.txt``;
    ``errlog`` takes the stdio servers' stderr."""

    home: Path
    work: Path
    vars: dict[str, str]
    errlog: TextIO

    def script(self, replies: list[Any]) -> str:
        path = self.home / "script.json"
        path.write_text(json.dumps(replies))
        return str(path)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    home, xdg, work = tmp_path / "home", tmp_path / "xdg", tmp_path / "work"
    for d in (home, xdg, work):
        d.mkdir()
    (work / "notes.txt").write_text("hello there\nsecond line\n")
    variables = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(xdg),
        "PYTHONPATH": SRC,
        "LANG": "C.UTF-8",
    }
    with open(home / "server-stderr.txt", "w") as errlog:
        yield Home(home, work.resolve(), variables, errlog)


@asynccontextmanager
async def served(home: Home, *args: str, extra: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """A client session with ``ketch mcp serve *args`` over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ketch", "mcp", "serve", *args],
        env=dict(home.vars, **(extra or {})),
        cwd=str(home.work),
    )
    async with stdio_client(params, errlog=home.errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def test_lists_the_builtin_tools_and_ketch_agent_with_annotations(home: Home) -> None:
    async with served(home) as session:
        listed = await session.list_tools()
    assert [t.name for t in listed.tools] == TOOLS
    hints = {t.name: (t.annotations.read_only_hint, t.annotations.destructive_hint) for t in listed.tools}
    assert hints == {
        "read": (True, None),
        "grep": (True, None),
        "find": (True, None),
        "ls": (True, None),
        "write": (False, True),
        "edit": (False, True),
        "bash": (False, True),
        "ketch_agent": (False, True),
    }
    agent = listed.tools[-1]
    assert agent.input_schema["required"] == ["task"]


async def test_read_returns_the_file_text(home: Home) -> None:
    async with served(home) as session:
        result = await session.call_tool("read", {"path": "notes.txt"})
    assert result.is_error is False
    assert _text(result) == "     1\thello there\n     2\tsecond line"


async def test_invalid_arguments_are_an_error_result_with_the_validation_message(home: Home) -> None:
    async with served(home) as session:
        result = await session.call_tool("read", {})
        unknown = await session.call_tool("nope", {})
    assert result.is_error is True
    assert _text(result).startswith('Validation failed for tool "read":')
    assert unknown.is_error is True
    assert _text(unknown) == f"Unknown tool 'nope'; the tools are {', '.join(TOOLS)}"


async def test_write_is_denied_in_plan_mode(home: Home) -> None:
    async with served(home, "--permission-mode", "plan") as session:
        result = await session.call_tool("write", {"path": "new.txt", "content": "x\n"})
    assert result.is_error is True
    assert _text(result) == PLAN_DENIED.format(tool="write")
    assert _text(result) == (
        "Permission denied: plan mode allows read-only tools only, and this write call may change "
        "things. Describe the change instead of making it."
    )
    assert not (home.work / "new.txt").exists()


async def test_a_call_needing_approval_is_denied_saying_how_to_allow_it(home: Home) -> None:
    async with served(home) as session:  # default mode: write asks, and nobody can answer
        result = await session.call_tool("write", {"path": "new.txt", "content": "x\n"})
    assert result.is_error is True
    assert _text(result) == SERVE_DENIAL.format(tool="write", mode="default")
    assert not (home.work / "new.txt").exists()


async def test_accept_edits_lets_write_run_and_deny_rules_still_win(home: Home) -> None:
    async with served(home, "--permission-mode", "accept_edits", "--deny", "Read(./notes.txt)") as session:
        written = await session.call_tool("write", {"path": "new.txt", "content": "made over MCP\n"})
        denied = await session.call_tool("read", {"path": "notes.txt"})
    assert written.is_error is False
    assert (home.work / "new.txt").read_text() == "made over MCP\n"
    assert denied.is_error is True
    assert _text(denied) == RULE_DENIED.format(rule="Read(./notes.txt)")


async def test_pre_and_post_tool_use_hooks_from_the_settings_apply(home: Home) -> None:
    config = Path(home.vars["XDG_CONFIG_HOME"]) / "ketch" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        """
[[hooks.PreToolUse]]
matcher = "ls"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "echo 'no listing today' >&2; exit 2"

[[hooks.PostToolUse]]
matcher = "read"
[[hooks.PostToolUse.hooks]]
type = "command"
command = "echo 'read was checked' >&2; exit 2"
"""
    )
    async with served(home) as session:
        listed = await session.call_tool("ls", {})
        read = await session.call_tool("read", {"path": "notes.txt"})
    assert (listed.is_error, _text(listed)) == (True, HOOK_DENIED.format(reason="no listing today"))
    assert (read.is_error, _text(read)) == (
        False,
        "     1\thello there\n     2\tsecond line\n\nPostToolUse hook feedback: read was checked",
    )


async def test_ketch_agent_runs_the_configured_model_and_reports_progress(home: Home) -> None:
    script = home.script(
        [
            {"blocks": [{"type": "tool_call", "id": "c1", "name": "read", "args": {"path": "notes.txt"}}]},
            "The notes say hello there.",
        ]
    )
    seen: list[tuple[float, str | None]] = []
    all_four = asyncio.Event()

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, message))
        if len(seen) == 4:
            all_four.set()

    async with served(home, extra={"KETCH_TEST_SCRIPT": script}) as session:
        result = await session.call_tool("ketch_agent", {"task": "What do the notes say?"}, progress_callback=progress)
        await asyncio.wait_for(all_four.wait(), 30)  # progress callbacks run as tasks of their own
    assert result.is_error is False
    assert _text(result) == "The notes say hello there."
    assert sorted(seen) == [(1.0, "turn 1"), (2.0, "calling read"), (3.0, "read done"), (4.0, "turn 2")]


async def test_bash_output_streams_as_progress(home: Home) -> None:
    seen: list[tuple[float, str | None]] = []
    everything = asyncio.Event()

    def streamed() -> str:
        return "".join(message or "" for _, message in sorted(seen))

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, message))
        if streamed() == "one\ntwo\n":
            everything.set()

    async with served(home, "--permission-mode", "bypass") as session:
        result = await session.call_tool("bash", {"command": "echo one; echo two"}, progress_callback=progress)
        await asyncio.wait_for(everything.wait(), 30)  # progress callbacks run as tasks of their own
    assert (result.is_error, _text(result)) == (False, "one\ntwo")
    assert streamed() == "one\ntwo\n"


async def test_ketch_agent_without_a_task_is_an_error_result(home: Home) -> None:
    async with served(home) as session:
        result = await session.call_tool("ketch_agent", {"task": "  "})
    assert result.is_error is True
    assert _text(result) == "ketch_agent needs a non-empty string argument 'task'"


async def test_no_agent_serves_the_tools_only(home: Home) -> None:
    async with served(home, "--no-agent", "--tools", "read,ls") as session:
        listed = await session.list_tools()
    assert [t.name for t in listed.tools] == ["read", "ls"]


@pytest.fixture
def http_server(home: Home) -> Iterator[subprocess.Popen[str]]:
    """``ketch mcp serve --http`` running (killed after the test if still running)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ketch", "mcp", "serve", "--http"],
        cwd=home.work,
        env=home.vars,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_streamable_http_on_loopback(http_server: subprocess.Popen[str]) -> None:
    process = http_server
    assert process.stderr is not None
    line = await asyncio.to_thread(process.stderr.readline)
    match = re.fullmatch(r"ketch: MCP server \(streamable HTTP\) at (http://127\.0\.0\.1:\d+/mcp)\n", line)
    assert match is not None, line
    async with streamable_http_client(match.group(1)) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        listed = await session.list_tools()
        result = await session.call_tool("read", {"path": "notes.txt"})
    assert [t.name for t in listed.tools] == TOOLS
    assert _text(result) == "     1\thello there\n     2\tsecond line"
    process.terminate()  # SIGTERM: a graceful stop
    assert await asyncio.to_thread(process.wait, 30) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http", "--port", "70000"], "ketch: --port 70000: expected a port number from 0 to 65535\n"),
        (["--port", "8080"], "ketch: --port 8080: only with --http\n"),
        (["--workspace", "/nonexistent/dir"], "ketch: --workspace /nonexistent/dir: not a directory\n"),
        (["--tools", "read,frobnicate"], "ketch: unknown tool(s) frobnicate; the built-in tools are read, write, edit, bash, grep, find, ls\n"),
    ],
)
def test_bad_serve_options_are_one_line_and_exit_2(home: Home, args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ketch", "mcp", "serve", *args],
        cwd=home.work,
        env=home.vars,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message)


# -- protocol versions, capabilities, resources ------------------------------------------------


@asynccontextmanager
async def served_newest(home: Home, *args: str) -> AsyncIterator[Any]:
    """A client of ``ketch mcp serve *args`` that negotiates as the SDK's ``Client`` does
    (``server/discover`` first, the handshake as the fallback)."""
    from mcp import Client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ketch", "mcp", "serve", *args], env=home.vars, cwd=str(home.work)
    )
    async with Client(params, cache=None) as client:
        yield client


async def test_the_newest_protocol_version_is_negotiated_and_older_clients_get_theirs(home: Home) -> None:
    import mcp_types as types
    from mcp_types.version import LATEST_HANDSHAKE_VERSION
    from mcp_types.version import LATEST_PROTOCOL_VERSION

    async with served_newest(home, "--no-agent") as client:
        newest = (client.protocol_version, client.server_capabilities.model_dump(exclude_none=True))
        info = client.server_info
    async with served(home, "--no-agent") as session:
        handshake = (session.protocol_version, session.server_capabilities)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ketch", "mcp", "serve", "--no-agent"], env=home.vars, cwd=str(home.work)
    )
    async with stdio_client(params, errlog=home.errlog) as (read, write), ClientSession(read, write) as session:
        old = await session.send_request(
            types.InitializeRequest(
                params=types.InitializeRequestParams(
                    protocol_version="2025-03-26",
                    capabilities=types.ClientCapabilities(),
                    client_info=types.Implementation(name="old", version="1"),
                )
            ),
            types.InitializeResult,
        )
    capabilities = {"tools": {"list_changed": False}, "resources": {"subscribe": False, "list_changed": False}}
    assert newest == (LATEST_PROTOCOL_VERSION, capabilities)
    assert LATEST_PROTOCOL_VERSION == "2026-07-28"
    assert info is not None and info.name == "ketch"
    assert handshake[0] == LATEST_HANDSHAKE_VERSION == "2025-11-25"
    assert handshake[1] is not None and handshake[1].model_dump(exclude_none=True) == capabilities
    assert old.protocol_version == "2025-03-26"
    assert old.capabilities.prompts is None  # no prompts are served (see docs)


async def test_files_read_are_listed_and_read_as_resources(home: Home) -> None:
    (home.work / "docs").mkdir()
    (home.work / "docs" / "a.md").write_text("# A\n")
    uri = (home.work / "notes.txt").as_uri()
    async with served(home, "--no-agent") as session:
        before = await session.list_resources()
        await session.call_tool("read", {"path": "notes.txt"})
        await session.call_tool("read", {"path": "docs/a.md"})
        await session.call_tool("read", {"path": "missing.txt"})  # an error: not a resource
        listed = await session.list_resources()
        templates = await session.list_resource_templates()
        read = await session.read_resource(uri)
        (home.work / "notes.txt").write_text("changed\n")
        again = await session.read_resource(uri)
        (home.work / "notes.txt").unlink()
        with pytest.raises(Exception) as gone:
            await session.read_resource(uri)
        with pytest.raises(Exception) as other:
            await session.read_resource((home.work / "never-read.txt").as_uri())
    assert before.resources == []
    assert [(r.uri, r.name, r.mime_type) for r in listed.resources] == [
        (uri, "notes.txt", "text/plain"),
        ((home.work / "docs" / "a.md").as_uri(), "docs/a.md", "text/markdown"),
    ]
    assert templates.resource_templates == []
    assert [(c.uri, c.mime_type, c.text) for c in read.contents] == [
        (uri, "text/plain", "     1\thello there\n     2\tsecond line")
    ]
    assert [c.text for c in again.contents] == ["     1\tchanged"]
    assert getattr(gone.value, "code", None) == -32603
    assert str(gone.value).startswith("File not found: ")
    assert getattr(other.value, "code", None) == -32002
    assert str(other.value) == (
        f"{(home.work / 'never-read.txt').as_uri()!r} is not a resource of this server: "
        "its resources are the files its read tool has read"
    )


async def test_a_file_the_rules_keep_from_being_read_is_no_resource(home: Home) -> None:
    async with served_newest(home, "--no-agent", "--tools", "read", "--deny", "Read(notes.txt)") as client:
        denied = await client.call_tool("read", {"path": "notes.txt"})
        listed = await client.list_resources()
    assert denied.is_error is True
    assert listed.resources == []  # a file not read is not a resource
    async with served(home, "--no-agent", "--tools", "ls") as session:
        capabilities = session.server_capabilities
    assert capabilities is not None and capabilities.resources is None  # no read tool: no resources
