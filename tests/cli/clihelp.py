"""Helpers for running the ``ketch`` command as a subprocess in an isolated home."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SRC = str(Path(__file__).resolve().parents[2] / "src")


@dataclass
class Env:
    """An isolated HOME / XDG config dir and a workspace to run ``ketch`` in."""

    home: Path
    xdg: Path
    work: Path
    vars: dict[str, str]

    def script(self, replies: list[Any], name: str = "script.json") -> str:
        """Write a model script; returns its path."""
        path = self.home / name
        path.write_text(json.dumps(replies))
        return str(path)

    def user_config(self, text: str) -> Path:
        """Write the user config file."""
        path = self.xdg / "ketch" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def project_config(self, text: str, directory: Path | None = None) -> Path:
        """Write a project config file (in the workspace unless ``directory``)."""
        path = (directory or self.work) / ".ketch" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def block_modules(self, *names: str) -> None:
        """Make the top-level modules ``names`` unimportable in the commands this
        environment runs (as if their packages were not installed): a ``sitecustomize``
        put first on ``PYTHONPATH`` adds an import hook that refuses them."""
        shim = self.home / "blocked-modules"
        shim.mkdir(exist_ok=True)
        (shim / "sitecustomize.py").write_text(
            "import sys\n"
            f"BLOCKED = frozenset({sorted(names)!r})\n"
            "class Blocker:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.partition('.')[0] in BLOCKED:\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Blocker())\n"
        )
        self.vars["PYTHONPATH"] = f"{shim}:{SRC}"

    def run(
        self, *args: str, input: str | None = None, extra: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python -m ketch *args`` and wait for it."""
        env = dict(self.vars, **(extra or {}))
        return subprocess.run(
            [sys.executable, "-m", "ketch", *args],
            cwd=cwd or self.work,
            env=env,
            input=input if input is not None else "",
            capture_output=True,
            text=True,
            timeout=60,
        )

    def popen(self, *args: str, extra: dict[str, str] | None = None, nohup: bool = False) -> subprocess.Popen[str]:
        """Start ``python -m ketch *args`` with pipes; with ``nohup`` SIGHUP is ignored in
        it from the start, as under ``nohup``."""
        import signal

        env = dict(self.vars, **(extra or {}))
        return subprocess.Popen(
            [sys.executable, "-m", "ketch", *args],
            cwd=self.work,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=(lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if nohup else None,
        )


def make_env(tmp_path: Path) -> Env:
    """A clean environment under ``tmp_path``: no provider keys, HOME and XDG_CONFIG_HOME
    of its own, an empty workspace."""
    import os

    home, xdg, work = tmp_path / "home", tmp_path / "xdg", tmp_path / "work"
    for d in (home, xdg, work):
        d.mkdir()
    variables = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(xdg),
        "PYTHONPATH": SRC,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
    }
    return Env(home, xdg, work.resolve(), variables)


