"""The ``subagent`` tool and the runtime behind it: :class:`Subagents`."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import logging
import time
import types
from collections.abc import Callable
from collections.abc import Iterable
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import TypeAlias

import msgspec

from ..llm import AbortSignal
from ..llm import AssistantMessage
from ..llm import Message
from ..llm import Usage
from ..llm import exception_text
from ..llm import response_format_for
from ..loop import AgentEvent
from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolExecutionUpdate
from ..loop import ToolResult
from ..loop import derived_options
from ..permissions import PermissionEngine
from ..permissions import parse_mode
from ..sessions import Session
from ..tasks import TASK_TOOLS
from ..tasks import TaskFailed
from ..tasks import TaskNotifier
from ..tasks import TaskRegistry
from ..tasks import notify_agent
from ._events import SubagentEvent
from ._spec import SubagentSpec

if TYPE_CHECKING:
    from .. import Agent
    from ..worktrees import Worktree

log = logging.getLogger("ketch.subagents")

RunStatus: TypeAlias = Literal["running", "completed", "failed", "aborted"]
Mode: TypeAlias = Literal["single", "parallel", "chain", "background"]
MODES: tuple[Mode, ...] = ("single", "parallel", "chain", "background")

DEFAULT_MAX_DEPTH = 3
MAX_BATCH = 16
"""The most subagents one ``tasks`` or ``chain`` call may name."""

SUBAGENT_TOOLS: tuple[str, ...] = ("subagent", *TASK_TOOLS)
"""The names of the tools :meth:`Subagents.attach` may add: ``subagent`` and the tasks'."""

_OWN_TOOLS = frozenset(SUBAGENT_TOOLS)


@dataclasses.dataclass(slots=True)
class SubagentRun:
    """One subagent run: who, what it was asked, how it went, and its transcript.

    ``messages`` is the subagent's whole transcript (kept after it finished);
    ``session_id`` names its session in the parent's session store when the parent has
    a :class:`ketch.sessions.Session`. ``task_id`` is set for background runs.
    ``worktree`` is the git worktree a run of an ``isolation="worktree"`` agent worked in
    (kept after the run: merge it with ``ketch worktree merge NAME``).
    """

    path: str
    agent: str
    task: str
    status: RunStatus = "running"
    text: str = ""
    error: str | None = None
    usage: Usage = dataclasses.field(default_factory=Usage)
    turns: int = 0
    messages: list[Message] = dataclasses.field(default_factory=list)
    session_id: str | None = None
    task_id: str | None = None
    output: Any = None
    started: float = 0.0
    ended: float | None = None
    worktree: Worktree | None = None


class _Member(msgspec.Struct):
    agent: str
    task: str


_ITEM = {
    "type": "object",
    "properties": {
        "agent": {"type": "string", "description": "The subagent's name."},
        "task": {"type": "string", "description": "What it should do (all the context it needs)."},
    },
    "required": ["agent", "task"],
    "additionalProperties": False,
}


