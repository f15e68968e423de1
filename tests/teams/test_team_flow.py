"""Teams on scripted models: a three-member team finishing a task, mail to idle and
working teammates, broadcast, list_teammates, events, inspection."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from teamkit import HeldModel
from teamkit import request_user_texts
from teamkit import team_tasks
from teamkit import until_idle
from teamkit import user_texts

from ketch import Agent
from ketch import Usage
from ketch.llm import Cost
from ketch.teams import Mail
from ketch.teams import MailRead
from ketch.teams import Team
from ketch.teams import TeamEvent
from ketch.teams import TeammateEvent
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def send(to: str, text: str) -> Any:
    return tool_call("send_message", {"to": to, "text": text})


def labels(events: list[Any]) -> list[str]:
    """Team events other than the teammates' own, as short labels."""
    out: list[str] = []
    for e in events:
        if e.type == "mail_posted":
            out.append(f"posted #{e.mail.id} {e.mail.sender}->{e.path}")
        elif e.type == "mail_read":
            out.append(f"read #{e.mail.id} {e.path}")
        elif e.type == "teammate_state":
            out.append(f"{e.path} {e.state}")
        elif e.type == "teammate_failed":
            out.append(f"{e.path} failed: {e.error}")
    return out


async def test_three_teammates_exchange_messages_to_finish_a_task(no_leaked_tasks: None) -> None:
    planner = ScriptedModel(
        [
            reply(send("coder", "Write add(a, b) in calc.py.")),
            "Waiting for the review.",
            reply(send("lead", "Done: add() is written and reviewed.")),
            "Reported to the lead.",
        ]
    )
    coder = ScriptedModel([reply(send("reviewer", "Please review add() in calc.py.")), "Asked for a review."])
    reviewer = ScriptedModel([reply(send("planner", "add() looks right; approved.")), "Review sent."])
    events: list[Any] = []
    async with Team() as team:
        team.add("planner", Agent(planner, system_prompt="Plan."), description="splits the work")
        team.add("coder", Agent(coder), description="writes code")
        team.add("reviewer", Agent(reviewer), description="reviews code")
        team.subscribe(events.append)

        await team.send("planner", "Add an add() function to calc.py, reviewed.")
        replies = []
        while (mail := await team.receive()) is not None:
            replies.append(mail)

        assert [(m.id, m.sender, m.to, m.text, m.seq) for m in team.messages] == [
            (1, "lead", "planner", "Add an add() function to calc.py, reviewed.", 1),
            (2, "planner", "coder", "Write add(a, b) in calc.py.", 1),
            (3, "coder", "reviewer", "Please review add() in calc.py.", 1),
            (4, "reviewer", "planner", "add() looks right; approved.", 1),
            (5, "planner", "lead", "Done: add() is written and reviewed.", 1),
        ]
        assert replies == [team.messages[4]] == list(team.inbox)
        assert labels(events) == [
            "posted #1 lead->team/planner",
            "team/planner working",
            "read #1 team/planner",
            "posted #2 planner->team/coder",
            "team/planner idle",
            "team/coder working",
            "read #2 team/coder",
            "posted #3 coder->team/reviewer",
            "team/coder idle",
            "team/reviewer working",
            "read #3 team/reviewer",
            "posted #4 reviewer->team/planner",
            "team/reviewer idle",
            "team/planner working",
            "read #4 team/planner",
            "posted #5 planner->team/lead",
            "team/planner idle",
        ]
        assert user_texts(team["planner"].agent) == [
            "Message from lead:\nAdd an add() function to calc.py, reviewed.",
            "Message from reviewer:\nadd() looks right; approved.",
        ]
        assert user_texts(team["coder"].agent) == ["Message from planner:\nWrite add(a, b) in calc.py."]
        assert user_texts(team["reviewer"].agent) == ["Message from coder:\nPlease review add() in calc.py."]
        tool_results = [m for m in team["planner"].agent.messages if m.role == "tool_result"]
        assert [r.content[0].text for r in tool_results] == [  # type: ignore[attr-defined]
            "Message #2 sent to coder.",
            "Message #5 sent to lead.",
        ]
        assert planner.requests[0].system_prompt.startswith(
            "Plan.\n\nYou are 'planner', a member of the team 'team'."
        )
        assert planner.requests[0].tool_names == ["send_message", "broadcast", "list_teammates"]
        for model in (planner, coder, reviewer):
            model.assert_complete()
        assert {n: (m.sent, m.received, m.unread, m.runs, m.failures) for n, m in team.members.items()} == {
            "planner": (2, 2, 0, 2, 0),
            "coder": (1, 1, 0, 1, 0),
            "reviewer": (1, 1, 0, 1, 0),
        }
        assert team.is_idle and team_tasks() == []
    assert team["planner"].agent.system_prompt == "Plan."
    assert team["planner"].agent.tools == []


