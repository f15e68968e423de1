"""``ketch run -o stream-json`` stays linear in the size of a tool call: a scripted 1 MB
``write`` streamed in 8-character fragments writes under 3 MB (it wrote tens of GB when
every fragment's line repeated the arguments parsed so far).

Black-box: runs the command; asserts on bytes and lines, never on time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from clihelp import Env

LIMIT = 3_000_000
CONTENT = "".join(f'    value_{i} = compute("item {i}", path="C:\\\\data")  # step {i}\n' for i in range(16_000))


def _stream_json(env: Env, script: str) -> bytes:
    """The command's stdout, read as it comes; stopped past :data:`LIMIT` bytes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ketch", "run", "--model", f"scripted:{script}", "--no-session", "--no-compaction",
         "--permission-mode", "accept_edits", "-o", "stream-json", "write big.py"],
        cwd=env.work, env=env.vars, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    out = bytearray()
    try:
        while chunk := proc.stdout.read(1 << 16):
            out += chunk
            if len(out) > LIMIT:
                break
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=60)
    assert len(out) <= LIMIT, f"stream-json wrote more than {LIMIT} bytes for a 1 MB call"
    assert proc.returncode == 0, err.decode()
    return bytes(out)


def test_a_1mb_write_streams_in_under_3mb_with_its_fragments_joined(env: Env) -> None:
    assert len(CONTENT) > 1_000_000
    args = {"path": "big.py", "content": CONTENT}
    call = {"type": "tool_call", "id": "w1", "name": "write", "args": args}
    script = env.script([{"blocks": [call], "chunk_size": 8}, "Done."])
    events: list[dict[str, Any]] = [json.loads(line) for line in _stream_json(env, script).splitlines()]
    updates = [e["event"] for e in events if e["type"] == "message_update"]
    deltas = [u for u in updates if u["type"] == "toolcall_delta"]
    # The fragments carry only themselves; joined, they are the call's JSON arguments.
    assert all(set(d) == {"type", "index", "delta"} and d["index"] == 0 for d in deltas)
    text = "".join(d["delta"] for d in deltas)
    assert json.loads(text) == args
    # 8-character fragments go out joined, up to 1024 characters a line
    assert all(len(d["delta"]) == 1024 for d in deltas[:-1])
    assert len(deltas) == -(-len(text) // 1024)
    assert [u for u in updates if u["type"] in ("toolcall_start", "toolcall_end")] == [
        {"type": "toolcall_start", "index": 0, "id": "w1", "name": "write"},
        {"type": "toolcall_end", "index": 0, "id": "w1", "name": "write"},
    ]
    # The arguments in full: once, in the assistant message; the tool events name the call.
    [message] = [e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == "assistant"][:1]
    assert message["content"] == [call]
    assert [e for e in events if e["type"] == "tool_execution_start"] == [
        {"type": "tool_execution_start", "tool_call_id": "w1", "tool_name": "write"}
    ]
    assert (env.work / "big.py").read_text() == CONTENT
    assert events[-1]["type"] == "result" and events[-1]["text"] == "Done."
