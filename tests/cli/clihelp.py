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

    def popen(self, *args: str, extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``python -m ketch *args`` with pipes."""
        env = dict(self.vars, **(extra or {}))
        return subprocess.Popen(
            [sys.executable, "-m", "ketch", *args],
            cwd=self.work,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


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
    return {"blocks": [{"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a in calls], **extra}
