"""Events out of band: activities publish a run's events live to an :class:`EventHub`.

The workflow sees only complete results; what a UI shows while a model streams or a
tool reports progress travels outside Temporal. The hub is a small loopback HTTP
service (aiohttp): workers ``POST /runs/{run}/events`` with a JSON list of items,
subscribers read ``GET /runs/{run}/events`` as server-sent events (``id:`` is the
event's number in the run; reconnect with ``Last-Event-ID`` or ``?after=N`` to resume)
or, in the hub's process, iterate :meth:`EventHub.events`.

Each event is the JSON of a loop event (``msgspec.to_builtins``), with two differences
from an in-process run's events: a live ``message_update`` carries only its stream
``event`` (the delta), not the partial message; and a model call retried by Temporal
(its worker died, or it failed with a retryable error) first publishes a ``retry``
event with ``discard_partial: true``, so a UI drops the partial output of the
discarded attempt, as it does for a provider's own retries. The workflow's own events
are numbered (``seq``) so the hub keeps each once even when an activity that carried
them is retried.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

log = logging.getLogger("ketch.temporal")


class _Run:
    __slots__ = ("changed", "done", "events", "seq")

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.seq = 0
        self.done = False
        self.changed = asyncio.Event()


class EventHub:
    """An in-memory store of runs' events with an HTTP face on loopback.

    ``async with EventHub() as hub:`` starts it on ``127.0.0.1`` and a free port;
    pass ``hub.url`` as ``events_url`` when starting runs. Events of a run are kept
    until :meth:`forget`.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._runs: dict[str, _Run] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""
        """``http://host:port`` once started."""

    async def start(self) -> EventHub:
        """Start serving; returns self."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/runs/{run}/events", self._post)
        app.router.add_get("/runs/{run}/events", self._get)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self._runner = runner
        self.url = f"http://{self._host}:{port}"
        return self

    async def close(self) -> None:
        """Stop serving."""
        for run in self._runs.values():
            run.done = True
            run.changed.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> EventHub:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
        return run

    def publish(self, run_id: str, items: list[dict[str, Any]]) -> None:
        """Add items (``{"event": ...}``, with ``"seq"`` for the workflow's own events)."""
        run = self._run(run_id)
        for item in items:
            seq = item.get("seq")
            if seq is not None:
                if seq <= run.seq:
                    continue  # already published by an earlier attempt
                run.seq = seq
            event = item["event"]
            run.events.append(event)
            if event.get("type") == "agent_end" and event["summary"]["end_reason"] != "approval_required":
                run.done = True
        run.changed.set()
        run.changed = asyncio.Event()

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """The events of ``run_id`` published so far."""
        run = self._runs.get(run_id)
        return list(run.events) if run is not None else []

    def forget(self, run_id: str) -> None:
        """Drop a run's events."""
        self._runs.pop(run_id, None)

    async def events(self, run_id: str, after: int = 0) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """``(id, event)`` for each event of the run after event number ``after``, live,
        until the run's ``agent_end``."""
        run = self._run(run_id)
        n = after
        while True:
            while n < len(run.events):
                event = run.events[n]
                n += 1
                yield n, event
            if run.done:
                return
            await run.changed.wait()

    async def _post(self, request: web.Request) -> web.Response:
        items = await request.json()
        self.publish(request.match_info["run"], items)
        return web.Response(status=204)

    async def _get(self, request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run"]
        last = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
        try:
            after = int(last)
        except ValueError:
            raise web.HTTPBadRequest(text=f"Last-Event-ID must be an event number, got {last!r}") from None
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        async for n, event in self.events(run_id, after):
            await response.write(f"id: {n}\ndata: {json.dumps(event)}\n\n".encode())
        await response.write_eof()
        return response


async def subscribe(url: str, run_id: str, after: int = 0) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """Read a run's events from a hub at ``url`` over HTTP (server-sent events): ``(id,
    event)`` after event number ``after`` until the run's ``agent_end``."""
    async with aiohttp.ClientSession() as session, session.get(
        f"{url}/runs/{run_id}/events", headers={"Last-Event-ID": str(after)}, timeout=aiohttp.ClientTimeout(total=None)
    ) as response:
        response.raise_for_status()
        n = after
        data: list[str] = []
        async for raw in response.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("id:"):
                n = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                yield n, json.loads("\n".join(data))
                data = []


class Publisher:
    """Sends one activity's events to a hub, batching while a request is in flight.
    Never raises: events are best effort (the workflow's results are the record)."""

    def __init__(self, session: aiohttp.ClientSession | None, url: str | None, run_id: str) -> None:
        self._session = session
        self._endpoint = f"{url}/runs/{run_id}/events" if url else None
        self._queue: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    def add(self, item: dict[str, Any]) -> None:
        """Queue one item (``{"event": ...}``)."""
        if self._endpoint is None:
            return
        self._queue.append(item)
        if self._task is None:
            self._task = asyncio.create_task(self._pump())
        self._wake.set()

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._queue:
                batch, self._queue = self._queue, []
                await self._send(batch)
            if self._closed and not self._queue:
                return

    async def _send(self, batch: list[dict[str, Any]]) -> None:
        assert self._session is not None and self._endpoint is not None
        try:
            async with self._session.post(self._endpoint, json=batch) as response:
                if response.status >= 300:
                    log.warning("event hub answered %s to %d events", response.status, len(batch))
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("event hub unreachable (%s); %d events dropped", exc, len(batch))

    async def close(self) -> None:
        """Send what is queued and stop."""
        self._closed = True
        self._wake.set()
        if self._task is not None:
            await self._task
