"""``ketch run --input-format stream-json -o stream-json``: a session driven by JSON lines.

The process stays alive and reads one JSON object per line on stdin; stdout carries the
``stream-json`` output (:mod:`ketch.cli._wire`): the ``init`` line, every agent event,
and a ``result`` line at the end of each run, plus the protocol's own lines below.

Commands (each may carry an ``"id"``, a string or an integer, echoed in its answer):

- ``{"type": "user", "text": "…"}``: starts a run when none is active; while one is
  active it steers it (the text reaches the model at its next turn); while a run is
  paused for approval it is queued as a follow-up of the resumed run.
- A ``user`` or ``follow_up`` text ``/NAME args`` of a custom command
  (:mod:`ketch.cli._commands`) is sent expanded, and its ack names it
  (``"slash_command": "/NAME"``); a run it starts uses the command's ``model`` and
  ``allowed-tools``. Any other text starting with ``/`` is sent as it is.
- ``{"type": "follow_up", "text": "…"}``: while a run is active (or paused), queued to
  run when the agent would otherwise stop; otherwise it starts a run. A steer or
  follow-up that comes as the run is ending starts the next run at once (with its own
  ``result`` line), so nothing sent is left waiting.
- ``{"type": "interrupt"}``: aborts the active run (its ``result`` line says
  ``aborted``) and drops the queued steering and follow-up messages.
- ``{"type": "control", "subtype": "set_model", "model": "provider:id"}``,
  ``"set_permission_mode"`` with ``"mode"``, ``"set_thinking"`` with ``"level"``:
  the permission mode applies at once, the model and thinking level from the next run
  (the ack says ``"applies": "now"`` or ``"next_run"``).
- ``{"type": "approve", "call_id": "…"}``, ``{"type": "deny", "call_id": "…",
  "reason": "…"}``, ``{"type": "edit", "call_id": "…", "args": {…}}``: decide a call a
  run paused on (it ended with ``approval_required``; its ``result`` lists
  ``pending_approvals``). Once every waiting call has a decision the run resumes.

Every command is answered by an ``ack`` line (``{"type": "ack", "id": …, "command":
"user", "as": "prompt" | "steer" | "follow_up" | "resume", …}``); a line that is not a
valid command by an ``error`` line (``{"type": "error", "id": …, "line": N, "error":
"…"}``) naming the problem and what is allowed, and the session goes on. End of input
ends the session: the active run finishes, then the command exits with 0. A session
resumed while paused (``--resume ID``) announces the waiting calls with an
``approval_pending`` line after ``init``. SIGINT or SIGTERM abort the active run and end
the session (exit code 130; a second one exits at once); SIGHUP exits at once (129).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET
from msgspec import UnsetType

from ..llm import Model
from ..llm import exception_text
from ..llm._model import THINKING_LEVELS
from ..loop import Decision
from ..loop import RunResult
from ..loop import RunState
from ..loop import approve
from ..loop import deny
from ..loop import edit
from ..permissions import PERMISSION_MODES
from ..permissions import parse_mode
from ._config import ConfigError
from ._config import Settings
from ._factory import Built
from ._factory import build_agent
from ._factory import build_model
from ._headless import _pending
from ._headless import _StreamJsonOut
from ._headless import _version
from ._headless import mcp_and_session
from ._sessions import SessionOptions
from ._sessions import use_recorded_model
from ._signals import exit_now
from ._signals import handle_signals
from ._stdio import MAX_LINE
from ._stdio import StdinLines
from ._wire import EXIT_BROKEN_PIPE
from ._wire import EXIT_INTERRUPTED
from ._wire import BrokenPipeGuard
from ._wire import Denied
from ._wire import Init
from ._wire import Pending
from ._wire import make_result

INPUT_FORMATS = ("text", "stream-json")
"""The input formats of ``ketch run`` (``--input-format``)."""

COMMANDS = ("user", "follow_up", "interrupt", "control", "approve", "deny", "edit")
"""The ``type`` of every command line."""

CONTROL_SUBTYPES = ("set_model", "set_permission_mode", "set_thinking")
"""The ``subtype`` of a ``control`` command."""


_EXAMPLE = '{"type": "user", "text": "…"}'


class Ack(msgspec.Struct, kw_only=True, omit_defaults=True, tag="ack", tag_field="type"):
    """The answer to a command: ``command`` (its type), ``id`` when it had one, and what
    happened (``as``; the new setting for ``control``; ``waiting`` calls for decisions)."""

    id: str | int | UnsetType = UNSET
    command: str
    subtype: str | UnsetType = UNSET
    as_: str | UnsetType = msgspec.field(default=UNSET, name="as")
    running: bool | UnsetType = UNSET
    model: str | UnsetType = UNSET
    permission_mode: str | UnsetType = UNSET
    thinking: str | UnsetType = UNSET
    applies: str | UnsetType = UNSET
    call_id: str | UnsetType = UNSET
    waiting: list[str] | UnsetType = UNSET
    slash_command: str | UnsetType = UNSET


class ErrorLine(msgspec.Struct, kw_only=True, omit_defaults=True, tag="error", tag_field="type"):
    """The answer to a line that is not a valid command (``line``: its number, from 1)."""

    id: str | int | UnsetType = UNSET
    line: int
    error: str


class ApprovalPending(msgspec.Struct, kw_only=True, tag="approval_pending", tag_field="type"):
    """After ``init``, when the resumed session's run is paused: the calls it waits on."""

    session_id: str | None
    pending_approvals: list[Pending]