async def test_mail_to_a_working_teammate_is_steered_into_its_next_turn() -> None:
    model = HeldModel([reply(tool_call("list_teammates")), "Both read."])
    model.hold(1)
    async with Team() as team:
        team.add("worker", Agent(model))
        await team.send("worker", "first")
        await model.entered(1)
        assert team["worker"].state == "working"
        await team.send("worker", "second")  # the run is in its first model call
        assert [m.text for m in team["worker"].mailbox] == ["second"]
        assert team["worker"].unread == 1
        model.release(1)
        await team.wait_idle()
    assert [request_user_texts(r) for r in model.requests] == [
        ["Message from lead:\nfirst"],
        ["Message from lead:\nfirst", "Message from lead:\nsecond"],
    ]
    roles = [m.role for m in team["worker"].agent.messages]
    assert roles == ["user", "assistant", "tool_result", "user", "assistant"]
    assert (team["worker"].runs, team["worker"].received, team["worker"].unread) == (1, 2, 0)


async def test_mail_arriving_after_the_runs_last_look_starts_the_next_run() -> None:
    model = ScriptedModel(["one", "two"])
    agent = Agent(model)
    async with Team() as team:
        team.add("worker", agent)
        sent = False

        async def late(ev: Any) -> None:  # the run has stopped polling its queues here
            nonlocal sent
            if ev.type == "agent_end" and not sent:
                sent = True
                await team.send("worker", "late")

        agent.subscribe(late)
        await team.send("worker", "early")
        await team.wait_idle()
    assert [request_user_texts(r) for r in model.requests] == [
        ["Message from lead:\nearly"],
        ["Message from lead:\nearly", "Message from lead:\nlate"],
    ]
    assert (team["worker"].runs, team["worker"].received) == (2, 2)
    assert len(agent.steering) == 0
    model.assert_complete()


async def test_mail_waiting_while_idle_is_given_in_one_run() -> None:
    model = ScriptedModel(["got them"])
    async with Team() as team:
        team.add("worker", Agent(model))
        await team.send("worker", "a")
        await team.send("worker", "b")  # the driver has not started yet: both go in one prompt
        await team.wait_idle()
    assert request_user_texts(model.requests[0]) == ["Message from lead:\na", "Message from lead:\nb"]
    assert team["worker"].runs == 1


async def test_a_run_someone_else_started_is_waited_for() -> None:
    model = HeldModel(["outside", "team"])
    model.hold(1)
    agent = Agent(model)
    async with Team() as team:
        team.add("worker", agent)
        outside = asyncio.create_task(agent.prompt("my own question"))
        await model.entered(1)
        await team.send("worker", "from the team")
        assert team["worker"].state == "working" and team["worker"].unread == 1
        model.release(1)
        assert (await outside).text == "outside"
        await team.wait_idle()
    assert user_texts(agent) == ["my own question", "Message from lead:\nfrom the team"]
    assert team["worker"].runs == 1


