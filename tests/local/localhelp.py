"""Helpers shared by the local model tests (a module of its own: ``conftest`` names clash)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

N_CTX = 2048
"""The session model's context window."""

PARALLEL = 2
"""The session server's slots."""

THREADS = 1
"""The session server's CPU threads: one, as llama.cpp's spinning thread barriers crawl
when the cores are shared with other work (as on a machine running tests)."""


def get_json(url: str, key: str, body: Any = None) -> Any:
    """A request to the server with its key; the decoded JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def decoded(base_url: str, key: str) -> int:
    """The server's ``llama_decode`` calls so far (``/metrics``): one per generated token
    of a single request."""
    request = urllib.request.Request(f"{base_url}/metrics", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("llamacpp:n_decode_total "):
                return int(float(line.split()[1]))
    raise AssertionError("no llamacpp:n_decode_total in /metrics")


def wait_idle(base_url: str, key: str) -> list[dict[str, Any]]:
    """The server's slots (``GET /slots``) once none is processing: the server notices a
    closed connection at its next token, so it is polled for at most a minute."""
    deadline = time.monotonic() + 60
    while True:
        slots: list[dict[str, Any]] = get_json(f"{base_url}/slots", key)
        if not any(s["is_processing"] for s in slots):
            return slots
        if time.monotonic() > deadline:
            pytest.fail(f"the server's slots are still busy: {slots}")
        time.sleep(0.05)  # polling a separate process