class BadLine(Exception):
    """A line that is not a valid command; the message says why and what is allowed."""


def check_args(args: argparse.Namespace) -> None:
    """The flags that do not go with ``--input-format stream-json``."""
    if args.output != "stream-json":
        raise ConfigError(f"--input-format stream-json needs -o stream-json (got -o {args.output})")
    if args.task is not None:
        raise ConfigError(
            f"--input-format stream-json: the prompts come as JSON lines on stdin ({_EXAMPLE}), not as an argument"
        )


# -- reading commands ---------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _text(command: dict[str, Any], field: str, what: str) -> str:
    if field not in command:
        raise BadLine(f'{what}: missing "{field}" (a string)')
    value = command[field]
    if not isinstance(value, str):
        raise BadLine(f'{what}: "{field}" must be a string, got {_kind(value)}')
    return value


def _choice(command: dict[str, Any], field: str, what: str, allowed: tuple[str, ...]) -> str:
    value = _text(command, field, what)
    if value not in allowed:
        raise BadLine(f'{what}: "{field}" {value!r} is not one of {", ".join(allowed)}')
    return value


def parse_command(data: bytes) -> tuple[dict[str, Any], str | int | UnsetType]:
    """The command object of one line and its id; :class:`BadLine` when it is none.
    Bytes that are not valid UTF-8 are decoded as U+FFFD."""
    if len(data) >= MAX_LINE:
        raise BadLine(f"the line is longer than {MAX_LINE // (1024 * 1024)} MiB; send large text in smaller messages")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        _warn_utf8()
        data = data.decode("utf-8", "replace").encode("utf-8")
    try:
        command = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise BadLine(f"not JSON ({exc}); each line must be one JSON object such as {_EXAMPLE}") from None
    if not isinstance(command, dict):
        raise BadLine(f"expected a JSON object such as {_EXAMPLE}, got {_kind(command)}")
    ident = command.get("id", UNSET)
    if ident is not UNSET and (isinstance(ident, bool) or not isinstance(ident, (str, int))):
        raise BadLine(f'"id" must be a string or an integer, got {_kind(ident)}')
    kind = command.get("type")
    if kind is None:
        raise BadLine(f'missing "type"; expected one of {", ".join(COMMANDS)}')
    if kind not in COMMANDS:
        shown = repr(kind) if isinstance(kind, str) else _kind(kind)
        raise BadLine(f'unknown type {shown}; expected one of {", ".join(COMMANDS)}')
    return command, ident


_warned = [False]


def _warn_utf8() -> None:
    if not _warned[0]:
        _warned[0] = True
        sys.stderr.write("ketch: warning: a line on stdin is not valid UTF-8; the invalid bytes were replaced with U+FFFD\n")
        sys.stderr.flush()


# -- the session --------------------------------------------------------------------------


