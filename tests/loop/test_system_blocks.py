"""A system prompt of blocks (SystemPrompt) through the loop to the request."""

from __future__ import annotations

from typing import Any

import msgspec

from ketch import Agent
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import SystemBlock
from ketch.llm import SystemPrompt
from ketch.testing import FunctionModel

PROMPT = SystemPrompt([SystemBlock("You are careful.", cache=True), SystemBlock("Today is Monday.")])


async def test_the_request_carries_the_joined_text_and_the_blocks() -> None:
    seen: list[Request] = []

    def respond(request: Request, options: StreamOptions) -> Any:
        seen.append(request)
        return "ok"

    agent = Agent(FunctionModel(respond), system_prompt=PROMPT)
    result = await agent.prompt("hi")
    assert result.end_reason == "stop"
    request = seen[0]
    assert type(request.system_prompt) is str
    assert request.system_prompt == "You are careful.\n\nToday is Monday."
    assert request.system_blocks == PROMPT.blocks
    msgspec.json.encode(request)  # a plain, encodable request
    assert repr(PROMPT) == (
        "SystemPrompt([SystemBlock(text='You are careful.', cache=True), SystemBlock(text='Today is Monday.', cache=False)])"
    )
