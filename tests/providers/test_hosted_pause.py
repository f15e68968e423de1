"""A response the provider paused (Anthropic's ``pause_turn``, stop reason ``pause``) is
continued by the hosted-tools capabilities: the transcript goes back as it is, with no
new user message, and the model's continuation ends the run; past the limit the run
ends with an error naming it. Recorded Anthropic streams on a loopback server."""

from __future__ import annotations

from typing import Any

import hosted_streams as hs
import msgspec
import pytest
from loopback import LoopbackServer
from loopback import recorded_reply as sse

from ketch import Agent
from ketch.llm import AssistantMessage
from ketch.llm import Citation
from ketch.llm import HostedToolCall
from ketch.llm import HostedToolResult
from ketch.llm import TextContent
from ketch.llm import UserMessage
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._registry import ModelInfo
from ketch.llm._retry import RetryPolicy
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.tools import HostedTools
from ketch.web import WebSearch

SONNET = ModelInfo(id="claude-sonnet-4-5", provider="anthropic", api="anthropic-messages", max_output_tokens=64_000)
SEARCH = {"type": "server_tool_use", "id": hs.PAUSED_SEARCH_ID, "name": "web_search", "input": {"query": "ketch releases"}}


def anthropic(server: LoopbackServer) -> AnthropicModel:
    return AnthropicModel(
        "claude-sonnet-4-5", base_url=server.url + "/v1", api_key="k", retry=RetryPolicy(max_attempts=1), info=SONNET
    )


def shape(event: Any) -> str:
    if event.type == "message_update":
        inner = event.event
        return f"update:{inner.type}" + (f":{type(inner.block).__name__}" if inner.type == "hosted_tool" else "")
    if event.type in ("message_start", "message_end"):
        return f"{event.type}:{event.message.role}"
    return str(event.type)


def native_blocks(stream: bytes) -> list[dict[str, Any]]:
    out = []
    for line in stream.split(b"\n"):
        if line.startswith(b"data: ") and b'"content_block_start"' in line:
            out.append(msgspec.json.decode(line[6:])["content_block"])
    return out


@pytest.mark.parametrize("capability", [WebSearch(), HostedTools("web_search")], ids=["WebSearch", "HostedTools"])
async def test_a_paused_turn_is_sent_back_as_it_is_and_the_model_continues(
    loopback: LoopbackServer, capability: Any
) -> None:
    loopback.queue(sse(hs.ANTHROPIC_PAUSED), sse(hs.ANTHROPIC_RESUMED))
    agent = Agent(anthropic(loopback), system_prompt="Help.", capabilities=[capability])
    events = [shape(e) async for e in agent.stream("What is the latest ketch release?")]
    assert events == [
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "update:text_start",
        "update:text_delta",
        "update:text_end",
        "update:hosted_tool:HostedToolCall",
        "update:hosted_tool:HostedToolResult",
        "message_end:assistant",
        "turn_end",
        "turn_start",
        "message_start:assistant",
        "update:text_start",
        "update:text_delta",
        "update:text_end",
        "message_end:assistant",
        "turn_end",
        "agent_end",
    ]
    first, second = loopback.requests
    assert len(loopback.requests) == 2
    question = {"type": "text", "text": "What is the latest ketch release?"}
    marker = {"cache_control": {"type": "ephemeral"}}  # (on the freshest message's last block)
    assert first.json["messages"] == [{"role": "user", "content": [{**question, **marker}]}]
    # the paused response goes back unchanged, last, with no user message after it; the tools are the same
    assert second.json["messages"] == [
        {"role": "user", "content": [question]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me research that."},
                SEARCH,
                {**native_blocks(hs.ANTHROPIC_PAUSED)[2], **marker},
            ],
        },
    ]
    assert second.json["tools"] == first.json["tools"] == [{"type": "web_search_20250305", "name": "web_search"}]

    user, paused, answer = agent.messages
    assert isinstance(user, UserMessage) and isinstance(paused, AssistantMessage) and isinstance(answer, AssistantMessage)
    assert paused.stop_reason == "pause"
    assert paused.content == [
        TextContent(text="Let me research that."),
        HostedToolCall(id=hs.PAUSED_SEARCH_ID, kind="web_search", name="web_search", input={"query": "ketch releases"}, native=SEARCH),
        HostedToolResult(
            call_id=hs.PAUSED_SEARCH_ID,
            kind="web_search",
            output="ketch releases <https://example.com/ketch/releases>",
            citations=[Citation(url="https://example.com/ketch/releases", title="ketch releases")],
            native=native_blocks(hs.ANTHROPIC_PAUSED)[2],
        ),
    ]
    assert answer.stop_reason == "stop"
    assert answer.content == [TextContent(text="ketch 1.0 was released in May 2025.")]


