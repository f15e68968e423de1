"""White-box test: imports ketch implementation modules (private) directly.

Provider-hosted tools: what each adapter sends for a ``HostedTool`` (or refuses, naming
the kind and the provider), recorded streams replayed by a loopback server becoming
``HostedToolCall``/``HostedToolResult`` blocks and ``hosted_tool`` events, the blocks
sent back verbatim to the provider that ran them, persisted in session JSON, and
summarised as text for a model of another provider."""

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
from ketch.llm import HostedTool
from ketch.llm import HostedToolCall
from ketch.llm import HostedToolResult
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolSpec
from ketch.llm import UserMessage
from ketch.llm import messages_from_json
from ketch.llm import messages_to_json
from ketch.llm._handoff import prepare_messages
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel
from ketch.llm._registry import ModelInfo
from ketch.llm._retry import RetryPolicy
from ketch.loop import MessageUpdate
from ketch.tools import HostedTools
from support import run
from support import trace

ONE_SHOT = RetryPolicy(max_attempts=1)
SONNET = ModelInfo(id="claude-sonnet-4-5", provider="anthropic", api="anthropic-messages", max_output_tokens=64_000)
GPT = ModelInfo(id="gpt-4.1", provider="openai", api="openai-responses", max_output_tokens=32_768)
FLASH = ModelInfo(id="gemini-2.5-flash", provider="google", api="gemini", max_output_tokens=65_536)
CHAT = ModelInfo(id="gpt-4o", provider="openai", api="openai-chat", max_output_tokens=16_384)
WEATHER = ToolSpec(name="get_weather", description="Weather.", parameters={"type": "object", "properties": {}})


def anthropic(server: LoopbackServer, id: str = "claude-sonnet-4-5") -> AnthropicModel:
    info = msgspec.structs.replace(SONNET, id=id)
    return AnthropicModel(id, base_url=server.url + "/v1", api_key="k", retry=ONE_SHOT, info=info)


def responses(server: LoopbackServer) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("gpt-4.1", base_url=server.url + "/v1", api_key="k", retry=ONE_SHOT, info=GPT)


def gemini(server: LoopbackServer) -> GeminiModel:
    return GeminiModel("gemini-2.5-flash", base_url=server.url + "/v1beta", api_key="k", retry=ONE_SHOT, info=FLASH)


