"""Drive a ``ketch`` process from Python: :class:`Process` spawns ``ketch run
--input-format stream-json -o stream-json`` and speaks its control protocol.

This package imports nothing else of ketch (only the standard library), so an editor or
tool can embed it next to any installation of the ``ketch`` command::

    from ketch.client import Process

    async with Process("--model", "anthropic:claude-sonnet-4-5", cwd="project") as ketch:
        await ketch.prompt("fix the failing test")
        async for event in ketch.events():
            if event["type"] == "result":
                break
"""

from ._process import Process
from ._process import ProcessError

__all__ = ["Process", "ProcessError"]
