"""Documents as input: a ``DocumentContent`` (PDF, plain text) in a user message reaches
Anthropic, Gemini and OpenAI in their own formats, and a model that takes no documents
fails the request with an error saying so (nothing is sent)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from loopback import LoopbackServer
from loopback import body_reply

from ketch.llm import DocumentContent
from ketch.llm import Model
from ketch.llm import Request
from ketch.llm import RetryPolicy
from ketch.llm import TextContent
from ketch.llm import UserMessage
from ketch.llm import complete
from ketch.llm._errors import InvalidRequestError
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.local import _turns
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel

PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
PDF64 = base64.b64encode(PDF).decode()
NOTES = "Line one.\nLine two: caf\u00e9.\n"
NOTES64 = base64.b64encode(NOTES.encode()).decode()
ONE_SHOT = RetryPolicy(max_attempts=1)

MESSAGE = UserMessage(
    content=[
        TextContent(text="Summarise these."),
        DocumentContent(data=PDF64, name="report.pdf"),
        DocumentContent.from_bytes(NOTES.encode(), "text/plain"),
    ]
)


def user_content(json: dict[str, Any], adapter: str) -> Any:
    if adapter == "anthropic":
        return json["messages"][0]["content"]
    if adapter == "gemini":
        return json["contents"][0]["parts"]
    if adapter == "responses":
        return json["input"][0]["content"]
    return json["messages"][-1]["content"]


MODELS: dict[str, Callable[[str], Model]] = {
    "anthropic": lambda url: AnthropicModel("claude-sonnet-4-5", base_url=url + "/v1", api_key="k", retry=ONE_SHOT),
    "gemini": lambda url: GeminiModel("gemini-2.5-flash", base_url=url + "/v1beta", api_key="k", retry=ONE_SHOT),
    "responses": lambda url: OpenAIResponsesModel("gpt-5", base_url=url + "/v1", api_key="k", retry=ONE_SHOT),
    "chat": lambda url: OpenAIChatModel("gpt-4.1", provider="openai", base_url=url + "/v1", api_key="k", retry=ONE_SHOT),
}

EXPECTED: dict[str, list[dict[str, Any]]] = {
    "anthropic": [
        {"type": "text", "text": "Summarise these."},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64},
         "title": "report.pdf"},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": NOTES},
         "cache_control": {"type": "ephemeral"}},  # the prompt cache's marker on the last block
    ],
    "gemini": [
        {"text": "Summarise these."},
        {"inlineData": {"mimeType": "application/pdf", "data": PDF64}},
        {"inlineData": {"mimeType": "text/plain", "data": NOTES64}},
    ],
    "responses": [
        {"type": "input_text", "text": "Summarise these."},
        {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"},
        {"type": "input_file", "filename": "document.txt", "file_data": f"data:text/plain;base64,{NOTES64}"},
    ],
    "chat": [
        {"type": "text", "text": "Summarise these."},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"}},
        {"type": "file", "file": {"filename": "document.txt", "file_data": f"data:text/plain;base64,{NOTES64}"}},
    ],
}


@pytest.mark.parametrize("adapter", sorted(MODELS))
async def test_a_document_is_sent_natively(loopback: LoopbackServer, adapter: str) -> None:
    loopback.queue(body_reply(400, b'{"error": {"message": "stop here"}}'))
    message = await complete(MODELS[adapter](loopback.url), Request(messages=[MESSAGE]))
    assert message.stop_reason == "error"  # the reply is an error: the request body is what counts
    assert user_content(loopback.requests[0].json, adapter) == EXPECTED[adapter]


async def test_an_openai_compatible_provider_refuses_documents_before_sending(loopback: LoopbackServer) -> None:
    model = OpenAIChatModel("llama", provider="groq", base_url=loopback.url + "/v1", api_key="k", retry=ONE_SHOT)
    message = await complete(model, Request(messages=[MESSAGE]))
    assert (message.stop_reason, message.error_kind, message.error_message) == (
        "error",
        "invalid_request",
        "provider 'groq' does not accept documents (application/pdf 'report.pdf'); "
        "send its text as a TextContent, or use an Anthropic, Gemini or OpenAI model",
    )
    assert loopback.requests == []


def test_the_local_model_refuses_documents() -> None:
    with pytest.raises(InvalidRequestError, match=r"^the local model does not accept documents \(application/pdf "):
        _turns("", [MESSAGE])


NOTES_ONLY = UserMessage(
    content=[TextContent(text="Summarise this."), DocumentContent.from_bytes(NOTES.encode(), "text/plain", "notes.txt")]
)
NOTES_TEXT = '<document name="notes.txt">\nLine one.\nLine two: caf\u00e9.\n\n</document>'


def test_the_local_model_gets_a_plain_text_document_as_text() -> None:
    assert _turns("", [NOTES_ONLY]) == [{"role": "user", "content": "Summarise this.\n\n" + NOTES_TEXT}]


async def test_an_openai_compatible_provider_gets_a_plain_text_document_as_text(loopback: LoopbackServer) -> None:
    model = OpenAIChatModel("llama", provider="groq", base_url=loopback.url + "/v1", api_key="k", retry=ONE_SHOT)
    loopback.queue(body_reply(400, b'{"error": {"message": "stop here"}}'))
    await complete(model, Request(messages=[NOTES_ONLY]))
    assert loopback.requests[0].json["messages"][-1]["content"] == [
        {"type": "text", "text": "Summarise this."},
        {"type": "text", "text": NOTES_TEXT},
    ]


def test_a_document_of_another_type_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^DocumentContent mime_type 'image/png' is not supported; "
                                         r"allowed: application/pdf, text/plain$"):
        DocumentContent(data="x", mime_type="image/png")


def test_a_document_counts_in_the_context_estimate() -> None:
    from ketch.context import estimate_message_tokens

    text_only = UserMessage(content=[TextContent(text="Summarise these.")])
    document = DocumentContent.from_bytes(b"x" * 3999, "text/plain")  # 3999 bytes, about 1000 tokens
    with_document = UserMessage(content=[TextContent(text="Summarise these."), document])
    assert estimate_message_tokens(with_document) - estimate_message_tokens(text_only) == 1000


def tool_transcript(provider: str, api: str, model: str) -> list[Any]:
    from ketch.llm import AssistantMessage
    from ketch.llm import ToolCall
    from ketch.llm import ToolResultMessage

    call = AssistantMessage(content=[ToolCall(id="call_1", name="read", args={"path": "report.pdf"})],
                            provider=provider, api=api, model=model, stop_reason="tool_use")
    result = ToolResultMessage(tool_call_id="call_1", tool_name="read", content=[
        TextContent(text="Read document report.pdf [application/pdf, 45 B]"),
        DocumentContent(data=PDF64, name="report.pdf"),
    ])
    return [UserMessage(content="Read report.pdf"), call, result]


TOOL_SOURCES = {
    "anthropic": ("anthropic", "anthropic-messages", "claude-sonnet-4-5"),
    "gemini": ("google", "gemini", "gemini-2.5-flash"),
    "responses": ("openai", "openai-responses", "gpt-5"),
    "chat": ("openai", "openai-chat", "gpt-4.1"),
}
TOOL_EXPECTED: dict[str, Callable[[dict[str, Any]], Any]] = {
    "anthropic": lambda body: body["messages"][2]["content"][0]["content"],
    "gemini": lambda body: body["contents"][2]["parts"][1:],
    "responses": lambda body: next(i for i in body["input"] if i.get("type") == "function_call_output")["output"],
    "chat": lambda body: body["messages"][-2:],
}
TOOL_PARTS: dict[str, Any] = {
    "anthropic": [
        {"type": "text", "text": "Read document report.pdf [application/pdf, 45 B]"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64},
         "title": "report.pdf"},
    ],
    "gemini": [{"inlineData": {"mimeType": "application/pdf", "data": PDF64}}],
    "responses": [
        {"type": "input_text", "text": "Read document report.pdf [application/pdf, 45 B]"},
        {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"},
    ],
    "chat": [
        {"role": "tool", "tool_call_id": "call_1", "content": "Read document report.pdf [application/pdf, 45 B]"},
        {"role": "user", "content": [
            {"type": "text", "text": "Files returned by the tools above:"},
            {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"}},
        ]},
    ],
}


@pytest.mark.parametrize("adapter", sorted(MODELS))
async def test_a_document_from_a_tool_is_sent_natively(loopback: LoopbackServer, adapter: str) -> None:
    loopback.queue(body_reply(400, b'{"error": {"message": "stop here"}}'))
    await complete(MODELS[adapter](loopback.url), Request(messages=tool_transcript(*TOOL_SOURCES[adapter])))
    assert TOOL_EXPECTED[adapter](loopback.requests[0].json) == TOOL_PARTS[adapter]


async def test_a_pdf_from_a_tool_handed_to_a_provider_without_documents_is_refused(loopback: LoopbackServer) -> None:
    model = OpenAIChatModel("llama", provider="groq", base_url=loopback.url + "/v1", api_key="k", retry=ONE_SHOT)
    reply = await complete(model, Request(messages=tool_transcript(*TOOL_SOURCES["anthropic"])))
    assert reply.error_message == (
        "provider 'groq' does not accept documents (application/pdf 'report.pdf'); "
        "send its text as a TextContent, or use an Anthropic, Gemini or OpenAI model"
    )
    assert loopback.requests == []
