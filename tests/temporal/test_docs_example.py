"""The durable examples of docs/library/durable.md run as written: a worker and a client in one
script on the built-in coding tools, and a client that steers a run and exits. The model
is a loopback OpenAI-compatible server (a ``sitecustomize`` points the example's provider at
it); Temporal is the tests' dev server."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import temporal_app as test_app
from fake_openai import FakeOpenAI
from fake_openai import tool_results
from temporalio.client import Client

from ketch.llm import TextContent
from ketch.temporal import DevServer
from ketch.temporal import EventHub
from ketch.temporal import start_run

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "library" / "durable.md"
SRC = str(ROOT / "src")

SITECUSTOMIZE = """
import os
from ketch.llm import register_provider
register_provider("anthropic", api="openai-chat", base_url=os.environ["FAKE_MODEL_URL"],
                  api_key_env="FAKE_MODEL_KEY", requires_key=False)
"""


def _block(name: str) -> str:
    text = DOC.read_text()
    match = re.search(rf"<!-- tested: {re.escape(name)} -->\n```python\n(.*?)```\n", text, re.S)
    assert match is not None, f"no tested block {name} in {DOC}"
    return match.group(1)


def _env(tmp: Path, address: str, **extra: str) -> dict[str, str]:
    path = [SRC]
    if "FAKE_MODEL_URL" in extra:
        site = tmp / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        path.insert(0, str(site))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), TEMPORAL_ADDRESS=address,
                KETCH_IDEMPOTENCY_DIR=str(tmp / "journal"), **extra)


def _coder(body: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    results = tool_results(body)
    if not results:
        return "Looking.", [("bash", {"command": "ls"})]
    if len(results) == 1:
        return "Writing notes.", [("write", {"path": "NOTES.md", "content": "# Files\n" + results[0]})]
    return "Wrote NOTES.md.", []


async def test_the_durable_example_runs_as_written(temporal_server: DevServer, tmp_path: Path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    (work / "main.py").write_text("print('hi')\n")
    (work / "README.md").write_text("# repo\n")
    script = tmp_path / "coder.py"
    script.write_text(_block("coder.py"))
    async with FakeOpenAI(_coder) as model:
        env = _env(tmp_path, temporal_server.address, FAKE_MODEL_URL=model.url)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), cwd=work, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
    assert (proc.returncode, out.decode(), err.decode()) == (0, "stop - Wrote NOTES.md.\n", "")
    notes = (work / "NOTES.md").read_text()
    assert notes.startswith("# Files\n") and "README.md" in notes and "main.py" in notes
    first = model.requests[0]
    assert first["model"] == "claude-sonnet-4-5"
    assert first["messages"][0] == {"role": "system", "content": "You are a careful coding agent. Keep changes small."}
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["bash", "edit", "find", "grep", "ls", "read", "write"]
    assert [len(tool_results(r)) for r in model.requests] == [0, 1, 2]


async def test_the_steering_client_steers_and_exits_cleanly(
    client: Client, hub: EventHub, queue: str, work_dir: Path, in_process_worker: Any,
    temporal_server: DevServer, tmp_path: Path,
) -> None:
    script = tmp_path / "steer.py"
    script.write_text(_block("steer.py"))
    async with in_process_worker():
        run = await start_run(client, test_app.agent(), "gate", task_queue=queue, events=hub)
        async for _, event in run.events():
            if event["type"] == "tool_execution_update":
                break
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), run.id, "please hurry", env=_env(tmp_path, temporal_server.address),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert (proc.returncode, out.decode(), err.decode()) == (0, f"steered {run.id}\n", "")
        (work_dir / "gate").touch()
        result = await run.result()
    assert result.messages[-1].content[0] == TextContent(text="seen: gate, please hurry")  # type: ignore[union-attr]


def test_run_client_exit_codes(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(
        "import sys\nfrom ketch.temporal import run_client\n"
        "async def main():\n    print('out', flush=False)\n    if sys.argv[1] == 'fail':\n        raise ValueError('boom')\n"
        "run_client(main())\n"
    )
    env = dict(os.environ, PYTHONPATH=SRC)
    ok = subprocess.run([sys.executable, str(script), "ok"], env=env, capture_output=True, text=True, timeout=60)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "out\n", "")
    bad = subprocess.run([sys.executable, str(script), "fail"], env=env, capture_output=True, text=True, timeout=60)
    assert (bad.returncode, bad.stdout) == (1, "out\n")
    assert bad.stderr.startswith("Traceback (most recent call last):") and bad.stderr.endswith("ValueError: boom\n")
