"""The @tool decorator: options, schema, threads, context, conversions, results, loop use."""

import asyncio
import dataclasses
import enum
import threading
from typing import Annotated
from typing import Any

import pydantic
import pytest

from ketch.llm import AbortSignal
from ketch.llm import ImageContent
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import FunctionTool
from ketch.tools import Param
from ketch.tools import tool


def make_ctx(name: str = "t", report: Any = None) -> ToolContext:
    return ToolContext(call_id="call_1", tool_name=name, signal=AbortSignal(), report=report)


class Unit(enum.Enum):
    C = "c"
    F = "f"


@dataclasses.dataclass
class Place:
    city: str
    country: str = "NO"


class Query(pydantic.BaseModel):
    text: str
    limit: int = 10


@dataclasses.dataclass
class Forecast:
    city: str
    temps: list[float]


@tool
def forecast(place: Place, days: Annotated[int, Param("Days ahead", minimum=1)] = 1, unit: Unit = Unit.C) -> Forecast:
    """Forecast the weather.

    Args:
        place: Where.
    """
    return Forecast(city=place.city, temps=[20.0 if unit is Unit.C else 68.0] * days)


def test_bare_decorator_builds_a_tool() -> None:
    assert isinstance(forecast, FunctionTool)
    assert isinstance(forecast, Tool)
    assert forecast.name == "forecast"
    assert forecast.description == "Forecast the weather."
    assert forecast.parameters == {
        "type": "object",
        "properties": {
            "place": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "country": {"type": "string", "default": "NO"}},
                "required": ["city"],
                "additionalProperties": False,
                "description": "Where.",
            },
            "days": {"type": "integer", "description": "Days ahead", "minimum": 1, "default": 1},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
        },
        "required": ["place"],
        "additionalProperties": False,
    }
    assert forecast.spec.name == "forecast"
    assert forecast.sequential is False
    assert forecast.read_only is False
    assert forecast.interrupt == "block"
    assert forecast.timeout is None
    assert forecast.label is None


def test_decorated_tool_stays_callable_as_the_function() -> None:
    assert forecast(Place("Oslo"), 2) == Forecast(city="Oslo", temps=[20.0, 20.0])
    assert forecast.__wrapped__ is forecast.fn
    assert forecast.fn(Place("Bergen")) == Forecast(city="Bergen", temps=[20.0])


def test_decorator_options() -> None:
    def pick(args: dict[str, Any]) -> bool:
        return bool(args.get("write"))

    def reads(args: dict[str, Any]) -> bool:
        return not args.get("write")

    @tool(
        name="shell", description="Run a command.", sequential=pick, read_only=reads,
        interrupt="cancel", timeout=5.0, label="Shell", strict=True,
    )
    async def run_command(command: str, write: bool = False) -> str:
        """Docstring that the explicit description replaces."""
        return command

    assert run_command.name == "shell"
    assert run_command.description == "Run a command."
    assert run_command.interrupt == "cancel"
    assert run_command.timeout == 5.0
    assert run_command.label == "Shell"
    assert run_command.strict is True
    assert run_command.is_sequential({"command": "ls", "write": True}) is True
    assert run_command.is_sequential({"command": "ls"}) is False
    assert run_command.is_read_only({"command": "ls", "write": True}) is False
    assert run_command.is_read_only({"command": "ls"}) is True


async def test_execute_converts_arguments_and_returns_a_result() -> None:
    result = await forecast.execute({"place": {"city": "Oslo"}, "days": 2, "unit": "f"}, make_ctx())
    assert result == ToolResult(
        content=[TextContent(text='{"city":"Oslo","temps":[68.0,68.0]}')],
        details=Forecast(city="Oslo", temps=[68.0, 68.0]),
    )


async def test_sync_tool_runs_in_another_thread() -> None:
    seen: list[int] = []

    @tool
    def where() -> str:
        seen.append(threading.get_ident())
        return "ok"

    result = await where.execute({}, make_ctx())
    assert result.text == "ok"
    assert seen != [threading.get_ident()]
    assert len(seen) == 1


