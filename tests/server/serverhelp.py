"""Helpers for the server tests: an in-process server on a free loopback port, an SSE
reader, and ``ketch serve`` as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from ketch import Agent
from ketch import tool
from ketch.cli._serve import encode_wire
from ketch.server import create_app
from ketch.sessions import JsonlStore
from ketch.sessions import Session
from ketch.testing import ScriptedModel

SRC = str(Path(__file__).resolve().parents[2] / "src")
TOKEN = "test-token-0123456789abcdef"


@dataclass
class Gate:
    """A tool that blocks until the test opens it: the run is active, deterministically."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)

    def tool(self) -> Any:
        gate = self

        @tool
        async def wait_gate() -> str:
            """Wait until the gate opens."""
            gate.entered.set()
            await gate.opened.wait()
            return "gate opened"

        return wait_gate


@dataclass
class Server:
    """A running in-process server."""

    url: str
    app: web.Application
    runner: web.AppRunner
    store: JsonlStore
    client: aiohttp.ClientSession
    models: list[ScriptedModel]

    def headers(self, token: str | None = TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"} if token is not None else {}

    async def call(self, method: str, path: str, body: Any = None, token: str | None = TOKEN) -> tuple[int, Any]:
        """One JSON request; the status and the decoded body."""
        kwargs: dict[str, Any] = {"headers": self.headers(token)}
        if body is not None:
            kwargs["json"] = body
        async with self.client.request(method, self.url + path, **kwargs) as response:
            text = await response.text()
            try:
                data = json.loads(text)
            except ValueError:
                data = text
            return response.status, data

    async def create(self) -> str:
        status, data = await self.call("POST", "/api/sessions", {})
        assert status == 201, data
        return str(data["id"])

    async def close(self) -> None:
        if not self.client.closed:
            await self.client.close()
            await self.runner.cleanup()


async def start_server(
    tmp_path: Path,
    script: Callable[[], list[Any]],
    *,
    tools: Callable[[], list[Any]] = list,
    token: str | None = TOKEN,
    **options: Any,
) -> Server:
    """A server whose sessions run a :class:`ScriptedModel` of ``script()`` replies with
    ``tools()``, on 127.0.0.1 and a free port."""
    store = JsonlStore(tmp_path / "sessions")
    models: list[ScriptedModel] = []

    async def factory(session: Session) -> Agent[None]:
        model = ScriptedModel(script())
        models.append(model)
        return Agent(model, tools=tools(), session=session)

    app = create_app(factory, store=store, cwd=str(tmp_path), token=token, encode=encode_wire, **options)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60), connector=aiohttp.TCPConnector(limit=0))
    return Server(f"http://127.0.0.1:{port}", app, runner, store, client, models)


class Stream:
    """An open SSE response: read frames (``id``, ``event``, ``data``) and comments."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def frame(self) -> dict[str, Any]:
        """The next frame: ``{"id", "event", "data"}`` or ``{"comment"}``."""
        fields: dict[str, Any] = {}
        while True:
            raw = await self.response.content.readline()
            if not raw:
                raise EOFError("the stream ended")
            line = raw.decode().rstrip("\n")
            if line == "":
                if fields:
                    if "data" in fields:
                        fields["data"] = json.loads(fields["data"])
                    return fields
                continue
            if line.startswith(":"):
                return {"comment": line[1:].strip()}
            name, _, value = line.partition(": ")
            fields[name] = value

    async def event(self) -> dict[str, Any]:
        """The next data frame (comments skipped)."""
        while True:
            frame = await self.frame()
            if "data" in frame:
                return frame

    async def until_idle(self) -> list[dict[str, Any]]:
        """Frames up to and including the ``session_state`` that says the run is over."""
        frames = []
        while True:
            frame = await self.event()
            frames.append(frame)
            data = frame["data"]
            if data.get("type") == "session_state" and not data["running"]:
                return frames

    async def until(self, kind: str) -> list[dict[str, Any]]:
        """Frames up to and including the first event of type ``kind``."""
        frames = []
        while True:
            frame = await self.event()
            frames.append(frame)
            if frame["data"].get("type") == kind:
                return frames

    def close(self) -> None:
        self.response.close()


async def subscribe(server: Server, session_id: str, last_event_id: str | None = None, token: str | None = TOKEN) -> Stream:
    """Open the session's event stream (subscribed once this returns)."""
    headers = server.headers(token)
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    response = await server.client.get(f"{server.url}/api/sessions/{session_id}/events", headers=headers)
    assert response.status == 200, await response.text()
    return Stream(response)


def types(frames: list[dict[str, Any]]) -> list[str]:
    """Event types, message updates as ``update:<inner>``, messages as ``<kind>:<role>``."""
    out = []
    for frame in frames:
        data = frame["data"]
        kind = data["type"]
        if kind == "message_update":
            out.append(f"update:{data['event']['type']}")
        elif kind in ("message_start", "message_end"):
            out.append(f"{kind}:{data['message']['role']}")
        else:
            out.append(kind)
    return out


# -- ketch serve as a subprocess ------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Connect until the server accepts (or the process ends)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"ketch serve exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"ketch serve did not listen on {port}") from None
            # connecting again at once is the poll; the connect itself waits for the kernel
            proc_wait = 0.02
            try:
                proc.wait(proc_wait)
            except subprocess.TimeoutExpired:
                pass


@dataclass
class ServeProcess:
    proc: subprocess.Popen[str]
    port: int
    token: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


def serve_env(tmp_path: Path, **extra: str) -> tuple[dict[str, str], Path]:
    """An isolated environment (HOME, XDG dirs, sessions under tmp_path) and a workspace."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "PYTHONPATH": SRC,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        **extra,
    }
    return env, work.resolve()


def start_serve(tmp_path: Path, *args: str, token: str = TOKEN, env_extra: dict[str, str] | None = None) -> ServeProcess:
    """``python -m ketch serve --port P --token T *args`` in an isolated home; waits until
    it accepts connections."""
    env, work = serve_env(tmp_path, **(env_extra or {}))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ketch", "serve", "--port", str(port), "--token", token, *args],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = ServeProcess(proc, port, token)
    try:
        wait_listening(port, proc)
    except BaseException:
        served.stop()
        raise
    return served


URL_SERVER = Path(__file__).with_name("url_server.py")


def add_url_server(tmp_path: Path) -> None:
    """Configure ``linker`` (url_server.py: its ``connect`` needs a URL opened first) as a
    user MCP server of the home :func:`serve_env` makes under ``tmp_path``."""
    folder = tmp_path / "home" / ".config" / "ketch"
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"command": sys.executable, "args": [str(URL_SERVER)]}
    (folder / ".mcp.json").write_text(json.dumps({"mcpServers": {"linker": entry}}))