def chat(server: LoopbackServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o", base_url=server.url + "/v1", api_key="k", retry=ONE_SHOT, info=CHAT)


def hosted(*kinds: str, **options: dict[str, Any]) -> StreamOptions:
    return StreamOptions(hosted_tools=tuple(HostedTool(kind=k, options=options.get(k, {})) for k in kinds))


def native_blocks(stream: bytes) -> list[dict[str, Any]]:
    """The content blocks of a recorded Anthropic stream as it started them."""
    out = []
    for line in stream.split(b"\n"):
        if line.startswith(b"data: ") and b'"content_block_start"' in line:
            out.append(msgspec.json.decode(line[6:])["content_block"])
    return out


ANTHROPIC_SEARCH_ID = "srvtoolu_014hJH82Qum7Td6UV8gDXThB"
ANTHROPIC_BASH_ID = "srvtoolu_01B3C4D5E6F7G8H9I0J1K2L3"


# -- Anthropic ------------------------------------------------------------------------------


async def test_anthropic_server_tools_through_an_agent_stream_persist_and_replay_verbatim(
    loopback: LoopbackServer,
) -> None:
    loopback.queue(sse(hs.ANTHROPIC), sse(hs.ANTHROPIC))
    agent = Agent(
        anthropic(loopback),
        system_prompt="Help.",
        capabilities=[HostedTools("web_search", "code_execution", options={"web_search": {"max_uses": 3}})],
    )
    updates = [
        (e.event.index, e.event.block)
        async for e in agent.stream("What is ketch? And 6*7?")
        if isinstance(e, MessageUpdate) and e.event.type == "hosted_tool"
    ]
    first = loopback.requests[0]
    assert first.json["tools"] == [
        {"max_uses": 3, "type": "web_search_20250305", "name": "web_search"},
        {"type": "code_execution_20250825", "name": "code_execution"},
    ]
    assert first.headers["anthropic-beta"] == "code-execution-2025-08-25"
    blocks = native_blocks(hs.ANTHROPIC)
    search_call = HostedToolCall(
        id=ANTHROPIC_SEARCH_ID,
        kind="web_search",
        name="web_search",
        input={"query": "ketch agent runtime"},
        native={"type": "server_tool_use", "id": ANTHROPIC_SEARCH_ID, "name": "web_search", "input": {"query": "ketch agent runtime"}},
    )
    search_result = HostedToolResult(
        call_id=ANTHROPIC_SEARCH_ID,
        kind="web_search",
        output="ketch: an asyncio agent runtime <https://example.com/ketch>\nAgent runtimes compared <https://example.org/runtimes>",
        citations=[
            Citation(url="https://example.com/ketch", title="ketch: an asyncio agent runtime"),
            Citation(url="https://example.org/runtimes", title="Agent runtimes compared"),
        ],
        native=blocks[2],
    )
    bash_call = HostedToolCall(
        id=ANTHROPIC_BASH_ID,
        kind="code_execution",
        name="bash_code_execution",
        input={"command": 'python -c "print(6*7)"'},
        native=blocks[3],
    )
    bash_result = HostedToolResult(call_id=ANTHROPIC_BASH_ID, kind="code_execution", output="42\n", native=blocks[4])
    assert updates == [(1, search_call), (2, search_result), (3, bash_call), (4, bash_result)]
    answer = agent.messages[-1]
    assert isinstance(answer, AssistantMessage)
    assert answer.content == [
        TextContent(text="I'll search for that."),
        search_call,
        search_result,
        bash_call,
        bash_result,
        TextContent(text="ketch is an asyncio agent runtime; 6*7 is 42."),
    ]
    # the encrypted search results survive, untouched, in session JSON
    assert messages_from_json(messages_to_json(agent.messages)) == agent.messages
    assert hs.ENCRYPTED in messages_to_json(agent.messages).decode()

    await agent.prompt("Thanks!")
    replayed = loopback.requests[1].json["messages"][1]
    assert replayed == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "I'll search for that."},
            {"type": "server_tool_use", "id": ANTHROPIC_SEARCH_ID, "name": "web_search", "input": {"query": "ketch agent runtime"}},
            blocks[2],
            blocks[3],
            blocks[4],
            {"type": "text", "text": "ketch is an asyncio agent runtime; 6*7 is 42."},
        ],
    }


async def test_anthropic_web_fetch_sends_its_beta_and_a_non_streamed_message_keeps_hosted_blocks(
    loopback: LoopbackServer,
) -> None:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_f1", "name": "web_fetch", "input": {"url": "https://example.com/a"}},
            {
                "type": "web_fetch_tool_result",
                "tool_use_id": "srvtoolu_f1",
                "content": {
                    "type": "web_fetch_result",
                    "url": "https://example.com/a",
                    "content": {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Page text."}, "title": "A page"},
                    "retrieved_at": "2025-08-25T10:30:00Z",
                },
            },
            {"type": "server_tool_use", "id": "srvtoolu_f2", "name": "web_fetch", "input": {"url": "https://example.com/b"}},
            {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_f2", "content": {"type": "web_fetch_tool_error", "error_code": "url_not_accessible"}},
            {"type": "text", "text": "Done."},
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    from loopback import json_reply

    loopback.queue(json_reply(body))
    model = AnthropicModel("claude-sonnet-4-5", base_url=loopback.url + "/v1", api_key="k", retry=ONE_SHOT, info=SONNET, stream=False)
    events = await run(model, Request(system_prompt="Help.", messages=[UserMessage(content="Read a")]), hosted("web_fetch"))
    assert loopback.requests[0].json["tools"] == [{"type": "web_fetch_20250910", "name": "web_fetch"}]
    assert loopback.requests[0].headers["anthropic-beta"] == "web-fetch-2025-09-10"
    assert trace(events) == [
        ("start",),
        ("hosted_tool", 0, "HostedToolCall", "web_fetch"),
        ("hosted_tool", 1, "HostedToolResult", "web_fetch"),
        ("hosted_tool", 2, "HostedToolCall", "web_fetch"),
        ("hosted_tool", 3, "HostedToolResult", "web_fetch"),
        ("text_start", 4),
        ("text_delta", 4, "Done."),
        ("text_end", 4, "Done."),
        ("done", "stop"),
    ]
    message = events[-1].message
    ok, failed = message.content[1], message.content[3]
    assert (ok.output, ok.citations, ok.is_error, ok.native) == (
        "A page <https://example.com/a>\nPage text.",
        [Citation(url="https://example.com/a", title="A page")],
        False,
        body["content"][1],
    )
    assert (failed.output, failed.is_error) == ("error: url_not_accessible", True)


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "kind", "message"),
    [
        (anthropic, "file_search", "hosted tool 'file_search' is not supported by provider 'anthropic' (anthropic-messages); supported: web_search, web_fetch, code_execution"),
        (anthropic, "mcp", "hosted tool 'mcp' is not supported by provider 'anthropic' (anthropic-messages); supported: web_search, web_fetch, code_execution"),
        (responses, "web_fetch", "hosted tool 'web_fetch' is not supported by provider 'openai' (openai-responses); supported: web_search, file_search, code_execution, mcp"),
        (gemini, "file_search", "hosted tool 'file_search' is not supported by provider 'google' (gemini); supported: web_search, web_fetch, code_execution"),
        (chat, "web_search", "hosted tool 'web_search' is not supported by provider 'openai' (openai-chat); supported: none"),
    ],
)
async def test_a_kind_the_provider_does_not_run_is_refused_naming_kind_and_provider(
    loopback: LoopbackServer, make: Any, kind: str, message: str
) -> None:
    events = await run(make(loopback), Request(messages=[UserMessage(content="Hi")]), hosted(kind))
    assert trace(events) == [("start",), ("error", "error", "invalid_request", message)]
    assert loopback.requests == []  # refused before anything was sent


