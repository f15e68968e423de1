"""Imports ketch implementation modules (private) directly, to measure them.

The cost of one more turn on a long transcript, against the scripted server.

Run: ``python -m suite.history --url-base http://127.0.0.1:PORT`` (from
``benchmarks/``); prints one JSON object. For each transcript size (10, 1,000, 10,000
messages of user prompts, tool calls, tool results and answers) one ``Agent`` holds
the transcript and answers one more prompt per turn: one request carrying the whole
history, a streamed answer of ``CHUNKS`` pieces. Each measurement uses a fresh agent
on the transcript whose first turn is not measured (it converts the whole history once),
so the measured turn sees ``n + 2`` messages. The sizes take turns, one measured turn
each, so that the host's slower spells spread over all of them and every size runs in
the same process state. Reported per turn (median): wall time, client CPU
(``time.process_time``), and two parts of it, both timed inside the measured turn: encoding the request (the adapter's ``build_request`` plus JSON encoding of the
body, in ``HTTPModel._prepare``) and sending it (the CPU spent in the session's
``post`` call until the response headers arrive: writing the body, then waiting), so
the cost beyond encoding and sending can be compared across sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from typing import Any

from . import script

SIZES = (10, 1_000, 10_000)
CHUNKS = 50
TURNS = 30
WARMUP = 3


def transcript(n: int) -> list[Any]:
    """``n`` messages: exchanges of prompt, tool call, tool result, answer."""
    from ketch.llm import AssistantMessage
    from ketch.llm import TextContent
    from ketch.llm import ToolCall
    from ketch.llm import ToolResultMessage
    from ketch.llm import UserMessage

    out: list[Any] = []
    i = 0
    while len(out) + 4 <= n:
        out.append(UserMessage(content=f"Question {i}: what is {i} plus {i + 1}? Please use the tool."))
        call = ToolCall(id=f"call_{i}", name="add", args={"a": i, "b": i + 1})
        out.append(
            AssistantMessage(
                content=[call],
                stop_reason="tool_use",
                provider="openai",
                api="openai-chat",
                model=script.MODEL,
            )
        )
        out.append(
            ToolResultMessage(
                tool_call_id=f"call_{i}", tool_name="add", content=[TextContent(text=str(2 * i + 1))]
            )
        )
        answer = f"The sum of {i} and {i + 1} is {2 * i + 1}. " + "It was computed with the add tool. " * 4
        out.append(
            AssistantMessage(
                content=[TextContent(text=answer)], provider="openai", api="openai-chat", model=script.MODEL
            )
        )
        i += 1
    while len(out) + 2 <= n:
        out.append(UserMessage(content=f"Note {i}."))
        out.append(
            AssistantMessage(
                content=[TextContent(text="Noted.")], provider="openai", api="openai-chat", model=script.MODEL
            )
        )
        i += 1
    assert len(out) == n, (len(out), n)
    return out


class _Size:
    """One transcript size: its model (request encoding timed), transcript and figures."""

    def __init__(self, url: str, n: int, spent: list[float], sizes: list[int]) -> None:
        from ketch import get_model
        from ketch.llm._providers.base import HTTPModel

        model = get_model("openai:" + script.MODEL, api="openai-chat", base_url=url, api_key="x")
        assert isinstance(model, HTTPModel)
        prepare = model._prepare

        async def timed_prepare(*args: Any, **kwargs: Any) -> Any:
            c = time.process_time()
            try:
                prepared = await prepare(*args, **kwargs)
            finally:
                spent.append(time.process_time() - c)
            sizes.append(sum(len(piece) for piece in prepared[1]))
            return prepared

        model._prepare = timed_prepare  # type: ignore[method-assign]
        self.n = n
        self.model = model
        self.base = transcript(n)
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.encodes: list[float] = []
        self.posts: list[float] = []
        self.request_bytes = 0

    def row(self) -> dict[str, Any]:
        """The medians of this size's measured turns."""
        cpu, enc = statistics.median(self.cpus), statistics.median(self.encodes)
        send = statistics.median(self.posts)
        return {
            "messages": self.n,
            "request_kb": self.request_bytes / 1024,
            "wall_ms": statistics.median(self.walls) * 1e3,
            "cpu_ms": cpu * 1e3,
            "encode_ms": enc * 1e3,
            "send_ms": send * 1e3,
            "cpu_beyond_encode_ms": (cpu - enc) * 1e3,
            "cpu_beyond_encode_send_ms": (cpu - enc - send) * 1e3,
        }


async def run(url_base: str) -> dict[str, Any]:
    """All sizes, measured alternately turn by turn (so that a slower spell of the
    machine does not fall on one size only); ratios against the smallest."""
    import aiohttp

    from ketch import Agent
    from ketch import tool

    from .script import add_numbers

    url = url_base + script.base_path(0, CHUNKS) + "/v1"
    add = tool(name="add")(add_numbers)
    expected = "".join(script.text_chunks([], CHUNKS))
    # Encoding and sending are timed inside the measured turn itself: the adapter's
    # _prepare builds the request body and encodes it; the session's post call sends it
    # and returns once the response headers are in.
    spent: list[float] = []
    sent: list[float] = []
    sizes: list[int] = []
    post = aiohttp.ClientSession.post

    def timed_post(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> Any:
        async def timed() -> Any:
            c = time.process_time()
            try:
                return await post(self, *args, **kwargs)
            finally:
                sent.append(time.process_time() - c)

        return timed()

    state = [_Size(url, n, spent, sizes) for n in SIZES]
    aiohttp.ClientSession.post = timed_post  # type: ignore[method-assign]
    try:
        for rep in range(WARMUP + TURNS):
            for size in state:
                n = size.n
                # A fresh agent per measurement keeps the transcript at n + 2 messages;
                # its first turn (which converts the whole history once) is not measured.
                agent = Agent(size.model, tools=[add], messages=size.base)
                await agent.prompt("A question before the measured turn.")
                gc.collect()
                spent.clear()
                sent.clear()
                sizes.clear()
                w0 = time.perf_counter()
                c0 = time.process_time()
                result = await agent.prompt("One more question.")
                c1 = time.process_time()
                w1 = time.perf_counter()
                if result.end_reason != "stop" or result.text != expected:
                    raise RuntimeError(f"at {n} messages: {result.end_reason} {result.summary.error}")
                if len(spent) != 1 or len(sent) != 1:
                    raise RuntimeError(f"at {n} messages: {len(spent)} requests prepared, {len(sent)} posted")
                if rep >= WARMUP:
                    size.walls.append(w1 - w0)
                    size.cpus.append(c1 - c0)
                    size.encodes.append(spent[0])
                    size.posts.append(sent[0])
                    size.request_bytes = sizes[0]
    finally:
        aiohttp.ClientSession.post = post  # type: ignore[method-assign]
    rows = [size.row() for size in state]
    base = rows[0]
    for row in rows:
        row["cpu_ratio"] = row["cpu_ms"] / base["cpu_ms"]
        row["wall_ratio"] = row["wall_ms"] / base["wall_ms"]
        row["cpu_beyond_encode_ratio"] = row["cpu_beyond_encode_ms"] / base["cpu_beyond_encode_ms"]
        row["cpu_beyond_encode_send_ratio"] = (
            row["cpu_beyond_encode_send_ms"] / base["cpu_beyond_encode_send_ms"]
        )
    return {"chunks": CHUNKS, "turns": TURNS, "rows": rows}


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--url-base", required=True)
    args = parser.parse_args()
    json.dump(asyncio.run(run(args.url_base)), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
