"""The sandbox's cost per bash call: median wall time of ``true`` through the bash tool,
unsandboxed, with the sandbox's old argv (namespaces and mounts only, as before the
kernel and resource protections), and with each protection added in turn up to the
full sandbox of today: the user namespace, the kernel mounts (read-only ``/proc/sys``,
masked entries), the seccomp filter, the limits (the start handshake and the
rlimits), and the control group per command. In write mode and in plan mode (as root,
a plan-mode command runs as another user through ``setpriv``).

Run: ``python benchmarks/bench_sandbox.py [--runs N]`` (prints a Markdown table and the
machine). The variants take turns call by call, so a change in the machine's load
touches them alike. White-box: the variants switch parts of :class:`BubblewrapSandbox`
off; nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.sandbox import BubblewrapSandbox
from ketch.sandbox import default_sandbox
from ketch.sandbox import sandbox_unavailable_reason
from ketch.sandbox._limits import Cgroups
from ketch.tools import BashTool
from ketch.tools import Workspace

WARMUP = 3
STEPS = ("userns", "kernel", "seccomp", "limits", "cgroup")
LABELS = (
    "old argv",
    "+ user namespace (as root, plan mode: setpriv to nobody)",
    "+ kernel mounts",
    "+ seccomp filter",
    "+ limits (start handshake, rlimits)",
    "+ cgroup per command (= today)",
)


class Variant(BubblewrapSandbox):
    """The sandbox with only the protections of ``STEPS[:level]`` (and, without
    ``level``, no uid change either: the old argv)."""

    __slots__ = ("level",)

    def __init__(self, real: BubblewrapSandbox, level: int) -> None:
        super().__init__(real.bwrap)
        self.level = level
        assert self.unavailable_reason() is None
        if level < STEPS.index("seccomp") + 1:
            self._seccomp = None
        if level == 0:
            self._setpriv = None  # the old argv: root's commands ran as root
        if level < STEPS.index("userns") + 1:
            self._userns = ()
        if level < STEPS.index("cgroup") + 1:
            self._cgroups = Cgroups("/nonexistent")  # no group can be made

    def _kernel_mounts(self, as_root: bool = True) -> list[str]:  # type: ignore[override]
        return BubblewrapSandbox._kernel_mounts(as_root) if self.level > STEPS.index("kernel") else []

    def _control_fds(self, run: Any) -> list[str]:
        args = super()._control_fds(run)
        if self.level > STEPS.index("limits"):
            return args
        # no handshake: bwrap gets only the filter's descriptor (if any)
        keep = args[:2] if args[:1] == ["--seccomp"] else []
        for fd in run.child_fds[len(keep) // 2 :]:
            os.close(fd)
        run.child_fds = run.child_fds[: len(keep) // 2]
        for fd in (run.info, run.block):
            os.close(fd)
        run.info = run.block = -1
        return keep

    async def started(self, wrapped: Sequence[str], pid: int) -> str | None:
        if self.level > STEPS.index("limits"):
            return await super().started(wrapped, pid)
        entry = self._active.get(id(wrapped))
        if entry is not None:
            entry[1].close_child_fds()
        return None


async def _once(tool: BashTool, ctx: ToolContext[Any]) -> float:
    start = time.perf_counter()
    result = await tool.execute({"command": "true"}, ctx)
    elapsed = time.perf_counter() - start
    if result.is_error:
        raise RuntimeError(f"`true` failed: {result.text}")
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="calls per variant (default 50)")
    runs = parser.parse_args().runs
    sandbox = default_sandbox()
    if sandbox is None or not isinstance(sandbox, BubblewrapSandbox):
        sys.exit(f"no sandbox: {sandbox_unavailable_reason()}")
    names = list(LABELS)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        (root / ".git" / "hooks").mkdir(parents=True)
        (root / ".git" / "config").write_text("[core]\n")
        os.chmod(tmp, 0o755)
        ws = Workspace(root)
        tools: dict[tuple[str, str], BashTool] = {("unsandboxed", "-"): BashTool(ws)}
        for mode, write in (("write", True), ("plan", False)):
            for level, name in enumerate(names):
                tools[(name, mode)] = BashTool(ws, sandbox=Variant(sandbox, level), write_allowed=lambda w=write: w)
        ctx: ToolContext[Any] = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
        times: dict[tuple[str, str], list[float]] = {key: [] for key in tools}
        for i in range(WARMUP + runs):
            for key, tool in tools.items():
                elapsed = await _once(tool, ctx)
                if i >= WARMUP:
                    times[key].append(elapsed)
    median = {key: statistics.median(values) * 1000 for key, values in times.items()}
    print(f"median of {runs} `true` calls through the bash tool, variants taking turns\n")
    load = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
        f"{'root' if os.geteuid() == 0 else 'user ' + str(os.geteuid())}, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    print("| variant | write mode, ms | plan mode, ms |")
    print("|---|---|---|")
    print(f"| unsandboxed | {median[('unsandboxed', '-')]:.2f} | |")
    for name in names:
        print(f"| {name} | {median[(name, 'write')]:.2f} | {median[(name, 'plan')]:.2f} |")
    old, new = median[("old argv", "write")], median[(names[-1], "write")]
    print(f"\nthe protections cost {new - old:.2f} ms per call in write mode ({old:.2f} -> {new:.2f})")
    old, new = median[("old argv", "plan")], median[(names[-1], "plan")]
    print(f"and {new - old:.2f} ms in plan mode ({old:.2f} -> {new:.2f})")


if __name__ == "__main__":
    asyncio.run(main())