class _Controller:
    """Runs the agent of ``built`` as commands arrive; writes every answer to ``out``."""

    def __init__(
        self,
        built: Built,
        settings: Settings,
        session: Any,
        out: _StreamJsonOut,
        model_name: Callable[[], str],
    ) -> None:
        self.built = built
        self.agent = built.agent
        self.settings = settings
        self.session = session
        self.out = out
        self.model_name = model_name
        self.run_task: asyncio.Task[None] | None = None
        self.paused: RunState | None = session.pending_state if session is not None else None
        self.decisions: dict[str, Decision] = {}
        self.next_model: Model | None = None
        self.abort_requested = False
        self.line = 0
        self.ending = False
        self.lines: StdinLines | None = None
        from ._commands import load_custom_commands

        self.commands, warnings = load_custom_commands(settings)
        for warning in warnings:
            sys.stderr.write(warning + "\n")

    # -- runs --
    @property
    def active(self) -> bool:
        return self.run_task is not None

    def start(self, first: Callable[[], Awaitable[RunResult]]) -> None:
        self.abort_requested = False
        self.run_task = asyncio.create_task(self._runs(first))

    async def _runs(self, first: Callable[[], Awaitable[RunResult]]) -> None:
        """Run ``first``, then again while queued messages wait (a steer or follow-up that
        arrived after the run's last look at its queues), each run with its result line."""
        step: Callable[[], Awaitable[RunResult]] | None = first
        line = self.line
        try:
            while step is not None:
                self.built.arm()
                mark = len(self.built.permissions.decisions)
                try:
                    result = await step()
                except Exception as exc:  # a run never raises; a hook or a bug might: say so, go on
                    self.out.write(ErrorLine(line=line, error=f"the run failed: {exception_text(exc)}"))
                    return
                self._result(result, mark)
                self._apply_next_model()
                step = None
                if result.end_reason == "approval_required" and result.state is not None:
                    self.paused = result.state
                    self.decisions = {}
                elif result.end_reason != "aborted" and not self.abort_requested and self.agent.has_queued_messages():
                    step = self.agent.continue_loop
        finally:
            self.run_task = None
            self.abort_requested = False

    def _result(self, result: RunResult, mark: int) -> None:
        decisions = self.built.permissions.decisions[mark:]
        denials = [
            Denied(tool_call_id=d.tool_call_id, tool_name=d.tool_name, reason=d.reason or "")
            for d in decisions
            if d.outcome == "deny"
        ]
        pending = _pending(result.state) if result.end_reason == "approval_required" else []
        self.out.write(
            make_result(
                result.summary,
                result.last_assistant,
                self.model_name(),
                denials,
                decisions,
                session_id=self.session.id if self.session is not None else None,
                pending=pending,
            )
        )

    def _apply_next_model(self) -> None:
        if self.next_model is not None:
            self.agent.model = self.next_model
            self.next_model = None
            self.built.fit_context(self.settings)

    def _on_event(self, event: Any) -> None:
        # an interrupt that came before the run had started aborts it as it starts
        if event.type == "agent_start" and self.abort_requested:
            self.agent.abort()

    def interrupt(self) -> None:
        """Abort the active run and drop the queued messages (the session goes on)."""
        if self.active:
            self.abort_requested = True
            self.agent.abort()
        self.agent.clear_queues()

    # -- commands --
    async def handle(self, data: bytes) -> None:
        """Answer one line."""
        self.line += 1
        if not data.strip():
            return
        ident: str | int | UnsetType = UNSET
        try:
            command, ident = parse_command(data)
            ack = await self._command(command)
        except BadLine as exc:
            self.out.write(ErrorLine(id=ident, line=self.line, error=str(exc)))
            return
        except Exception as exc:  # e.g. the session store failing: the session goes on
            self.out.write(ErrorLine(id=ident, line=self.line, error=f"failed: {exception_text(exc)}"))
            return
        ack.id = ident
        self.out.write(ack)

    async def _command(self, command: dict[str, Any]) -> Ack:
        kind: str = command["type"]
        if kind in ("user", "follow_up"):
            text = _text(command, "text", kind)
            custom = self._custom(text)
            if custom is not None:
                name, prompt = custom
                return Ack(command=kind, as_=self._deliver(kind, prompt, self.commands[name]), slash_command=f"/{name}")
            return Ack(command=kind, as_=self._deliver(kind, text))
        if kind == "interrupt":
            running = self.active
            self.interrupt()
            return Ack(command=kind, running=running)
        if kind == "control":
            return await self._control(command)
        return self._decide(kind, command)

    def _custom(self, text: str) -> tuple[str, str] | None:
        """(name, prompt) when ``text`` is ``/NAME args`` of a custom command."""
        if not text.startswith("/"):
            return None
        from ._commands import split_line

        name, arguments = split_line(text)
        command = self.commands.get(name)
        return (name, command.expand(arguments)) if command is not None else None

    def _deliver(self, kind: str, text: str, custom: Any = None) -> str:
        if self.paused is not None:
            self.agent.follow_up(text)
            return "follow_up"
        if self.active:
            if kind == "user":
                self.agent.steer(text)
                return "steer"
            self.agent.follow_up(text)
            return "follow_up"
        if custom is not None:  # its model and allowed tools apply to the run it starts
            from ._commands import run_command

            self.start(lambda: run_command(self.built, self.settings, custom, text))
        else:
            self.start(lambda: self.built.prompt(text))
        return "prompt"

    def _paused_note(self) -> str:
        assert self.paused is not None
        calls = ", ".join(f"{p.tool_call_id} ({p.tool_name})" for p in self.paused.awaiting)
        return f"a run is paused for approval of {calls}: decide those first (approve, deny or edit)"

    async def _control(self, command: dict[str, Any]) -> Ack:
        subtype = _choice(command, "subtype", "control", CONTROL_SUBTYPES)
        what = f"control {subtype}"
        applies = "next_run" if self.active else "now"
        if subtype == "set_model":
            spec = _text(command, "model", what)
            if self.paused is not None:
                raise BadLine(f"{what}: {self._paused_note()}; the paused run resumes with its own model")
            try:
                model = build_model(spec, self.settings)
            except ConfigError as exc:
                raise BadLine(f"{what}: {exc}") from None
            self.next_model = model
            if not self.active:
                self._apply_next_model()
            return Ack(command="control", subtype=subtype, model=f"{model.provider}:{model.id}", applies=applies)
        if subtype == "set_permission_mode":
            text = _text(command, "mode", what)
            try:
                mode = parse_mode(text)
            except ValueError:
                raise BadLine(f'{what}: "mode" {text!r} is not one of {", ".join(PERMISSION_MODES)} (or accept-edits)') from None
            self.built.permissions.set_mode(mode)
            if self.session is not None:
                await self.session.record_permission_mode(mode)
            return Ack(command="control", subtype=subtype, permission_mode=mode, applies="now")
        level = _choice(command, "level", what, THINKING_LEVELS)
        self.agent.thinking = level  # type: ignore[assignment]  # checked above
        return Ack(command="control", subtype=subtype, thinking=level, applies=applies)

    def _decide(self, kind: str, command: dict[str, Any]) -> Ack:
        call_id = _text(command, "call_id", kind)
        state = self.paused
        if state is None:
            now = "the active run has not paused" if self.active else "no run is paused"
            raise BadLine(f"{kind} {call_id}: {now}; approve, deny and edit answer the pending_approvals of a result")
        waiting = {p.tool_call_id: p for p in state.awaiting}
        if call_id not in waiting:
            calls = ", ".join(f"{p.tool_call_id} ({p.tool_name})" for p in waiting.values())
            raise BadLine(f"{kind} {call_id}: the paused run waits on no such call; it waits on {calls}")
        decision: Decision
        if kind == "approve":
            decision = approve()
        elif kind == "deny":
            reason = command.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise BadLine(f'deny {call_id}: "reason" must be a string, got {_kind(reason)}')
            decision = deny(reason or None)
        else:
            args = command.get("args")
            if not isinstance(args, dict):
                shown = 'missing "args"' if args is None else f'"args" must be an object, got {_kind(args)}'
                raise BadLine(f"edit {call_id}: {shown} (the arguments to run the call with)")
            decision = edit(args)
        self.decisions[call_id] = decision
        left = [c for c in waiting if c not in self.decisions]
        if left:
            return Ack(command=kind, call_id=call_id, waiting=left)
        decisions, self.decisions, self.paused = self.decisions, {}, None
        try:
            from ..loop._run import check_resume

            check_resume(state, decisions, self.agent.model, self.agent.system_prompt, self.agent.tools)
        except ValueError as exc:
            self.paused = state
            raise BadLine(f"{kind} {call_id}: cannot resume: {exc}") from None
        self.start(lambda: self.agent.resume(state, decisions=decisions))
        return Ack(command=kind, call_id=call_id, as_="resume", waiting=[])

    # -- the session --
    def end(self) -> None:
        """Stop reading commands and abort the active run."""
        if not self.ending:
            self.ending = True
            self.interrupt()
            if self.lines is not None:
                self.lines.end()

    async def serve(self, first: Callable[[], Awaitable[RunResult]] | None) -> int:
        """Read commands until the end of input (or a signal), then wait for the active
        run; returns the exit code."""
        self.agent.subscribe(self._on_event)
        lines = self.lines = StdinLines()
        code = [0]
        hits = [0]

        def on_signal() -> None:
            hits[0] += 1
            if hits[0] > 1:
                exit_now(EXIT_INTERRUPTED)
            code[0] = EXIT_INTERRUPTED
            self.end()

        handle_signals({signal.SIGINT: on_signal, signal.SIGTERM: on_signal, signal.SIGHUP: lambda: exit_now(129)})
        if first is not None:
            self.start(first)
        while not self.ending:
            data = await lines.get()
            if data is None:
                break
            await self.handle(data)
        while self.run_task is not None:
            await asyncio.shield(self.run_task)
        return code[0]


