"""White-box test: imports ketch implementation modules (private) directly.

The local provider against the real SmolLM2-135M GGUF model, run by a managed
llama.cpp server (no mocks).

Generations are short (a few dozen tokens) and greedy or seeded, so they are fast and
repeatable; assertions are about the protocol, validity and accounting, never about
what the model chose to say.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from localhelp import N_CTX
from localhelp import PARALLEL
from localhelp import THREADS
from localhelp import decoded
from localhelp import wait_idle

from ketch._schema import check_arguments
from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import ImageContent
from ketch.llm import Request
from ketch.llm import StreamDone
from ketch.llm import StreamError
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import ToolSpec
from ketch.llm import UserMessage
from ketch.llm import get_model
from ketch.llm._providers.local import DEFAULT_SEED
from ketch.llm._providers.local import DEFAULT_TEMPERATURE
from ketch.llm._providers.local import LocalModel
from ketch.llm._providers.local import benchmark
from ketch.llm._providers.local import default_model_path
from ketch.llm._providers.local import load_stats
from ketch.llm._providers.local import physical_cores
from ketch.llm._providers.local import tools_section
from ketch.llm._providers.local import unload_all
from ketch.llm._providers.local_grammar import CALL_OVERHEAD_TOKENS
from ketch.llm._providers.local_grammar import bounded_string_length
from ketch.llm._providers.local_grammar import tool_call_schema
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import NextTurn
from ketch.loop import Tool
from ketch.loop import ToolResult
from ketch.loop import run_loop

WEATHER = ToolSpec(
    name="get_weather",
    description="Get the current weather for a city.",
    parameters={
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
        },
        "required": ["city", "unit"],
    },
)
TIME = ToolSpec(
    name="get_time",
    description="Get the current time in a time zone.",
    parameters={
        "type": "object",
        "properties": {"zone": {"type": "string"}, "format": {"$ref": "#/$defs/Format"}},
        "required": ["zone", "format"],
        "$defs": {"Format": {"type": "object", "properties": {"hours": {"enum": [12, 24]}}, "required": ["hours"]}},
    },
)


def ask(text: str, tools: list[ToolSpec] | None = None, system: str = "") -> Request:
    return Request(system_prompt=system, messages=[UserMessage(content=text)], tools=tools or [])


def options(**kw: Any) -> StreamOptions:
    kw.setdefault("temperature", 0.0)
    kw.setdefault("extra", {"seed": 7})
    return StreamOptions(**kw)


async def events_of(model: LocalModel, context: Request, opts: StreamOptions) -> list[Any]:
    return [event async for event in model.stream(context, opts)]


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def idle_slots(model: LocalModel) -> list[dict[str, Any]]:
    """The server's slots once none is processing (``GET /slots``; the server is polled,
    for at most a minute, as it notices a closed connection at its next token)."""
    info = model.server.ensure_blocking()
    return wait_idle(info.base_url, model.server.api_key)


def decoded_by(model: LocalModel) -> int:
    """The model server's ``llama_decode`` calls so far."""
    info = model.server.ensure_blocking()
    return decoded(info.base_url, model.server.api_key)


def assert_valid_call(call: ToolCall, tools: list[ToolSpec]) -> None:
    specs = {t.name: t for t in tools}
    assert call.name in specs
    assert call.parse_error is None
    value, issues = check_arguments(specs[call.name].parameters, call.args)
    assert issues == []
    assert value == call.args


# -- text ----------------------------------------------------------------------------


async def test_text_streams_in_protocol_order_and_stops_at_max_tokens(model: LocalModel) -> None:
    events = await events_of(model, ask("Write a long story about a dragon."), options(max_tokens=8))
    types = [e.type for e in events]
    assert types == ["start", "text_start", *["text_delta"] * (len(types) - 4), "text_end", "done"]
    deltas = "".join(e.delta for e in events if e.type == "text_delta")
    done = events[-1]
    assert type(done) is StreamDone
    message = done.message
    assert done.reason == "length"
    assert message.stop_reason == "length"
    assert deltas != ""
    assert message.content == [TextContent(text=deltas)]
    assert events[-2].content == deltas
    assert (message.provider, message.api, message.model) == ("local", "local", "smollm2")
    stats = model.last_stats
    assert stats is not None
    assert message.usage.output == 8 == stats.completion_tokens
    assert message.usage.input == stats.prompt_tokens > 0
    assert message.usage.total_tokens == message.usage.input + 8
    assert message.usage.cost.total == 0.0


