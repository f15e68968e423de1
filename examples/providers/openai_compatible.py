"""Any OpenAI-compatible server (vLLM, llama.cpp's server, LM Studio, a gateway) as a provider.

    python examples/providers/openai_compatible.py

``register_provider`` adds a provider to the registry; ``"<provider>:<model>"`` then
works wherever a model is taken (``Agent``, ``get_model``, the command's ``--model``).
The command's config file does the same with a ``[providers.NAME]`` table. To run
offline, this example serves a minimal streaming Chat Completions endpoint on loopback;
point ``base_url`` at your server instead.
"""

import asyncio
import json
import socket

from aiohttp import web

from ketch import Agent
from ketch.llm import register_provider


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """A stand-in for an OpenAI-compatible server: streams a fixed answer."""
    body = await request.json()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for piece in ["Hello from ", body["model"], "!"]:
        chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}}
    await response.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
    return response


async def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat_completions)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        # api_key_env="MYLAB_API_KEY" would send that variable's value as the bearer key.
        register_provider("mylab", base_url=base_url, api="openai-chat")
        agent = Agent("mylab:tiny-1")
        result = await agent.prompt("Say hello.")
        print(result.text)
        print(f"provider={agent.model.provider} id={agent.model.id} tokens={result.usage.total_tokens}")
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
