"""``ketch run``: one task, no conversation, output for people or programs.

``--output text`` streams the assistant's text to stdout (errors go to stderr);
``json`` prints the result object at the end; ``stream-json`` prints one JSON line per
event (see :mod:`ketch.cli._wire`). The exit code says how the run ended
(:data:`ketch.cli._wire.EXIT_CODES`). SIGINT or SIGTERM aborts the run (it still ends
with its result, exit code 130); a second one exits at once (130), and so does SIGHUP
(129), in both cases after ending the processes the tools started.

Tool calls that need approval are asked on the terminal when stdin and stderr are
both terminals. Otherwise the run pauses: it ends with ``approval_required`` (exit code
5), the state is saved in the session and ``ketch run --resume ID --approve CALL_ID``
(or ``--deny CALL_ID:reason``) continues it; the line on stderr gives that command with the
session's and the calls' real ids. With ``--no-session`` such calls are denied.

An answer cut off at the output token limit (the last model call ended with stop reason
``length``, after the loop's length recoveries) is said so: a warning line on stderr in
``text`` mode, ``"truncated": true`` in the ``json`` and ``stream-json`` result.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from typing import BinaryIO

from ..llm import AssistantMessage
from ..llm import ToolCallDeltaJoiner
from ..loop import AgentEvent
from ..permissions import Approval
from ..permissions import PermissionRequest
from ._config import SAVE_RULE_PROMPT
from ._config import ConfigError
from ._config import Settings
from ._config import save_allow_rules
from ._factory import Built
from ._factory import build_agent
from ._factory import mcp_manager
from ._lines import result_preview
from ._lines import tool_call_line
from ._render import compaction_note
from ._render import cut_off_note
from ._render import output_limit
from ._sessions import SessionOptions
from ._sessions import open_session
from ._sessions import pre_approve
from ._sessions import use_recorded_model
from ._signals import exit_now
from ._signals import handle_signals
from ._subagents import subagent_line
from ._wire import EXIT_BROKEN_PIPE
from ._wire import EXIT_INTERRUPTED
from ._wire import BrokenPipeGuard
from ._wire import Denied
from ._wire import Init
from ._wire import OutputFormat
from ._wire import Pending
from ._wire import encode_event
from ._wire import encode_line
from ._wire import exit_code_for
from ._wire import make_result


def _version() -> str:
    import ketch

    return str(ketch.__version__)


class _TextOut:
    """Streams assistant text to stdout; when stderr is a terminal, each tool call as it
    starts (:func:`tool_call_line`, e.g. ``→ ls .``), the first lines of its result when
    it ends (:func:`result_preview`) and context compactions to stderr."""

    __slots__ = ("_err", "_newline", "_out", "_show_tools")

    def __init__(self, out: BinaryIO, err: Any) -> None:
        self._out = out
        self._err = err
        self._show_tools = bool(getattr(err, "isatty", lambda: False)())
        self._newline = True

    def __call__(self, event: AgentEvent) -> None:
        if event.type == "message_update":
            inner: Any = event.event
            if inner.type == "text_delta":
                data = inner.delta.encode()
                if data:
                    self._out.write(data)
                    self._out.flush()
                    self._newline = data.endswith(b"\n")
            elif inner.type == "hosted_tool":
                self._hosted(inner.block)
        elif event.type == "message_end":
            message = event.message
            if type(message) is AssistantMessage and not self._newline:
                self._out.write(b"\n")
                self._out.flush()
                self._newline = True
        elif event.type == "tool_execution_start" and self._show_tools:
            line = tool_call_line(event.tool_name, event.args)
            self._err.write(f"\x1b[2m{line}\x1b[0m\n")
            self._err.flush()
        elif event.type == "tool_execution_end" and self._show_tools:
            end: Any = event
            preview = result_preview(end.result.text, end.is_error)
            self._err.write("".join(f"\x1b[2m{line}\x1b[0m\n" for line in preview))
            self._err.flush()
        elif event.type == "compaction_end" and self._show_tools:
            self._err.write(f"\x1b[2m{compaction_note(event)}\x1b[0m\n")
            self._err.flush()
        elif event.type == "tool_execution_update" and self._show_tools:
            nested = subagent_line(event.partial, tool_call_line)
            if nested is not None:
                self._err.write(f"\x1b[2m{nested}\x1b[0m\n")
                self._err.flush()


    def _hosted(self, block: Any) -> None:
        """A provider-hosted tool's call or result, as it streams: the text so far is ended
        with a newline (the text after it starts a line); on a terminal, stderr shows its
        call line (``→ web_search (hosted) <query>``) or the first lines of its result."""
        if not self._newline:
            self._out.write(b"\n")
            self._out.flush()
            self._newline = True
        if not self._show_tools:
            return
        if block.type == "hosted_tool_call":
            lines = [tool_call_line(f"{block.kind} (hosted)", block.input)]
        else:
            lines = result_preview(block.output, block.is_error)
        self._err.write("".join(f"\x1b[2m{line}\x1b[0m\n" for line in lines))
        self._err.flush()


class _StreamJsonOut:
    """Writes one JSON line per event (a tool call's consecutive deltas joined)."""

    __slots__ = ("_buffer", "_join", "_out")

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._buffer = bytearray()
        self._join: ToolCallDeltaJoiner[AgentEvent] = ToolCallDeltaJoiner()

    def write(self, obj: Any) -> None:
        for held in self._join.flush():
            self._line(encode_event(held))
        self._line(obj)

    def _line(self, obj: Any) -> None:
        encode_line(obj, self._buffer)
        self._out.write(self._buffer)
        self._out.flush()

    def __call__(self, event: AgentEvent) -> None:
        for item in self._join.feed(event):
            self._line(encode_event(item))


async def _terminal_line(prompt: str) -> str:
    """Write ``prompt`` on stderr and read one answer line from the terminal on stdin."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    line: asyncio.Future[str] = loop.create_future()

    def readable() -> None:
        data = os.read(fd, 4096).decode(errors="replace")
        if not line.done():
            line.set_result(data)

    loop.add_reader(fd, readable)
    try:
        return (await line).strip()
    finally:
        loop.remove_reader(fd)


async def _ask_on_terminal(request: PermissionRequest, project_root: Path) -> Approval:
    """Ask on stderr and read the answer from the terminal on stdin; after "always", ask
    where to save the rule(s) (:func:`~ketch.cli._config.save_allow_rules`)."""
    subject = f" {request.subject}" if request.subject else ""
    always = ", ".join(str(r) for r in request.suggested_rules) or "no rule fits: once"
    answer = parse_answer(
        await _terminal_line(
            f"\nketch wants to run {request.tool_name}{subject}\n"
            f"  [y] allow once  [a] always ({always})  [n] deny (optionally: n <reason>)\n> "
        )
    )
    if answer.decision == "always" and request.suggested_rules:
        choice = await _terminal_line(f"{SAVE_RULE_PROMPT}\n> ")
        shown, _ = save_allow_rules(choice, [str(r) for r in request.suggested_rules], project_root)
        sys.stderr.write(f"ketch: {shown}\n")
        sys.stderr.flush()
    return answer


def parse_answer(answer: str) -> Approval:
    """``y``/``yes`` allow once, ``a``/``always`` always, anything else denies; text after
    ``n``/``no`` is the reason."""
    word, _, rest = answer.strip().partition(" ")
    word = word.lower()
    if word in ("y", "yes"):
        return Approval.once()
    if word in ("a", "always"):
        return Approval.always()
    if word in ("n", "no", "d", "deny"):
        return Approval.deny(rest.strip() or None)
    return Approval.deny(answer.strip() or None)


def _install_signals(built: Built) -> Callable[[], None]:
    """SIGINT/SIGTERM abort the run, a second one exits at once, SIGHUP exits at once.
    The handlers stay until the event loop closes; call the returned function when the
    run is over, from then on any of these signals exits at once."""
    hits = [0]

    def on_signal() -> None:
        hits[0] += 1
        if hits[0] > 1:
            exit_now(EXIT_INTERRUPTED)
        built.agent.abort()

    def on_hangup() -> None:
        exit_now(129)

    handle_signals({signal.SIGINT: on_signal, signal.SIGTERM: on_signal, signal.SIGHUP: on_hangup})

    def run_over() -> None:
        hits[0] = max(hits[0], 1)

    return run_over


def _pending(state: Any) -> list[Pending]:
    """The calls a paused run waits on (``RunState.awaiting``)."""
    if state is None:
        return []
    return [
        Pending(tool_call_id=p.tool_call_id, tool_name=p.tool_name, args=dict(p.args), reason=p.reason or "")
        for p in state.awaiting
    ]


def _decisions(options: SessionOptions, session: Any, settings: Settings) -> dict[str, Any]:
    """The decisions ``--approve`` and ``--deny CALL_ID[:reason]`` give on the calls the
    session's paused run waits on (each must be decided). A ``--deny`` value that is no
    waiting call is a deny rule (already in ``settings``); one that decides a call is
    taken out of the rules."""
    from .. import approve
    from .. import deny
    from ..permissions import Rule

    state = session.pending_state if session is not None else None
    waiting = {p.tool_call_id: p for p in state.awaiting} if state is not None else {}
    described = ", ".join(f"{p.tool_call_id} ({p.tool_name})" for p in waiting.values())
    decisions: dict[str, Any] = {}
    for call_id in options.approve:
        if not waiting:
            raise ConfigError(f"--approve {call_id}: session {session.id} is not paused for approval")
        if call_id not in waiting:
            raise ConfigError(f"--approve {call_id}: session {session.id} waits on no such call; it waits on {described}")
        decisions[call_id] = approve()
    for text in options.deny:
        call_id, _, reason = text.partition(":")
        if call_id in waiting:
            decisions[call_id] = deny(reason.strip() or None)
            settings.deny[:] = [r for r in settings.deny if r.text != text]
            continue
        try:
            Rule.parse(text, "flag")
        except ValueError:
            where = f"session {session.id} waits on {described}" if waiting else "no call waits for approval"
            raise ConfigError(f"--deny {text}: neither a rule nor CALL_ID[:reason] of a waiting call ({where})") from None
    if waiting and decisions:
        undecided = [f"--approve {c} or --deny {c}:reason" for c in waiting if c not in decisions]
        if undecided:
            raise ConfigError(f"session {session.id} still waits on more calls: add {'; '.join(undecided)}")
    return decisions


def paused_hint(session_id: str | None, call_ids: list[str]) -> str:
    """How to continue a run paused for approval, as a command to paste:
    ``ketch run --resume S --approve c1 (to refuse it: --deny c1:reason instead)``."""
    approve = " ".join(f"--approve {c}" for c in call_ids)
    if len(call_ids) == 1:
        other = f"to refuse it: --deny {call_ids[0]}:reason instead"
    else:
        other = "to refuse one: --deny ID:reason in place of its --approve"
    return f"ketch run --resume {session_id} {approve} ({other})"


async def run_headless(
    task: str | None,
    settings: Settings,
    root: Path,
    *,
    output: OutputFormat = "text",
    tool_choice: str | None = None,
    interactive_approval: bool = False,
    sessions: SessionOptions | None = None,
) -> int:
    """Run ``task`` once (``None``: only continue the session's paused run with the
    decisions in ``sessions``) and write the output; returns the exit code."""
    options = sessions if sessions is not None else SessionOptions(enabled=False)
    async with mcp_and_session(settings, root, options) as (mcp, session):
        return await _run_in_session(task, settings, root, output, tool_choice, interactive_approval, options, session, mcp)


@asynccontextmanager
async def mcp_and_session(settings: Settings, root: Path, options: SessionOptions) -> AsyncIterator[tuple[Any, Any]]:
    """The MCP manager of ``settings`` and the session ``options`` name (each None when
    there is none), both closed on leaving."""
    mcp = mcp_manager(settings, root)
    session = await open_session(options, root)
    try:
        yield mcp, session
    finally:
        if mcp is not None:
            await mcp.aclose()
        if session is not None:
            await session.close()


async def _run_in_session(
    task: str | None,
    settings: Settings,
    root: Path,
    output: OutputFormat,
    tool_choice: str | None,
    interactive_approval: bool,
    options: SessionOptions,
    session: Any,
    mcp: Any = None,
) -> int:
    decisions = _decisions(options, session, settings)
    use_recorded_model(settings, session)
    paused = session.pending_state if session is not None else None
    if paused is not None and not decisions:
        calls = ", ".join(f"{p.tool_call_id} ({p.tool_name})" for p in paused.awaiting)
        raise ConfigError(
            f"session {session.id} is paused for approval of {calls}: continue it with "
            + paused_hint(session.id, [p.tool_call_id for p in paused.awaiting])
        )
    built: Built | None = None

    async def ask(request: PermissionRequest) -> Approval:
        if built is not None and built.hooks is not None:
            built.hooks.notify(f"ketch needs your permission to use {request.tool_name}")
        return await _ask_on_terminal(request, settings.project_root or root)

    built = build_agent(
        settings,
        root,
        approver=ask if interactive_approval else None,
        tool_choice=tool_choice,
        session=session,
        no_approver="pause" if session is not None else "deny",
        mcp=mcp,
    )
    for line in await built.attach_mcp():
        sys.stderr.write(f"ketch: warning: {line}\n")
    session_id = session.id if session is not None else None
    agent = built.agent
    if paused is not None and decisions:
        from ..loop._run import check_resume

        try:  # before any output: a configuration other than the paused run's is a usage error
            check_resume(paused, decisions, agent.model, agent.system_prompt, agent.tools)
        except ValueError as exc:
            raise ConfigError(f"cannot continue session {session.id}: {exc}") from None
    if session is not None:
        await session.record_permission_mode(built.permissions.mode)
    model = agent.model
    model_name = f"{model.provider}:{model.id}"
    guard = BrokenPipeGuard(sys.stdout.buffer, agent.abort)  # the reader went away: stop
    stdout = guard.stream
    stream: _StreamJsonOut | None = None
    if output == "stream-json":
        stream = _StreamJsonOut(stdout)
        stream.write(
            Init(
                model=model_name,
                provider=model.provider,
                cwd=str(root),
                tools=[t.name for t in agent.tools],
                permission_mode=built.permissions.mode,
                thinking=agent.thinking,
                version=_version(),
                session_id=session_id,
            )
        )
        agent.subscribe(stream)
    elif output == "text":
        agent.subscribe(_TextOut(stdout, sys.stderr))

    run_over = _install_signals(built)
    built.arm()
    if built.sandbox_warning is not None:
        sys.stderr.write(f"ketch: warning: {built.sandbox_warning}\n")
    try:
        await built.session_start("resume" if options.resuming else "startup")
        if paused is not None and decisions:
            pre_approve(built.permissions, paused, decisions)
            if task is not None:
                agent.follow_up(task)
            result = await agent.resume(paused, decisions=decisions)
        else:
            assert task is not None
            result = await _prompt(built, settings, task)
    finally:
        run_over()
        await built.session_end("other")
    return _report(result, built, settings, model_name, session_id, output, stream, guard)


async def _prompt(built: Built, settings: Settings, task: str) -> Any:
    """Run ``task`` with the files it mentions (``@path``, :mod:`ketch.cli._attach`;
    a line on stderr for each); a task ``/NAME args`` naming a custom command runs it
    expanded (:mod:`ketch.cli._commands`), with its model and allowed tools."""
    from ._attach import attach_mentions

    def note(line: str, style: str) -> None:
        sys.stderr.write(f"ketch: {line}\n")

    if task.startswith("/"):
        from ._commands import load_custom_commands
        from ._commands import run_command
        from ._commands import split_line

        commands, warnings = load_custom_commands(settings)
        for warning in warnings:
            sys.stderr.write(warning + "\n")
        name, arguments = split_line(task)
        if name in commands:
            text, attachments = await attach_mentions(built, commands[name].expand(arguments), note)
            return await run_command(built, settings, commands[name], text, attachments)
    text, attachments = await attach_mentions(built, task, note)
    return await built.prompt(text, attachments)


def _report(
    result: Any,
    built: Built,
    settings: Settings,
    model_name: str,
    session_id: str | None,
    output: OutputFormat,
    stream: _StreamJsonOut | None,
    guard: BrokenPipeGuard,
) -> int:
    """Write the run's result in the output format and return the exit status."""
    agent = built.agent
    stdout = guard.stream
    denials = [
        Denied(tool_call_id=d.tool_call_id, tool_name=d.tool_name, reason=d.reason or "")
        for d in built.permissions.decisions
        if d.outcome == "deny"
    ]
    pending = _pending(result.state) if result.end_reason == "approval_required" else []
    final = make_result(
        result.summary,
        result.last_assistant,
        model_name,
        denials,
        built.permissions.decisions,
        session_id=session_id,
        pending=pending,
    )
    answer = built.tool_answer(result)
    if answer is not None:  # the embedded model's run: the result of its one call is the answer
        final.text = answer
        if stream is None and output != "json" and not guard.broken:
            stdout.write((answer if answer.endswith("\n") else answer + "\n").encode())
            stdout.flush()
    if stream is not None:
        stream.write(final)
    elif output == "json":
        stdout.write(encode_line(final, bytearray()))
        stdout.flush()
    else:
        reason = result.end_reason
        if final.truncated and not guard.broken:
            sys.stderr.write(f"ketch: warning: {cut_off_note(output_limit(agent.model, settings.max_tokens))}\n")
        if reason == "approval_required" and not guard.broken:
            calls = ", ".join(f"{p.tool_name} ({p.tool_call_id})" for p in pending)
            hint = paused_hint(session_id, [p.tool_call_id for p in pending])
            sys.stderr.write(f"ketch: run paused: {calls} need{'s' if len(pending) == 1 else ''} approval; continue with: {hint}\n")
        elif reason != "stop" and reason != "stop_sequence" and not guard.broken:
            detail = f": {result.summary.error}" if result.summary.error else ""
            sys.stderr.write(f"ketch: run ended with {reason}{detail}\n")
    return EXIT_BROKEN_PIPE if guard.broken else exit_code_for(result.end_reason)