async def test_short_answer_ends_with_stop(model: LocalModel) -> None:
    events = await events_of(model, ask("Say hello."), options(max_tokens=64))
    done = events[-1]
    assert type(done) is StreamDone
    assert done.reason == "stop"
    assert 0 < done.message.usage.output < 64
    assert done.message.text.strip() != ""


async def test_thinking_level_is_ignored(model: LocalModel) -> None:
    plain = await events_of(model, ask("Name a colour."), options(max_tokens=12))
    thinking = await events_of(model, ask("Name a colour."), options(max_tokens=12, thinking="high"))
    assert [e.type for e in thinking] == [e.type for e in plain]
    assert thinking[-1].message.content == plain[-1].message.content


async def test_same_seed_same_answer_when_sampling(model: LocalModel) -> None:
    opts = StreamOptions(max_tokens=16, temperature=0.9, extra={"seed": 1234})
    first = await events_of(model, ask("Tell me about cats."), opts)
    second = await events_of(model, ask("Tell me about cats."), opts)
    assert first[-1].message.text == second[-1].message.text != ""


# -- tool calls ----------------------------------------------------------------------


async def test_forced_tool_call_is_schema_valid(model: LocalModel) -> None:
    tools = [WEATHER, TIME]
    events = await events_of(
        model, ask("What is the weather in Paris?", tools), options(max_tokens=64, tool_choice="get_weather")
    )
    types = [e.type for e in events]
    assert types == ["start", "toolcall_start", *["toolcall_delta"] * (len(types) - 4), "toolcall_end", "done"]
    done = events[-1]
    assert type(done) is StreamDone
    assert done.reason == "tool_use"
    message = done.message
    assert message.stop_reason == "tool_use"
    [call] = message.content
    assert type(call) is ToolCall
    assert call.name == "get_weather"
    assert call.id.startswith("call_")
    assert_valid_call(call, tools)
    streamed = "".join(e.delta for e in events if e.type == "toolcall_delta")
    assert msgspec.json.decode(streamed) == call.args
    assert events[-2].tool_call == call
    assert message.usage.output > 0


async def test_required_tool_call_picks_a_declared_tool(model: LocalModel) -> None:
    tools = [TIME, WEATHER]
    events = await events_of(
        model, ask("What time is it in Tokyo?", tools), options(max_tokens=64, tool_choice="required")
    )
    done = events[-1]
    assert type(done) is StreamDone
    assert done.reason == "tool_use"
    [call] = done.message.tool_calls
    assert_valid_call(call, tools)


async def test_auto_gives_text_or_one_valid_call(model: LocalModel) -> None:
    tools = [WEATHER]
    for seed in (1, 2):
        events = await events_of(
            model,
            ask("What is the weather in Berlin in celsius?", tools),
            StreamOptions(max_tokens=24, temperature=0.8, extra={"seed": seed}),
        )
        done = events[-1]
        assert type(done) is StreamDone
        calls = done.message.tool_calls
        if calls:
            assert len(calls) == 1
            assert done.reason == "tool_use"
            assert done.message.text == ""
            assert_valid_call(calls[0], tools)
        else:
            assert done.reason in ("stop", "length")
            assert done.message.text.strip() != ""


async def test_tool_choice_none_answers_in_text(model: LocalModel) -> None:
    events = await events_of(
        model, ask("What is the weather in Rome?", [WEATHER]), options(max_tokens=16, tool_choice="none")
    )
    done = events[-1]
    assert type(done) is StreamDone
    assert done.message.tool_calls == []
    assert done.message.text != ""


async def test_forcing_an_unknown_tool_is_an_error_event(model: LocalModel) -> None:
    events = await events_of(model, ask("Hi", [WEATHER]), options(tool_choice="nope"))
    assert [e.type for e in events] == ["start", "error"]
    error = events[-1].error
    assert error.error_message == "tool_choice names an unknown tool: 'nope'"
    assert error.error_kind == "invalid_request"