class Subagents:
    """Subagents for one parent agent, behind one ``subagent`` tool.

    ``Subagents(specs).attach(agent)`` adds the ``subagent`` tool to ``agent.tools`` (and
    the ``task_*`` tools of ``tasks`` when a registry is given and the agent lacks them).
    The tool has four modes: single (``agent``, ``task``), parallel (``tasks: [{agent,
    task}, ...]``, at most ``max_concurrency`` at once, results in the order given),
    chain (``chain: [...]``, each ``{previous}`` in a task replaced by the previous
    step's answer; stops at the first failure), and background (``background: true``
    with ``agent`` and ``task``: a task of ``tasks`` is started and its id returned at
    once; when it ends the parent hears of it: steering while it runs, a follow-up when
    idle, or a new run with ``start_runs=True``).

    Each subagent is a fresh :class:`ketch.Agent` with its own transcript, whose agent
    options come from the parent's as :data:`ketch.loop.INHERITANCE` says (its limits,
    budget, guardrails, permission gate and tool hooks bind the subagent; its stop
    controls, context manager and typed output do not), with the spec's ``max_turns``,
    ``thinking`` and ``permission_mode`` on top. Its final
    text is the tool's result, a failure (error, max turns, abort) is an error result
    naming the reason. Its usage is the result's ``usage`` keyed by its path, so it
    counts in the parent's run and is itemised in ``RunSummary.tool_usage``. Its events
    reach the parent's subscribers as :class:`SubagentEvent` partials of the call's
    ``tool_execution_update`` events. Aborting the parent's run aborts the subagents it
    is running, and stops its background ones unless ``background_survives_abort``.
    Subagents may start subagents (when a spec names the ``subagent`` tool) down to
    ``max_depth`` levels. :attr:`runs` keeps every run with its transcript.

    ``modes`` limits what the tool offers (e.g. ``("single",)`` for a small model: the
    schema then requires ``agent`` and ``task``); ``background`` needs ``tasks``.
    """

    def __init__(
        self,
        specs: Iterable[SubagentSpec],
        *,
        tasks: TaskRegistry | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_concurrency: int = 4,
        start_runs: bool = False,
        background_survives_abort: bool = False,
        path: str = "main",
        modes: Iterable[Mode] = MODES,
        _depth: int = 0,
    ) -> None:
        self.specs: dict[str, SubagentSpec] = {}
        for spec in specs:
            if spec.name in self.specs:
                raise ValueError(f"Two subagents are named {spec.name!r}")
            self.specs[spec.name] = spec
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency!r}")
        self.modes: frozenset[Mode] = frozenset(modes)
        unknown = sorted(set(self.modes) - set(MODES))
        if unknown or not self.modes:
            raise ValueError(f"modes must be some of {', '.join(MODES)}, got {sorted(self.modes)!r}")
        self.tasks = tasks
        self.max_depth = max_depth
        self.max_concurrency = max_concurrency
        self.start_runs = start_runs
        self.background_survives_abort = background_survives_abort
        self.path = path
        self.depth = _depth
        self.runs: dict[str, SubagentRun] = {}
        """Every run so far by path, in the order started."""
        self.parent: Agent[Any] | None = None
        self.notifier: TaskNotifier | None = None
        self._counters: dict[str, itertools.count[int]] = {}
        self._background: set[str] = set()
        self._stopping: set[asyncio.Task[Any]] = set()
        self._tool: Tool | None = None

    # -- wiring -------------------------------------------------------------------------
    def attach(self, agent: Agent[Any]) -> Subagents:
        """Make ``agent`` the parent: add the tool(s), deliver background completions to
        it, and stop background subagents when its run is aborted. Returns self."""
        if self.parent is not None:
            raise RuntimeError("These subagents are attached to an agent already")
        for spec in self.specs.values():
            if spec.permission_mode is not None:
                _engine_of(spec, agent.config.before_tool_call)
        self.parent = agent
        names = {t.name for t in agent.tools}
        if "subagent" not in names:
            agent.tools.append(self.tool())
        if self.tasks is not None:
            agent.tools.extend(t for t in self.tasks.tools() if t.name not in names)
            self.notifier = notify_agent(self.tasks, agent, start_run=self.start_runs, kinds=frozenset({"subagent"}))
        agent.subscribe(self._on_parent_event)
        return self

    def tool(self) -> Tool:
        """The ``subagent`` tool (one per :class:`Subagents`)."""
        if self._tool is None:
            self._tool = Tool(
                "subagent",
                self._description(),
                self._parameters(),
                self._execute,
                label="Subagent",
                # Delegating changes nothing by itself: each of the subagent's own calls
                # goes through the parent's before_tool_call (the permission engine).
                read_only=True,
            )
        return self._tool

    def _description(self) -> str:
        lines = [
            "Delegate work to a subagent: it works in its own context with its own tools and returns "
            "its final answer. Give it all the context it needs in `task`.",
            "Modes: `agent` + `task` (one); `tasks: [{agent, task}, ...]` (in parallel); "
            "`chain: [{agent, task}, ...]` (one after another; `{previous}` in a task is replaced by "
            "the previous answer)",
        ]
        if self._background_ok:
            lines[-1] += "; `background: true` with `agent` + `task` (returns a task id at once; you are "
            lines[-1] += "told when it finishes; see task_output, task_wait, task_stop)."
        else:
            lines[-1] += "."
        if not self.modes & {"parallel", "chain"}:
            lines[1] = "Give `agent` (which subagent) and `task` (what it should do)."
            if self._background_ok:
                lines[1] += " `background: true` runs it in the background (you are told when it finishes)."
        lines.append("Available agents:")
        for name in sorted(self.specs):
            lines.append(f"- {name}: {self.specs[name].description}")
        return "\n".join(lines)

    @property
    def _background_ok(self) -> bool:
        return self.tasks is not None and self.depth == 0 and "background" in self.modes

    def _parameters(self) -> dict[str, Any]:
        agent: dict[str, Any] = {"type": "string", "description": "The subagent's name."}
        if self.specs:
            agent["enum"] = sorted(self.specs)
        props: dict[str, Any] = {
            "agent": agent,
            "task": {"type": "string", "description": "What it should do (all the context it needs)."},
        }
        if "parallel" in self.modes:
            props["tasks"] = {"type": "array", "items": _ITEM, "maxItems": MAX_BATCH, "description": "Run these in parallel."}
        if "chain" in self.modes:
            props["chain"] = {"type": "array", "items": _ITEM, "maxItems": MAX_BATCH, "description": "Run these in order."}
        if self._background_ok:
            props["background"] = {"type": "boolean", "description": "Run in the background; returns a task id."}
            props["description"] = {"type": "string", "description": "A short label for a background run."}
        schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
        if not self.modes & {"parallel", "chain"}:
            schema["required"] = ["agent", "task"]
        return schema

    def _on_parent_event(self, event: AgentEvent) -> None:
        if event.type != "agent_end" or self.tasks is None or self.background_survives_abort:
            return
        if event.summary.end_reason != "aborted":
            return
        for task_id in list(self._background):
            info = self.tasks.get(task_id)
            if info.status == "running":
                stopping = asyncio.get_running_loop().create_task(self.tasks.stop(task_id))
                self._stopping.add(stopping)
                stopping.add_done_callback(self._stopping.discard)

    # -- the tool -------------------------------------------------------------------------
    async def _execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        given = [m for m in ("agent", "tasks", "chain") if args.get(m) not in (None, [], "")]
        if "single" not in self.modes and given == ["agent"] and args.get("background") is not True:
            return ToolResult.error("Single subagent calls are not offered here; use `tasks` or `chain`.")
        if len(given) != 1:
            return ToolResult.error(
                "Give exactly one mode: `agent` + `task`, `tasks: [...]` or `chain: [...]`"
                f" (got {', '.join(given) if given else 'none'})."
            )
        if self.depth + 1 > self.max_depth:
            return ToolResult.error(
                f"Subagent depth limit reached: {self.path} is at depth {self.depth} and max_depth is "
                f"{self.max_depth}; do this work yourself."
            )
        if given[0] == "agent":
            member = self._member(args)
            if isinstance(member, ToolResult):
                return member
            if args.get("background") is True:
                if not self._background_ok:
                    return ToolResult.error("Background subagents are not available here; run it in the foreground.")
                return self._start_background(member, args.get("description"), ctx)
            run = await self._run(member, ctx.signal, ctx)
            return self._single_result(run)
        try:
            members = msgspec.convert(args[given[0]], list[_Member])
        except msgspec.ValidationError as exc:
            return ToolResult.error(f"`{given[0]}` must be a list of {{agent, task}} objects: {exc}.")
        if len(members) > MAX_BATCH:
            return ToolResult.error(f"`{given[0]}` may name at most {MAX_BATCH} subagents, got {len(members)}.")
        for m in members:
            if m.agent not in self.specs:
                return self._unknown(m.agent)
        if given[0] == "tasks":
            return await self._parallel(members, ctx)
        return await self._chain(members, ctx)

    def _member(self, args: dict[str, Any]) -> _Member | ToolResult:
        name, task = args.get("agent"), args.get("task")
        if not isinstance(name, str) or name not in self.specs:
            return self._unknown(name)
        if not isinstance(task, str) or not task.strip():
            return ToolResult.error(f"`task` must be a non-empty string, got {task!r}.")
        return _Member(name, task)

    def _unknown(self, name: Any) -> ToolResult:
        known = ", ".join(sorted(self.specs)) or "none"
        return ToolResult.error(f"Unknown subagent {name!r}; available: {known}.")

    def _single_result(self, run: SubagentRun) -> ToolResult:
        details = self._details(run)
        usage = {run.path: run.usage}
        if run.status != "completed":
            text = f"Subagent {run.path} failed: {run.error}"
            return ToolResult(content=text, details=details, is_error=True, usage=usage)
        if run.output is not None:
            text = _output_json(run.output)
            details["output"] = msgspec.json.decode(text)
            return ToolResult(content=text, details=details, usage=usage)
        return ToolResult(content=_answer(run), details=details, usage=usage)

    @staticmethod
    def _details(run: SubagentRun) -> dict[str, Any]:
        return {
            "path": run.path,
            "agent": run.agent,
            "status": run.status,
            "turns": run.turns,
            "cost": run.usage.cost.total,
            "session_id": run.session_id,
            **({"worktree": run.worktree.name, "branch": run.worktree.branch} if run.worktree is not None else {}),
        }

    async def _parallel(self, members: list[_Member], ctx: ToolContext[Any]) -> ToolResult:
        gate = asyncio.Semaphore(self.max_concurrency)
        paths = [self._next_path(m.agent) for m in members]

        async def one(member: _Member, path: str) -> SubagentRun:
            async with gate:
                return await self._run(member, ctx.signal, ctx, path=path)

        async with asyncio.TaskGroup() as group:
            jobs = [group.create_task(one(m, p)) for m, p in zip(members, paths, strict=True)]
        runs = [j.result() for j in jobs]
        ok = sum(1 for r in runs if r.status == "completed")
        parts = [f"{ok}/{len(runs)} subagents succeeded."]
        for run in runs:
            if run.status == "completed":
                parts.append(f"--- {run.path}: completed\n{_answer(run)}")
            else:
                parts.append(f"--- {run.path}: {run.status}\n{run.error}")
        return ToolResult(
            content="\n\n".join(parts),
            details={"runs": [self._details(r) for r in runs]},
            is_error=ok == 0,
            usage={r.path: r.usage for r in runs},
        )

    async def _chain(self, members: list[_Member], ctx: ToolContext[Any]) -> ToolResult:
        runs: list[SubagentRun] = []
        previous = ""
        for step, member in enumerate(members, start=1):
            task = member.task.replace("{previous}", previous)
            run = await self._run(_Member(member.agent, task), ctx.signal, ctx)
            runs.append(run)
            if run.status != "completed":
                done = "".join(f"\n\n--- {r.path}: completed\n{_answer(r)}" for r in runs[:-1])
                return ToolResult(
                    content=f"Chain stopped at step {step} ({run.path}): {run.error}{done}",
                    details={"runs": [self._details(r) for r in runs]},
                    is_error=True,
                    usage={r.path: r.usage for r in runs},
                )
            previous = _output_json(run.output) if run.output is not None else run.text
        return ToolResult(
            content=_answer(runs[-1]) if runs else "(no output)",
            details={"runs": [self._details(r) for r in runs]},
            usage={r.path: r.usage for r in runs},
        )

    def _start_background(self, member: _Member, description: Any, ctx: ToolContext[Any]) -> ToolResult:
        registry = self.tasks
        if registry is None or self.depth != 0:
            return ToolResult.error("Background subagents are not available here; run it in the foreground.")
        signal = AbortSignal()
        path = self._next_path(member.agent)
        label = description if isinstance(description, str) and description.strip() else member.task[:80]

        async def work(write: Callable[[str], None]) -> str:
            run = await self._run(member, signal, None, path=path, write=write)
            if run.status != "completed":
                raise TaskFailed(run.error or run.status)
            return _answer(run)

        info = registry.start(
            work, kind="subagent", description=f"{member.agent}: {label}", prefix="agent", stop=signal.abort
        )
        self._background.add(info.id)
        self.runs[path] = SubagentRun(path=path, agent=member.agent, task=member.task, task_id=info.id, started=time.time())
        return ToolResult(
            content=f"Started background subagent {info.id} ({path}). You will be told when it finishes; "
            "task_output, task_wait and task_stop work on it.",
            details={"task_id": info.id, "path": path, "agent": member.agent},
        )

    # -- one run ----------------------------------------------------------------------------
    def _next_path(self, name: str) -> str:
        counter = self._counters.setdefault(name, itertools.count(1))
        return f"{self.path}/{name}#{next(counter)}"

    def _child_tools(self, spec: SubagentSpec, path: str) -> tuple[list[Tool], Subagents | None]:
        parent = self.parent
        assert parent is not None
        inherited = {t.name: t for t in parent.tools}
        nested: Subagents | None = None
        if spec.tools is None:
            return [t for t in parent.tools if t.name not in _OWN_TOOLS], None
        tools: list[Tool] = []
        for item in spec.tools:
            if isinstance(item, Tool):
                tools.append(item)
            elif item == "subagent":
                nested = Subagents(
                    self.specs.values(),
                    max_depth=self.max_depth,
                    max_concurrency=self.max_concurrency,
                    path=path,
                    modes=self.modes - {"background"} or {"single"},
                    _depth=self.depth + 1,
                )
            elif item in inherited:
                tools.append(inherited[item])
            else:
                known = ", ".join(sorted(inherited)) or "none"
                raise _SubagentFailed(f"agent {spec.name!r} names tool {item!r}, which the parent lacks (it has: {known})")
        return tools, nested

    def _child(
        self, spec: SubagentSpec, path: str, session: Session | None, worktree: Worktree | None = None
    ) -> tuple[Agent[Any], Subagents | None]:
        from .. import Agent

        parent = self.parent
        if parent is None:
            raise RuntimeError("Subagents.attach(agent) first: a subagent needs its parent agent")
        cfg = parent.config
        tools, nested = self._child_tools(spec, path)
        if worktree is not None:
            from ..worktrees import rebase_tools

            tools = rebase_tools(tools, worktree.path)
        before = cfg.before_tool_call
        if spec.permission_mode is not None:
            try:
                parent_engine = _engine_of(spec, before)
            except ValueError as exc:
                raise _SubagentFailed(str(exc)) from None
            engine = copy.copy(parent_engine)
            # a parent in plan mode is read-only for everything it starts: no subagent loosens it
            engine.mode = "plan" if parent_engine.mode == "plan" else parse_mode(spec.permission_mode)
            before = engine.before_tool_call
        overrides: dict[str, Any] = {"max_turns": spec.max_turns, "before_tool_call": before}
        if spec.thinking is not None:
            overrides["thinking"] = spec.thinking
        options = derived_options(cfg, overrides)
        if spec.output_type is not None:
            options["options"] = msgspec.structs.replace(
                options["options"], response_format=response_format_for(spec.output_type)
            )
        child: Agent[Any] = Agent(
            spec.model if spec.model is not None else parent.model,
            system_prompt=spec.system_prompt,
            tools=tools,
            session=session,
            **options,
        )
        if nested is not None:
            nested.attach(child)
        return child, nested

    async def _run(
        self,
        member: _Member,
        signal: AbortSignal,
        ctx: ToolContext[Any] | None,
        *,
        path: str | None = None,
        write: Callable[[str], None] | None = None,
    ) -> SubagentRun:
        """Run one subagent to its end; never raises except for cancellation."""
        spec = self.specs[member.agent]
        path = path or self._next_path(member.agent)
        run = self.runs.get(path) or SubagentRun(path=path, agent=spec.name, task=member.task, started=time.time())
        self.runs[path] = run
        session: Session | None = None
        remove: Callable[[], None] | None = None
        try:
            parent_session = self.parent.session if self.parent is not None else None
            if isinstance(parent_session, Session):
                session = await Session.create(parent_session.store, cwd=parent_session.cwd or None, checkpoints=False)
                run.session_id = session.id
            if spec.isolation == "worktree":
                run.worktree = await self._worktree(spec)
            child, _ = self._child(spec, path, session, run.worktree)
            run.messages = child.messages
            if ctx is not None:
                child.subscribe(_forwarder(path, ctx))
            if write is not None:
                child.subscribe(_writer(write))
            if signal.aborted:
                child.abort()
                run.status, run.error = "aborted", "the parent's run was aborted before it started"
                return run
            remove = signal.add_callback(child.abort)
            result = await child.prompt(member.task)
            run.messages = child.messages
            run.usage = result.usage
            run.turns = result.summary.turns
            run.text = result.text
            reason = result.end_reason
            if reason == "stop" and spec.output_type is not None:
                try:
                    run.output = result.parse(spec.output_type)
                    run.status = "completed"
                except ValueError as exc:  # StructuredOutputError
                    run.status, run.error = "failed", f"its answer is not a valid {_type_name(spec.output_type)}: {exc}"
            elif reason == "stop":
                run.status = "completed"
            elif reason == "aborted":
                run.status, run.error = "aborted", "aborted"
            else:
                run.status = "failed"
                run.error = f"{reason}: {result.summary.error}" if result.summary.error else reason
        except _SubagentFailed as exc:
            run.status, run.error = "failed", str(exc)
        except asyncio.CancelledError:
            run.status, run.error = "aborted", "cancelled"
            raise
        except Exception as exc:  # a model that cannot be resolved, a session store failing
            run.status, run.error = "failed", exception_text(exc)
        finally:
            if remove is not None:
                remove()
            run.ended = time.time()
            if session is not None:
                try:
                    await session.close()
                except Exception:
                    log.exception("Closing the session of subagent %s failed", path)
        return run

    async def _worktree(self, spec: SubagentSpec) -> Worktree:
        """A new worktree for one run of ``spec``, made from the parent's workspace (its
        file tools' root, else its session's folder, else the current one)."""
        from ..worktrees import WorktreeError
        from ..worktrees import create_worktree

        parent = self.parent
        root: Any = None
        for tool in parent.tools if parent is not None else ():
            root = getattr(getattr(tool, "workspace", None), "root", None)
            if root is not None:
                break
        if root is None and parent is not None and isinstance(parent.session, Session):
            root = parent.session.cwd or None
        try:
            return await asyncio.to_thread(create_worktree, root or ".", prefix=spec.name[:50])
        except WorktreeError as exc:
            raise _SubagentFailed(f"agent {spec.name!r} needs a worktree (isolation: worktree): {exc}") from None

    def transcript(self, path: str) -> list[Message]:
        """The transcript of the run ``path`` (also after it finished)."""
        run = self.runs.get(path)
        if run is None:
            raise KeyError(f"No subagent run {path!r} (runs: {', '.join(self.runs) or 'none'})")
        return run.messages

    def __repr__(self) -> str:
        return f"Subagents(path={self.path!r}, agents={sorted(self.specs)!r}, runs={len(self.runs)})"


