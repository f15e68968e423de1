"""Every example program and every Python code block of the docs and the README runs.

Examples (``examples/**/*.py``) run as a user runs them, ``python examples/x.py``, in a
fresh process with no provider key and no ``KETCH_EXAMPLE_MODEL`` (so offline, on their
scripted models), in an isolated home; each must exit 0 and print what the test expects.
``test_*.py`` files under ``examples/`` are pytest files and run under pytest.

Python blocks (```` ```python ````) of ``README.md`` and ``docs/**/*.md`` (not
``docs/_incoming/``) run in this process, each on its own, in a fresh folder: a block
must be complete as written (its imports, every name it uses, ``asyncio.run(main())``
rather than a top-level ``await``). Lines of a block starting with ``#> `` are the
output the block prints, in order; when a block has them, its output must be exactly
those lines. A block that cannot run as Python (shell, TOML, output) is fenced as what
it is, not as ``python``. A block that includes an example (``--8<-- "examples/…"``)
is that example, run above. A block right after a ``<!-- tested: NAME -->`` line needs a
service this test does not start (a Temporal server, a model behind it): the test file
named in :data:`TESTED_ELSEWHERE` runs it as ``NAME``, and this test checks that it does.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# Modules an example starts itself (not programs of their own).
HELPERS = {"mcp/clock_server.py"}
# Arguments an example runs with here (one that would otherwise serve until Ctrl-C).
ARGS = {"aiohttp_app/app.py": ["--check"]}
# What each example must print (substrings of its output, in order).
EXPECTED = {
    "first_agent.py": ["2 + 40 = 42.", "stop: 2 model calls, 1 tool call(s)"],
    "agents/options.py": ["lead: stop None", "typo: Agent() got an unexpected keyword argument 'max_turn' "
                          "(did you mean 'max_turns'?)", "reviewer max_budget_usd: inherit -> 0.5",
                          "reviewer usage_limits: inherit -> tool_calls=20", "reviewer max_turns: override -> None",
                          "reviewer stop_when: reset -> 0"],
    "tools/custom_tools.py": ["[order] placing the order", "[order] confirmed", "orders: ['2 x pear (express)']"],
    "tools/coding_tools.py": ["-> read", "-> edit", 'print("hello, world")', "permission: edit allow"],
    "streaming/terminal.py": ["-> forecast({'city': 'Paris'})", "take an umbrella.", "[stop, 2 turns]",
                              "Bonjour! How can I help?"],
    "typed_output/weather.py": ["stop Weather(city='Paris', temperature_c=18, summary='light rain')", "partial:",
                                "final: Weather(city='Oslo', temperature_c=4, summary='clear and cold')"],
    "approval/another_process.py": ["waiting for approval: delete_build_dir({'path': 'build/'})",
                                    "resumed: stop: Done: build/ is deleted."],
    "sessions/resume_and_rewind.py": ["with 4 messages", "restored 4 messages",
                                      "deleted ['notes.md'] - notes.md exists: False"],
    "subagents/delegate.py": ["main/researcher#1 -> search_docs", "main/researcher#1: completed, 2 turns"],
    "teams/review.py": ["coder -> lead: Done: add() is written and reviewed.", "coder: sent 2, received 2",
                        "failures: 0"],
    "durable/durable_agent.py": ["book_room runs as an activity", "stop: The room is booked for Monday."],
    "mcp/capability.py": ["MCP tools: ['mcp__clock__now'] - the agent's own: []", "the tool said:", "I looked it up"],
    "mcp/use_a_server.py": ["tools: ['mcp__clock__now']", "the tool said:", "server clock: running"],
    "mcp/ketch_as_server.py": ["read: read-only=True", "1 buy milk", "write refused=True: Permission denied"],
    "providers/custom_model.py": ["Reversed: desserts", "2 tokens in, 4 tokens out"],
    "providers/openai_compatible.py": ["Hello from tiny-1!", "provider=mylab id=tiny-1 tokens=16"],
    "aiohttp_app/app.py": ["POST /ask -> {'answer': '2 + 40 = 42.'", 'data: {"delta": " 42."}', "event: done"],
    "testing/test_support_agent.py": ["3 passed"],
    "editors/claude_sdk.py": ["-> write({'path': 'hello.txt', 'content': 'hi\\n'})", "asked: write hello.txt",
                              "assistant: I wrote hello.txt.", "result: success, 2 turns", "hello.txt: hi"],
    "editors/acp_client.py": ["tool call: Read a.txt (read)", "tool call: Edit a.txt (edit)",
                              "diff a.txt: 'hello world\\n' -> 'hello there\\n'",
                              "permission for Edit a.txt: ['allow_once', 'allow_always', 'reject_once']",
                              "editor buffer a.txt <- 'hello there\\n'", "agent: Edited a.txt.",
                              "stop reason: end_turn"],
}


def _examples() -> list[str]:
    found = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.py"))
    return [p for p in found if p not in HELPERS]


def _isolated_env(home: Path) -> dict[str, str]:
    """The environment of a user with no keys and no settings: examples run offline."""
    env = {k: v for k, v in os.environ.items()
           if not k.endswith(("_API_KEY", "_TOKEN")) and k not in ("KETCH_EXAMPLE_MODEL", "TEMPORAL_ADDRESS")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
               KETCH_HOME=str(home / ".ketch"), PYTHONPATH=str(ROOT / "src"))
    return env


def test_every_example_is_checked() -> None:
    assert sorted(EXPECTED) == _examples()


@pytest.mark.parametrize("example", _examples())
def test_example_runs(example: str, tmp_path: Path) -> None:
    path = EXAMPLES / example
    if path.name.startswith("test_"):
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(ROOT), str(path)]
    else:
        command = [sys.executable, str(path), *ARGS.get(example, [])]
    done = subprocess.run(command, cwd=tmp_path, env=_isolated_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{example} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    position = 0
    for expected in EXPECTED[example]:
        found = done.stdout.find(expected, position)
        assert found >= 0, f"{example}: {expected!r} not in its output (after position {position}):\n{done.stdout}"
        position = found + len(expected)


# -- code blocks of the docs ------------------------------------------------------------

BLOCK_SECONDS = 120
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<info>[^\n`]*)$")
INCLUDE = re.compile(r'^--8<--\s+"(?P<path>[^"]+)"\s*$')


# The tests that run the blocks marked ``<!-- tested: NAME -->``, by the page holding them.
TESTED_ELSEWHERE = {"docs/library/durable.md": ROOT / "tests" / "temporal" / "test_docs_example.py"}
TESTED = re.compile(r"^<!-- tested: (?P<name>[\w.-]+) -->$")


@dataclass
class Block:
    file: str
    line: int
    code: str
    tested: str | None = None  # the name another test runs it as (``<!-- tested: NAME -->``)

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def documents() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "_incoming" not in p.relative_to(ROOT / "docs").parts]
    return [ROOT / "README.md", *docs]


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file (fences may be indented, as in admonitions)."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").strip()
        body: list[str] = []
        start = i + 1
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        language = info.split()[0].lower() if info else ""
        if language in ("python", "py"):
            marker = TESTED.match(lines[start - 2].strip()) if start >= 2 else None
            name = marker.group("name") if marker else None
            blocks.append(Block(str(path.relative_to(ROOT)), start, "\n".join(body) + "\n", name))
    return blocks


ALL_BLOCKS = [b for doc in documents() for b in python_blocks(doc)]
INCLUDED = [b for b in ALL_BLOCKS if INCLUDE.match(b.code.strip())]
ELSEWHERE = [b for b in ALL_BLOCKS if b.tested is not None]
RUNNABLE = [b for b in ALL_BLOCKS if not INCLUDE.match(b.code.strip()) and b.tested is None]


def test_blocks_tested_elsewhere_are_run_there() -> None:
    assert ELSEWHERE, "no <!-- tested: NAME --> block found: the marker parser finds nothing"
    for block in ELSEWHERE:
        runner = TESTED_ELSEWHERE.get(block.file)
        assert runner is not None, f"{block.id}: no test runs the tested blocks of {block.file}"
        source = runner.read_text()
        assert f'_block("{block.tested}")' in source, f"{block.id}: {runner.name} does not run {block.tested}"
        page = block.file.removeprefix("docs/")
        assert page in source, f"{runner.name} does not read {block.file}"


def test_blocks_that_include_a_file_include_a_checked_example() -> None:
    for block in INCLUDED:
        m = INCLUDE.match(block.code.strip())
        assert m is not None
        target = m.group("path")
        assert target.startswith("examples/"), f"{block.id}: a Python block includes {target}, not an example"
        name = target[len("examples/"):]
        assert name in EXPECTED or name in HELPERS, f"{block.id}: {target} is not a checked example"


def test_the_docs_have_python_blocks() -> None:
    # A parser that finds nothing would make the test below pass vacuously.
    assert len(RUNNABLE) >= 40, [b.id for b in RUNNABLE]


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_docs_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    for key in [k for k in os.environ if k.endswith(("_API_KEY", "_TOKEN")) or k == "KETCH_EXAMPLE_MODEL"]:
        monkeypatch.delenv(key)
    for key, value in _isolated_env(tmp_path).items():
        if key != "PYTHONPATH":
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    expected = [line[3:] if line.startswith("#> ") else "" for line in block.code.splitlines()
                if line.startswith("#>")]
    namespace = {"__name__": "__main__", "__file__": str(tmp_path / "block.py")}
    code = compile(block.code, block.id, "exec")
    # A block starts its own event loop (asyncio.run); none may be running here.
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    def too_long(signum: int, frame: object) -> None:
        raise TimeoutError(f"{block.id} ran for more than {BLOCK_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, too_long)  # a hanging block fails, not the suite
    signal.alarm(BLOCK_SECONDS)
    try:
        exec(code, namespace)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    printed = capsys.readouterr().out.splitlines()
    if expected:
        assert [line.rstrip() for line in printed] == expected, f"{block.id} printed:\n" + "\n".join(printed)
