"""``ketch acp``'s ``initialize`` served by the official ``agent-client-protocol`` package's
agent side (``acp.run_agent``) instead of ketch's hand-written JSON-RPC: the same answer
(ketch's :meth:`AcpAgent.initialize`), validated into the package's ``InitializeResponse``
and sent by its connection. Only ``initialize`` is served: what bench_spawn.py times.

Not a way to run ketch; a measuring stick for the choice in src/ketch/cli/_acp.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import acp
from acp.schema import InitializeResponse

from ketch.cli._acp import AcpAgent
from ketch.cli._stdio import JsonLines


class PackageAgent:
    """The package's agent interface, answering ``initialize`` as ketch does."""

    def __init__(self) -> None:
        self.ketch = AcpAgent([], JsonLines(on_broken=lambda: None))

    def on_connect(self, conn: Any) -> None:
        pass

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None, **kw: Any) -> Any:
        params = {"protocolVersion": protocol_version, "clientCapabilities": {}}
        return InitializeResponse.model_validate(self.ketch.initialize(params))


if __name__ == "__main__":
    asyncio.run(acp.run_agent(PackageAgent()))