async def test_call_cut_by_max_tokens_ends_with_length(model: LocalModel) -> None:
    events = await events_of(
        model, ask("Weather in Oslo?", [WEATHER]), options(max_tokens=10, tool_choice="get_weather")
    )
    done = events[-1]
    assert type(done) is StreamDone
    assert done.reason == "length"
    assert done.message.usage.output == 10
    [call] = done.message.tool_calls
    assert call.name == "get_weather"


async def test_response_format_gives_schema_valid_json(model: LocalModel) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    events = await events_of(
        model,
        ask("Invent a person."),
        options(max_tokens=48, response_format={"name": "person", "schema": schema}),
    )
    done = events[-1]
    assert type(done) is StreamDone
    assert done.reason == "stop"
    value = msgspec.json.decode(done.message.text)
    _, issues = check_arguments(schema, value)
    assert issues == []


async def test_transcript_with_calls_results_and_images(model: LocalModel) -> None:
    call = ToolCall(id="call_1", name="get_weather", args={"city": "Paris", "unit": "celsius"})
    context = Request(
        system_prompt="Answer briefly.",
        messages=[
            UserMessage(
                content=[TextContent(text="What is the weather in Paris? "), ImageContent(url="https://x/y.png")]
            ),
            AssistantMessage(content=[call], provider="local", api="local", model="smollm2", stop_reason="tool_use"),
            ToolResultMessage(tool_call_id="call_1", tool_name="get_weather", content=[TextContent(text="Sunny, 21 C")]),
        ],
        tools=[WEATHER],
    )
    events = await events_of(model, context, options(max_tokens=24, tool_choice="none"))
    done = events[-1]
    assert type(done) is StreamDone
    assert done.message.text != ""
    assert done.message.usage.input > 0


# -- cancellation --------------------------------------------------------------------


async def test_abort_mid_generation_keeps_partial_text_and_stops_the_server(model: LocalModel) -> None:
    before = decoded_by(model)
    signal = AbortSignal()
    seen: list[str] = []
    events: list[Any] = []
    async for event in model.stream(ask("Count from 1 to 300."), options(max_tokens=300, signal=signal)):
        events.append(event)
        if event.type == "text_delta":
            seen.append(event.delta)
            if len(seen) == 3:
                signal.abort()
    last = events[-1]
    assert type(last) is StreamError
    assert last.reason == "aborted"
    message = last.error
    assert message.stop_reason == "aborted"
    assert message.error_message == "Request was aborted"
    assert message.text == "".join(seen)
    assert [e.type for e in events] == ["start", "text_start", "text_delta", "text_delta", "text_delta", "error"]
    assert 3 <= message.usage.output < 300
    # The server stopped generating at the abort, far from the token budget.
    await asyncio.to_thread(idle_slots, model)
    assert decoded_by(model) - before < 300


async def test_cancelling_the_consumer_stops_the_generation(model: LocalModel, no_leaked_tasks: None) -> None:
    before = decoded_by(model)
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in model.stream(ask("Count from 1 to 300."), options(max_tokens=300)):
            if event.type == "text_delta":
                first_delta.set()

    task = asyncio.create_task(consume())
    waiter = asyncio.create_task(first_delta.wait())
    # A stream that ends without any text (an error event) must fail the test, not hang it.
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not first_delta.is_set():
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await task
        pytest.fail("the stream ended before its first text delta")
    await waiter
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.to_thread(idle_slots, model)
    assert 0 < decoded_by(model) - before < 300


async def test_abort_before_start(model: LocalModel) -> None:
    signal = AbortSignal()
    signal.abort()
    events = await events_of(model, ask("Hi"), options(signal=signal))
    assert [e.type for e in events] == ["start", "error"]
    assert events[-1].reason == "aborted"


async def test_concurrent_streams_share_the_model_and_run_together(model: LocalModel) -> None:
    pid = model.server.ensure_blocking().pid
    first, second = await asyncio.gather(
        events_of(model, ask("Name a fruit."), options(max_tokens=8)),
        events_of(
            LocalModel("smollm2", n_ctx=N_CTX, parallel=PARALLEL, n_threads=THREADS),
            ask("Name a river."),
            options(max_tokens=8),
        ),
    )
    assert first[-1].type == second[-1].type == "done"
    assert first[-1].message.text != "" and second[-1].message.text != ""
    assert model.server.ensure_blocking().pid == pid  # one server, one loaded model


