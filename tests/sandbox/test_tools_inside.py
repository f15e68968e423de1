"""White-box test: imports ketch implementation modules (private) directly.

The programs a coding agent runs still work inside the hardened sandbox (seccomp filter,
user namespace or another user, resource bounds): git, python, pip, node and gcc in
write mode, git and python in plan mode; and the bash tool's output log: capped, the
cut said, removed with the workspace's scratch folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ketch.sandbox as sandbox_module
from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.sandbox import Sandbox
from ketch.sandbox import default_sandbox
from ketch.tools import BashTool
from ketch.tools import Workspace

pytestmark = pytest.mark.usefixtures("scratch_in_tmp_path")


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    found = default_sandbox()
    if found is None:
        pytest.fail(f"these tests need a working sandbox: {sandbox_module.sandbox_unavailable_reason()}")
    return found


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    return root


async def _run(tool: BashTool, command: str, **args: Any) -> ToolResult:
    ctx = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
    return await tool.execute({"command": command, "timeout": 120, **args}, ctx)


async def test_git_python_pip_node_and_gcc_work_in_write_mode(sandbox: Sandbox, repo: Path) -> None:
    tool = BashTool(Workspace(repo), sandbox=sandbox, write_allowed=lambda: True)
    (repo / "a.txt").write_text("one\ntwo\n")
    assert (await _run(tool, "git status --short")).text == " M a.txt"
    committed = await _run(tool, "git -c user.name=t -c user.email=t@example.com commit -qam second && git log --format=%s")
    assert committed.text == "second\nfirst"
    assert (await _run(tool, "python3 -c 'import sys, json; print(json.dumps([sys.version_info.major]))'")).text == "[3]"
    pip = await _run(tool, "python3 -m pip --version")  # (not this venv's: a checkout under /tmp is hidden)
    assert pip.text.startswith("pip "), pip.text
    assert (await _run(tool, "node -e 'console.log(6 * 7)'")).text == "42"
    (repo / "hello.c").write_text('#include <stdio.h>\nint main(void) { puts("hello from gcc"); return 0; }\n')
    compiled = await _run(tool, "gcc -O1 -o hello hello.c && ./hello")
    assert compiled.text == "hello from gcc", compiled.text
    threads = await _run(tool, "python3 -c 'import concurrent.futures as f; print(sum(f.ThreadPoolExecutor(8).map(abs, range(100))))'")
    assert threads.text == "4950"


async def test_git_and_python_work_in_plan_mode(sandbox: Sandbox, repo: Path) -> None:
    tool = BashTool(Workspace(repo), sandbox=sandbox, write_allowed=lambda: False)
    (repo / "a.txt").write_text("one\nchanged\n")
    assert (await _run(tool, "git status --short")).text == " M a.txt"
    assert (await _run(tool, "git log --format=%s")).text == "first"
    assert (await _run(tool, "git diff --stat | tail -1")).text == " 1 file changed, 1 insertion(+)"
    assert (await _run(tool, "python3 -c 'print(open(\"a.txt\").read().split())'")).text == "['one', 'changed']"
    assert (await _run(tool, "node -e 'console.log(1 + 1)'")).text == "2"


async def test_the_grep_search_reads_what_ketch_may_read_bash_in_plan_mode_only_what_its_user_may(
    sandbox: Sandbox, repo: Path
) -> None:
    """The grep tool's search is ketch's own program, confined to the workspace: it runs as
    ketch's user. A plan-mode command of root runs as nobody and cannot read a file only
    root may read, even in the workspace."""
    from ketch.tools import GrepTool

    private = repo / "private.txt"
    private.write_text("needle in a private file\n")
    os.chmod(private, 0o600)
    grep = GrepTool(Workspace(repo), sandbox=sandbox)
    ctx = ToolContext(call_id="g", tool_name="grep", signal=AbortSignal())
    found = await grep.execute({"pattern": "needle"}, ctx)
    assert found.text == "private.txt:1:needle in a private file"
    plan = BashTool(Workspace(repo), sandbox=sandbox, write_allowed=lambda: False)
    read = await _run(plan, "cat private.txt")
    if os.geteuid() == 0:
        assert read.is_error
        assert read.text.startswith("cat: private.txt: Permission denied")
    else:
        assert read.text == "needle in a private file"


# --- the output log ---------------------------------------------------------------------------


def _contents(path: str) -> bytes:
    return Path(path).read_bytes()


def _gone(log: str) -> bool:
    """Whether the log and its scratch folder are gone."""
    return not os.path.exists(log) and not os.path.exists(os.path.dirname(log))


async def test_a_long_output_keeps_its_first_and_last_half_and_the_log_goes_with_the_scratch_folder(
    tmp_path: Path,
) -> None:
    ws = Workspace(tmp_path)
    tool = BashTool(ws)  # the log is the tool's, sandbox or not
    chunks: list[str] = []

    async def report(chunk: Any) -> None:
        chunks.append(chunk)

    ctx = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal(), report=report)
    command = "head -c 40000000 /dev/zero | tr '\\0' a | fold -w 79; echo LAST"
    result = await tool.execute({"command": command}, ctx)
    log = result.details["output_file"]
    data = _contents(log)
    half = 8 << 20
    assert data.startswith(b"a" * 79 + b"\n")
    assert data.endswith(b"a" * 79 + b"\n" + b"a" * 9 + b"LAST\n")  # 40,000,000 = 506,329 * 79 + 9
    marker = data[half : data.index(b"]\n", half) + 2]
    cut = 40_000_000 + 506_329 + len("LAST\n") - 2 * half  # the output's bytes but the log's
    assert marker == f"\n[... {cut} bytes of output cut here ...]\n".encode()
    assert len(data) == 2 * half + len(marker)
    assert result.text.endswith(
        "[output cut: the command wrote 38.6 MiB; its log keeps the first and the last 8 MiB (log limit 16 MiB)]"
    )
    assert f"The start and the end of the output are saved to {log}]" in result.text
    streamed = "".join(chunks)
    assert len(streamed.encode()) < (16 << 20) + 100
    assert streamed.endswith("\n[output no longer streamed after 16 MiB; the end is in the result]\n")
    ws.close()
    assert _gone(log)


async def test_a_log_under_the_limit_is_whole(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    tool = BashTool(ws)
    ctx = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
    result = await tool.execute({"command": "seq 1 200000"}, ctx)
    log = result.details["output_file"]
    assert _contents(log) == "".join(f"{n}\n" for n in range(1, 200001)).encode()
    assert "[output cut" not in result.text
    assert result.text.endswith(f" of 200000. Full output saved to {log}]")
    ws.close()
    assert _gone(log)


def test_the_scratch_folder_is_removed_when_the_program_exits(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from ketch.tools import BashTool, Workspace\n"
        "from ketch.loop import ToolContext\n"
        "from ketch.llm import AbortSignal\n"
        "tool = BashTool(Workspace(sys.argv[1]))\n"
        "ctx = ToolContext(call_id='c', tool_name='bash', signal=AbortSignal())\n"
        "r = asyncio.run(tool.execute({'command': 'seq 1 100000'}, ctx))\n"
        "print(r.details['output_file'])\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=src, TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env, check=True)
    log = Path(done.stdout.strip())
    assert log.parent.parent == tmp_path
    assert not log.exists()
    assert not log.parent.exists()
