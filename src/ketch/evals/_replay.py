"""Replay: rerun a recorded conversation on another agent, tools answered from the recording.

:func:`replay` sends the recording's user prompts to the agent one after the other. While
the agent's model asks for the same tool calls as the recording did at the same turn (same
tool names and arguments, in the same order), each call is answered with the recorded
result and no tool runs. The first turn where its decision differs (other calls, fewer,
more, or an answer instead of calls) is the divergence. With ``on_divergence="stop"``
(the default) the calls of that turn get an error result and the run ends there
(``end_reason == "stop_guard"``); with ``"live"`` they and every later call run on the
agent's real tools (the recording no longer matches the conversation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import Literal

import msgspec

from .. import Agent
from ..llm import AssistantMessage
from ..llm import Message
from ..llm import ToolCall
from ..llm import ToolResultMessage
from ..llm import UserMessage
from ..llm import message_from_dict
from ..loop import Capability
from ..loop import Contribution
from ..loop import End
from ..loop import RunResult
from ..loop import ToolCallInfo
from ..loop import ToolResult
from ..loop import TurnInfo

__all__ = ["Call", "Divergence", "ReplayReport", "load_session", "replay"]


class Call(msgspec.Struct, frozen=True):
    """One tool call as replay compares it: the tool's name and its arguments."""

    name: str
    args: dict[str, Any]

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.name}({args})"


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """Where the replayed agent's decision first differs from the recording.

    ``turn`` counts the conversation's assistant messages from 0; ``expected`` are the
    calls the recording made at that turn (empty: it answered, or the recording had ended)
    and ``actual`` the calls the agent asked for (empty: it answered).
    """

    turn: int
    expected: list[Call]
    actual: list[Call]

    def __str__(self) -> str:
        def show(calls: list[Call]) -> str:
            return ", ".join(map(str, calls)) if calls else "no tool call"

        return f"turn {self.turn}: expected {show(self.expected)}, got {show(self.actual)}"


@dataclasses.dataclass(slots=True)
class ReplayReport:
    """How a replay went: the ``divergence`` (None when every decision matched),
    how many calls were answered from the recording (``replayed``) and how many ran
    on the agent's tools (``live``), and each prompt's :class:`~ketch.loop.RunResult`."""

    divergence: Divergence | None
    replayed: int
    live: int
    results: list[RunResult]

    @property
    def text(self) -> str:
        """The last run's final text."""
        return self.results[-1].text if self.results else ""


def _calls(message: AssistantMessage) -> list[Call]:
    return [Call(c.name, c.args) for c in message.content if isinstance(c, ToolCall)]


class _Recording:
    """The recording's prompts, each turn's calls and each call's recorded result."""

    def __init__(self, messages: Sequence[Message | dict[str, Any]]) -> None:
        self.prompts: list[UserMessage] = []
        self.turns: list[list[Call]] = []
        self.answers: list[list[ToolResultMessage | None]] = []
        by_id: dict[str, tuple[int, int]] = {}
        for item in messages:
            m = message_from_dict(item) if isinstance(item, dict) else item
            if isinstance(m, UserMessage):
                self.prompts.append(m)
            elif isinstance(m, AssistantMessage):
                ids = [c.id for c in m.content if isinstance(c, ToolCall)]
                for i, cid in enumerate(ids):
                    by_id[cid] = (len(self.turns), i)
                self.turns.append(_calls(m))
                self.answers.append([None] * len(ids))
            elif isinstance(m, ToolResultMessage) and m.tool_call_id in by_id:
                t, i = by_id[m.tool_call_id]
                self.answers[t][i] = m