async def test_sync_tool_does_not_block_the_event_loop() -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()

    @tool
    def blocking() -> str:
        loop.call_soon_threadsafe(started.set)
        return "released" if release.wait(10) else "never released"

    async def releaser() -> None:
        await started.wait()
        release.set()

    result, _ = await asyncio.gather(blocking.execute({}, make_ctx()), releaser())
    assert result.text == "released"


async def test_async_tool_runs_on_the_event_loop() -> None:
    seen: list[int] = []

    @tool
    async def where() -> str:
        seen.append(threading.get_ident())
        await asyncio.sleep(0)
        return "ok"

    assert (await where.execute({}, make_ctx())).text == "ok"
    assert seen == [threading.get_ident()]


async def test_invoke_runs_a_sync_function_on_the_calling_thread_and_returns_its_value() -> None:
    seen: list[int] = []

    @tool
    def where(place: Place, ctx: ToolContext) -> Place:
        seen.append(threading.get_ident())
        return dataclasses.replace(place, country=ctx.call_id)

    assert await where.invoke({"place": {"city": "Oslo"}}, make_ctx()) == Place(city="Oslo", country="call_1")
    assert seen == [threading.get_ident()]


async def test_invoke_awaits_an_async_function() -> None:
    @tool
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return 2 * n

    assert await double.invoke({"n": 21}, make_ctx()) == 42


async def test_context_parameter_receives_the_context_and_is_hidden() -> None:
    reports: list[Any] = []

    async def report(partial: Any) -> None:
        reports.append(partial)

    @tool
    async def work(steps: int, ctx: ToolContext) -> str:
        for i in range(steps):
            await ctx.report(f"step {i}")
        return f"{ctx.tool_name}/{ctx.call_id}"

    assert work.parameters == {
        "type": "object",
        "properties": {"steps": {"type": "integer"}},
        "required": ["steps"],
        "additionalProperties": False,
    }
    result = await work.execute({"steps": 2}, make_ctx("work", report))
    assert result.text == "work/call_1"
    assert reports == ["step 0", "step 1"]


async def test_parametrised_context_annotation_receives_the_deps() -> None:
    class Deps:
        user = "ada"

    @tool
    async def whoami(greeting: str, ctx: ToolContext[Deps]) -> str:
        return f"{greeting}, {ctx.deps.user}"

    assert whoami.parameters == {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
        "additionalProperties": False,
    }
    ctx = ToolContext(call_id="call_1", tool_name="whoami", signal=AbortSignal(), deps=Deps())
    assert (await whoami.execute({"greeting": "hi"}, ctx)).text == "hi, ada"


async def test_optional_context_annotation_in_a_sync_tool() -> None:
    @tool
    def named(ctx: ToolContext | None = None) -> str:
        assert ctx is not None
        return ctx.tool_name

    assert named.parameters == {"type": "object", "properties": {}, "additionalProperties": False}
    assert (await named.execute({}, make_ctx("named"))).text == "named"


async def test_pydantic_parameter_arrives_as_a_model() -> None:
    got: list[Query] = []

    @tool
    def search(query: Query) -> list[str]:
        got.append(query)
        return [query.text] * query.limit

    result = await search.execute({"query": {"text": "x", "limit": 2}}, make_ctx())
    assert got == [Query(text="x", limit=2)]
    assert result.text == '["x","x"]'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", ToolResult(content=[TextContent(text="plain")])),
        (None, ToolResult(content=[])),
        (3, ToolResult(content=[TextContent(text="3")], details=3)),
        ({"a": [1, 2]}, ToolResult(content=[TextContent(text='{"a":[1,2]}')], details={"a": [1, 2]})),
        (Query(text="q"), ToolResult(content=[TextContent(text='{"text":"q","limit":10}')], details=Query(text="q"))),
        (
            ImageContent(data="aGk=", mime_type="image/jpeg"),
            ToolResult(content=[ImageContent(data="aGk=", mime_type="image/jpeg")]),
        ),
        (
            [TextContent(text="see"), ImageContent(url="https://example.com/a.png")],
            ToolResult(content=[TextContent(text="see"), ImageContent(url="https://example.com/a.png")]),
        ),
        (ToolResult(content="done", terminate=True), ToolResult(content=[TextContent(text="done")], terminate=True)),
    ],
)
async def test_return_values_become_tool_results(value: Any, expected: ToolResult) -> None:
    @tool
    def give() -> Any:
        return value

    @tool
    async def give_async() -> Any:
        return value

    assert await give.execute({}, make_ctx()) == expected
    assert await give_async.execute({}, make_ctx()) == expected