async def test_without_a_hosted_tools_capability_a_paused_turn_ends_the_run(loopback: LoopbackServer) -> None:
    loopback.queue(sse(hs.ANTHROPIC_PAUSED))
    agent = Agent(anthropic(loopback))
    result = await agent.prompt("What is the latest ketch release?")
    assert (result.end_reason, result.error) == ("stop", None)
    assert len(loopback.requests) == 1
    assert agent.messages[-1].stop_reason == "pause"  # type: ignore[attr-defined]


async def test_past_its_limit_a_paused_turn_ends_the_run_with_an_error_naming_the_limit(
    loopback: LoopbackServer,
) -> None:
    loopback.queue(sse(hs.ANTHROPIC_PAUSED), sse(hs.ANTHROPIC_PAUSED), sse(hs.ANTHROPIC_PAUSED))
    agent = Agent(anthropic(loopback), capabilities=[HostedTools("web_search", max_pause_continuations=2)])
    result = await agent.prompt("What is the latest ketch release?")
    assert len(loopback.requests) == 3
    assert result.end_reason == "error"
    assert result.error == (
        "the provider paused its turn again after 2 continuations (HostedTools max_pause_continuations=2); "
        "send another prompt to continue it"
    )
    assert [m.role for m in agent.messages] == ["user", "assistant", "assistant", "assistant"]
    assert [len(r.json["messages"]) for r in loopback.requests] == [1, 2, 3]


async def test_the_limit_counts_per_prompt() -> None:
    paused = reply("Searching.", stop_reason="pause")
    model = ScriptedModel([paused, paused, "Found it.", paused, "Found more."])
    agent = Agent(model, capabilities=[WebSearch(max_pause_continuations=2)])
    assert (await agent.prompt("one")).text == "Found it."
    assert (await agent.prompt("two")).text == "Found more."
    assert len(model.requests) == 5


def test_the_limit_must_be_a_whole_number() -> None:
    with pytest.raises(ValueError) as info:
        HostedTools("web_search", max_pause_continuations=-1)
    assert str(info.value) == "HostedTools max_pause_continuations=-1: use a whole number, 0 or more"
    with pytest.raises(ValueError) as info:
        WebSearch(max_pause_continuations=1.5)  # type: ignore[arg-type]
    assert str(info.value) == "WebSearch max_pause_continuations=1.5: use a whole number, 0 or more"


async def test_a_limit_of_zero_lets_a_paused_turn_end_the_run() -> None:
    model = ScriptedModel([reply("Searching.", stop_reason="pause"), "never sent"])
    agent = Agent(model, capabilities=[HostedTools("web_search", max_pause_continuations=0)])
    result = await agent.prompt("?")
    assert (result.end_reason, result.error, len(model.requests)) == ("stop", None, 1)


async def test_a_capability_of_ones_own_continues_paused_turns_with_continue_paused() -> None:
    from ketch.llm import HostedTool
    from ketch.loop import Capability
    from ketch.loop import continue_paused

    paused = reply("Running.", stop_reason="pause")
    model = ScriptedModel([paused, paused, "Ran it."])
    code = Capability.of("code", hosted_tools=[HostedTool(kind="code_execution")], at_stop=continue_paused(2))
    result = await Agent(model, capabilities=[code]).prompt("Run it.")
    assert (result.end_reason, result.text, len(model.requests)) == ("stop", "Ran it.", 3)
    with pytest.raises(ValueError) as info:
        continue_paused(True)
    assert str(info.value) == "continue_paused max_pause_continuations=True: use a whole number, 0 or more"
