"""A model of your own: any API (or no API at all) behind ketch's Model protocol.

    python examples/providers/custom_model.py

A model is an object with ``provider``, ``api``, ``id``, ``context_window`` and
``stream(request, options)``, an async iterator of stream events. ``MessageBuilder``
assembles the assistant message and returns the matching events; ``guard_stream``
keeps the stream protocol whatever your code does (one terminal event, an exception
turned into an error event, an abort honoured at once). Everything above the model (the
loop, tools, sessions, the command's agent) then works unchanged.

Here the "API" is a small JSON service on loopback (``POST /complete`` with the prompt,
answering ``{"text": ..., "tokens_in": ..., "tokens_out": ...}``), started by the
example itself so it runs offline.
"""

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from ketch import Agent
from ketch.llm import MessageBuilder
from ketch.llm import Request
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm import guard_stream


class JsonServiceModel:
    """A model served by a plain JSON HTTP service (no streaming, no tools)."""

    provider = "my-service"
    api = "my-json-api"

    def __init__(self, base_url: str, id: str = "house-model", context_window: int = 8192) -> None:
        self.base_url = base_url
        self.id = id
        self.context_window = context_window

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        options = options or StreamOptions()
        builder = MessageBuilder(provider=self.provider, api=self.api, model=self.id)
        return guard_stream(self._produce(request, builder), builder, options.signal)

    async def _produce(self, request: Request, builder: MessageBuilder) -> AsyncIterator[StreamEvent]:
        yield builder.start()
        last_user = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
        prompt = last_user.content if isinstance(last_user.content, str) else "".join(
            getattr(b, "text", "") for b in last_user.content
        )
        async with aiohttp.ClientSession() as http, http.post(
            f"{self.base_url}/complete", json={"system": request.system_prompt, "prompt": prompt}
        ) as response:
            if response.status != 200:
                # a classified error ends the stream; "server" errors are worth retrying
                yield builder.error(f"service answered HTTP {response.status}", kind="server")
                return
            body = await response.json()
        block = builder.text_start()
        yield block
        for word in body["text"].split(" "):  # a non-streaming API: hand out the text in pieces anyway
            yield builder.text_delta(word + " ", block.index)
        yield builder.text_end(block.index)
        builder.set_usage(input=body["tokens_in"], output=body["tokens_out"])
        yield builder.done()


async def complete(request: web.Request) -> web.Response:
    """The stand-in service: answers with the prompt reversed."""
    data = await request.json()
    text = f"Reversed: {data['prompt'][::-1]}"
    return web.json_response({"text": text, "tokens_in": len(data["prompt"]) // 4, "tokens_out": len(text) // 4})


async def main() -> None:
    app = web.Application()
    app.router.add_post("/complete", complete)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # any free port
    await web.SockSite(runner, sock).start()
    port = sock.getsockname()[1]
    try:
        agent = Agent(JsonServiceModel(f"http://127.0.0.1:{port}"), system_prompt="Reverse the text.")
        result = await agent.prompt("stressed")
        print(result.text.strip())
        print(result.usage.input, "tokens in,", result.usage.output, "tokens out")
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