async def test_exceptions_from_the_function_propagate() -> None:
    @tool
    def broken() -> str:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="^disk full$"):
        await broken.execute({}, make_ctx())


async def test_missing_or_unconvertible_arguments_raise_value_errors() -> None:
    with pytest.raises(ValueError, match=r'^Missing required argument "place"$'):
        await forecast.execute({}, make_ctx())
    with pytest.raises(ValueError, match=r'^Invalid value for parameter "unit": Invalid enum value \'k\'$'):
        await forecast.execute({"place": {"city": "x"}, "unit": "k"}, make_ctx())


class Counter:
    def __init__(self, start: int) -> None:
        self.start = start

    @tool
    def add(self, n: int) -> int:
        """Add to the counter's start."""
        return self.start + n


async def test_tool_on_a_method_binds_to_the_instance() -> None:
    counter = Counter(10)
    bound = counter.add
    assert isinstance(bound, FunctionTool)
    assert bound.name == "add"
    assert bound.parameters == {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    assert (await bound.execute({"n": 5}, make_ctx())).text == "15"
    assert bound(1) == 11
    assert Counter.add is Counter.__dict__["add"]


def test_non_callable_is_rejected() -> None:
    with pytest.raises(TypeError, match=r"^@tool needs a function, got 5$"):
        FunctionTool(5)  # type: ignore[arg-type]


async def test_through_the_loop_arguments_are_validated_coerced_and_converted() -> None:
    calls: list[tuple[Place, int, Unit]] = []

    @tool
    def weather(place: Place, days: int = 1, unit: Unit = Unit.C) -> str:
        """Weather."""
        calls.append((place, days, unit))
        return f"{place.city}: {days} days"

    model = ScriptedModel(
        [
            reply(
                tool_call("weather", {"place": '{"city": "Oslo"}', "days": "3", "unit": None}, id="a"),
                tool_call("weather", {"place": {"town": "x"}, "days": "many"}, id="b"),
            ),
            "done",
        ]
    )
    result = await run_loop("go", Conversation(tools=[weather]), LoopConfig(model=model)).result()
    tool_results = [(m.tool_call_id, m.text, m.is_error) for m in result.messages if isinstance(m, ToolResultMessage)]
    assert calls == [(Place(city="Oslo"), 3, Unit.C)]
    assert tool_results == [
        ("a", "Oslo: 3 days", False),
        (
            "b",
            'Validation failed for tool "weather":\n'
            "  - place.city: missing required property\n"
            '  - days: expected integer, got string "many"\n'
            "  - place.town: unknown property\n"
            "\n"
            "Received arguments:\n"
            "{\n"
            '  "place": {\n'
            '    "town": "x"\n'
            "  },\n"
            '  "days": "many"\n'
            "}",
            True,
        ),
    ]


def test_tool_declares_approval_and_deferral() -> None:
    from ketch.tools import tool as make_tool

    @make_tool(requires_approval=lambda args: args["n"] > 1, deferred=True)
    def risky(n: int) -> int:
        "Do something risky n times."
        return n

    assert risky.deferred is True
    assert risky.needs_approval({"n": 2}) is True
    assert risky.needs_approval({"n": 1}) is False

    @make_tool
    def plain(n: int) -> int:
        "Plain."
        return n

    assert plain.deferred is None and plain.needs_approval({"n": 5}) is False
