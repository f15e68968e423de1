"""White-box test: imports ketch implementation modules (private) directly.

ketch's HTTP adapters against a real llama.cpp ``llama-server`` (the session's managed
server, SmolLM2-135M, ``--jinja``): OpenAI Chat Completions, the Anthropic Messages route
(``/v1/messages``) and the OpenAI Responses route (``/v1/responses``). For each: streamed
text cut by the output limit (stop reason ``length``; the Responses route says
``completed`` there, ketch says ``length``), a short answer (``stop``), and an abort in
the middle of the stream, which stops the server's generation. (SmolLM2's chat template
has no tools, and with such a template this llama-server ignores ``tools`` and
``tool_choice``: the local provider's own constrained calls are tested in
``test_local_model.py``.) Assertions are about events, stop reasons and schema validity,
never about what the model writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from localhelp import decoded
from localhelp import wait_idle

from ketch.llm import AbortSignal
from ketch.llm import Model
from ketch.llm import Request
from ketch.llm import StreamDone
from ketch.llm import StreamError
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm._llama_server import ManagedServer
from ketch.llm._llama_server import ServerInfo
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel
from ketch.llm._retry import NO_RETRY

STORY = Request(messages=[UserMessage(content="Write a long story about a dragon who learns to bake bread.")])


def chat(info: ServerInfo, key: str) -> Model:
    return OpenAIChatModel("smollm2", provider="llamacpp", base_url=info.base_url + "/v1", api_key=key, retry=NO_RETRY)


def messages(info: ServerInfo, key: str) -> Model:
    return AnthropicModel("smollm2", base_url=info.base_url + "/v1", api_key=key, retry=NO_RETRY)


def responses(info: ServerInfo, key: str) -> Model:
    return OpenAIResponsesModel("smollm2", provider="llamacpp", base_url=info.base_url + "/v1", api_key=key, retry=NO_RETRY)


ROUTES: dict[str, Callable[[ServerInfo, str], Model]] = {
    "chat": chat,
    "messages": messages,
    "responses": responses,
}
API = {"chat": "openai-chat", "messages": "anthropic-messages", "responses": "openai-responses"}


@pytest.fixture(params=list(ROUTES))
def route(request: pytest.FixtureRequest, running: ServerInfo, server: ManagedServer) -> tuple[str, Model]:
    return request.param, ROUTES[request.param](running, server.api_key)


def shape(events: list[Any]) -> list[str]:
    """Event types with runs of deltas collapsed to one entry."""
    out: list[str] = []
    for event in events:
        if event.type.endswith("_delta") and out and out[-1] == event.type:
            continue
        out.append(event.type)
    return out


async def events_of(model: Model, context: Request, options: StreamOptions) -> list[Any]:
    return [event async for event in model.stream(context, options)]


async def test_streamed_text_cut_by_the_output_limit_ends_with_length(route: tuple[str, Model]) -> None:
    name, model = route
    events = await events_of(model, STORY, StreamOptions(max_tokens=8, temperature=0))
    assert shape(events) == ["start", "text_start", "text_delta", "text_end", "done"]
    done = events[-1]
    assert type(done) is StreamDone
    message = done.message
    assert (done.reason, message.stop_reason, message.api) == ("length", "length", API[name])
    assert message.text == "".join(e.delta for e in events if e.type == "text_delta") != ""
    assert message.usage.output == 8
    assert message.usage.input + message.usage.cache_read > 10


async def test_a_short_answer_ends_with_stop(route: tuple[str, Model]) -> None:
    _name, model = route
    # Greedy decoding: the answer is the same on every run (at the default temperature
    # the model sometimes rambles past any budget).
    events = await events_of(
        model, Request(messages=[UserMessage(content="Say hi.")]), StreamOptions(max_tokens=200, temperature=0)
    )
    done = events[-1]
    assert type(done) is StreamDone
    assert done.reason == "stop"
    assert 0 < done.message.usage.output < 200


async def test_abort_mid_stream_keeps_the_partial_text_and_frees_the_slot(
    route: tuple[str, Model], running: ServerInfo, server: ManagedServer
) -> None:
    _name, model = route
    before = decoded(running.base_url, server.api_key)
    signal = AbortSignal()
    events: list[Any] = []
    deltas = 0
    async for event in model.stream(STORY, StreamOptions(max_tokens=400, temperature=0, signal=signal)):
        events.append(event)
        if event.type == "text_delta":
            deltas += 1
            if deltas == 3:
                signal.abort()
    last = events[-1]
    assert type(last) is StreamError
    assert last.reason == "aborted"
    assert last.error.stop_reason == "aborted"
    assert last.error.text == "".join(e.delta for e in events if e.type == "text_delta") != ""
    assert shape(events) == ["start", "text_start", "text_delta", "error"]
    # The server stopped generating far from the 400-token budget.
    # (in a thread: the event loop must run to close the aborted connection)
    await asyncio.to_thread(wait_idle, running.base_url, server.api_key)
    assert 3 <= decoded(running.base_url, server.api_key) - before < 400


async def test_a_request_without_the_key_is_refused(running: ServerInfo) -> None:
    model = OpenAIChatModel("smollm2", provider="llamacpp", base_url=running.base_url + "/v1", retry=NO_RETRY)
    events = await events_of(model, STORY, StreamOptions(max_tokens=4))
    assert [e.type for e in events] == ["start", "error"]
    assert events[-1].error.error_kind == "auth"
