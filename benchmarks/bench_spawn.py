"""Spawn to ready: how long an editor or SDK that starts ketch per session waits for its
first answer, side by side with the interpreter's own start, in one run.

Each sample starts a fresh process, writes the client's first line and times until the
first line comes back (then kills the process):

- ``python -c "print(1)"``: the interpreter's start, the floor;
- ``ketch acp``: the ACP ``initialize`` request answered, and ``initialize`` then
  ``session/new`` answered (the agent built: what an editor waits for before a prompt);
- the same ``initialize`` answer served by the ``agent-client-protocol`` package's agent
  side (``benchmarks/_acp_package_agent.py``, ``acp.run_agent``): what ``ketch acp``
  would take on the official package instead of its hand-written JSON-RPC;
- ``ketch --output-format stream-json --verbose --input-format stream-json`` (the Claude
  Agent SDK's invocation): its ``initialize`` control request answered;
- ``ketch run --input-format stream-json -o stream-json``: the ``init`` line.

All on the scripted model (``KETCH_TEST_SCRIPT``), in an empty home and workspace.
Samples alternate between the commands; medians (and min, max) of ``--samples``.
``--src PATH`` measures another checkout's ``src`` (e.g. main's, for a before/after).

Run: ``python benchmarks/bench_spawn.py`` (prints a Markdown table); nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ACP_INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
SDK_INIT = {"type": "control_request", "request_id": "req_1", "request": {"subtype": "initialize", "hooks": None}}

ACP_NEW = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "WORK", "mcpServers": []}}

COMMANDS: list[tuple[str, list[str], list[dict[str, object]] | None]] = [
    ('python -c "print(1)"', ["-c", "print(1)"], None),
    ("ketch acp: initialize answered", ["-m", "ketch", "acp"], [ACP_INIT]),
    ("ketch acp: initialize and session/new answered", ["-m", "ketch", "acp"], [ACP_INIT, ACP_NEW]),
    (
        "the same initialize on the acp package's agent side",
        [str(ROOT / "benchmarks" / "_acp_package_agent.py")],
        [ACP_INIT],
    ),
    (
        "ketch, Claude SDK invocation: initialize answered",
        ["-m", "ketch", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json"],
        [SDK_INIT],
    ),
    ("ketch run stream-json: init line", ["-m", "ketch", "run", "--input-format", "stream-json", "-o", "stream-json"], None),
]


def once(args: list[str], first: list[dict[str, object]] | None, env: dict[str, str], cwd: str) -> float | None:
    """Seconds to the answer to the last request (None: the process answered nothing)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    assert proc.stdin is not None and proc.stdout is not None
    for request in first or ():
        proc.stdin.write(json.dumps(request).replace('"WORK"', json.dumps(cwd)).encode() + b"\n")
    proc.stdin.flush()
    line = b""
    for _ in first or [None]:  # the answer to the last request
        line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.kill()
    proc.wait()
    if not line or (first is not None and not _answered(line)):
        return None
    return elapsed


def _answered(line: bytes) -> bool:
    """Whether the first line answers the request (not an error line)."""
    try:
        data = json.loads(line)
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    if "jsonrpc" in data:
        return "result" in data
    response = data.get("response")
    return isinstance(response, dict) and response.get("subtype") == "success"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--src", default=str(ROOT / "src"), help="the checkout's src directory to measure")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        for name in ("home", "xdg", "work"):
            (base / name).mkdir()
        script = base / "script.json"
        script.write_text('["Hi."]')
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(base / "home"),
            "XDG_CONFIG_HOME": str(base / "xdg"),
            "PYTHONPATH": options.src,
            "KETCH_TEST_SCRIPT": str(script),
            "LANG": "C.UTF-8",
        }
        times: dict[str, list[float | None]] = {name: [] for name, _, _ in COMMANDS}
        for _ in range(options.samples):
            for name, args, first in COMMANDS:
                times[name].append(once(args, first, env, str(base / "work")))
    print(f"Python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {options.src}\n")
    print("| spawn to first line | median ms | min | max |\n|---|---:|---:|---:|")
    for name, values in times.items():
        ms = [v * 1000 for v in values if v is not None]
        if len(ms) < len(values):
            print(f"| {name} | no answer (an error, or nothing) | | |")
            continue
        print(f"| {name} | {statistics.median(ms):.0f} | {min(ms):.0f} | {max(ms):.0f} |")


if __name__ == "__main__":
    main()