async def run_control(
    settings: Settings,
    root: Path,
    *,
    tool_choice: str | None = None,
    sessions: SessionOptions | None = None,
) -> int:
    """The controlled session (see the module docstring); returns the exit code."""
    options = sessions if sessions is not None else SessionOptions(enabled=False)
    async with mcp_and_session(settings, root, options) as (mcp, session):
        return await _serve(settings, root, tool_choice, options, session, mcp)


async def _serve(
    settings: Settings, root: Path, tool_choice: str | None, options: SessionOptions, session: Any, mcp: Any
) -> int:
    from ._headless import _decisions

    decisions = _decisions(options, session, settings)
    use_recorded_model(settings, session)
    built = build_agent(
        settings, root, approver=None, tool_choice=tool_choice, session=session, no_approver="pause", mcp=mcp
    )
    for line in await built.attach_mcp():
        sys.stderr.write(f"ketch: warning: {line}\n")
    agent = built.agent
    paused = session.pending_state if session is not None else None
    if paused is not None and decisions:
        from ..loop._run import check_resume

        try:
            check_resume(paused, decisions, agent.model, agent.system_prompt, agent.tools)
        except ValueError as exc:
            raise ConfigError(f"cannot continue session {session.id}: {exc}") from None
    if session is not None:
        await session.record_permission_mode(built.permissions.mode)

    def model_name() -> str:
        return f"{agent.model.provider}:{agent.model.id}"

    controller: _Controller | None = None

    def reader_gone() -> None:  # stdout closed: nobody hears the session any more
        agent.abort()
        if controller is not None:
            controller.end()

    guard = BrokenPipeGuard(sys.stdout.buffer, reader_gone)
    out = _StreamJsonOut(guard.stream)
    controller = _Controller(built, settings, session, out, model_name)
    out.write(
        Init(
            model=model_name(),
            provider=agent.model.provider,
            cwd=str(root),
            tools=[t.name for t in agent.tools],
            permission_mode=built.permissions.mode,
            thinking=agent.thinking,
            version=_version(),
            session_id=session.id if session is not None else None,
        )
    )
    first: Callable[[], Awaitable[RunResult]] | None = None
    if paused is not None and decisions:
        controller.paused = None
        first = lambda: agent.resume(paused, decisions=decisions)  # noqa: E731
    elif paused is not None:
        out.write(ApprovalPending(session_id=session.id, pending_approvals=_pending(paused)))
    agent.subscribe(out)
    if built.sandbox_warning is not None:
        sys.stderr.write(f"ketch: warning: {built.sandbox_warning}\n")
    await built.session_start("resume" if options.resuming else "startup")
    try:
        code = await controller.serve(first)
    finally:
        await built.session_end("other")
    return EXIT_BROKEN_PIPE if guard.broken else code
