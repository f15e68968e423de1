"""A loopback OpenAI-compatible Chat Completions server for the durable tests.

``FakeOpenAI(answer)``: ``answer(body)`` gets each request's JSON body and returns what
the model says: ``(text, calls)`` with ``calls`` a list of ``(name, args)``. The reply
streams as server-sent events; its tool calls carry no ``id`` (as some servers send
them), or ``call_id`` every time (as others do). ``requests`` keeps every body.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

Answer = Callable[[dict[str, Any]], tuple[str, list[tuple[str, dict[str, Any]]]]]


def tool_results(body: dict[str, Any]) -> list[str]:
    """The contents of the request's tool messages, in order."""
    return [m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
            for m in body["messages"] if m["role"] == "tool"]


class FakeOpenAI:
    def __init__(self, answer: Answer, *, call_id: str | None = None) -> None:
        self.answer = answer
        self.call_id = call_id
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        text, calls = self.answer(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": body["model"],
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": text})
        for i, (name, args) in enumerate(calls):
            call: dict[str, Any] = {"index": i, "type": "function",
                                    "function": {"name": name, "arguments": json.dumps(args)}}
            if self.call_id is not None:
                call["id"] = self.call_id
            await send({"tool_calls": [call]})
        await send({}, "tool_calls" if calls else "stop")
        usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": body["model"], "choices": [],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
        await response.write(f"data: {json.dumps(usage)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
