"""The Temporal benchmark's task on the OpenAI Agents SDK's Temporal integration.

Used by ``bench_temporal.py`` (needs ``temporalio-openai-agents``, which brings
``openai-agents``: the ``bench`` extra). The same task as ketch's durable run: the
prompt, one round of an ``add(a, b)`` call, then the final answer, against the same
scripted OpenAI-compatible server and script (``suite.server``, ``suite.script``),
with the model called through ``OpenAIChatCompletionsModel`` (Chat Completions, like
ketch's ``openai-chat``).

The integration's own way of running it: a workflow that calls ``Runner.run``, the
model call as the plugin's ``invoke_model_activity`` (one non-streamed Chat Completions
request per turn: ``Runner.run`` does not stream) and the tool as an activity
(``activity_as_tool``). Workers run in the sandbox (the default, as ketch's do).

A worker process: ``python -m bench_temporal_oai --address HOST:PORT --task-queue Q``
(from ``benchmarks/``, with ``$BENCH_LLM_URL`` set); it prints ``oai worker: ...`` once
it polls and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio import workflow

# Tracing would export to OpenAI's platform; ketch's runs export nothing either.
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

with workflow.unsafe.imports_passed_through():
    from agents import Agent
    from agents import Model
    from agents import ModelProvider
    from agents import OpenAIChatCompletionsModel
    from agents import Runner
    from agents import function_tool
    from openai import AsyncOpenAI
    from suite import script
    from temporalio.openai_agents import ModelActivityParameters
    from temporalio.openai_agents import OpenAIAgentsPlugin
    from temporalio.openai_agents.workflow import activity_as_tool

WORKFLOW = "oai-bench"
TIMEOUT = timedelta(seconds=60)


@activity.defn(name="add")
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _model(url: str) -> OpenAIChatCompletionsModel:
    return OpenAIChatCompletionsModel(script.MODEL, AsyncOpenAI(base_url=url, api_key="x", max_retries=0))


class BenchProvider(ModelProvider):
    """Every model name resolves to the scripted server's Chat Completions model."""

    def __init__(self, url: str) -> None:
        self._model = _model(url)

    def get_model(self, model_name: str | None) -> Model:
        """The one model (one client, so its connection pool is shared by all runs)."""
        return self._model


def plugin(url: str | None = None) -> OpenAIAgentsPlugin:
    """The integration's plugin for clients and workers; the model points at ``url``
    (default ``$BENCH_LLM_URL``)."""
    url = url or os.environ.get("BENCH_LLM_URL", "http://127.0.0.1:9/v1")
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=TIMEOUT),
        model_provider=BenchProvider(url),
    )


@workflow.defn(name=WORKFLOW)
class OaiBench:
    """One run of the benchmark's task with the Agents SDK inside a workflow."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        """``Runner.run`` on an agent whose only tool is the ``add`` activity."""
        agent: Agent[None] = Agent(
            name="bench",
            model=script.MODEL,
            tools=[activity_as_tool(add, start_to_close_timeout=TIMEOUT)],
        )
        result = await Runner.run(agent, prompt)
        return str(result.final_output)


def worker(client: Any, queue: str) -> Any:
    """A worker for :class:`OaiBench` on ``queue`` (``client`` connected with :func:`plugin`)."""
    from temporalio.worker import Worker

    return Worker(
        client, task_queue=queue, workflows=[OaiBench], activities=[add], max_concurrent_activities=200
    )


def check(text: str) -> None:
    """Fail unless ``text`` is the script's final answer after the tool's result."""
    if not text.startswith("Sums: 3."):
        raise RuntimeError(f"unexpected final text {text[:40]!r}")


async def durable_run(client: Any, queue: str, run_id: str) -> None:
    """One durable run, started and awaited from ``client``."""
    check(await client.execute_workflow(WORKFLOW, script.PROMPT, id=run_id, task_queue=queue))


async def inprocess(runs: int, concurrent: bool, url: str) -> float:
    """Seconds for ``runs`` in-process ``Runner.run`` runs of the task (no Temporal)."""
    model = _model(url)
    add_tool = function_tool(add, name_override="add")

    async def once() -> None:
        result = await Runner.run(Agent(name="bench", model=model, tools=[add_tool]), script.PROMPT)
        check(str(result.final_output))

    await once()
    started = time.perf_counter()
    if concurrent:
        await asyncio.gather(*(once() for _ in range(runs)))
    else:
        for _ in range(runs):
            await once()
    return time.perf_counter() - started


async def _serve(address: str, queue: str) -> None:
    from temporalio.client import Client

    client = await Client.connect(address, plugins=[plugin()])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker(client, queue):
        print(f"oai worker: on task queue {queue!r} at {address}", flush=True)
        await stop.wait()


def main() -> None:
    """Command line entry point: one worker process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.address, args.task_queue))


if __name__ == "__main__":
    # Run the module's own import (not ``__main__``), so the sandbox re-imports the
    # workflow by its module name.
    import bench_temporal_oai

    bench_temporal_oai.main()