# -- loading -------------------------------------------------------------------------


async def test_models_naming_one_file_share_one_load(model: LocalModel) -> None:
    stats = await model.load()
    before = load_stats()
    other = LocalModel("default", n_ctx=N_CTX, parallel=PARALLEL, n_threads=THREADS)
    assert other.server is model.server
    assert await other.load() is stats
    assert load_stats() == before
    assert stats.path == default_model_path()
    assert stats.path.endswith(".gguf")
    assert (stats.n_ctx, stats.parallel, stats.engine) == (N_CTX, PARALLEL, "llama-server")
    assert stats.seconds > 0
    assert stats.pid == model.server.ensure_blocking().pid
    # Other settings are another server.
    assert LocalModel("smollm2", n_ctx=N_CTX, parallel=1, n_threads=THREADS).server is not model.server


async def test_concurrent_first_loads_load_once() -> None:
    before = len(load_stats())
    a, b = LocalModel("smollm2", n_ctx=512), LocalModel(default_model_path(), n_ctx=512)
    first, second = await asyncio.gather(a.load(), b.load())
    assert first is second
    assert len(load_stats()) == before + 1
    assert load_stats()[-1] is first
    assert a.server.starts == 1
    assert await a.unload() is True


async def test_unload_stops_the_server_and_the_next_request_starts_it_again() -> None:
    model = LocalModel("smollm2", n_ctx=384)
    other = LocalModel(default_model_path(), n_ctx=384)  # the same file and settings
    stats = await model.load()
    assert await other.load() is stats
    assert any(s is stats for s in load_stats())
    assert await model.unload() is True
    assert not any(s is stats for s in load_stats())
    assert not process_alive(stats.pid)
    assert await model.unload() is False
    # The other model's next request starts the server again.
    events = await events_of(other, ask("Hi"), options(max_tokens=4))
    assert events[-1].type == "done"
    again = await model.load()
    assert again is not stats and any(s is again for s in load_stats())
    assert again.pid != stats.pid
    assert model.count_tokens("Hello there") > 0
    assert await model.unload() is True
    assert model.count_tokens("Hello there") > 0  # counting starts it again too
    assert await unload_all() >= 1
    assert not any(s.n_ctx == 384 for s in load_stats())


async def test_unload_waits_for_the_running_generation() -> None:
    model = LocalModel("smollm2", n_ctx=384)
    events: list[Any] = []
    unloading: asyncio.Task[bool] | None = None
    async for event in model.stream(ask("Count from 1 to 50."), options(max_tokens=24)):
        events.append(event)
        if event.type == "text_delta" and unloading is None:
            unloading = asyncio.create_task(model.unload())
    assert unloading is not None
    assert await unloading is True
    last = events[-1]
    assert last.type == "done"  # the generation ran to its end
    assert last.message.usage.output == 24 or last.message.stop_reason == "stop"
    assert not model.server.alive()
    assert not any(s.n_ctx == 384 for s in load_stats())


async def test_missing_file_is_an_error_event_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "missing.gguf"
    events = await events_of(LocalModel(str(path)), ask("Hi"), StreamOptions())
    assert [e.type for e in events] == ["start", "error"]
    error = events[-1].error
    assert error.stop_reason == "error"
    assert error.error_message == f"Local model file not found: {path}"
    assert error.error_kind == "invalid_request"


async def test_file_that_is_not_gguf_is_an_error_event(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"not a gguf file at all")
    events = await events_of(LocalModel(str(path)), ask("Hi"), StreamOptions())
    assert [e.type for e in events] == ["start", "error"]
    error = events[-1].error
    assert error.error_message is not None
    assert error.error_message.startswith(f"Could not load GGUF model {path}: ")
    assert error.error_kind == "invalid_request"


async def test_prompt_longer_than_the_window_is_a_context_overflow() -> None:
    small = LocalModel("smollm2", n_ctx=512)
    events = await events_of(small, ask("word " * 600), StreamOptions(max_tokens=4))
    assert [e.type for e in events] == ["start", "error"]
    error = events[-1].error
    assert error.error_kind == "context_overflow"
    assert error.error_message is not None
    assert error.error_message.endswith("the local model's context window is 512")
    assert small.info.context_window == 512