def test_an_unknown_kind_is_a_one_line_error() -> None:
    with pytest.raises(ValueError) as caught:
        HostedTool(kind="image_generation")
    assert str(caught.value) == (
        "HostedTool kind 'image_generation' is not known; allowed: web_search, web_fetch, code_execution, file_search, mcp"
    )


async def test_a_fallback_function_tool_stands_in_where_the_hosted_kind_is_not_run(loopback: LoopbackServer) -> None:
    from loopback import sse_reply

    loopback.queue(sse_reply({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}))
    search = ToolSpec(name="web_search", description="Search.", parameters={"type": "object", "properties": {}})
    options = StreamOptions(hosted_tools=(HostedTool(kind="web_search", fallback="web_search"),))
    request = Request(messages=[UserMessage(content="Hi")], tools=[WEATHER, search])
    await run(chat(loopback), request, options)
    assert [t["function"]["name"] for t in loopback.requests[0].json["tools"]] == ["get_weather", "web_search"]
    loopback.queue(sse(hs.ANTHROPIC))
    await run(anthropic(loopback), request, options)
    assert [t.get("type", "custom") + ":" + t["name"] for t in loopback.requests[1].json["tools"]] == [
        "custom:get_weather",
        "web_search_20250305:web_search",
    ]


# -- OpenAI Responses ------------------------------------------------------------------------


