"""White-box test: imports ketch implementation modules (private) directly.

A lone surrogate (undecodable bytes Python keeps as surrogate escapes, e.g. a file name
that is not UTF-8) cannot be written as JSON: every JSON encoder of ketch writes it as
U+FFFD instead of failing, and leaves other text byte for byte as before."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from ketch.llm import AssistantMessage
from ketch.llm import Message
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.llm._messages import messages_from_json
from ketch.llm._messages import messages_to_json
from ketch.llm._messages import scrub_surrogates
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.base import HTTPModel
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel
from ketch.llm._providers.wire_cache import encode_body

BAD = "caf\udce9"  # b"caf\xe9" decoded with surrogateescape
GOOD = "caf\ufffd"


def _transcript(turns: int, args: dict[str, Any] | None = None) -> list[Message]:
    messages: list[Message] = []
    for i in range(turns):
        messages.append(UserMessage(content=[TextContent(text=f"list {BAD} {i}")], timestamp=1.0))
        messages.append(
            AssistantMessage(
                content=[TextContent(text=f"looking {BAD}"), ToolCall(id=f"c{i}", name="ls", args=args or {"path": "."})],
                provider="openai",
                api="openai-chat",
                model="gpt-4o-mini",
                stop_reason="tool_use",
                timestamp=1.0,
            )
        )
        messages.append(
            ToolResultMessage(
                tool_call_id=f"c{i}",
                tool_name="ls",
                content=[TextContent(text=f"{BAD}.txt\nplain.txt")],
                timestamp=1.0,
            )
        )
    return messages


def test_scrub_surrogates_replaces_each_lone_surrogate_in_keys_and_values() -> None:
    value = {BAD: [BAD, ("x\ud800y", 3)], "n": None, "raw": msgspec.Raw(b"1")}
    scrubbed = scrub_surrogates(value)
    assert scrubbed == {GOOD: [GOOD, ["x\ufffdy", 3]], "n": None, "raw": msgspec.Raw(b"1")}
    assert scrub_surrogates(TextContent(text=BAD)) == {"type": "text", "text": GOOD}


def test_to_json_writes_lone_surrogates_as_replacement_characters() -> None:
    messages = _transcript(2, {"path": BAD})
    data = messages_to_json(messages)
    decoded = messages_from_json(data)
    assert decoded[0].content[0].text == f"list {GOOD} 0"
    assert decoded[1].content[1].args == {"path": GOOD}
    assert decoded[2].content[0].text == f"{GOOD}.txt\nplain.txt"
    clean = scrub_surrogates(msgspec.to_builtins(messages))
    assert json.loads(data) == clean


def test_to_json_of_valid_text_is_unchanged() -> None:
    message = UserMessage(content=[TextContent(text="café ☃ \U0001f600")], timestamp=1.0)
    assert messages_to_json(message) == msgspec.json.encode(message)


def test_encode_body_writes_lone_surrogates_as_replacement_characters() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": BAD}], BAD: True}
    pieces = encode_body(body)
    assert json.loads(b"".join(bytes(p) for p in pieces)) == {
        "model": "m",
        "messages": [{"role": "user", "content": GOOD}],
        GOOD: True,
    }


MAKERS = {
    "openai-chat": lambda: OpenAIChatModel("gpt-4o-mini", api_key="k", base_url="http://127.0.0.1:9/v1"),
    "anthropic": lambda: AnthropicModel("claude-sonnet-4-5", api_key="k", base_url="http://127.0.0.1:9/v1"),
    "openai-responses": lambda: OpenAIResponsesModel("gpt-4o-mini", api_key="k", base_url="http://127.0.0.1:9/v1"),
    "gemini": lambda: GeminiModel("gemini-2.5-flash", api_key="k", base_url="http://127.0.0.1:9/v1"),
}


@pytest.mark.parametrize("api", list(MAKERS))
async def test_request_bodies_of_every_provider_carry_lone_surrogates_as_replacement_characters(api: str) -> None:
    model: HTTPModel = MAKERS[api]()
    # Long enough for the wire cache to keep the converted messages' JSON, then grown by
    # one turn so the second request reuses it.
    for turns in (4, 5):
        context = Request(system_prompt=f"Work in /home/{BAD}.", messages=_transcript(turns))
        _request, pieces, _headers, _secrets = await model._prepare(context, StreamOptions())
        data = b"".join(bytes(p) for p in pieces)
        text = data.decode("utf-8")
        json.loads(text)
        assert "\\udce9" not in text and "\udce9" not in text
        assert text.count(GOOD) >= 3 * turns


def test_token_estimates_of_tool_calls_with_lone_surrogates() -> None:
    from ketch.llm._tokens import estimate_message_tokens

    (_, assistant, _) = _transcript(1, {"path": BAD})
    clean = AssistantMessage(
        content=[TextContent(text=f"looking {GOOD}"), ToolCall(id="c0", name="ls", args={"path": GOOD})],
        provider="openai",
        api="openai-chat",
        model="gpt-4o-mini",
        stop_reason="tool_use",
        timestamp=1.0,
    )
    assert estimate_message_tokens(assistant) == estimate_message_tokens(clean)


def test_validation_messages_show_arguments_with_lone_surrogates() -> None:
    from ketch._schema import validate_arguments

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    _, problem = validate_arguments("count", schema, {"n": BAD})
    assert problem == (
        'Validation failed for tool "count":\n'
        "  - n: expected integer, got string 'caf\\udce9'\n\n"
        "Received arguments:\n{'n': 'caf\\udce9'}"
    )
    problem.encode("utf-8")  # the message itself can be sent


async def test_a_tool_returning_lone_surrogates_gives_json_with_replacement_characters() -> None:
    from ketch import Agent
    from ketch import tool
    from ketch.testing import ScriptedModel
    from ketch.testing import reply
    from ketch.testing import tool_call

    @tool
    def files() -> dict[str, list[str]]:
        """List the files."""
        return {"files": [f"{BAD}.txt", "ok.txt"]}

    agent = Agent(ScriptedModel([reply(tool_call("files", {})), "done"]), tools=[files])
    result = await agent.prompt("list")
    assert result.end_reason == "stop"
    (tool_result,) = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert tool_result.content == [TextContent(text='{"files":["caf\ufffd.txt","ok.txt"]}')]
    assert not tool_result.is_error
    json.loads(messages_to_json(agent.messages))


def test_encode_json_replaces_lone_surrogates_with_any_encoder() -> None:
    from ketch.llm import encode_json

    class Odd:
        def __str__(self) -> str:
            return "odd\udc80"

    value = {"name\udce9": ["caf\udce9", TextContent(text="x\ud800")], "other": Odd()}
    loose = msgspec.json.Encoder(enc_hook=str)
    assert encode_json(value, loose) == b'{"name\xef\xbf\xbd":["caf\xef\xbf\xbd",{"type":"text","text":"x\xef\xbf\xbd"}],"other":"odd\xef\xbf\xbd"}'
    assert encode_json({"a": "fine"}) == b'{"a":"fine"}'
    with pytest.raises(TypeError):
        encode_json({"other": Odd()})  # the plain encoder refuses what it cannot encode
