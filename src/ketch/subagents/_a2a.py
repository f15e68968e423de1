"""A remote A2A agent as a subagent: a tool that hands the model's task to an agent
served over A2A (protocol 1.0, JSON-RPC binding; ``ketch serve`` is one) and returns
its answer.

::

    helper = await a2a_agent("http://127.0.0.1:8765", token=os.environ["HELPER_TOKEN"])
    agent = Agent("openai:gpt-5-mini", tools=[*coding_tools(), helper])

The card (``/.well-known/agent-card.json``) is read once, when the tool is made: it
names the tool (``ask_<agent name>``) and says what the agent does. Each call sends one
message and follows the task's stream; the calls of one tool share a context, so the
remote agent remembers what it was asked before. Aborting the run cancels the remote
task. A task that fails is an error result naming why; one that waits for input (a tool
approval on the remote side) returns what the remote agent asks.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from ketch import Tool
from ketch import ToolContext

if TYPE_CHECKING:
    import aiohttp

CARD_PATH = "/.well-known/agent-card.json"
_SETTLED = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED", "TASK_STATE_INPUT_REQUIRED"}
)
_MAX_EVENT = 16 * 1024 * 1024


class A2AError(Exception):
    """A remote A2A agent that cannot be used (its card, its answer)."""


async def _sse(response: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    """The ``data`` of each Server-Sent Event of ``response``, decoded as JSON."""
    buffer = b""
    data: list[bytes] = []
    async for chunk in response.content.iter_any():
        buffer += chunk
        if len(buffer) > _MAX_EVENT:
            raise A2AError(f"an event of the remote agent is over {_MAX_EVENT} bytes")
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if data:
                    yield json.loads(b"\n".join(data))
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))


def _tool_name(name: str) -> str:
    slug = re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_").lower() or "agent"
    return f"ask_{slug}"[:64]


async def a2a_agent(
    url: str,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    name: str | None = None,
    call_timeout: float | None = None,
) -> Tool:
    """A tool that asks the A2A agent at ``url`` (its base URL: the card is at
    ``url + /.well-known/agent-card.json``). ``token``: sent as ``Authorization: Bearer``;
    ``headers``: more headers for every request; ``name``: the tool's name (default
    ``ask_<the card's name>``); ``call_timeout``: seconds a call may take (None: no limit).
    Raises :class:`A2AError` when the card cannot be read or offers no JSON-RPC 1.x
    interface."""
    import aiohttp  # with its first use: importing ketch.subagents stays cheap

    sent = {**(headers or {}), "A2A-Version": "1.0"}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    base = url.rstrip("/")
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(base + CARD_PATH, headers=sent, timeout=aiohttp.ClientTimeout(total=30)) as response:
                if response.status != 200:
                    raise A2AError(f"the agent card at {base + CARD_PATH} answered HTTP {response.status}")
                card = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise A2AError(f"cannot read the agent card at {base + CARD_PATH}: {exc or type(exc).__name__}") from None
    if not isinstance(card, dict):
        raise A2AError(f"the agent card at {base + CARD_PATH} is not a JSON object")
    endpoint = next(
        (
            i.get("url")
            for i in card.get("supportedInterfaces") or []
            if isinstance(i, dict) and i.get("protocolBinding") == "JSONRPC" and str(i.get("protocolVersion", "")).startswith("1")
        ),
        None,
    )
    if not isinstance(endpoint, str):
        raise A2AError(f"the agent at {base} offers no JSON-RPC interface of A2A 1.x (its card lists {card.get('supportedInterfaces')!r})")
    title = str(card.get("name") or "remote agent")
    about = str(card.get("description") or "")
    context: dict[str, str] = {}

    async def execute(args: dict[str, Any], ctx: ToolContext[Any]) -> str:
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ValueError("'task': expected the task for the remote agent, as text")
        message: dict[str, Any] = {"messageId": os.urandom(16).hex(), "role": "ROLE_USER", "parts": [{"text": task}]}
        if "id" in context:
            message["contextId"] = context["id"]
        state = _State()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=call_timeout)) as session:
            try:
                async with ctx.signal.scope():
                    # the task's id first (so an abort can cancel it), then its stream
                    params = {"message": message, "configuration": {"returnImmediately": True}}
                    answer = await _call(session, endpoint, sent, _request(ctx.call_id, "SendMessage", params))
                    state.take(answer.get("task") or {}, context)
                    await ctx.report({"type": "a2a_task", "agent": title, "task_id": state.task, "state": state.status})
                    if state.status not in _SETTLED:
                        await _follow(session, endpoint, sent, _request(ctx.call_id, "SubscribeToTask", {"id": state.task}), state, context)
                    if state.status not in _SETTLED:  # settled before the subscription: its record has all
                        record = await _call(session, endpoint, sent, _request(ctx.call_id, "GetTask", {"id": state.task}))
                        state.take(record, context)
            except BaseException:
                if state.task and ctx.signal.aborted:
                    _cancel_remote(endpoint, sent, state.task, ctx.call_id)
                raise
        status = state.status
        if status == "TASK_STATE_COMPLETED":
            return "".join(state.text) or state.said
        if status == "TASK_STATE_INPUT_REQUIRED":
            return f"The remote agent {title} waits for input: {state.said}"
        raise A2AError(f"the remote agent {title} ended the task {status or 'without a final state'}" + (f": {state.said}" if state.said else ""))

    description = (
        f"Ask the remote agent {title!r} to do a task and return its answer."
        + (f" What it does: {about}" if about else "")
        + " It has its own tools and context and remembers earlier tasks sent through this tool; give it everything it needs in the task."
    )
    parameters = {
        "type": "object",
        "properties": {"task": {"type": "string", "description": "The task, with everything the remote agent needs to know."}},
        "required": ["task"],
        "additionalProperties": False,
    }
    return Tool(name or _tool_name(title), description, parameters, execute, label=f"A2A agent {title}")


_cancels: set[asyncio.Task[None]] = set()  # CancelTask requests still under way


def _cancel_remote(endpoint: str, headers: dict[str, str], task_id: str, ident: str) -> None:
    """Ask the remote agent to cancel ``task_id``, in a task of its own: the call being
    aborted is cancelled itself and cannot wait for the answer."""

    async def cancel() -> None:
        import aiohttp

        call = {"jsonrpc": "2.0", "id": ident, "method": "CancelTask", "params": {"id": task_id}}
        try:
            async with aiohttp.ClientSession() as session, session.post(
                endpoint, json=call, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
            ) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError):
            pass  # the remote agent ends the task on its own then

    task = asyncio.ensure_future(cancel())
    _cancels.add(task)
    task.add_done_callback(_cancels.discard)


class _State:
    """What one call read of the remote task: its id, its answer, its last status."""

    __slots__ = ("said", "status", "task", "text")

    def __init__(self) -> None:
        self.task = ""
        self.text: list[str] = []
        self.status = ""
        self.said = ""

    def take(self, task: dict[str, Any], context: dict[str, str]) -> None:
        """A whole task record: its id, context, answer so far and status."""
        self.task = str(task.get("id", self.task))
        if task.get("contextId"):
            context["id"] = str(task["contextId"])
        for artifact in task.get("artifacts") or []:
            if isinstance(artifact, dict) and artifact.get("artifactId") == "answer":
                self.text = [p.get("text", "") for p in artifact.get("parts", []) if isinstance(p, dict)]
        self.status_of(task.get("status") or {})

    def status_of(self, status: dict[str, Any]) -> None:
        self.status = str(status.get("state", ""))
        said = status.get("message") or {}
        self.said = "".join(p.get("text", "") for p in said.get("parts", []) if isinstance(p, dict))


def _request(ident: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}


def _refused(body: Any) -> A2AError:
    error = body.get("error") if isinstance(body, dict) else None
    return A2AError(f"the remote agent refused the task: {error.get('message') if isinstance(error, dict) else body!r}")


async def _call(session: aiohttp.ClientSession, endpoint: str, headers: dict[str, str], call: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC call; its result (an error answer is an :class:`A2AError`)."""
    async with session.post(endpoint, json=call, headers=headers) as response:
        if response.status != 200:
            raise A2AError(f"the remote agent answered HTTP {response.status}: {(await response.text())[:300]}")
        body = await response.json(content_type=None)
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, dict):
        raise _refused(body)
    return result


async def _follow(
    session: aiohttp.ClientSession, endpoint: str, headers: dict[str, str], call: dict[str, Any], state: _State, context: dict[str, str]
) -> None:
    """Send ``call`` (a subscription) and read the task's stream into ``state`` until it
    ends. A task that settled before the subscription leaves ``state`` as it was."""
    async with session.post(endpoint, json=call, headers={**headers, "Accept": "text/event-stream"}) as response:
        if response.status != 200:
            raise A2AError(f"the remote agent answered HTTP {response.status}: {(await response.text())[:300]}")
        if not response.content_type.startswith("text/event-stream"):
            return  # an error answer: the task settled meanwhile (GetTask tells how)
        async for frame in _sse(response):
            if not isinstance(frame, dict):
                continue
            if "error" in frame:
                raise _refused(frame)
            result = frame.get("result") or {}
            if "task" in result:
                state.take(result["task"], context)
            elif "artifactUpdate" in result:
                update = result["artifactUpdate"]
                if not update.get("append"):
                    state.text = []
                state.text.extend(p.get("text", "") for p in update.get("artifact", {}).get("parts", []) if isinstance(p, dict))
            elif "statusUpdate" in result:
                state.status_of(result["statusUpdate"].get("status") or {})