async def test_responses_builtin_tools_become_hosted_blocks_with_url_citations(loopback: LoopbackServer) -> None:
    loopback.queue(sse(hs.RESPONSES))
    options = hosted(
        "web_search",
        "file_search",
        "code_execution",
        "mcp",
        file_search={"vector_store_ids": ["vs_1"]},
        mcp={"server_label": "deepwiki", "server_url": "https://mcp.deepwiki.com/mcp"},
    )
    events = await run(responses(loopback), Request(messages=[UserMessage(content="What is ketch?")], tools=[WEATHER]), options)
    assert loopback.requests[0].json["tools"][1:] == [
        {"type": "web_search"},
        {"vector_store_ids": ["vs_1"], "type": "file_search"},
        {"container": {"type": "auto"}, "type": "code_interpreter"},
        {"require_approval": "never", "server_label": "deepwiki", "server_url": "https://mcp.deepwiki.com/mcp", "type": "mcp"},
    ]
    assert trace(events) == [
        ("start",),
        ("hosted_tool", 0, "HostedToolCall", "web_search"),
        ("hosted_tool", 1, "HostedToolResult", "web_search"),
        ("hosted_tool", 2, "HostedToolCall", "code_execution"),
        ("hosted_tool", 3, "HostedToolResult", "code_execution"),
        ("text_start", 4),
        ("text_delta", 4, "ketch is an agent runtime (example.com). 42."),
        ("text_end", 4, "ketch is an agent runtime (example.com). 42."),
        ("done", "stop"),
    ]
    content = events[-1].message.content
    ws_id = "ws_67ccf18f64008190a39b619f4c8455ef087bb177ab789d5c"
    assert content[0] == HostedToolCall(
        id=ws_id,
        kind="web_search",
        name="web_search_call",
        input={"type": "search", "query": "ketch agent runtime"},
        native={
            "type": "web_search_call",
            "id": ws_id,
            "status": "completed",
            "action": {"type": "search", "query": "ketch agent runtime", "sources": [{"type": "url", "url": "https://example.com/ketch"}]},
        },
    )
    assert content[1] == HostedToolResult(
        call_id=ws_id,
        kind="web_search",
        output="searched: ketch agent runtime",
        citations=[Citation(url="https://example.com/ketch")],  # the annotation adds no new URL
    )
    assert (content[2].input, content[3].output) == ({"code": "print(6*7)"}, "42\n")

    # replayed: the hosted items verbatim, in order, before the answer
    loopback.queue(sse(hs.RESPONSES))
    history = [UserMessage(content="What is ketch?"), events[-1].message, UserMessage(content="More?")]
    await run(responses(loopback), Request(messages=history), StreamOptions())
    items = loopback.requests[1].json["input"]
    assert [i.get("type", i.get("role")) for i in items] == ["user", "web_search_call", "code_interpreter_call", "message", "user"]
    assert items[1] == content[0].native and items[2] == content[2].native


async def test_responses_url_citations_join_the_search_result(loopback: LoopbackServer) -> None:
    stream = hs.RESPONSES.replace(b'"sources":[{"type":"url","url":"https://example.com/ketch"}]', b'"sources":[]')
    loopback.queue(sse(stream))
    events = await run(responses(loopback), Request(messages=[UserMessage(content="?")]), hosted("web_search"))
    assert events[-1].message.content[1].citations == [
        Citation(url="https://example.com/ketch", title="ketch: an asyncio agent runtime")
    ]


# -- Gemini --------------------------------------------------------------------------------


async def test_gemini_code_execution_and_grounding_become_hosted_blocks(loopback: LoopbackServer) -> None:
    from loopback import recorded_reply

    loopback.queue(recorded_reply(hs.GEMINI, b"\r\n\r\n"))
    events = await run(gemini(loopback), Request(messages=[UserMessage(content="?")]), hosted("web_search", "code_execution", "web_fetch"))
    assert loopback.requests[0].json["tools"] == [{"google_search": {}}, {"code_execution": {}}, {"url_context": {}}]
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Let me compute."),
        ("text_end", 0, "Let me compute."),
        ("hosted_tool", 1, "HostedToolCall", "code_execution"),
        ("hosted_tool", 2, "HostedToolResult", "code_execution"),
        ("text_start", 3),
        ("text_delta", 3, "ketch is an agent runtime; 6*7 is 42."),
        ("text_end", 3, "ketch is an agent runtime; 6*7 is 42."),
        ("hosted_tool", 4, "HostedToolCall", "web_search"),
        ("hosted_tool", 5, "HostedToolResult", "web_search"),
        ("done", "stop"),
    ]
    message = events[-1].message
    assert message.content[1:3] == [
        HostedToolCall(
            id="code_execution_0",
            kind="code_execution",
            name="code_execution",
            input={"language": "PYTHON", "code": "print(6*7)\n"},
            native={"executableCode": {"language": "PYTHON", "code": "print(6*7)\n"}},
        ),
        HostedToolResult(
            call_id="code_execution_0",
            kind="code_execution",
            output="42\n",
            native={"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "42\n"}},
        ),
    ]
    assert message.content[5] == HostedToolResult(
        call_id="google_search_Ym3OaKq1Lf2Z1dkPqZ2RmQ4",
        kind="web_search",
        output="searched: ketch agent runtime",
        citations=[Citation(url="https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9wXE", title="example.com")],
    )
    # back to Gemini: the code parts verbatim, the grounding (not a part) left out
    loopback.queue(recorded_reply(hs.GEMINI, b"\r\n\r\n"))
    await run(gemini(loopback), Request(messages=[UserMessage(content="?"), message, UserMessage(content="!")]))
    assert loopback.requests[1].json["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "Let me compute."},
            {"executableCode": {"language": "PYTHON", "code": "print(6*7)\n"}},
            {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "42\n"}},
            {"text": "ketch is an agent runtime; 6*7 is 42."},
        ],
    }