class _Replayer(Capability):
    name = "replay"

    def __init__(self, recording: _Recording, on_divergence: Literal["stop", "live"]) -> None:
        self.recording = recording
        self.on_divergence = on_divergence
        self.divergence: Divergence | None = None
        self.replayed = 0
        self.live = 0
        self._seen = 0  # messages of the conversation already counted
        self._turn = -1  # index of the conversation's last assistant message
        self._checked: dict[int, bool] = {}  # turn -> its calls match the recording

    def contribute(self) -> Contribution:
        return Contribution(middlewares=[self._middleware], after_turn=[self._after_turn])

    def _turn_of(self, messages: list[Message]) -> int:
        if len(messages) < self._seen:  # the transcript was rewritten (compaction)
            self._seen = 0
            self._turn = -1
        for m in messages[self._seen :]:
            if isinstance(m, AssistantMessage):
                self._turn += 1
        self._seen = len(messages)
        return self._turn

    def check(self, turn: int, message: AssistantMessage) -> bool:
        """Whether ``message`` (the conversation's turn ``turn``) makes the recorded calls;
        the first turn that does not is the divergence."""
        if turn not in self._checked:
            actual = _calls(message)
            turns = self.recording.turns
            expected = turns[turn] if turn < len(turns) else []
            ok = self.divergence is None and actual == expected
            if not ok and self.divergence is None:
                self.divergence = Divergence(turn=turn, expected=expected, actual=actual)
            self._checked[turn] = ok
        return self._checked[turn]

    async def _middleware(
        self, info: ToolCallInfo, call_next: Callable[[dict[str, Any]], Awaitable[ToolResult]]
    ) -> ToolResult:
        turn = self._turn_of(info.conversation.messages)
        if self.check(turn, info.assistant_message):
            index = [c.id for c in info.assistant_message.content if isinstance(c, ToolCall)].index(
                info.tool_call.id
            )
            answer = self.recording.answers[turn][index]
            self.replayed += 1
            if answer is None:
                return ToolResult(content="replay: the recording has no result for this call", is_error=True)
            return ToolResult(content=list(answer.content), details=answer.details, is_error=answer.is_error)
        if self.on_divergence == "live":
            self.live += 1
            return await call_next(info.args)
        return ToolResult(
            content=f"replay: this call is not in the recording ({self.divergence}); the replay stops here",
            is_error=True,
        )

    def _after_turn(self, info: TurnInfo) -> End | None:
        if self.divergence is not None and self.on_divergence == "stop":
            return End("stop_guard", error=f"replay diverged at {self.divergence}")
        return None


async def replay(
    recording: Sequence[Message | dict[str, Any]],
    agent: Agent[Any],
    *,
    on_divergence: Literal["stop", "live"] = "stop",
) -> ReplayReport:
    """Rerun ``recording`` (messages, or :func:`ketch.message_to_dict` dicts such as a
    :class:`CaseResult`'s ``messages``) on ``agent``; see the module doc. The agent must
    have the recording's tools (their schemas go to its model) and an empty transcript."""
    if on_divergence not in ("stop", "live"):
        raise ValueError(f"replay: on_divergence must be 'stop' or 'live', got {on_divergence!r}")
    if agent.messages:
        raise ValueError(
            f"replay: the agent must start with an empty transcript, it has {len(agent.messages)} messages"
        )
    rec = _Recording(recording)
    if not rec.prompts:
        raise ValueError("replay: the recording has no user message to send")
    replayer = _Replayer(rec, on_divergence)
    results: list[RunResult] = []
    before = agent.config.capabilities
    agent.config.capabilities = (*before, replayer)
    try:
        for prompt in rec.prompts:
            results.append(await agent.prompt(prompt))
            # a turn that answered instead of calling tools never reached the middleware
            turn = -1
            for m in agent.messages:
                if isinstance(m, AssistantMessage):
                    turn += 1
                    replayer.check(turn, m)
            if replayer.divergence is not None and on_divergence == "stop":
                break
    finally:
        agent.config.capabilities = before
    if replayer.divergence is None and turn + 1 < len(rec.turns):
        replayer.divergence = Divergence(turn=turn + 1, expected=rec.turns[turn + 1], actual=[])
    return ReplayReport(
        divergence=replayer.divergence, replayed=replayer.replayed, live=replayer.live, results=results
    )


async def load_session(store: Any, session_id: str) -> list[Message]:
    """The transcript of the saved session ``session_id`` of ``store`` (a
    :class:`ketch.sessions.SessionStore`), without opening it for writing."""
    from ..sessions import export_json

    exported = msgspec.json.decode(export_json(await store.load(session_id), session_id=session_id))
    return [message_from_dict(d) for d in exported["messages"]]
