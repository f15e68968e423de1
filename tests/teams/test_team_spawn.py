"""Team.spawn: a teammate derived from another agent through ketch.loop.INHERITANCE."""

from __future__ import annotations

import pytest

from ketch import Agent
from ketch.llm import StreamOptions
from ketch.loop import INHERITANCE
from ketch.loop import Tool
from ketch.loop import UsageLimits
from ketch.loop import input_guardrail
from ketch.teams import Team
from ketch.testing import ScriptedModel


def _tool(name: str) -> Tool:
    return Tool(name, name, execute=lambda args, ctx: name)


async def test_a_spawned_teammate_takes_what_the_table_says_from_its_parent() -> None:
    guard = input_guardrail(lambda check: None)
    model = ScriptedModel(["hi"])
    lead = Agent(
        model,
        system_prompt="You lead.",
        tools=[_tool("read")],
        guardrails=[guard],
        usage_limits=UsageLimits(tool_calls=4),
        max_budget_usd=1.5,
        max_turns=7,
        stop_when=[lambda info: True],
        options=StreamOptions(temperature=0.2, session_id="lead-session"),
    )
    async with Team() as team:
        team.add("manager", lead, description="runs the show")
        coder = team.spawn("coder", lead, description="writes code", max_turns=3)
        config = coder.agent.config
        assert config.model is model
        assert coder.agent.system_prompt.startswith("You lead.\n\nYou are 'coder', a member of the team 'team'.")
        assert "'manager'" not in coder.agent.system_prompt  # the parent's own team note is not copied
        assert [t.name for t in coder.agent.tools] == ["read", "send_message", "broadcast", "list_teammates"]
        assert coder.agent.messages == []
        for name, rule in INHERITANCE.items():
            if name == "max_turns":
                assert config.max_turns == 3  # given
            elif name == "options":
                assert config.options == StreamOptions(temperature=0.2)
            elif rule.rule == "inherit":
                assert getattr(config, name) == getattr(lead.config, name), name
        assert (list(config.guardrails), config.usage_limits, config.max_budget_usd) == (
            [guard], UsageLimits(tool_calls=4), 1.5
        )
        assert config.stop_when == ()


async def test_spawn_overrides_and_refuses_unknown_options() -> None:
    lead = Agent(ScriptedModel(), system_prompt="You lead.", tools=[_tool("read")])
    async with Team() as team:
        mate = team.spawn("tester", lead, system_prompt="You test.", tools=[], thinking="high")
        assert (mate.agent.system_prompt.split("\n\n")[0], mate.agent.thinking) == ("You test.", "high")
        assert [t.name for t in mate.agent.tools] == ["send_message", "broadcast", "list_teammates"]
        with pytest.raises(TypeError, match=r"^Team.spawn\(\) got an unexpected keyword argument 'max_turn' \(did you mean 'max_turns'\?\); allowed: name, parent, "):
            team.spawn("x", lead, max_turn=2)  # type: ignore[call-arg]
        assert list(team.members) == ["tester"]