# -- handoff -------------------------------------------------------------------------------


def anthropic_answer() -> AssistantMessage:
    blocks = native_blocks(hs.ANTHROPIC)
    from ketch.llm._providers.anthropic import hosted_call
    from ketch.llm._providers.anthropic import hosted_result

    return AssistantMessage(
        content=[
            TextContent(text="I'll search for that."),
            hosted_call(ANTHROPIC_SEARCH_ID, "web_search", {"query": "ketch agent runtime"}),
            hosted_result(blocks[2]),
            TextContent(text="ketch is an asyncio agent runtime."),
        ],
        provider="anthropic",
        api="anthropic-messages",
        model="claude-sonnet-4-5",
    )


SUMMARY = (
    "[web_search result]\n"
    "ketch: an asyncio agent runtime <https://example.com/ketch>\n"
    "Agent runtimes compared <https://example.org/runtimes>"
)


def test_handoff_keeps_hosted_blocks_for_the_same_provider_and_summarises_them_for_others() -> None:
    answer = anthropic_answer()
    history = [UserMessage(content="?"), answer]
    # another Claude model of the same API: the blocks pass unchanged
    [_, same] = prepare_messages(history, provider="anthropic", api="anthropic-messages", model="claude-opus-4-1")
    assert same.content == answer.content
    # another provider: the call is dropped, the result becomes text, nothing native stays
    for provider, api in (("openai", "openai-responses"), ("google", "gemini"), ("openai", "openai-chat")):
        [_, other] = prepare_messages(history, provider=provider, api=api, model="m")
        assert other.content == [
            TextContent(text="I'll search for that."),
            TextContent(text=SUMMARY),
            TextContent(text="ketch is an asyncio agent runtime."),
        ]
    assert answer.content[2].native is not None  # the input was not changed


async def test_a_handoff_request_to_another_provider_carries_the_summary_not_the_native_blocks(
    loopback: LoopbackServer,
) -> None:
    loopback.queue(sse(hs.RESPONSES), sse(hs.ANTHROPIC))
    history = [UserMessage(content="?"), anthropic_answer(), UserMessage(content="And?")]
    await run(responses(loopback), Request(messages=history))
    sent = msgspec.json.encode(loopback.requests[0].json).decode()
    assert hs.ENCRYPTED not in sent and "server_tool_use" not in sent
    assert [i["content"] for i in loopback.requests[0].json["input"] if i.get("role") == "assistant"] == [
        "I'll search for that.",
        SUMMARY,
        "ketch is an asyncio agent runtime.",
    ]
    # and a Claude model of the same API gets them back natively
    await run(anthropic(loopback, "claude-opus-4-1"), Request(messages=history))
    assert hs.ENCRYPTED in msgspec.json.encode(loopback.requests[1].json).decode()


def test_hosted_blocks_count_in_token_estimates_and_reach_a_compaction_summary() -> None:
    from ketch.context import estimate_message_tokens
    from ketch.context._summary import serialize

    answer = anthropic_answer()
    native = len(msgspec.json.encode(answer.content[1].native)) + len(msgspec.json.encode(answer.content[2].native))
    texts = len("I'll search for that.") + len("ketch is an asyncio agent runtime.")
    assert estimate_message_tokens(answer) >= (native + texts) // 4
    assert serialize([UserMessage(content="?"), answer]) == (
        "[User]: ?\n\n"
        f"[Hosted web_search]: {SUMMARY}\n\n"
        "[Assistant]: I'll search for that.ketch is an asyncio agent runtime."
    )


