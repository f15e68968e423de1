"""A tiny stdio MCP server that ignores cancellation (run as a script; no SDK, one thread).

It speaks just enough JSON-RPC for a client to list and call its one tool, ``slow``,
which reports progress 0 (so a test knows the call arrived) and then never answers.
It ignores ``notifications/cancelled``, SIGTERM, and the end of its stdin: only SIGKILL
ends it. What happens is appended to the file named by its first argument, one word a
line: ``start <pid>``, ``called``, ``cancelled``, ``SIGTERM``, ``EOF``, in the order the
server saw them (the one thread reads stdin, so a SIGTERM that arrives while it waits
for input is noted before an end of input that comes after it).
"""

from __future__ import annotations

import json
import os
import signal
import sys

LOG = sys.argv[1]


def note(text: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(text + "\n")


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


TOOL = {
    "name": "slow",
    "description": "Takes forever and ignores cancellation.",
    "inputSchema": {"type": "object", "properties": {}},
}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: note("SIGTERM"))
    note(f"start {os.getpid()}")
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "result": {
                        "protocolVersion": params.get("protocolVersion"),
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "stubborn", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [TOOL]}})
        elif method == "tools/call":
            note("called")
            token = (params.get("_meta") or {}).get("progressToken")
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 0}})
        elif method == "notifications/cancelled":
            note("cancelled")
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": ident, "result": {}})
        elif ident is not None:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no method {method}"}})
    note("EOF")
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
