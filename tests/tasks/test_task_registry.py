"""The background task registry: ids, output capture (incremental, bounded), wait, stop,
listeners, and the model's task tools."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tasks import TaskInfo
from ketch.tasks import TaskNotFoundError
from ketch.tasks import TaskRegistry


def _ctx() -> ToolContext[None]:
    return ToolContext(call_id="c1", tool_name="t", signal=AbortSignal())


async def _call(registry: TaskRegistry, name: str, **args: object) -> ToolResult:
    tool = {t.name: t for t in registry.tools()}[name]
    out = await tool.execute(dict(args), _ctx())
    assert isinstance(out, ToolResult)
    return out


async def test_a_task_runs_and_its_output_is_read_incrementally() -> None:
    registry = TaskRegistry()
    gate = asyncio.Event()

    async def work(write: Callable[[str], None]) -> str:
        write("one\n")
        await gate.wait()
        write("two\n")
        return "all done"

    info = registry.start(work, kind="job", description="counting")
    assert info.id == "job-1" and info.status == "running"
    first = await registry.wait_output(info.id, 0)
    assert (first.text, first.next_offset, first.dropped, first.status) == ("one\n", 4, 0, "running")
    gate.set()
    done = await registry.wait(info.id)
    assert (done.status, done.result) == ("completed", "all done")
    second = registry.output(info.id, since=first.next_offset)
    assert (second.text, second.next_offset, second.status) == ("two\n", 8, "completed")
    assert registry.output(info.id, since=8).text == ""
    assert registry.output(info.id).text == "one\ntwo\n"
    assert [t.id for t in registry.list()] == ["job-1"]


async def test_output_is_bounded_and_says_how_much_was_dropped() -> None:
    registry = TaskRegistry(max_output=10)

    async def work(write: Callable[[str], None]) -> None:
        write("abcdef")
        write("ghijklmnop")
        write("qrst")

    info = registry.start(work, kind="job")
    await registry.wait(info.id)
    out = registry.output(info.id, since=0)
    assert (out.text, out.dropped, out.next_offset) == ("klmnopqrst", 10, 20)
    assert registry.get(info.id).dropped_chars == 10
    assert registry.output(info.id, since=15).text == "pqrst"
    result = await _call(registry, "task_output", task_id=info.id)
    assert result.text == (
        "[10 earlier characters were dropped; showing what is kept]\nklmnopqrst\n[status: completed; next_offset: 20]"
    )


async def test_a_failing_task_is_failed_with_its_error() -> None:
    registry = TaskRegistry()

    async def work(write: Callable[[str], None]) -> None:
        raise ValueError("disk full")

    info = registry.start(work, kind="job")
    done = await registry.wait(info.id)
    assert (done.status, done.error) == ("failed", "ValueError: disk full")


async def test_stop_cancels_a_task_without_a_stop_function_and_listeners_hear_of_it() -> None:
    registry = TaskRegistry()
    heard: list[tuple[str, str]] = []
    registry.subscribe(lambda i: heard.append((i.id, i.status)))

    async def work(write: Callable[[str], None]) -> None:
        await asyncio.Event().wait()

    info = registry.start(work, kind="job")
    stopped = await registry.stop(info.id)
    assert stopped.status == "stopped"
    assert heard == [("job-1", "stopped")]
    assert registry.list(status="running") == []


async def test_stop_uses_the_tasks_stop_function() -> None:
    registry = TaskRegistry()
    signal = AbortSignal()

    async def work(write: Callable[[str], None]) -> str:
        await signal.wait()
        return "wound down"

    info = registry.start(work, kind="job", stop=signal.abort)
    stopped = await registry.stop(info.id)
    assert (stopped.status, stopped.result) == ("stopped", "wound down")


async def test_wait_with_a_timeout_returns_a_running_task() -> None:
    registry = TaskRegistry()

    async def work(write: Callable[[str], None]) -> None:
        await asyncio.Event().wait()

    info = registry.start(work, kind="job")
    assert (await registry.wait(info.id, timeout=0)).status == "running"
    result = await _call(registry, "task_wait", task_id=info.id, timeout=0)
    assert result.text.endswith("[still running; wait again or read its output with task_output]")
    await registry.stop(info.id)


async def test_unknown_ids_and_bad_offsets() -> None:
    registry = TaskRegistry()
    with pytest.raises(TaskNotFoundError, match=r"No task 'x-1' \(known tasks: none\)"):
        registry.output("x-1")
    result = await _call(registry, "task_stop", task_id="x-1")
    assert result.is_error and result.text == "No task 'x-1' (known tasks: none)"
    result = await _call(registry, "task_output", task_id="x-1", since=-1)
    assert result.is_error and result.text == "since must be an offset >= 0 (from next_offset), got -1."
    with pytest.raises(ValueError, match="max_output must be a positive number of characters, got 0"):
        TaskRegistry(max_output=0)


async def test_task_list_tool() -> None:
    registry = TaskRegistry()
    assert (await _call(registry, "task_list")).text == "No background tasks."

    async def work(write: Callable[[str], None]) -> int:
        write("x")
        return 3

    info = registry.start(work, kind="shell", description="make", prefix="bash")
    done: TaskInfo = await registry.wait(info.id)
    assert done.exit_code == 3
    text = (await _call(registry, "task_list")).text
    assert text.startswith("bash-1 [completed] shell: make (exit code 3) — ")
    assert text.endswith("s, 1 chars of output")