def _engine_of(spec: SubagentSpec, before: object) -> PermissionEngine:
    """The permission engine whose gate ``before`` is, for a spec that sets a mode; a
    ValueError when there is none (the mode cannot be enforced: fail closed)."""
    if isinstance(before, types.MethodType) and isinstance(before.__self__, PermissionEngine):
        return before.__self__
    raise ValueError(
        f"agent {spec.name!r} sets permission_mode {spec.permission_mode!r}, which needs the parent's "
        "before_tool_call to be a PermissionEngine's (before_tool_call=engine.before_tool_call)"
    )


class _SubagentFailed(Exception):
    pass


def _answer(run: SubagentRun) -> str:
    """A finished run's answer for the parent: its structured output as JSON, else its text."""
    text = _output_json(run.output) if run.output is not None else run.text or "(no output)"
    if run.worktree is not None:
        text += (
            f"\n\n(Worked in git worktree {run.worktree.name}, branch {run.worktree.branch}, at {run.worktree.path}; "
            f"its changes are there, not in your workspace: ketch worktree merge {run.worktree.name})"
        )
    return text


def _type_name(type_: Any) -> str:
    return getattr(type_, "__name__", None) or str(type_)


def _output_json(value: Any) -> str:
    dump = getattr(value, "model_dump", None)
    data = dump(mode="json") if callable(dump) else msgspec.to_builtins(value)
    return msgspec.json.encode(data).decode()


def _forwarder(path: str, ctx: ToolContext[Any]) -> Callable[[AgentEvent], Any]:
    async def forward(event: AgentEvent) -> None:
        if type(event) is ToolExecutionUpdate and isinstance(event.partial, SubagentEvent):
            await ctx.report(event.partial)  # a nested subagent's event, already tagged
        else:
            await ctx.report(SubagentEvent(path=path, event=event))

    return forward


def _writer(write: Callable[[str], None]) -> Callable[[AgentEvent], None]:
    def record(event: AgentEvent) -> None:
        if event.type == "message_end" and type(event.message) is AssistantMessage:
            text = event.message.text
            if text:
                write(text + "\n")
        elif event.type == "tool_execution_start":
            write(f"→ {event.tool_name}\n")

    return record

