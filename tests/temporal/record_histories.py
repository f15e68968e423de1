"""Record the workflow histories the replay tests replay (tests/temporal/histories/).

Run from the repository root when the workflow changes on purpose (a change that
breaks replay of these histories would break runs in flight across a deploy)::

    PYTHONPATH=src python tests/temporal/record_histories.py [scenario ...]

Without scenarios every history is recorded again; with some, only those (a new scenario
without re-recording the old ones, which keep testing that runs started by earlier
versions still replay). ``wrapped`` is a run of an agent wrapped by DurableAgent with
worker-side hooks (a guardrail, stop_when), usage limits and the bash tool's per-call
decision.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from aiohttp import web  # noqa: E402
from temporalio.client import Client  # noqa: E402

from ketch.loop import approve  # noqa: E402
from ketch.temporal import DevServer  # noqa: E402
from ketch.temporal import EventHub  # noqa: E402
from ketch.temporal import build_worker  # noqa: E402
from ketch.temporal import start_run  # noqa: E402


async def main(only: list[str]) -> None:
    work = tempfile.mkdtemp()
    os.environ["KETCH_TEMPORAL_DIR"] = work
    os.environ["KETCH_IDEMPOTENCY_DIR"] = os.path.join(work, "journal")
    (Path(work) / "work").mkdir()
    import temporal_app as test_app

    async with DevServer() as server, EventHub() as hub:
        client = await Client.connect(server.address)
        agent = test_app.agent()
        writer = test_app.writer()
        async with build_worker(client, task_queue="record", agents=[agent, writer]):
            runs = {}
            if only == ["wrapped"]:
                run = await start_run(client, writer, "shell", task_queue="record", id="wrapped")
                await run.result()
                runs["wrapped"] = run
                await _save(runs)
                return
            run = await start_run(client, agent, "rounds 2", task_queue="record", id="rounds", events=hub)
            await run.result()
            runs["rounds"] = run

            run = await start_run(client, agent, "gate", task_queue="record", id="steering", events=hub)
            async for _, e in run.events():
                if e["type"] == "tool_execution_update":
                    break
            await run.steer("s1")
            await run.follow_up("f1")
            (Path(work) / "gate").touch()
            await run.result()
            runs["steering"] = run

            run = await start_run(client, agent, "approve", task_queue="record", id="approval")
            while (await run.state())["status"] != "awaiting_approval":  # noqa: ASYNC110  (a script)
                await asyncio.sleep(0.05)
            await run.decide({"call_danger": approve()})
            await run.result()
            runs["approval"] = run

            run = await start_run(client, agent, "pure", task_queue="record", id="pure")
            await run.result()
            runs["pure"] = run

            long = test_app.agent(max_history_events=20)
            run = await start_run(client, long, "rounds 4", task_queue="record", id="continued")
            assert (await run.result()).generations > 1
            runs["continued"] = run  # its last workflow run, started by continue-as-new

            # a follow-up signalled while the run publishes its last events (workflow.patched path)
            ending, release = asyncio.Event(), asyncio.Event()

            async def post(request: web.Request) -> web.Response:
                items = await request.json()
                if any(i["event"]["type"] == "turn_end" for i in items) and not ending.is_set():
                    ending.set()
                    await release.wait()
                return web.Response(status=204)

            blocking = web.Application()
            blocking.router.add_post("/runs/{run}/events", post)
            runner = web.AppRunner(blocking)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            run = await start_run(client, agent, "hello", task_queue="record", id="late", events=f"http://127.0.0.1:{port}")
            await ending.wait()
            await run.follow_up("more")
            release.set()
            await run.result()
            await runner.cleanup()
            runs["late"] = run

            (Path(work) / "gate").unlink()
            run = await start_run(client, agent, "gate", task_queue="record", id="abort", events=hub)
            async for _, e in run.events():
                if e["type"] == "tool_execution_update":
                    break
            await run.abort()
            await run.result()
            runs["abort"] = run

        await _save(runs)


async def _save(runs: dict[str, Any]) -> None:
    for name, run in runs.items():
        history = await run.workflow.fetch_history()
        (HERE / "histories" / f"{name}.json").write_text(history.to_json())
        print(name, len(history.events), "events")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
