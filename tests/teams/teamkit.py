"""Helpers for the team tests: a model that can be held mid-request, transcript readers."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable
from collections.abc import Iterable
from typing import Any

from ketch import Agent
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.testing import FunctionModel
from ketch.testing import Reply
from ketch.testing import reply


class HeldModel(FunctionModel):
    """A scripted model whose requests can be held: ``hold(n)`` makes the n-th request
    (1-based) wait until ``release(n)``; ``entered(n)`` waits until it has arrived."""

    def __init__(self, replies: Iterable[str | Reply]) -> None:
        self._replies: deque[str | Reply] = deque(replies)
        self._holds: dict[int, asyncio.Event] = {}
        self._arrived: dict[int, asyncio.Event] = {}
        self.calls = 0
        super().__init__(self._answer)

    def hold(self, n: int) -> None:
        self._holds[n] = asyncio.Event()

    def release(self, n: int) -> None:
        self._holds[n].set()

    async def entered(self, n: int) -> None:
        await self._arrived.setdefault(n, asyncio.Event()).wait()

    async def _answer(self, request: Request, options: StreamOptions) -> str | Reply:
        self.calls += 1
        n = self.calls
        self._arrived.setdefault(n, asyncio.Event()).set()
        gate = self._holds.get(n)
        if gate is not None:
            await gate.wait()
        if not self._replies:
            return "(no more replies)"
        return self._replies.popleft()


def user_texts(agent: Agent[Any]) -> list[str]:
    """The text of every user message of the agent's transcript, in order."""
    return [m.content[0].text for m in agent.messages if isinstance(m, UserMessage)]  # type: ignore[union-attr]


def request_user_texts(request: Any) -> list[str]:
    """The text of every user message in a recorded request."""
    return [m.content[0].text for m in request.messages if isinstance(m, UserMessage)]


def say(*blocks: Any) -> Reply:
    """A reply (shorthand)."""
    return reply(*blocks)


def team_tasks() -> list[asyncio.Task[Any]]:
    """The team's driver tasks still around."""
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("ketch-team:")]


def until_idle(team: Any, name: str) -> Awaitable[None]:
    """Subscribe now; the result waits for the next time teammate ``name`` goes idle (its
    ``teammate_state`` event)."""
    done = asyncio.Event()
    path = f"{team.name}/{name}"

    def on(ev: Any) -> None:
        if ev.type == "teammate_state" and ev.path == path and ev.state == "idle":
            done.set()

    unsubscribe = team.subscribe(on)

    async def wait() -> None:
        try:
            await done.wait()
        finally:
            unsubscribe()

    return wait()
