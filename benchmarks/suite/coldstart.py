"""Cold start: a fresh process that imports ketch and runs the benchmark task once.

Run by path, not as part of the ``suite`` package, so nothing else is imported first:
``python benchmarks/suite/coldstart.py URL T0`` where ``T0`` is the parent's
``time.monotonic()`` just before it started this process (``CLOCK_MONOTONIC`` is
system-wide on Linux, so the two clocks agree). Prints one JSON object of seconds
since ``T0``: interpreter ready, ``import ketch`` done, the first event of the run
(``agent_start``), the first streamed delta from the server, and the end of the run.
"""

import sys
import time

t_main = time.monotonic()

import asyncio  # noqa: E402
import json  # noqa: E402


def main() -> None:
    """Command line entry point."""
    url, t0 = sys.argv[1], float(sys.argv[2])
    import ketch
    from ketch import Agent
    from ketch import get_model
    from ketch import tool

    t_import = time.monotonic()
    marks: dict[str, float] = {}

    async def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a + b

    def listen(event: ketch.AgentEvent) -> None:
        if "first_event" not in marks:
            marks["first_event"] = time.monotonic()
        if event.type == "message_update" and "first_delta" not in marks:
            marks["first_delta"] = time.monotonic()

    async def run() -> str:
        model = get_model("openai:gpt-4o-mini", api="openai-chat", base_url=url, api_key="x")
        agent = Agent(model, tools=[tool(add)])
        agent.subscribe(listen)
        result = await agent.prompt("Add the numbers the tool asks for, three times, then write the report.")
        return result.end_reason

    reason = asyncio.run(run())
    t_end = time.monotonic()
    out = {
        "end_reason": reason,
        "interpreter_ready": t_main - t0,
        "import_done": t_import - t0,
        "import_ketch": t_import - t_main,
        "first_event": marks["first_event"] - t0,
        "first_delta": marks["first_delta"] - t0,
        "run_done": t_end - t0,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
