"""Audio as input: an ``AudioContent`` in a user message reaches Gemini and OpenAI Chat
Completions in their own formats; every other model (Anthropic, the OpenAI Responses API,
another server of the Chat API, the local model) and a type OpenAI does not take fail the
request with a one-line error naming where and the recording, before anything is sent."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from loopback import LoopbackServer
from loopback import body_reply

from ketch.llm import AssistantMessage
from ketch.llm import AudioContent
from ketch.llm import Model
from ketch.llm import Request
from ketch.llm import RetryPolicy
from ketch.llm import TextContent
from ketch.llm import UserMessage
from ketch.llm import complete
from ketch.llm import messages_from_json
from ketch.llm import messages_to_json
from ketch.llm._errors import InvalidRequestError
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.local import _turns
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel

WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00"
WAV64 = base64.b64encode(WAV).decode()
ONE_SHOT = RetryPolicy(max_attempts=1)
MESSAGE = UserMessage(content=[TextContent(text="What is said here?"), AudioContent(data=WAV64, name="memo.wav")])


async def request_body(loopback: LoopbackServer, model: Model, message: UserMessage = MESSAGE) -> dict[str, Any]:
    loopback.queue(body_reply(400, b'{"error": {"message": "stop here"}}'))
    reply = await complete(model, Request(messages=[message]))
    assert reply.stop_reason == "error"  # the reply is an error: the request body is what counts
    return loopback.requests[0].json


async def test_openai_chat_gets_input_audio(loopback: LoopbackServer) -> None:
    model = OpenAIChatModel("gpt-4o-audio-preview", provider="openai", base_url=loopback.url + "/v1", api_key="k",
                            retry=ONE_SHOT)
    body = await request_body(loopback, model)
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "What is said here?"},
        {"type": "input_audio", "input_audio": {"data": WAV64, "format": "wav"}},
    ]


async def test_openai_chat_gets_mp3_as_mp3(loopback: LoopbackServer) -> None:
    model = OpenAIChatModel("gpt-4o-audio-preview", provider="openai", base_url=loopback.url + "/v1", api_key="k",
                            retry=ONE_SHOT)
    message = UserMessage(content=[AudioContent.from_bytes(b"ID3\x04", "audio/mp3")])
    body = await request_body(loopback, model, message)
    assert body["messages"][-1]["content"] == [
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"ID3\x04").decode(), "format": "mp3"}},
    ]


async def test_gemini_gets_inline_audio(loopback: LoopbackServer) -> None:
    model = GeminiModel("gemini-2.5-flash", base_url=loopback.url + "/v1beta", api_key="k", retry=ONE_SHOT)
    body = await request_body(loopback, model)
    assert body["contents"][0]["parts"] == [
        {"text": "What is said here?"},
        {"inlineData": {"mimeType": "audio/wav", "data": WAV64}},
    ]


REFUSED: dict[str, tuple[Any, str]] = {
    "anthropic": (
        lambda url: AnthropicModel("claude-sonnet-4-5", base_url=url + "/v1", api_key="k", retry=ONE_SHOT),
        "the Anthropic Messages API does not accept audio ('memo.wav'); "
        "send a transcript as a TextContent, or use a Gemini or OpenAI Chat model",
    ),
    "responses": (
        lambda url: OpenAIResponsesModel("gpt-5", base_url=url + "/v1", api_key="k", retry=ONE_SHOT),
        "the OpenAI Responses API does not accept audio ('memo.wav'); "
        "send a transcript as a TextContent, or use a Gemini or OpenAI Chat model",
    ),
    "groq": (
        lambda url: OpenAIChatModel("llama", provider="groq", base_url=url + "/v1", api_key="k", retry=ONE_SHOT),
        "provider 'groq' does not accept audio ('memo.wav'); "
        "send a transcript as a TextContent, or use a Gemini or OpenAI Chat model",
    ),
}


@pytest.mark.parametrize("where", sorted(REFUSED))
async def test_audio_is_refused_before_sending(loopback: LoopbackServer, where: str) -> None:
    make, error = REFUSED[where]
    reply = await complete(make(loopback.url), Request(messages=[MESSAGE]))
    assert (reply.stop_reason, reply.error_kind, reply.error_message) == ("error", "invalid_request", error)
    assert loopback.requests == []


async def test_openai_refuses_a_type_it_does_not_take(loopback: LoopbackServer) -> None:
    model = OpenAIChatModel("gpt-4o-audio-preview", provider="openai", base_url=loopback.url + "/v1", api_key="k",
                            retry=ONE_SHOT)
    message = UserMessage(content=[AudioContent.from_bytes(b"fLaC", "audio/flac")])
    reply = await complete(model, Request(messages=[message]))
    assert reply.error_message == (
        "OpenAI Chat Completions does not accept audio of type audio/flac ('audio.flac'); it takes audio/wav, audio/mp3"
    )
    assert loopback.requests == []


def test_the_local_model_refuses_audio() -> None:
    with pytest.raises(InvalidRequestError, match=r"^the local model does not accept audio \('memo.wav'\); "):
        _turns("", [MESSAGE])


async def test_a_transcript_with_audio_handed_to_anthropic_is_refused(loopback: LoopbackServer) -> None:
    """A handoff keeps user messages as they are: the recording a Gemini model heard makes
    the same request to Anthropic fail with the one-line error (nothing is dropped silently)."""
    answer = AssistantMessage(content=[TextContent(text="It says hello.")], provider="google", api="gemini",
                              model="gemini-2.5-flash", stop_reason="stop")
    model = AnthropicModel("claude-sonnet-4-5", base_url=loopback.url + "/v1", api_key="k", retry=ONE_SHOT)
    reply = await complete(model, Request(messages=[MESSAGE, answer, UserMessage(content="And then?")]))
    assert reply.error_message is not None and reply.error_message.startswith(
        "the Anthropic Messages API does not accept audio ('memo.wav')"
    )
    assert loopback.requests == []


def test_audio_round_trips_through_json() -> None:
    assert messages_from_json(messages_to_json([MESSAGE])) == [MESSAGE]
    assert b'"type":"audio"' in messages_to_json([MESSAGE])


def test_an_audio_of_another_type_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^AudioContent mime_type 'video/mp4' is not supported; "
                                         r"allowed: audio/wav, audio/mp3, audio/aiff, audio/aac, audio/ogg, audio/flac$"):
        AudioContent(data="x", mime_type="video/mp4")


def test_audio_counts_in_the_context_estimate() -> None:
    from ketch.context import estimate_message_tokens

    text_only = UserMessage(content=[TextContent(text="What is said here?")])
    audio = UserMessage(content=[TextContent(text="What is said here?"), AudioContent.from_bytes(b"\0" * 32_000)])
    assert estimate_message_tokens(audio) - estimate_message_tokens(text_only) == 64


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_prompt_with_audio_and_a_document_is_kept_in_the_session(kind: str, tmp_path: Any) -> None:
    from ketch import Agent
    from ketch.llm import DocumentContent
    from ketch.sessions import JsonlStore
    from ketch.sessions import Session
    from ketch.sessions import SqliteStore
    from ketch.testing import ScriptedModel

    store = JsonlStore(tmp_path / "store") if kind == "jsonl" else SqliteStore(tmp_path / "store.db")
    prompt = UserMessage(content=[*MESSAGE.content, DocumentContent.from_bytes(b"%PDF-1.4\n", name="a.pdf")])
    session = await Session.create(store, cwd=tmp_path)
    await Agent(ScriptedModel(["It says hello."]), session=session).prompt(prompt)
    await session.close()
    again = await Session.open(store, session.id)
    model = ScriptedModel(["ok"])
    await Agent(model, session=again).prompt("and?")
    await again.close()
    assert model.requests[0].messages[0].content == prompt.content
