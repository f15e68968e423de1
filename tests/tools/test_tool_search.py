"""Tool search: a large tool set sent on demand, activations kept by compaction and sessions."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ketch import Agent
from ketch import Tool
from ketch import ToolResultMessage
from ketch import UserMessage
from ketch import approve
from ketch.context import Compactor
from ketch.context import ContextSummary
from ketch.loop import NextTurn
from ketch.loop import TurnInfo
from ketch.sessions import JsonlStore
from ketch.sessions import Session
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import ToolActivations
from ketch.tools import ToolSearch

TOPICS = ["billing", "crm", "calendar", "storage", "email", "chat", "deploy", "metrics", "tickets", "docs"]
DESCRIPTION = (
    "Load tools that are not loaded yet. The deferred tools are listed by name at the end of this description; "
    "they cannot be called until this tool has loaded them. `query` is one of: exact tool names "
    "separated by commas or spaces (loads those tools); keywords, matched against tool names and "
    "descriptions (loads the best matches); or, with `regex` true, a regular expression matched "
    "case-insensitively against names and descriptions. The result lists the tools loaded with "
    "their descriptions; call them from your next step on."
)
LISTING = DESCRIPTION + "\n\nDeferred tools: "
HOW = (
    'Search by exact names from the deferred tools listed in this tool\'s description (e.g. "billing_00"), '
    "by keywords from a tool's name or description, or by a regular expression with regex true "
    '(e.g. "^bill").'
)


def _schema(*names: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {n: {"type": "string", "description": f"The {n} to use for this operation."} for n in names},
        "required": list(names),
    }


def generated() -> list[Tool]:
    """200 tools: 198 generated ones (ten topics) plus two with distinctive words."""
    tools: list[Tool] = []
    for i in range(198):
        topic, j = TOPICS[i % 10], i // 10
        tools.append(
            Tool(
                f"{topic}_{j:02d}",
                f"Operation {j} of the {topic} service: reads or changes {topic} records by id.",
                _schema("id", "account", "region"),
                lambda args, ctx, name=f"{topic}_{j:02d}": f"{name} ok",
            )
        )
    tools.insert(57, Tool(
        "weather_forecast",
        "Forecast the weather for a city.\nUses the public forecast service.",
        _schema("city"),
        lambda args, ctx: f"{args['city']}: sunny",
    ))
    tools.insert(130, Tool(
        "invoice_refund",
        "Refund an invoice to the customer's card.",
        _schema("invoice"),
        lambda args, ctx: f"refunded {args['invoice']}",
    ))
    return tools


def note_tool() -> Tool:
    return Tool("note", "Write a note.", _schema("text"), lambda args, ctx: "noted", deferred=False)


def catalogue() -> list[Tool]:
    return [note_tool(), *generated()]


def deferred_names() -> list[str]:
    return [t.name for t in generated()]


def results(agent: Agent[Any]) -> list[ToolResultMessage]:
    return [m for m in agent.messages if isinstance(m, ToolResultMessage)]


def summariser() -> FunctionModel:
    return FunctionModel(lambda request, options: "<summary>## Goal\nweather in Oslo</summary>")


def search_turn(query: str, **extra: Any) -> Any:
    return reply(tool_call("tool_search", {"query": query, **extra}))


# -- what the model is sent --------------------------------------------------------------------


async def test_the_first_request_has_the_loaded_tools_and_tool_search_only() -> None:
    model = ScriptedModel(["hello"])
    agent = Agent(model, system_prompt="Be brief.", tools=catalogue())
    search = ToolSearch()
    search.attach(agent)
    await agent.prompt("hi")

    request = model.requests[0]
    assert request.tool_names == ["note", "tool_search"]
    assert request.system_prompt == "Be brief."
    assert request.tools[1].description == LISTING + ", ".join(deferred_names())
    assert search.deferred == deferred_names() and len(search.deferred) == 200
    assert search.active == []
    assert [t.name for t in agent.tools] == [t.name for t in catalogue()]  # the agent's own are not changed
    everything = len(msgspec.json.encode([t.spec for t in catalogue()]))
    sent = len(msgspec.json.encode(request.tools))
    assert sent < everything / 10  # the definitions and the listing: a tenth of all definitions


async def test_below_the_threshold_nothing_changes() -> None:
    tools = catalogue()[:30]
    model = ScriptedModel(["hello"])
    agent = Agent(model, system_prompt="Be brief.", tools=tools)
    search = ToolSearch(threshold=30)
    search.attach(agent)
    await agent.prompt("hi")

    assert agent.tools == tools
    assert model.requests[0].tool_names == [t.name for t in tools]
    assert model.requests[0].system_prompt == "Be brief."
    assert search.deferred == [] and search.active == []


async def test_a_tool_declared_deferred_is_deferred_below_the_threshold() -> None:
    tools = catalogue()[:5]
    tools[2].deferred = True
    model = ScriptedModel(["hello"])
    agent = Agent(model, tools=tools)
    ToolSearch().attach(agent)
    await agent.prompt("hi")

    assert model.requests[0].tool_names == ["note", "billing_00", "calendar_00", "storage_00", "tool_search"]
    assert model.requests[0].tools[4].description == LISTING + "crm_00"
    assert model.requests[0].system_prompt == ""


# -- searching and activating ------------------------------------------------------------------


async def test_a_keyword_search_activates_the_tool_for_the_following_turns() -> None:
    model = ScriptedModel([
        search_turn("weather forecast"),
        reply(tool_call("weather_forecast", {"city": "Oslo"})),
        "Sunny in Oslo.",
        reply(tool_call("weather_forecast", {"city": "Bergen"})),
        "Sunny in Bergen too.",
    ])
    agent = Agent(model, tools=catalogue())
    search = ToolSearch()
    search.attach(agent)

    result = await agent.prompt("Weather in Oslo?")
    assert result.text == "Sunny in Oslo."
    assert [r.text for r in results(agent)] == [
        "Loaded 1 tool; call it from your next step on:\n- weather_forecast: Forecast the weather for a city.",
        "Oslo: sunny",
    ]
    assert [r.is_error for r in results(agent)] == [False, False]
    assert results(agent)[0].details == {"query": "weather forecast", "activated": ["weather_forecast"]}
    assert [r.tool_names for r in model.requests] == [
        ["note", "tool_search"],
        ["note", "tool_search", "weather_forecast"],
        ["note", "tool_search", "weather_forecast"],
    ]
    assert search.active == ["weather_forecast"]

    result = await agent.prompt("And Bergen?")  # the next run starts with it
    assert result.text == "Sunny in Bergen too."
    assert model.requests[3].tool_names == ["note", "tool_search", "weather_forecast"]
    assert results(agent)[-1].text == "Bergen: sunny"
    model.assert_complete()


async def test_a_regex_search_activates_every_match_up_to_the_limit() -> None:
    model = ScriptedModel([search_turn("^email_0[0-9]$", regex=True, limit=3), "ok"])
    agent = Agent(model, tools=catalogue())
    ToolSearch().attach(agent)
    await agent.prompt("mail")

    assert results(agent)[0].text == (
        "Loaded 3 tools; call them from your next step on:\n"
        "- email_00: Operation 0 of the email service: reads or changes email records by id.\n"
        "- email_01: Operation 1 of the email service: reads or changes email records by id.\n"
        "- email_02: Operation 2 of the email service: reads or changes email records by id."
    )
    assert model.requests[1].tool_names == ["note", "tool_search", "email_00", "email_01", "email_02"]


async def test_exact_names_activate_those_tools_in_the_order_given() -> None:
    model = ScriptedModel([search_turn("Docs_03, crm_11 docs_03"), "ok"])
    agent = Agent(model, tools=catalogue())
    ToolSearch().attach(agent)
    await agent.prompt("docs")

    assert model.requests[1].tool_names == ["note", "tool_search", "docs_03", "crm_11"]


def test_keywords_rank_names_above_descriptions_ties_in_the_agents_order() -> None:
    agent = Agent(ScriptedModel(), tools=catalogue())
    search = ToolSearch(max_results=4)
    search.attach(agent)

    assert [t.name for t in search.search("refund")] == ["invoice_refund"]
    assert [t.name for t in search.search("billing")] == ["billing_00", "billing_01", "billing_02", "billing_03"]
    # a whole part of a name scores 3, a piece of a name 2, a description 1: metrics_07 has
    # 3 + 1 (metrics) and 3 (07), the other metrics tools 3 + 1, the other *_07 tools 3
    assert [t.name for t in search.search("metrics 07", limit=3)] == ["metrics_07", "metrics_00", "metrics_01"]
    assert [t.name for t in search.search("etric 07", limit=3)] == ["metrics_07", "metrics_00", "metrics_01"]
    assert [t.name for t in search.search("07 zzz", limit=3)] == ["billing_07", "crm_07", "calendar_07"]
    assert [t.name for t in search.search("note")] == []  # loaded tools are not searched


async def test_a_search_without_a_match_is_an_error_that_says_how_to_search() -> None:
    model = ScriptedModel([
        search_turn("teleport"),
        search_turn("^zz", regex=True),
        search_turn("(unclosed", regex=True),
        search_turn("  "),
        "I give up.",
    ])
    agent = Agent(model, tools=catalogue())
    search = ToolSearch()
    search.attach(agent)
    await agent.prompt("teleport me")

    assert [(r.is_error, r.text) for r in results(agent)] == [
        (True, f'No deferred tool matches the keywords "teleport" in its name or description. {HOW}'),
        (True, f'No deferred tool matches the regular expression "^zz" in its name or description. {HOW}'),
        (True, f'Invalid regular expression "(unclosed": missing ), unterminated subpattern at position 0. {HOW}'),
        (True, f"tool_search needs a non-empty query. {HOW}"),
    ]
    assert {tuple(r.tool_names) for r in model.requests} == {("note", "tool_search")}
    assert search.active == []


async def test_a_run_aborted_after_the_search_leaves_the_tool_for_the_next_run() -> None:
    model = ScriptedModel([search_turn("weather"), reply(tool_call("weather_forecast", {"city": "Oslo"})), "Sunny."])
    agent = Agent(model, tools=catalogue())
    ToolSearch().attach(agent)

    def abort_after_search(event: Any) -> None:
        if event.type == "tool_execution_end" and event.tool_name == "tool_search":
            agent.abort()

    stop = agent.subscribe(abort_after_search)
    aborted = await agent.prompt("Find the weather tool.")
    stop()
    assert aborted.end_reason == "aborted"
    assert [r.text.split("\n")[0] for r in results(agent)] == ["Loaded 1 tool; call it from your next step on:"]

    result = await agent.prompt("Weather in Oslo?")
    assert result.text == "Sunny."
    assert [r.tool_names for r in model.requests] == [
        ["note", "tool_search"],
        ["note", "tool_search", "weather_forecast"],
        ["note", "tool_search", "weather_forecast"],
    ]


async def test_the_agents_own_prepare_next_turn_still_runs() -> None:
    seen: list[int] = []

    async def prepare(info: TurnInfo) -> NextTurn | None:
        seen.append(info.turn)
        return NextTurn(thinking="low")

    model = ScriptedModel([search_turn("invoice_refund"), "ok"])
    agent = Agent(model, tools=catalogue(), prepare_next_turn=prepare)
    ToolSearch().attach(agent)
    await agent.prompt("refund")

    assert seen == [1, 2]
    assert model.requests[1].tool_names == ["note", "tool_search", "invoice_refund"]
    assert model.requests[1].options.thinking == "low"


# -- compaction and sessions -------------------------------------------------------------------


async def test_activation_survives_compaction() -> None:
    model = ScriptedModel([
        search_turn("weather"),
        "Loaded.",
        "Noted.",
        reply(tool_call("weather_forecast", {"city": "Oslo"})),
        "Sunny.",
    ])
    agent = Agent(model, tools=catalogue(), context_manager=Compactor(keep_recent_tokens=1, summary_model=summariser()))
    search = ToolSearch()
    search.attach(agent)
    await agent.prompt("Load the weather tool.")
    await agent.prompt("Remember Oslo.")

    assert await agent.compact() is True
    assert [type(m) for m in agent.messages] == [ContextSummary, ToolActivations, type(agent.messages[2])]
    marker = agent.messages[1]
    assert isinstance(marker, ToolActivations) and marker.names == ["weather_forecast"]
    assert not any(isinstance(m, ToolResultMessage) for m in agent.messages)  # the search result is gone

    assert search.active == ["weather_forecast"]
    result = await agent.prompt("Weather in Oslo?")
    assert result.text == "Sunny."
    assert model.requests[3].tool_names == ["note", "tool_search", "weather_forecast"]
    assert results(agent)[-1].text == "Oslo: sunny"
    # the marker is not sent: the summary, the kept answer, the prompt
    sent = model.requests[3].messages
    assert [m.role for m in sent] == ["user", "assistant", "user"]
    assert sent[0].content[0].text == "<context-summary>\n## Goal\nweather in Oslo\n</context-summary>"  # type: ignore[union-attr,index]


async def test_activation_survives_an_automatic_compaction_inside_a_run() -> None:
    model = ScriptedModel([
        search_turn("weather"),
        "Loaded.",
        reply(tool_call("weather_forecast", {"city": "Oslo"})),
        "Sunny.",
    ])
    manager = Compactor(window=3000, reserve=1000, keep_recent_tokens=1, summary_model=summariser())
    agent = Agent(model, tools=catalogue(), context_manager=manager)
    ToolSearch().attach(agent)
    await agent.prompt("Load the weather tool.")
    result = await agent.prompt("Weather in Oslo? " + "Details follow. " * 600)  # over the threshold

    assert result.text == "Sunny."
    assert manager.summary_calls == 1
    assert [type(m) for m in agent.messages[:3]] == [ContextSummary, ToolActivations, UserMessage]
    assert model.requests[2].tool_names == ["note", "tool_search", "weather_forecast"]
    assert results(agent)[-1].text == "Oslo: sunny"


async def test_a_second_compaction_keeps_the_marker() -> None:
    model = ScriptedModel([search_turn("invoice refund"), "Loaded.", "One.", "Two."])
    agent = Agent(model, tools=catalogue(), context_manager=Compactor(keep_recent_tokens=1, summary_model=summariser()))
    search = ToolSearch()
    search.attach(agent)
    await agent.prompt("Load the refund tool.")
    assert await agent.compact() is True
    await agent.prompt("one")
    await agent.prompt("two")
    assert await agent.compact() is True

    assert [type(m) for m in agent.messages[:2]] == [ContextSummary, ToolActivations]
    assert sum(isinstance(m, ToolActivations) for m in agent.messages) == 1
    assert agent.messages[1].names == ["invoice_refund"]  # type: ignore[attr-defined]
    assert search.active == ["invoice_refund"]
    assert model.requests[-1].tool_names == ["note", "tool_search", "invoice_refund"]


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "after-compaction"])
async def test_activation_survives_closing_and_reopening_the_session(tmp_path: Path, compact: bool) -> None:
    store = JsonlStore(tmp_path / "sessions")
    session = await Session.create(store, cwd=tmp_path, checkpoints=False)
    first = ScriptedModel([search_turn("weather forecast"), "Loaded."])
    agent = Agent(
        first, tools=catalogue(), session=session,
        context_manager=Compactor(keep_recent_tokens=1, summary_model=summariser()),
    )
    ToolSearch().attach(agent)
    await agent.prompt("Load the weather tool.")
    if compact:
        assert await agent.compact() is True
    await session.close()

    reopened = await Session.open(store, session.id, checkpoints=False)
    second = ScriptedModel([reply(tool_call("weather_forecast", {"city": "Oslo"})), "Sunny."])
    resumed = Agent(second, tools=catalogue(), session=reopened)
    search = ToolSearch()
    search.attach(resumed)

    assert search.active == ["weather_forecast"]
    assert [type(m) for m in resumed.messages[:2]] == (
        [ContextSummary, ToolActivations] if compact else [UserMessage, type(resumed.messages[1])]
    )
    result = await resumed.prompt("Weather in Oslo?")
    assert result.text == "Sunny."
    assert second.requests[0].tool_names == ["note", "tool_search", "weather_forecast"]
    assert results(resumed)[-1].text == "Oslo: sunny"
    await reopened.close()


# -- attaching ---------------------------------------------------------------------------------


async def test_as_a_capability_it_defers_the_tools_other_capabilities_add() -> None:
    from ketch.loop import Capability

    model = ScriptedModel([search_turn("weather"), reply(tool_call("weather_forecast", {"city": "Oslo"})), "Sunny."])
    servers = Capability.of("servers", tools=generated())  # e.g. an MCP server's 200 tools
    agent = Agent(model, tools=[note_tool()], capabilities=[servers, ToolSearch()])
    result = await agent.prompt("Weather in Oslo?")

    assert result.text == "Sunny."
    assert [r.tool_names for r in model.requests] == [
        ["note", "tool_search"],
        ["note", "tool_search", "weather_forecast"],
        ["note", "tool_search", "weather_forecast"],
    ]
    assert model.requests[0].tools[1].description == LISTING + ", ".join(deferred_names())
    assert results(agent)[-1].text == "Oslo: sunny"
    assert [t.name for t in agent.tools] == ["note"]


async def test_a_deferred_tool_called_before_its_search_is_an_unknown_tool() -> None:
    model = ScriptedModel([reply(tool_call("weather_forecast", {"city": "Oslo"})), "ok"])
    agent = Agent(model, tools=catalogue(), capabilities=[ToolSearch()])
    await agent.prompt("Weather?")

    [result] = results(agent)
    assert (result.is_error, result.text) == (True, 'Tool "weather_forecast" not found')



def test_bad_settings_and_a_second_attach_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^ToolSearch threshold must be an integer >= 0, got -1$"):
        ToolSearch(threshold=-1)
    with pytest.raises(ValueError, match=r"^ToolSearch max_results must be an integer from 1 to 50, got 0$"):
        ToolSearch(max_results=0)
    search = ToolSearch()
    search.attach(Agent(ScriptedModel(), tools=catalogue()))
    with pytest.raises(RuntimeError, match=r"^This ToolSearch is already attached to an agent; make one per agent$"):
        search.attach(Agent(ScriptedModel(), tools=catalogue()))
    clash = Tool("tool_search", "mine")
    with pytest.raises(ValueError, match=r"^The agent already has a tool named 'tool_search'; ToolSearch adds its own$"):
        ToolSearch().attach(Agent(ScriptedModel(), tools=[clash]))


async def test_a_session_with_activations_opens_in_a_process_that_never_imported_tool_search(
    tmp_path: Path,
) -> None:
    store = JsonlStore(tmp_path / "sessions")
    session = await Session.create(store, cwd=tmp_path, checkpoints=False)
    agent = Agent(
        ScriptedModel([search_turn("weather"), "Loaded."]), tools=catalogue(), session=session,
        context_manager=Compactor(keep_recent_tokens=1, summary_model=summariser()),
    )
    ToolSearch().attach(agent)
    await agent.prompt("Load the weather tool.")
    assert await agent.compact() is True
    await session.close()

    script = (
        "import asyncio, sys\n"
        "from ketch.sessions import JsonlStore, Session\n"
        "async def main():\n"
        "    s = await Session.open(JsonlStore(sys.argv[1]), sys.argv[2])\n"
        "    print([m.role for m in s.messages], s.messages[1].names)\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(tmp_path / "sessions"), session.id,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert (process.returncode, err.decode()) == (0, "")
    assert out.decode() == "['context_summary', 'tool_activations', 'assistant'] ['weather_forecast']\n"


# -- a run paused for approval -----------------------------------------------------------------


def refund_needs_approval() -> list[Tool]:
    tools = catalogue()
    for t in tools:
        if t.name == "invoice_refund":
            t.requires_approval = True
    return tools


async def test_a_run_paused_on_an_activated_tool_resumes_from_the_session(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "sessions")
    session = await Session.create(store, cwd=tmp_path, checkpoints=False)
    first = ScriptedModel([search_turn("invoice_refund"), reply(tool_call("invoice_refund", {"invoice": "A-1"}, id="r1"))])
    agent = Agent(first, tools=refund_needs_approval(), session=session)
    ToolSearch().attach(agent)
    paused = await agent.prompt("Refund A-1.")
    assert paused.end_reason == "approval_required"
    await session.close()

    reopened = await Session.open(store, session.id, checkpoints=False)
    assert reopened.pending_state is not None
    second = ScriptedModel(["Refunded."])
    resumed = Agent(second, tools=refund_needs_approval(), session=reopened)
    ToolSearch().attach(resumed)
    result = await resumed.resume(reopened.pending_state, decisions={"r1": approve()})
    assert result.text == "Refunded."
    assert results(resumed)[-1].text == "refunded A-1"
    assert second.requests[0].tool_names == ["note", "tool_search", "invoice_refund"]
    await reopened.close()


async def test_a_search_in_a_paused_batch_activates_once_the_run_resumes(tmp_path: Path) -> None:
    def tools() -> list[Tool]:
        out = catalogue()
        out[0].requires_approval = True  # note, always loaded
        return out

    store = JsonlStore(tmp_path / "sessions")
    session = await Session.create(store, cwd=tmp_path, checkpoints=False)
    first = ScriptedModel([
        reply(tool_call("tool_search", {"query": "weather"}, id="s1"), tool_call("note", {"text": "x"}, id="n1")),
    ])
    agent = Agent(first, tools=tools(), session=session)
    search = ToolSearch()
    search.attach(agent)
    paused = await agent.prompt("Note it, then find the weather tool.")
    assert paused.end_reason == "approval_required"
    assert search.active == []  # the search's result is not committed while the run waits
    await session.close()

    reopened = await Session.open(store, session.id, checkpoints=False)
    assert reopened.pending_state is not None
    second = ScriptedModel([reply(tool_call("weather_forecast", {"city": "Oslo"})), "Sunny."])
    resumed = Agent(second, tools=tools(), session=reopened)
    again = ToolSearch()
    again.attach(resumed)
    result = await resumed.resume(reopened.pending_state, decisions={"n1": approve()})
    assert result.text == "Sunny."
    assert [r.text for r in results(resumed)][-1] == "Oslo: sunny"
    assert second.requests[0].tool_names == ["note", "tool_search", "weather_forecast"]
    assert again.active == ["weather_forecast"]
    await reopened.close()