async def test_broadcast_reaches_every_other_teammate() -> None:
    a = ScriptedModel([reply(tool_call("broadcast", {"text": "standup in 5"})), "ok"])
    b = ScriptedModel(["noted b"])
    c = ScriptedModel(["noted c"])
    async with Team() as team:
        team.add("a", Agent(a))
        team.add("b", Agent(b))
        team.add("c", Agent(c))
        await team.send("a", "tell everyone")
        await team.wait_idle()
        result = next(m for m in team["a"].agent.messages if m.role == "tool_result")
        assert result.content[0].text == "Message sent to 2 teammates: b, c."  # type: ignore[attr-defined]
        assert result.details == {"ids": [2, 3], "to": ["b", "c"]}  # type: ignore[attr-defined]
        assert user_texts(team["b"].agent) == ["Broadcast from a:\nstandup in 5"]
        assert user_texts(team["c"].agent) == ["Broadcast from a:\nstandup in 5"]
        assert user_texts(team["a"].agent) == ["Message from lead:\ntell everyone"]
        assert [(m.sender, m.to, m.broadcast) for m in team.messages[1:]] == [
            ("a", "b", True),
            ("a", "c", True),
        ]

        b.add("again b")
        c.add("again c")
        a.add("again a")
        mails = await team.broadcast("all hands")
        assert [(m.id, m.to, m.seq) for m in mails] == [(4, "a", 2), (5, "b", 1), (6, "c", 1)]
        await team.wait_idle()
    assert user_texts(team["a"].agent)[-1] == "Broadcast from lead:\nall hands"


async def test_list_teammates_shows_names_roles_states_and_unread() -> None:
    busy = HeldModel(["done"])
    busy.hold(1)
    asker = ScriptedModel([reply(tool_call("list_teammates")), "thanks"])
    async with Team("crew") as team:
        team.add("asker", Agent(asker), description="asks questions")
        team.add("busy", Agent(busy), description="works hard")
        team.add("quiet", Agent(ScriptedModel([])))
        await team.send("busy", "work")
        await busy.entered(1)
        await team.send("busy", "more work")
        asked = until_idle(team, "asker")
        await team.send("asker", "who is there?")
        await asked
        result = next(m for m in team["asker"].agent.messages if m.role == "tool_result")
        assert result.content[0].text == (  # type: ignore[attr-defined]
            "Team 'crew' (you are 'asker'):\n"
            "- lead: the team lead (runs the team; reads its messages itself)\n"
            "- asker (you): asks questions [working, 0 unread]\n"
            "- busy: works hard [working, 1 unread]\n"
            "- quiet [idle, 0 unread]"
        )
        assert result.details[1] == {  # type: ignore[attr-defined]
            "name": "busy",
            "description": "works hard",
            "state": "working",
            "unread": 1,
            "failed": False,
        }
        busy.release(1)
        await team.wait_idle()


async def test_teammate_events_are_tagged_with_the_teammates_path() -> None:
    events: list[Any] = []
    async with Team("squad") as team:
        team.add("reviewer", Agent(ScriptedModel(["lgtm"])))
        team.subscribe(events.append)
        await team.send("reviewer", "review this")
        await team.wait_idle()
    inner = [(e.path, e.event.type) for e in events if isinstance(e, TeammateEvent)]
    assert inner[0] == ("squad/reviewer", "agent_start")
    assert inner[-1] == ("squad/reviewer", "agent_end")
    assert {p for p, _ in inner} == {"squad/reviewer"}
    read = [e for e in events if isinstance(e, MailRead)]
    assert [(e.path, e.mail.id) for e in read] == [("squad/reviewer", 1)]
    # The wire form: tagged on "type", decodable as the TeamEvent union.
    wire = msgspec.json.encode(read[0])
    assert msgspec.json.decode(wire)["type"] == "mail_read"
    assert msgspec.json.decode(wire, type=TeamEvent) == read[0]
    start = next(e for e in events if isinstance(e, TeammateEvent))
    assert msgspec.json.decode(msgspec.json.encode(start)) == {
        "type": "teammate_event",
        "path": "squad/reviewer",
        "event": {"type": "agent_start"},
    }