def lines(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a stream-json output."""
    return [json.loads(line) for line in stdout.splitlines()]


def shape(events: list[dict[str, Any]]) -> list[str]:
    """Event types, with the inner stream event for message_update and the role for messages."""
    out = []
    for e in events:
        kind = e["type"]
        if kind == "message_update":
            out.append(f"update:{e['event']['type']}")
        elif kind in ("message_start", "message_end"):
            out.append(f"{kind}:{e['message']['role']}")
        elif kind in ("tool_execution_start", "tool_execution_end"):
            out.append(f"{kind}:{e['tool_call_id']}")
        else:
            out.append(kind)
    return out


def text_reply(text: str, **extra: Any) -> dict[str, Any]:
    """A scripted reply with one text block."""
    return {"blocks": [{"type": "text", "text": text}], **extra}


def call_reply(*calls: tuple[str, str, dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A scripted reply with tool calls ``(id, name, arguments)``."""
    return {"blocks": [{"type": "tool_call", "id": i, "name": n, "args": a} for i, n, a in calls], **extra}


class FakeServer:
    """A loopback OpenAI-compatible endpoint: ``GET /v1/models`` and a streaming
    ``POST /v1/chat/completions``; requests are recorded, ``good_key`` is the accepted key."""

    good_key = "sk-test-0123456789abcdef-WXYZ"

    def __init__(self) -> None:
        import http.server
        import threading

        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.replies: list[str | list[tuple[str, str, dict[str, Any]]]] = []
        """What the next completions answer (in order; then the default text): a text, or
        tool calls ``(id, name, arguments)``."""
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _record(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                return body

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _authorised(self) -> bool:
                return self.headers.get("Authorization") == f"Bearer {server.good_key}"

            def do_GET(self) -> None:
                self._record()
                if not self._authorised():
                    self._send(401, b'{"error": {"message": "bad key"}}', "application/json")
                else:
                    self._send(200, b'{"object": "list", "data": []}', "application/json")

            def do_POST(self) -> None:
                self._record()
                if not self._authorised():
                    self._send(401, b'{"error": {"message": "bad key", "type": "invalid_request_error"}}', "application/json")
                    return
                reply = server.replies.pop(0) if server.replies else None
                if isinstance(reply, list):
                    calls = [
                        {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                        for i, (cid, name, args) in enumerate(reply)
                    ]
                    chunks = [
                        {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": calls}}]},
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                    ]
                else:
                    first, rest = ("Hi from ", "the fake.") if reply is None else (reply, "")
                    chunks = [
                        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": first}}]},
                        {"choices": [{"index": 0, "delta": {"content": rest}}]},
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    ]
                chunks.append({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}})
                body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
                self._send(200, body, "text/event-stream")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def received(self) -> str:
        """Everything the endpoint received (paths, headers and bodies), as text, to look for canaries."""
        return "\n".join(
            f"{m} {p} {json.dumps(h)} {b.decode('utf-8', 'replace')}" for m, p, h, b in self.requests
        )

    @property
    def base_url(self) -> str:
        """The endpoint's base URL (``…/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


class Terminal:
    """``python -m ketch`` in a pseudo-terminal (pexpect); answers cursor-position requests
    the way a terminal would, so prompt_toolkit draws its bottom toolbar."""

    CPR = "\x1b[6n"

    def __init__(
        self, env: Env, *args: str, extra: dict[str, str] | None = None, columns: int = 120, cwd: Path | None = None
    ) -> None:
        import pexpect

        variables = dict(env.vars, TERM="xterm-256color", COLUMNS=str(columns), LINES="30", **(extra or {}))
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "ketch", *args],
            cwd=str(cwd or env.work),
            env=variables,
            encoding="utf-8",
            dimensions=(30, columns),
            timeout=60,  # a guard against a hung child only: every wait is for text on the screen
        )
        self.seen = ""

    def expect(self, pattern: Any) -> str:
        """Wait for the regex ``pattern`` (or ``pexpect.EOF``); returns the output before it
        (since the previous match)."""
        import re

        before = ""
        while True:
            index = self.child.expect([pattern, re.escape(self.CPR)])
            before += self.child.before if isinstance(self.child.before, str) else ""
            after = self.child.after if isinstance(self.child.after, str) else ""
            if index == 0:
                self.seen += before + after
                return before
            before += after
            self.child.send("\x1b[20;1R")

    def sendline(self, text: str) -> None:
        """Type ``text`` and Enter."""
        self.child.send(text + "\r")

    def ctrl(self, key: str) -> None:
        """Press Ctrl-``key``."""
        self.child.sendcontrol(key)

    def wait_exit(self) -> int:
        """Wait for the process to end (answering CPRs meanwhile); its exit status."""
        import pexpect

        self.expect(pexpect.EOF)
        self.child.close()
        status = self.child.exitstatus
        assert status is not None
        return int(status)

    def close(self) -> None:
        """Kill the process if it still runs."""
        if self.child.isalive():
            self.child.terminate(force=True)