async def test_responses_file_search_and_mcp_items_in_a_complete_response(loopback: LoopbackServer) -> None:
    from loopback import json_reply

    output = [
        {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["refund policy"], "results": [{"file_id": "file-1", "filename": "policy.md", "score": 0.9, "text": "Refunds within 30 days."}]},
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "deepwiki", "tools": [{"name": "ask_question", "input_schema": {}}]},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "deepwiki", "name": "ask_question", "arguments": "{\"q\":\"x\"}", "output": "An answer.", "error": None},
        {"type": "mcp_call", "id": "mcp_2", "server_label": "deepwiki", "name": "ask_question", "arguments": "{}", "output": None, "error": "tool failed"},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "30 days.", "annotations": []}]},
    ]
    loopback.queue(json_reply({"id": "resp_1", "status": "completed", "output": output, "usage": {"input_tokens": 5, "output_tokens": 3}}))
    model = OpenAIResponsesModel("gpt-4.1", base_url=loopback.url + "/v1", api_key="k", retry=ONE_SHOT, info=GPT, stream=False)
    events = await run(model, Request(messages=[UserMessage(content="?")]), hosted("file_search", "mcp"))
    content = events[-1].message.content
    assert [(type(b).__name__, b.kind) for b in content[:6]] == [
        ("HostedToolCall", "file_search"),
        ("HostedToolResult", "file_search"),
        ("HostedToolCall", "mcp"),
        ("HostedToolCall", "mcp"),
        ("HostedToolResult", "mcp"),
        ("HostedToolCall", "mcp"),
    ]
    assert (content[0].input, content[1].output) == ({"queries": ["refund policy"]}, "policy.md: Refunds within 30 days.")
    assert (content[2].name, content[2].native) == ("mcp_list_tools", output[1])
    assert (content[3].input, content[4].output, content[4].is_error) == (
        {"server_label": "deepwiki", "name": "ask_question", "arguments": '{"q":"x"}'},
        "An answer.",
        False,
    )
    assert (content[6].output, content[6].is_error) == ("error: tool failed", True)
    assert content[7] == TextContent(text="30 days.", signature='{"id":"msg_1"}')


def test_anthropic_result_blocks_of_tools_ketch_does_not_map_are_skipped() -> None:
    from ketch.llm import MessageBuilder
    from ketch.llm._providers.anthropic import AnthropicStreamState

    state = AnthropicStreamState(MessageBuilder(provider="anthropic", api="anthropic-messages", model="m"))
    payloads = [
        b'{"type":"content_block_start","index":0,"content_block":{"type":"mcp_tool_result","tool_use_id":"mcptoolu_1","is_error":false,"content":[]}}',
        b'{"type":"content_block_stop","index":0}',
        b'{"type":"content_block_start","index":1,"content_block":{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_2","content":{"type":"code_execution_tool_result_error","error_code":"unavailable"}}}',
        b'{"type":"content_block_stop","index":1}',
        b'{"type":"message_stop"}',
    ]
    events = [e for p in payloads for e in state.feed(p)]
    assert trace(events) == [("hosted_tool", 0, "HostedToolResult", "code_execution"), ("done", "stop")]
    assert (events[0].block.output, events[0].block.is_error) == ("error: unavailable", True)


def test_hosted_kinds_names_what_each_api_runs() -> None:
    from ketch.llm import get_model
    from ketch.llm import hosted_kinds
    from ketch.llm import proxy
    from ketch.testing import ScriptedModel

    assert hosted_kinds(get_model("anthropic:claude-sonnet-4-5", api_key="k")) == frozenset(
        {"web_search", "web_fetch", "code_execution"}
    )
    assert hosted_kinds(get_model("openai:gpt-5-mini", api="openai-responses", api_key="k")) == frozenset(
        {"web_search", "file_search", "code_execution", "mcp"}
    )
    assert hosted_kinds(get_model("google:gemini-2.5-flash", api_key="k")) == frozenset(
        {"web_search", "web_fetch", "code_execution"}
    )
    assert hosted_kinds(get_model("openai:gpt-5-mini", api="openai-chat", api_key="k")) == frozenset()
    assert hosted_kinds(ScriptedModel([])) == frozenset()  # a model that says nothing runs none
    assert hosted_kinds(proxy("http://127.0.0.1:1", "t")) is None  # the server's provider decides