def test_get_model_builds_a_local_model() -> None:
    built = get_model("local:/models/x.gguf", n_ctx=1024)
    assert type(built) is LocalModel
    assert (built.provider, built.api, built.id) == ("local", "local", "/models/x.gguf")
    assert built.path == "/models/x.gguf"
    assert built.info.context_window == 1024
    assert built.info.pricing.input == built.info.pricing.output == 0.0


async def test_benchmark_reports_load_first_token_and_rate(model: LocalModel) -> None:
    result = await benchmark(model, prompt="Write a long story about a dragon.", max_tokens=16)
    assert result.load.path == default_model_path()
    run = result.generation
    assert run.completion_tokens == 16
    assert run.prompt_tokens > 0
    assert run.first_token_seconds is not None and run.first_token_seconds > 0
    assert run.tokens_per_second is not None and run.tokens_per_second > 0
    assert result.text != ""


# -- the agent loop ------------------------------------------------------------------


async def test_agent_round_trip_with_a_real_tool(model: LocalModel) -> None:
    calls: list[dict[str, Any]] = []

    async def get_weather(args: dict[str, Any], ctx: Any) -> ToolResult:
        calls.append(args)
        return ToolResult(content=f"It is sunny and 21 degrees in {args['city']}.")

    tool = Tool(
        name=WEATHER.name, description=WEATHER.description, parameters=WEATHER.parameters, execute=get_weather
    )
    context = Conversation(system_prompt="You are a weather assistant.", tools=[tool])
    config = LoopConfig(
        model=model,
        options=options(max_tokens=32, tool_choice="get_weather"),
        prepare_next_turn=lambda turn: NextTurn(tools=[]),
        length_recoveries=0,
    )
    result = await run_loop("What is the weather in Paris?", context, config).result()
    assert result.end_reason == "stop"
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant"]
    _, call_message, tool_result, answer = result.messages
    assert isinstance(call_message, AssistantMessage) and isinstance(tool_result, ToolResultMessage)
    assert isinstance(answer, AssistantMessage)
    [call] = call_message.tool_calls
    assert calls == [call.args]
    assert_valid_call(call, [WEATHER])
    assert tool_result.tool_call_id == call.id
    assert tool_result.is_error is False
    assert tool_result.text == f"It is sunny and 21 degrees in {call.args['city']}."
    assert answer.tool_calls == []
    assert answer.text != ""
    assert result.summary.turns == 2
    assert result.usage.output == call_message.usage.output + answer.usage.output


def test_count_tokens_is_exact_and_plugs_into_accounting(model: LocalModel) -> None:
    from ketch.llm import UserMessage
    from ketch.llm._tokens import context_usage
    from ketch.llm._tokens import set_token_counter

    text = "The quick brown fox jumps over the lazy dog."
    n = model.count_tokens(text)
    assert 5 <= n <= 20
    assert model.count_tokens("") == 0
    set_token_counter(model.count_tokens)
    try:
        assert context_usage([UserMessage(content=text)], 2048).tokens == n
    finally:
        set_token_counter(None)


# -- defaults: greedy, seeded, every core; bounded forced calls -----------------------


async def test_default_sampling_is_greedy_with_a_fixed_seed(model: LocalModel) -> None:
    plain = StreamOptions(max_tokens=24)  # no temperature, no seed
    first = await events_of(model, ask("Tell me about cats."), plain)
    await events_of(model, ask("Name a river."), plain)  # another prompt in between
    second = await events_of(model, ask("Tell me about cats."), plain)
    assert (DEFAULT_TEMPERATURE, DEFAULT_SEED) == (0.0, 42)
    assert first[-1].type == second[-1].type == "done"
    assert first[-1].message.text == second[-1].message.text != ""


def test_threads_default_to_every_physical_core() -> None:
    cores = physical_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    assert LocalModel("smollm2").n_threads == cores
    assert LocalModel("smollm2", n_threads=1).n_threads == 1


async def test_prompt_threads_can_be_set_apart() -> None:
    small = LocalModel("smollm2", n_ctx=256, n_threads_batch=1)
    stats = await small.load()
    assert stats.n_threads == physical_cores()
    events = await events_of(small, ask("Hi"), StreamOptions(max_tokens=2))
    assert events[-1].type == "done"
    assert await small.unload() is True


