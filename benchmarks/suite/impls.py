"""The benchmark task, implemented once per runtime.

Each ``setup_<name>(url)`` coroutine imports its framework, builds whatever is reused
across runs, and returns ``(run_once, close)``: ``run_once()`` performs one complete
agent run — the prompt, three rounds of one streamed ``add(a, b)`` call, then a final
answer of 300 streamed chunks — and returns ``(final_text, tool_calls_seen)``;
``close()`` releases clients. ``url`` is the scripted server's base URL for the script
(``http://127.0.0.1:<port>/r3/c300/v1``). Every implementation streams, and every
``add`` is a coroutine (so no framework pays for a thread hop the others skip).
"""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

from . import script

RunOnce = Callable[[], Awaitable[tuple[str, int]]]
Close = Callable[[], Awaitable[None]]

# -- (1) the floor: a hand-written loop on raw aiohttp ---------------------------------------
async def setup_floor(url: str) -> tuple[RunOnce, Close]:
    """The hand-written loop in :mod:`suite.floor`."""
    from .floor import setup

    return await setup(url)


# -- (2) ketch ----------------------------------------------------------------------------------
async def setup_ketch(url: str) -> tuple[RunOnce, Close]:
    """ketch's ``Agent`` with the OpenAI Chat Completions adapter pointed at the server."""
    from ketch import Agent
    from ketch import get_model
    from ketch import tool
    from ketch.llm import close_session

    model = get_model("openai:" + script.MODEL, api="openai-chat", base_url=url, api_key="x")
    add = tool(name="add")(script.add_numbers)

    async def run_once() -> tuple[str, int]:
        result = await Agent(model, tools=[add]).prompt(script.PROMPT)
        if result.end_reason != "stop":
            raise RuntimeError(f"run ended with {result.end_reason}: {result.summary.error}")
        return result.text, result.summary.tool_calls

    return run_once, close_session


async def setup_ketch_anthropic(url: str) -> tuple[RunOnce, Close]:
    """ketch with the Anthropic Messages adapter pointed at the server."""
    from ketch import Agent
    from ketch import get_model
    from ketch import tool
    from ketch.llm import close_session

    model = get_model("anthropic:claude-sonnet-4-5", base_url=url, api_key="x")
    add = tool(name="add")(script.add_numbers)

    async def run_once() -> tuple[str, int]:
        result = await Agent(model, tools=[add]).prompt(script.PROMPT)
        if result.end_reason != "stop":
            raise RuntimeError(f"run ended with {result.end_reason}: {result.summary.error}")
        return result.text, result.summary.tool_calls

    return run_once, close_session


# -- (3) the OpenAI Agents SDK ------------------------------------------------------------------
async def setup_openai_agents(url: str) -> tuple[RunOnce, Close]:
    """OpenAI Agents SDK: ``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI`` client
    pointed at the server, tracing disabled, ``Runner.run_streamed``."""
    from agents import Agent
    from agents import OpenAIChatCompletionsModel
    from agents import Runner
    from agents import function_tool
    from agents import set_tracing_disabled
    from agents.items import ToolCallItem
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=url, api_key="x")
    model = OpenAIChatCompletionsModel(model=script.MODEL, openai_client=client)
    agent = Agent(name="bench", model=model, tools=[function_tool(script.add_numbers, name_override="add")])

    async def run_once() -> tuple[str, int]:
        result = Runner.run_streamed(agent, script.PROMPT)
        async for _ in result.stream_events():
            pass
        calls = sum(1 for item in result.new_items if isinstance(item, ToolCallItem))
        return str(result.final_output), calls

    return run_once, client.close


# -- (4) Pydantic AI ------------------------------------------------------------------------------
async def setup_pydantic_ai(url: str) -> tuple[RunOnce, Close]:
    """Pydantic AI: ``OpenAIChatModel`` with an ``OpenAIProvider`` pointed at the server;
    ``agent.run`` with an event stream handler, so model responses stream."""
    from pydantic_ai import Agent
    from pydantic_ai import Tool
    from pydantic_ai.messages import ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=url, api_key="x")
    model = OpenAIChatModel(script.MODEL, provider=provider)
    agent = Agent(model, tools=[Tool(script.add_numbers, name="add", takes_ctx=False)])

    async def drain(ctx: Any, events: Any) -> None:
        async for _ in events:
            pass

    async def run_once() -> tuple[str, int]:
        result = await agent.run(script.PROMPT, event_stream_handler=drain)
        calls = sum(1 for m in result.new_messages() for p in m.parts if isinstance(p, ToolReturnPart))
        return str(result.output), calls

    async def close() -> None:
        await provider.client.close()

    return run_once, close


SETUPS: dict[str, Callable[[str], Awaitable[tuple[RunOnce, Close]]]] = {
    "floor": setup_floor,
    "ketch": setup_ketch,
    "openai-agents": setup_openai_agents,
    "pydantic-ai": setup_pydantic_ai,
    "ketch-anthropic": setup_ketch_anthropic,
}
"""Implementation name -> setup coroutine."""

LABELS = {
    "floor": "hand-written aiohttp loop (floor)",
    "ketch": "ketch",
    "openai-agents": "OpenAI Agents SDK",
    "pydantic-ai": "Pydantic AI",
    "ketch-anthropic": "ketch, Anthropic adapter",
}
"""Implementation name -> table label."""
