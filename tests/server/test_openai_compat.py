"""The served agent as an OpenAI model, driven by the official ``openai`` package and by
ketch's own OpenAI adapters: /v1/models, /v1/chat/completions and /v1/responses, with
the agent's tool running on the server between two streamed answers."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import TypeAdapter
from serverhelp import TOKEN

from ketch import Agent
from ketch import tool
from ketch.llm import get_model
from ketch.testing import reply
from ketch.testing import tool_call


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"{key} = 42"


def _tool_round() -> list[Any]:
    return [reply("Looking it up.", tool_call("lookup", {"key": "answer"}, id="c1")), "The answer is 42."]


def _client(server: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0)


async def test_models_lists_the_served_agent(servers: Any) -> None:
    server = await servers(_tool_round, name="helper")
    async with _client(server) as client:
        models = await client.models.list()
    assert [(m.id, m.object, m.owned_by) for m in models.data] == [("helper", "model", "ketch")]


async def test_chat_completions_stream_an_answer_with_a_tool_round_on_the_server(servers: Any) -> None:
    server = await servers(_tool_round, tools=lambda: [lookup])
    async with _client(server) as client:
        stream = await client.chat.completions.create(
            model="ketch",
            messages=[{"role": "user", "content": "What is the answer?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Looking it up.\n\nThe answer is 42."
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl_")
    # the tool ran on the server: its result is in the session the request made
    _, listing = await server.call("GET", "/api/sessions")
    assert [s["title"] for s in listing["sessions"]] == ["What is the answer?"]
    _, state = await server.call("GET", f"/api/sessions/{listing['sessions'][0]['id']}")
    results = [m["content"][0]["text"] for m in state["messages"] if m["role"] == "tool_result"]
    assert results == ["answer = 42"]


async def test_chat_completions_without_streaming_and_the_history_sent(servers: Any) -> None:
    server = await servers(lambda: ["Paris."], tools=lambda: [lookup])
    async with _client(server) as client:
        completion = await client.chat.completions.create(
            model="ketch",
            messages=[
                {"role": "system", "content": "Answer in one word."},
                {"role": "user", "content": "Capital of Italy?"},
                {"role": "assistant", "content": "Rome."},
                {"role": "user", "content": [{"type": "text", "text": "And of France?"}]},
            ],
        )
    assert completion.object == "chat.completion" and completion.model == "ketch"
    assert [(c.message.role, c.message.content, c.finish_reason) for c in completion.choices] == [("assistant", "Paris.", "stop")]
    assert completion.usage is not None and completion.usage.total_tokens > 0
    seen = server.models[0].requests[0].messages
    assert [(m.role, m.content[0].text) for m in seen] == [
        ("user", "Answer in one word."),
        ("user", "Capital of Italy?"),
        ("assistant", "Rome."),
        ("user", "And of France?"),
    ]


async def test_bad_requests_get_openai_shaped_errors(servers: Any) -> None:
    server = await servers(_tool_round)
    async with _client(server) as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert missing.value.body == {
            "message": "The model 'gpt-4o' does not exist: this server serves 'ketch'",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
        with pytest.raises(openai.BadRequestError) as tools:
            await client.chat.completions.create(
                model="ketch",
                messages=[{"role": "user", "content": "hi"}],
                tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            )
        assert tools.value.body["message"] == "'tools': a served ketch agent runs its own tools on the server; send no tools of the client's"
        with pytest.raises(openai.BadRequestError) as last:
            await client.chat.completions.create(model="ketch", messages=[{"role": "assistant", "content": "hi"}])
        assert last.value.body["message"] == "messages: the last message must be a user message with text"
        with pytest.raises(openai.BadRequestError) as image:
            await client.chat.completions.create(
                model="ketch", messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
            )
        assert image.value.body["message"] == "messages[0].content[0]: only text parts ('text') are accepted, got 'image_url'"
    bad = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="wrong-token-0123456789", max_retries=0)
    async with bad:
        with pytest.raises(openai.AuthenticationError):
            await bad.models.list()


async def test_responses_stream_the_open_responses_events(servers: Any) -> None:
    from openai.types.responses import Response
    from openai.types.responses import ResponseStreamEvent

    server = await servers(_tool_round, tools=lambda: [lookup])
    async with _client(server) as client:
        stream = await client.responses.create(model="ketch", input="What is the answer?", stream=True)
        events = [event async for event in stream]
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed" and final.output_text == "Looking it up.The answer is 42."
    assert [[c.text for c in item.content] for item in final.output] == [["Looking it up."], ["The answer is 42."]]  # type: ignore[union-attr]
    # every event is what the specification's types accept (validated, not just read)
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    for event in events:
        adapter.validate_python(event.model_dump())
    Response.model_validate(final.model_dump())


async def test_a_response_continues_from_the_previous_one(servers: Any) -> None:
    from openai.types.responses import Response

    server = await servers(lambda: ["Rome.", "Paris."])
    async with _client(server) as client:
        first = await client.responses.create(model="ketch", input="Capital of Italy?", instructions="One word.")
        second = await client.responses.create(model="ketch", input="And of France?", previous_response_id=first.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="ketch", input="x", previous_response_id="resp_unknown")
    assert (first.output_text, second.output_text) == ("Rome.", "Paris.")
    Response.model_validate(second.model_dump())
    seen = server.models[0].requests[1].messages
    assert [(m.role, m.content[0].text) for m in seen] == [
        ("user", "One word."),
        ("user", "Capital of Italy?"),
        ("assistant", "Rome."),
        ("user", "And of France?"),
    ]
    _, listing = await server.call("GET", "/api/sessions")
    assert len(listing["sessions"]) == 1


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses"])
async def test_another_ketch_uses_the_served_agent_as_its_model(servers: Any, api: str) -> None:
    server = await servers(_tool_round, tools=lambda: [lookup])
    model = get_model("openai:ketch", api=api, base_url=f"{server.url}/v1", api_key=TOKEN)
    client = Agent(model)
    result = await client.prompt("What is the answer?")
    assert result.end_reason == "stop", result.summary.error
    assert result.text in ("Looking it up.\n\nThe answer is 42.", "Looking it up.The answer is 42.")


async def test_a_run_that_needs_approval_says_so_in_the_answer(servers: Any) -> None:
    @tool(requires_approval=True)
    def remove(path: str) -> str:
        """Remove a file.

        Args:
            path: The file.
        """
        return "removed"

    server = await servers(lambda: [reply("Removing.", tool_call("remove", {"path": "a"}, id="r1"))], tools=lambda: [remove])
    async with _client(server) as client:
        completion = await client.chat.completions.create(model="ketch", messages=[{"role": "user", "content": "remove a"}])
    _, listing = await server.call("GET", "/api/sessions")
    sid = listing["sessions"][0]["id"]
    assert completion.choices[0].message.content == (
        f"Removing.\n\n[paused: remove (r1) needs approval; decide it on the ketch page, session {sid}]"
    )
    assert listing["sessions"][0]["waiting"] is True


async def test_the_chat_stream_is_plain_sse_ending_with_done(servers: Any) -> None:
    server = await servers(lambda: ["Hi."])
    async with server.client.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "ketch", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers=server.headers(),
    ) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        body = (await response.read()).decode()
    lines = [line for line in body.split("\n") if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert [c["choices"][0]["delta"] for c in chunks] == [{"role": "assistant", "content": ""}, {"content": "Hi."}, {}]


async def test_the_model_proxy_lists_its_models_the_way_openai_clients_read_them(servers: Any) -> None:
    from ketch.server import proxy_app
    from ketch.testing import ScriptedModel

    token = "proxy-client-token-0123456789"
    proxied = proxy_app(models=["openai:gpt-5-mini", "x:y"], budgets={token: None}, resolve=lambda name: ScriptedModel())
    server = await servers(_tool_round, subapps=[("/proxy", proxied)])
    async with openai.AsyncOpenAI(base_url=f"{server.url}/proxy", api_key=token, max_retries=0) as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["openai:gpt-5-mini", "x:y"]
