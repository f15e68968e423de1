"""An aiohttp web application with an agent behind two routes.

    python examples/aiohttp_app/app.py            # serves http://127.0.0.1:8080 until Ctrl-C
    python examples/aiohttp_app/app.py --check    # starts, asks both routes once, stops

    curl -s localhost:8080/ask -d '{"question": "What is 2 + 40?"}'
    curl -sN 'localhost:8080/stream?question=What+is+2+%2B+40%3F'

``POST /ask`` answers with JSON when the run is done; ``GET /stream`` sends the answer as
Server-Sent Events while the model writes it. An Agent is cheap to make (microseconds),
so each request gets its own; keep one per conversation for multi-turn chats. All HTTP
to providers goes through one shared aiohttp session per event loop, which the
application's loop owns. (For a complete server with sessions, approvals and a web
page, see ``ketch serve`` and ``ketch.server``.)
"""

import asyncio
import json
import os
import socket
import sys

import aiohttp
from aiohttp import web

from ketch import Agent
from ketch import Model
from ketch import tool
from ketch.llm import TextDelta
from ketch.loop import AgentEvent
from ketch.loop import MessageUpdate
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def new_agent() -> Agent[None]:
    model: Model | str = os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel(
        [reply(tool_call("add", {"a": 2, "b": 40})), "2 + 40 = 42."]
    )
    return Agent(model, system_prompt="Be brief. Use add for sums.", tools=[add], max_turns=5)


async def ask(request: web.Request) -> web.Response:
    data = await request.json()
    question = data.get("question")
    if not isinstance(question, str) or not question:
        return web.json_response({"error": "'question' must be a non-empty string"}, status=400)
    result = await new_agent().prompt(question)
    return web.json_response({"answer": result.text, "end_reason": result.end_reason, "cost": result.cost})


async def stream(request: web.Request) -> web.StreamResponse:
    question = request.query.get("question", "")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    agent = new_agent()

    async def forward(event: AgentEvent) -> None:  # listeners may be async: awaited in order
        if isinstance(event, MessageUpdate) and isinstance(event.event, TextDelta):
            await response.write(f"data: {json.dumps({'delta': event.event.delta})}\n\n".encode())

    agent.subscribe(forward)
    result = await agent.prompt(question)
    await response.write(f"event: done\ndata: {json.dumps({'end_reason': result.end_reason})}\n\n".encode())
    return response


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/ask", ask)
    app.router.add_get("/stream", stream)
    return app


async def check() -> None:
    """Serve on a free loopback port, call both routes once, stop."""
    runner = web.AppRunner(make_app())
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/ask", json={"question": "What is 2 + 40?"}) as r:
                print("POST /ask ->", await r.json())
            async with http.get(f"{url}/stream", params={"question": "What is 2 + 40?"}) as r:
                print("GET /stream ->")
                async for line in r.content:
                    if line.strip():
                        print("  ", line.decode().strip())
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        asyncio.run(check())
    else:
        web.run_app(make_app(), host="127.0.0.1", port=8080)