async def test_inspection_counts_usage_and_cost_per_teammate_and_in_total() -> None:
    def priced(text: str, cost: float) -> Any:
        return reply(text, usage=Usage(input=10, output=5, total_tokens=15, cost=Cost(total=cost)))

    a = ScriptedModel(
        [reply(send("b", "hi b"), usage=Usage(input=3, output=2, total_tokens=5)), priced("a done", 0.25)]
    )
    b = ScriptedModel([priced("b done", 0.5)])
    async with Team() as team:
        ta = team.add("a", Agent(a), description="first")
        tb = team.add("b", Agent(b))
        assert list(team.members) == ["a", "b"] and team.members["a"] is ta
        assert repr(ta) == "Teammate('team/a', state='idle', unread=0, sent=0)"
        await team.send("a", "start")
        await team.wait_idle()
        assert (ta.sent, ta.received, ta.unread, ta.runs) == (1, 1, 0, 1)
        assert (tb.sent, tb.received, tb.unread, tb.runs) == (0, 1, 0, 1)
        assert ta.usage.total_tokens == 20 and ta.cost == 0.25
        assert tb.usage.total_tokens == 15 and tb.cost == 0.5
        assert team.usage.total_tokens == 35 and team.cost == 0.75
        assert [m.id for m in team.messages] == [1, 2]
        assert repr(team) == "Team('team', members=['a', 'b'], messages=2)"
        with pytest.raises(KeyError, match=r"unknown teammate 'c'; teammates: a, b"):
            team["c"]


async def test_receive_returns_none_when_the_team_is_idle() -> None:
    async with Team() as team:
        assert await team.receive() is None
        team.add("echo", Agent(ScriptedModel([reply(send("lead", "pong")), "sent"])))
        await team.send("echo", "ping")
        first = await team.receive()
        assert isinstance(first, Mail) and first.text == "pong"
        assert await team.receive() is None


async def test_a_lead_agent_assigns_work_in_parallel_and_collects_the_results(no_leaked_tasks: None) -> None:
    manager = ScriptedModel(
        [
            reply(send("w1", "part 1"), send("w2", "part 2")),
            "Waiting for w2.",
            reply(send("lead", "Both parts done.")),
            "Reported.",
        ]
    )
    w1 = ScriptedModel([reply(send("manager", "part 1 done")), "ok"])
    w2 = ScriptedModel([reply(send("manager", "part 2 done")), "ok"])
    async with Team() as team:
        team.add("manager", Agent(manager), description="splits the work")
        team.add("w1", Agent(w1))
        team.add("w2", Agent(w2))
        await team.send("manager", "Do parts 1 and 2.")
        report = await team.receive()
        await team.wait_idle()
    assert report is not None and (report.sender, report.text) == ("manager", "Both parts done.")
    # w1's answer was steered into the manager's first run; w2's came after that run ended
    # and started the second.
    assert [request_user_texts(r) for r in manager.requests] == [
        ["Message from lead:\nDo parts 1 and 2."],
        ["Message from lead:\nDo parts 1 and 2.", "Message from w1:\npart 1 done"],
        [
            "Message from lead:\nDo parts 1 and 2.",
            "Message from w1:\npart 1 done",
            "Message from w2:\npart 2 done",
        ],
        [
            "Message from lead:\nDo parts 1 and 2.",
            "Message from w1:\npart 1 done",
            "Message from w2:\npart 2 done",
        ],
    ]
    assert [(m.id, m.sender, m.to) for m in team.messages] == [
        (1, "lead", "manager"),
        (2, "manager", "w1"),
        (3, "manager", "w2"),
        (4, "w1", "manager"),
        (5, "w2", "manager"),
        (6, "manager", "lead"),
    ]
    assert (team["manager"].runs, team["w1"].runs, team["w2"].runs) == (2, 1, 1)
    for model in (manager, w1, w2):
        model.assert_complete()