def test_forced_call_strings_are_bounded_by_the_budget() -> None:
    assert bounded_string_length([WEATHER], 160) == (160 - CALL_OVERHEAD_TOKENS) // 6
    assert bounded_string_length([WEATHER], 10_000) > 1000
    assert bounded_string_length([WEATHER], 1) == 8
    unbounded = tool_call_schema([WEATHER])["properties"]["arguments"]["properties"]["city"]
    bounded = tool_call_schema([WEATHER], token_budget=160)["properties"]["arguments"]["properties"]["city"]
    assert unbounded == {"type": "string"}
    assert bounded == {"type": "string", "maxLength": bounded_string_length([WEATHER], 160)}


def test_a_path_argument_is_never_empty_in_a_call() -> None:
    read = ToolSpec(
        name="read",
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    schema = tool_call_schema([read, WEATHER], token_budget=160)
    [of_read, of_weather] = schema["anyOf"]
    assert of_read["properties"]["name"] == {"const": "read"}
    path = of_read["properties"]["arguments"]["properties"]["path"]
    assert path["minLength"] == 1 and path["maxLength"] >= 1
    assert "minLength" not in of_weather["properties"]["arguments"]["properties"]["city"]
    assert of_read["required"] == ["name", "arguments"] and of_read["additionalProperties"] is False
    # The caller's schema is left as it was.
    assert read.parameters["properties"]["path"] == {"type": "string"}


async def test_a_forced_read_call_names_a_file(model: LocalModel) -> None:
    read = ToolSpec(
        name="read",
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    events = await events_of(
        model, ask("What does it say?", [read]), options(max_tokens=48, tool_choice="read")
    )
    [call] = events[-1].message.tool_calls
    assert call.name == "read" and isinstance(call.args["path"], str) and call.args["path"].strip() != ""


def test_the_tool_section_is_compact() -> None:
    section = tools_section([WEATHER, TIME])
    assert section.splitlines() == [
        "You can call these tools:",
        '- get_weather(city: string, unit: "celsius"|"fahrenheit", days?: integer): Get the current weather for a city.',
        "- get_time(zone: string, format): Get the current time in a time zone.",
        'To call a tool, answer with only one JSON object with the tool\'s name and arguments, like '
        '{"name":"get_weather","arguments":{}}. Otherwise answer in plain text.',
    ]


async def test_forced_call_ends_within_its_budget_whatever_the_model_writes(model: LocalModel) -> None:
    # The prompt invites copying a long name; the grammar bounds every free string, so the
    # call always closes within max_tokens (tool_use, never length).
    city = "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch, Anglesey, Wales, United Kingdom"
    events = await events_of(
        model,
        ask(f"What is the weather in {city} /very/long/path/{'x' * 80}?", [WEATHER]),
        options(max_tokens=160, tool_choice="get_weather"),
    )
    done = events[-1]
    assert type(done) is StreamDone
    assert done.reason == "tool_use"
    assert done.message.usage.output <= 160
    [call] = done.message.tool_calls
    assert_valid_call(call, [WEATHER])
    assert len(call.args["city"]) <= bounded_string_length([WEATHER], 160)


async def test_a_hosted_tool_is_refused_naming_the_kind_and_a_fallback_is_sent(model: LocalModel) -> None:
    from ketch.llm import HostedTool

    request = Request(messages=[UserMessage(content="Search the web for ketch.")], tools=[
        ToolSpec(name="web_search", description="Search the web.", parameters={"type": "object", "properties": {}}),
    ])  # fmt: skip
    refused = [e async for e in model.stream(request, StreamOptions(hosted_tools=(HostedTool(kind="web_search"),)))]
    assert [e.type for e in refused] == ["start", "error"]
    last = refused[-1]
    assert type(last) is StreamError
    assert last.error.error_message == "hosted tool 'web_search' is not supported by provider 'local' (local); supported: none"
    fallback = HostedTool(kind="web_search", fallback="web_search")  # the function tool stands in
    options = StreamOptions(hosted_tools=(fallback,), tool_choice="web_search", max_tokens=32)
    events = [e async for e in model.stream(request, options)]
    done = events[-1]
    assert type(done) is StreamDone
    assert [b.name for b in done.message.content if type(b) is ToolCall] == ["web_search"]
