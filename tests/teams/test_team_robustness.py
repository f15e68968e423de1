"""Teams under pressure: many concurrent senders (exactly once, in order per sender),
shutdown waiting for or aborting the runs in flight, failing teammates, bad input, and no
task left behind."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import defaultdict
from typing import Any

import pytest
from teamkit import HeldModel
from teamkit import team_tasks
from teamkit import user_texts

from ketch import Agent
from ketch import Tool
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.teams import Team
from ketch.teams import TeammateFailed
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply
from ketch.testing import tool_call


def send(to: str, text: str) -> Any:
    return tool_call("send_message", {"to": to, "text": text})


def tool_results(agent: Agent[Any]) -> list[tuple[str, bool]]:
    return [(m.content[0].text, m.is_error) for m in agent.messages if m.role == "tool_result"]  # type: ignore[attr-defined]


_HEADER = re.compile(r"(?:Message|Broadcast) from (\S+):\n(.*)\Z", re.S)


async def test_many_concurrent_senders_each_message_exactly_once_in_order(no_leaked_tasks: None) -> None:
    senders, per_turn, turns, rounds, lead_per_round = 12, 5, 3, 2, 20
    per_round = per_turn * turns

    async def sink_answer(request: Request, options: StreamOptions) -> str:
        for _ in range(len(request.messages) % 4):  # vary where the sink yields
            await asyncio.sleep(0)
        return "ok"

    sink_model = FunctionModel(sink_answer)
    read_events: list[int] = []
    async with Team() as team:
        team.add("sink", Agent(sink_model))
        for s in range(senders):
            name = f"s{s}"
            script: list[Any] = []
            for r in range(rounds):
                for t in range(turns):
                    first = r * per_round + t * per_turn
                    script.append(reply(*(send("sink", f"{name}-{first + i}") for i in range(per_turn))))
                script.append("done")
            team.add(name, Agent(ScriptedModel(script)))
        team.subscribe(lambda e: read_events.append(e.mail.id) if e.type == "mail_read" else None)

        async def lead_sends(r: int) -> None:
            for i in range(r * lead_per_round, (r + 1) * lead_per_round):
                await team.send("sink", f"lead-{i}")
                await asyncio.sleep(0)  # interleave with the teammates' runs

        for r in range(rounds):  # each round: every sender and the lead at once
            lead = asyncio.create_task(lead_sends(r))
            for s in range(senders):
                await team.send(f"s{s}", "go")
            await lead
            await team.wait_idle()

        sink = team["sink"]
        to_sink = [m for m in team.messages if m.to == "sink"]
        assert len(to_sink) == (senders * per_round + lead_per_round) * rounds
        seen: dict[str, list[str]] = defaultdict(list)
        for text in user_texts(sink.agent):
            match = _HEADER.match(text)
            assert match is not None
            seen[match.group(1)].append(match.group(2))
        expected = {f"s{s}": [f"s{s}-{i}" for i in range(per_round * rounds)] for s in range(senders)}
        expected["lead"] = [f"lead-{i}" for i in range(lead_per_round * rounds)]
        assert dict(seen) == expected  # every message once, each sender's in the order sent
        assert sorted(read_events) == sorted(m.id for m in team.messages)  # one mail_read per message
        assert (sink.received, sink.unread) == (len(to_sink), 0)
        for m in to_sink:  # seq numbers are 1, 2, 3, ... per sender
            assert m.seq == int(m.text.rsplit("-", 1)[1]) + 1
        # Both ways of delivery were taken: new runs, and steering into a running one.
        assert 1 < sink.runs < len(sink_model.requests)
        assert len(sink.agent.steering) == 0 and len(sink.agent.follow_ups) == 0
    assert team_tasks() == []


async def test_shutdown_waits_for_the_turn_in_flight_and_refuses_new_messages(no_leaked_tasks: None) -> None:
    model = HeldModel([reply(send("other", "still here?")), "finished"])
    model.hold(1)
    team = Team()
    worker = team.add("worker", Agent(model))
    other = team.add("other", Agent(ScriptedModel([])))
    await team.send("worker", "go")
    await model.entered(1)
    closing = asyncio.create_task(team.shutdown())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not closing.done() and team.is_closed and worker.state == "working"
    with pytest.raises(RuntimeError, match=r"^team 'team' is shut down; message to 'worker' not sent$"):
        await team.send("worker", "late")
    with pytest.raises(RuntimeError, match=r"^team 'team' is shut down; cannot add 'x'$"):
        team.add("x", Agent(ScriptedModel([])))
    model.release(1)
    await closing
    assert tool_results(worker.agent) == [("team 'team' is shut down; message to 'other' not sent", True)]
    assert worker.last_result is not None and worker.last_result.end_reason == "stop"
    assert (worker.runs, worker.failures, other.runs, other.received) == (1, 0, 0, 0)
    assert worker.agent.tools == [] and worker.agent.system_prompt == ""
    assert team_tasks() == [] and team.is_idle
    await team.shutdown()  # a second call is harmless


async def test_shutdown_with_abort_ends_the_runs_in_flight(no_leaked_tasks: None) -> None:
    model = HeldModel(["never answered"])
    model.hold(1)
    team = Team()
    worker = team.add("worker", Agent(model))
    await team.send("worker", "go")
    await model.entered(1)
    await team.shutdown(abort=True)
    assert worker.last_result is not None and worker.last_result.end_reason == "aborted"
    assert (worker.runs, worker.failures, team.failures) == (1, 0, ())
    assert team_tasks() == []


async def test_unread_mail_stays_in_the_mailbox_after_shutdown() -> None:
    model = HeldModel(["first done"])
    model.hold(1)
    team = Team()
    worker = team.add("worker", Agent(model))
    await team.send("worker", "first")
    await model.entered(1)
    await team.send("worker", "second")  # steered into the held run
    await team.shutdown(abort=True)
    assert [m.text for m in worker.mailbox] == ["second"]
    assert team.mailboxes == {"worker": worker.mailbox}
    assert (worker.received, worker.unread) == (1, 1)
    assert len(worker.agent.steering) == 0


async def test_a_failing_teammate_tells_the_sender_and_the_team_goes_on(no_leaked_tasks: None) -> None:
    a = ScriptedModel([reply(send("b", "compute x")), "asked b", "noted: b failed"])
    b = ScriptedModel([error_reply("model exploded"), "x = 42"])
    failed: list[Any] = []
    async with Team() as team:
        team.add("a", Agent(a))
        team.add("b", Agent(b))
        team.subscribe(lambda e: failed.append(e) if e.type == "teammate_failed" else None)
        await team.send("a", "get x from b")
        await team.wait_idle()
        error = "run ended with error: model exploded"
        assert team.failures == (TeammateFailed(path="team/b", error=error, mail_ids=[2]),)
        assert failed == list(team.failures)
        assert user_texts(team["a"].agent) == [
            "Message from lead:\nget x from b",
            f"Message from team:\nTeammate 'b' failed while handling your message #2: {error}",
        ]
        assert (team["b"].failures, team["b"].last_error, team["b"].received) == (1, error, 1)
        a.assert_complete()

        await team.send("b", "try again")  # b works again; the lead hears of the failure
        await team.wait_idle()
        assert team["b"].last_result is not None and team["b"].last_result.text == "x = 42"
        assert (team["b"].runs, team["b"].failures, team["b"].failed) == (2, 1, False)
        assert team.inbox == ()


async def test_a_failure_on_the_leads_message_reaches_the_leads_inbox() -> None:
    async with Team() as team:
        team.add("b", Agent(ScriptedModel([error_reply("no quota", kind="rate_limit")])))
        await team.send("b", "work")
        assert await team.receive() is not None
        assert [(m.sender, m.text) for m in team.inbox] == [
            ("team", "Teammate 'b' failed while handling your message #1: run ended with error: no quota")
        ]


async def test_sending_to_a_teammate_whose_last_run_failed_says_so() -> None:
    a = ScriptedModel([reply(send("b", "again")), "ok", reply(send("b", "and again")), "ok"])
    async with Team(notify_failures=False) as team:
        team.add("a", Agent(a))
        team.add("b", Agent(ScriptedModel([error_reply("boom"), "fine now", "still fine"])))
        await team.send("b", "first")
        await team.wait_idle()
        assert team.inbox == ()  # notify_failures=False
        await team.send("a", "poke b")
        await team.wait_idle()
        assert tool_results(team["a"].agent) == [
            (
                "Message #3 sent to b. Note: b's last run failed (run ended with error: boom); "
                "this message starts a new one.",
                False,
            )
        ]
        assert team["b"].failed is False  # the run on message #3 went well
        await team.send("a", "poke b once more")
        await team.wait_idle()
        assert tool_results(team["a"].agent)[-1] == ("Message #5 sent to b.", False)


async def test_an_agent_that_refuses_to_run_keeps_its_mail_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = ScriptedModel(["both read"])
    agent = Agent(model)
    real_prompt = agent.prompt

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken agent")

    agent.prompt = broken  # type: ignore[method-assign]
    async with Team() as team:
        worker = team.add("worker", agent)
        with caplog.at_level(logging.WARNING, logger="ketch.teams"):
            await team.send("worker", "one")
            await team.wait_idle()
        assert "teammate 'worker' failed: RuntimeError: broken agent" in caplog.text
        assert [m.text for m in worker.mailbox] == ["one"]
        assert (worker.runs, worker.failures, worker.received) == (1, 1, 0)
        assert worker.state == "idle"
        assert [m.text for m in team.inbox] == [
            "Teammate 'worker' failed while handling your message #1: RuntimeError: broken agent"
        ]
        agent.prompt = real_prompt  # type: ignore[method-assign]
        await team.send("worker", "two")
        await team.wait_idle()
        assert user_texts(agent) == ["Message from lead:\none", "Message from lead:\ntwo"]
        assert (worker.runs, worker.received, worker.unread) == (2, 2, 0)


async def test_a_tool_error_inside_a_teammate_is_only_a_tool_error() -> None:
    async def explode(args: dict[str, Any], ctx: Any) -> str:
        raise ValueError("disk full")

    model = ScriptedModel([reply(tool_call("save")), "could not save"])
    async with Team() as team:
        worker = team.add("worker", Agent(model, tools=[Tool("save", "", None, explode)]))
        await team.send("worker", "save it")
        await team.wait_idle()
        assert tool_results(worker.agent) == [("ValueError: disk full", True)]
        assert (worker.failures, team.failures) == (0, ())


async def test_a_listener_that_raises_does_not_stop_the_team(caplog: pytest.LogCaptureFixture) -> None:
    def bad(event: Any) -> None:
        raise RuntimeError("listener bug")

    async with Team() as team:
        team.add("w", Agent(ScriptedModel(["fine"])))
        team.subscribe(bad)
        with caplog.at_level(logging.ERROR, logger="ketch.teams"):
            await team.send("w", "hi")
            await team.wait_idle()
        assert team["w"].last_result is not None and team["w"].last_result.text == "fine"
        assert "Team listener failed on mail_posted event" in caplog.text


async def test_bad_input_gets_one_line_errors_naming_the_value_and_what_is_allowed() -> None:
    team = Team()
    agent = Agent(ScriptedModel([]))
    team.add("coder", agent)
    team.add("reviewer", Agent(ScriptedModel([])))
    cases: list[tuple[Any, type[Exception], str]] = [
        (
            lambda: team.add("coder", Agent(ScriptedModel([]))),
            ValueError,
            "duplicate teammate name 'coder': team 'team' already has coder, reviewer",
        ),
        (
            lambda: team.add("no spaces", Agent(ScriptedModel([]))),
            ValueError,
            "invalid teammate name 'no spaces': use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit",
        ),
        (
            lambda: team.add("", Agent(ScriptedModel([]))),
            ValueError,
            "invalid teammate name '': use 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit",
        ),
        (
            lambda: team.add("lead", Agent(ScriptedModel([]))),
            ValueError,
            "teammate name 'lead' is the team's lead (the code running the team); choose another name",
        ),
        (
            lambda: team.add("team", Agent(ScriptedModel([]))),
            ValueError,
            "teammate name 'team' is reserved for the team's own notices; choose another name",
        ),
        (
            lambda: team.add("again", agent),
            ValueError,
            "this agent is already teammate 'coder'; give each teammate its own Agent",
        ),
        (
            lambda: Team().add("x", agent),
            ValueError,
            "the agent for 'x' already has a tool named 'broadcast' (is it in another team?)",
        ),
        (lambda: team.add("x", "openai:gpt-5"), TypeError, "teammate 'x' must be a ketch.Agent, got str"),
        (
            lambda: Team("a/b"),
            ValueError,
            "invalid team name 'a/b': use 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit",
        ),
        (
            lambda: Team(lead="team"),
            ValueError,
            "invalid lead name 'team': it is the sender of the team's notices; choose another",
        ),
    ]
    for make, kind, message in cases:
        with pytest.raises(kind) as info:
            make()
        assert str(info.value) == message
        assert "\n" not in message
    calls: list[tuple[Any, str]] = [
        (team.send("tester", "hi"), "unknown teammate 'tester'; teammates: coder, reviewer"),
        (team.send("coder", ""), "empty message text '': write the message to send"),
        (team.send("coder", "   "), "empty message text '   ': write the message to send"),
        (
            team.send("coder", "hi", sender="coder"),
            "cannot send a message to yourself ('coder'); teammates: lead, reviewer",
        ),
        (team.send("coder", "hi", sender="ghost"), "unknown sender 'ghost'; senders: lead, coder, reviewer"),
        (team.broadcast(" "), "empty message text ' ': write the message to send"),
        (Team().broadcast("hi"), "no teammates to broadcast to: team 'team' has no member besides 'lead'"),
    ]
    for call, message in calls:
        with pytest.raises(ValueError) as info:
            await call
        assert str(info.value) == message
    assert team.messages == ()


async def test_bad_tool_calls_are_error_results_naming_the_value() -> None:
    model = ScriptedModel(
        [
            reply(
                send("tester", "hi"),
                send("reviewer", ""),
                send("coder", "me?"),
                tool_call("broadcast", {"text": "\n"}),
            ),
            "gave up",
        ]
    )
    async with Team() as team:
        team.add("coder", Agent(model))
        team.add("reviewer", Agent(ScriptedModel([])))
        await team.send("coder", "go")
        await team.wait_idle()
        assert tool_results(team["coder"].agent) == [
            ("unknown teammate 'tester'; teammates: lead, reviewer", True),
            ("empty message text '': write the message to send", True),
            ("cannot send a message to yourself ('coder'); teammates: lead, reviewer", True),
            ("empty message text '\\n': write the message to send", True),
        ]
        assert [m.id for m in team.messages] == [1]
        assert team["coder"].failures == 0


async def test_mail_taken_back_from_a_finished_run_stays_before_newer_mail() -> None:
    model = ScriptedModel([error_reply("flaky"), "all three read"])
    agent = Agent(model)
    async with Team(notify_failures=False) as team:
        team.add("worker", agent)

        async def steer_late(ev: Any) -> None:  # after the run's last look at its queue
            if ev.type == "agent_end" and team["worker"].runs == 0:
                await team.send("worker", "A")

        async def on_failure(ev: Any) -> None:  # the run is over; "A" is not read yet
            if ev.type == "teammate_failed":
                await team.send("worker", "B")

        agent.subscribe(steer_late)
        team.subscribe(on_failure)
        await team.send("worker", "first")
        await team.wait_idle()
    assert user_texts(agent) == [
        "Message from lead:\nfirst",
        "Message from lead:\nA",
        "Message from lead:\nB",
    ]
    assert [m.text for m in team.messages] == ["first", "A", "B"]
    assert (team["worker"].runs, team["worker"].received) == (2, 3)


async def test_shutdown_from_inside_a_teammates_tool_does_not_wait_for_itself(no_leaked_tasks: None) -> None:
    team = Team()

    async def finish(args: dict[str, Any], ctx: Any) -> str:
        with pytest.raises(RuntimeError) as info:
            await team.wait_idle()
        assert str(info.value) == (
            "wait_idle() called inside teammate 'worker''s run would wait for itself; call it from outside the team"
        )
        await team.shutdown()
        return "team closed"

    model = ScriptedModel([reply(tool_call("finish")), "bye"])
    worker = team.add("worker", Agent(model, tools=[Tool("finish", "", None, finish)]))
    await team.send("worker", "wrap up")
    await team.wait_idle()
    assert tool_results(worker.agent) == [("team closed", False)]
    assert worker.last_result is not None and worker.last_result.text == "bye"
    assert team.is_closed and team_tasks() == []
    assert [t.name for t in worker.agent.tools] == ["finish"]
    model.assert_complete()


async def test_an_exception_in_the_team_block_aborts_the_runs_in_flight(no_leaked_tasks: None) -> None:
    model = HeldModel(["never"])
    model.hold(1)
    with pytest.raises(KeyError):
        async with Team() as team:
            worker = team.add("worker", Agent(model))
            await team.send("worker", "go")
            await model.entered(1)
            team["nobody"]
    assert worker.last_result is not None and worker.last_result.end_reason == "aborted"
    assert team.is_closed and team_tasks() == []


async def test_every_teammate_sending_to_every_other_gets_each_message_once_in_order(
    no_leaked_tasks: None,
) -> None:
    names = [f"m{i}" for i in range(6)]
    rounds = 3

    def member_model(me: str) -> FunctionModel:
        done = 0

        async def answer(request: Request, options: StreamOptions) -> Any:
            nonlocal done
            await asyncio.sleep(0)  # let the others run in between
            if done == rounds:
                return "ok"
            k = done
            done += 1
            return reply(*(send(other, f"{me}#{k}") for other in names if other != me))

        return FunctionModel(answer)

    async with Team() as team:
        for name in names:
            team.add(name, Agent(member_model(name)))
        await team.broadcast("go")
        await team.wait_idle()
        for name in names:
            seen: dict[str, list[str]] = defaultdict(list)
            for text in user_texts(team[name].agent):
                match = _HEADER.match(text)
                assert match is not None
                seen[match.group(1)].append(match.group(2))
            expected = {other: [f"{other}#{k}" for k in range(rounds)] for other in names if other != name}
            assert dict(seen) == {"lead": ["go"], **expected}
            member = team[name]
            assert (member.sent, member.received, member.unread) == (rounds * 5, rounds * 5 + 1, 0)
        assert len(team.messages) == 6 + 6 * 5 * rounds
