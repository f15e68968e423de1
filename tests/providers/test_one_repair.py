"""White-box test: imports ketch implementation modules (private) directly.

One transcript repair per request: the loop leaves pairing to models that prepare
their messages themselves (every built-in adapter) and does it for the others."""

from __future__ import annotations

from typing import Any

from loopback import LoopbackServer
from loopback import sse_reply

from ketch import Agent
from ketch.llm import AssistantMessage
from ketch.llm import FallbackModel
from ketch.llm import PreparesMessages
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.llm import get_model
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.local import LocalModel
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel
from ketch.testing import ScriptedModel

# A transcript whose last tool call never got a result (a crash between the call and its result).
BROKEN: list[Any] = [
    UserMessage(content="go"),
    AssistantMessage(content=[ToolCall(id="c1", name="t", args={})], stop_reason="tool_use",
                     provider="openai", api="openai-chat", model="m"),
    UserMessage(content="and now?"),
]


class Preparing(ScriptedModel):
    """A model that declares it prepares its messages (records what the loop sent)."""

    prepares_messages = True


def tool_results(messages: list[Any]) -> list[tuple[str, str]]:
    return [(m.tool_call_id, m.text) for m in messages if isinstance(m, ToolResultMessage)]


async def test_the_loop_repairs_for_a_model_that_does_not_prepare_its_messages() -> None:
    model = ScriptedModel(["ok"])
    await Agent(model, messages=list(BROKEN)).continue_loop()
    assert tool_results(model.requests[0].messages) == [("c1", "No result provided")]


async def test_the_loop_leaves_the_transcript_to_a_model_that_prepares_it() -> None:
    model = Preparing(["ok"])
    assert isinstance(model, PreparesMessages)
    await Agent(model, messages=list(BROKEN)).continue_loop()
    assert tool_results(model.requests[0].messages) == []
    assert [m.role for m in model.requests[0].messages] == ["user", "assistant", "user"]


def test_every_built_in_model_prepares_its_messages() -> None:
    for cls in (OpenAIChatModel, OpenAIResponsesModel, AnthropicModel, GeminiModel):
        model = cls("m", api_key="k")
        assert isinstance(model, PreparesMessages) and model.prepares_messages, cls
    assert LocalModel.prepares_messages is True
    assert FallbackModel([get_model("openai:gpt-5-mini"), get_model("anthropic:claude-sonnet-4-5")]).prepares_messages
    assert not FallbackModel([get_model("openai:gpt-5-mini"), ScriptedModel()]).prepares_messages


async def test_a_built_in_adapter_sends_exactly_one_synthetic_result(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(
        {"choices": [{"delta": {"content": "fine"}, "finish_reason": None}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
    ))
    model = OpenAIChatModel("m", base_url=loopback.url, api_key="k")
    await Agent(model, messages=list(BROKEN)).continue_loop()
    sent = loopback.requests[0].json["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in sent] == [
        ("user", None), ("assistant", None), ("tool", "c1"), ("user", None),
    ]
    assert [m["content"] for m in sent if m["role"] == "tool"] == ["No result provided"]
