"""The interactive session: ``ketch`` with no task.

prompt_toolkit reads input (line editing, history in the user config directory) while
the agent streams: the prompt stays live during a run, so what you type steers the
agent (or, prefixed with ``>>``, queues a follow-up). Output is printed above the prompt
with rich; the bottom toolbar shows a spinner with the elapsed time and the live
token, cost and context counters (``ctx``: the share of the context window the
conversation fills). Compactions of the context, automatic or by ``/compact``, are
announced with the tokens before and after.

Input: Enter sends; Alt-Enter (Esc then Enter) or a ``\\`` at the end of the line start a
new line instead. Tab completes the slash commands and ``@`` file paths (a menu
shows while typing them). ``@path`` in a prompt attaches that file's content (as the read
tool shows it, which also counts as the agent having read it), under the file tools'
rules: a path outside the workspace or one a ``Read`` deny rule names is refused, with a
note, and the prompt goes without it.

Keys: Ctrl-C aborts the current run (a second Ctrl-C exits, also while the aborted run
winds down); Ctrl-D exits; Ctrl-T expands or collapses thinking. SIGTERM ends the
session (exit code 143), SIGHUP exits at once (129); every way out first ends the
processes the tools started. Slash commands: see :data:`HELP`. A resumed session
shows its conversation again; on leaving, a saved session's resume command is printed
(``ketch --resume ID``).
"""

from __future__ import annotations

import asyncio
import difflib
import os
import signal
import stat
import sys
import time
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

from .._proc import kill_process_groups
from ..llm import exception_text
from ..llm._model import THINKING_LEVELS
from ..loop import AgentEvent
from ..permissions import Approval
from ..permissions import PermissionRequest
from ..permissions import parse_mode
from ._config import SAVE_RULE_PROMPT
from ._config import ConfigError
from ._config import Settings
from ._config import save_allow_rules
from ._config import save_network_allow
from ._dirs import config_dir
from ._factory import Built
from ._factory import build_agent
from ._factory import build_model
from ._factory import mcp_manager
from ._headless import parse_answer
from ._render import EventRenderer
from ._render import format_tokens
from ._signals import exit_now
from ._signals import handle_signals
from ._wire import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.formatted_text import StyleAndTextTuples

    from ..sessions import Session as SavedSession
    from ._commands import CustomCommand
    from ._sessions import SessionOptions


HELP = """\
Commands:
  /help                 this help
  /model [provider:id]  show or switch the model
  /thinking [level]     show or set the thinking level (off minimal low medium high xhigh)
  /tools                list the tools
  /memory               the instruction files (AGENTS.md) in the system prompt
  /mcp                  the MCP servers: status and tools
  /mode [mode]          show or set the permission mode (default accept_edits plan bypass)
  /cost                 tokens and cost of this session
  /compact [text]       summarise older history now (text: what the summary must keep)
  /sessions             the saved sessions of this directory (* marks this one)
  /fork                 continue in a copy of this session (the original stays as it is)
  /rewind [N]           list your prompts; with N, undo prompt N and everything after it
                        (the conversation and the agent's file changes)
  /export [file]        write this session as Markdown (default ketch-<id>.md)
  /clear                start a new conversation (a new session)
  /exit                 quit (also Ctrl-D)
While the agent works, type to steer it; start with >> to queue a follow-up instead.
@path in a prompt attaches that file (Tab completes paths and commands).
At a permission question answer y (once), a (always; then choose where the rule is
saved: this session, your user settings, the project's or your local project settings)
or n [reason].
Keys: Enter sends, Alt-Enter (or \\ before Enter) starts a new line,
Ctrl-C aborts the run (twice exits), Ctrl-T expands/collapses thinking."""


def slash_commands() -> list[tuple[str, str]]:
    """The slash commands and what each does (from :data:`HELP`), for completion."""
    out: list[tuple[str, str]] = []
    for line in HELP.splitlines():
        if line.startswith("  /"):
            usage, about = line[2:24].strip(), line[24:].strip()
            out.append((usage.split()[0], about))
    return out


_PREVIEW_LINES = 40
_DIFF_READ_LIMIT = 1 << 20


def path_completions(root: Path, partial: str, hidden: Callable[[str], bool] | None = None, limit: int = 50) -> list[str]:
    """Workspace paths starting with ``partial`` (relative to ``root``; folders end with
    ``/``; names starting with a dot only when ``partial``'s last part does). Nothing
    outside the workspace: no absolute path, ``~`` or ``..``, no folder whose real path
    leaves ``root``; ``hidden`` (real path -> bool) leaves out what the tools may not read."""
    if partial.startswith(("/", "~")) or ".." in partial.split("/"):
        return []
    head, _, tail = partial.rpartition("/")
    real_root = os.path.realpath(root)
    folder = os.path.realpath(os.path.join(real_root, head)) if head else real_root
    if folder != real_root and not folder.startswith(real_root + os.sep):
        return []
    out: list[str] = []
    try:
        with os.scandir(folder) as entries:
            names = sorted(
                (e.name, e.is_dir()) for e in entries if e.name.startswith(tail) and (tail.startswith(".") or not e.name.startswith("."))
            )
    except OSError:
        return []
    for name, is_dir in names:
        if hidden is not None and hidden(os.path.join(folder, name)):
            continue
        out.append(f"{head}/{name}" if head else name)
        if is_dir:
            out[-1] += "/"
        if len(out) >= limit:
            break
    return out


def make_completer(
    root: Path, hidden: Callable[[str], bool] | None = None, custom: Sequence[tuple[str, str]] = ()
) -> Any:
    """The prompt's completer: slash commands at the start of the input (with what each
    does), ``@`` paths of the workspace anywhere (:func:`path_completions`)."""
    from prompt_toolkit.completion import Completer
    from prompt_toolkit.completion import Completion

    commands = [*slash_commands(), *custom]

    class _Completer(Completer):
        def get_completions(self, document: Any, complete_event: Any) -> Any:
            text = document.text_before_cursor
            if text.startswith("/") and not any(c.isspace() for c in text):
                for name, about in commands:
                    if name.startswith(text):
                        yield Completion(name, start_position=-len(text), display_meta=about)
                return
            word = text.split()[-1] if text and not text[-1].isspace() else ""
            if word.startswith("@"):
                for path in path_completions(root, word[1:], hidden):
                    yield Completion("@" + path, start_position=-len(word))

    return _Completer()


def _completing() -> bool:
    """Whether the input being typed is a slash command or ends in an ``@`` path."""
    from prompt_toolkit.application import get_app

    text = get_app().current_buffer.document.text_before_cursor
    if text.startswith("/"):
        return not any(c.isspace() for c in text)
    return bool(text) and not text[-1].isspace() and text.split()[-1].startswith("@")


def write_preview(root: Path, subject: str | None, content: str, hidden: Callable[[str], bool] | None = None) -> str:
    """What a ``write`` approval shows: the diff against the file it replaces (when that
    is a readable UTF-8 file of at most 1 MB inside ``root`` that ``hidden`` does not
    name), else the new content as added lines; at most :data:`_PREVIEW_LINES` lines,
    then a line counting the rest."""
    name = subject or "file"
    old: str | None = None
    if subject:
        real = os.path.realpath(os.path.join(root, os.path.expanduser(subject)))
        inside = real.startswith(os.path.realpath(root) + os.sep)
        try:
            info = os.stat(real)
            if inside and stat.S_ISREG(info.st_mode) and info.st_size <= _DIFF_READ_LIMIT and not (hidden and hidden(real)):
                fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as f:
                    old = f.read(_DIFF_READ_LIMIT + 1).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            old = None
    if old is not None:
        lines = difflib.unified_diff(
            old.splitlines(), content.splitlines(), fromfile=f"a/{name}", tofile=f"b/{name}", lineterm="", n=2
        )
        diff = "\n".join(lines) or f"--- a/{name}\n+++ b/{name}\n(no change)"
    else:
        body = content.split("\n")
        if body and body[-1] == "":
            body.pop()
        diff = "\n".join(["--- /dev/null", f"+++ b/{name}", f"@@ -0,0 +1,{len(body)} @@", *("+" + line for line in body)])
    return clip_lines(diff, _PREVIEW_LINES)


def clip_lines(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` lines, then ``… N more lines``."""
    lines = text.split("\n")
    if len(lines) <= limit:
        return text
    rest = len(lines) - limit
    return "\n".join([*lines[:limit], f"… {rest} more line{'s' if rest != 1 else ''}"])

PROMPT = "› "
PERMISSION_PROMPT = "Allow? [y] once  [a] always  [n] deny (n <reason>) › "
SCOPE_PROMPT = f"{SAVE_RULE_PROMPT} › "
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def shorten_path(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal cells: the middle replaced by ``…``, keeping
    more of the end (the directory's own name) than of the start (none when narrow)."""
    from rich.cells import cell_len

    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"
    keep = width - 1
    head = keep // 3 if keep >= 24 else 0
    tail = keep - head
    while head + tail > 0 and cell_len(text[:head]) + cell_len(text[len(text) - tail :]) > keep:
        if tail > head * 2:
            tail -= 1
        else:
            head -= 1
    return text[:head] + "…" + (text[len(text) - tail :] if tail else "")


def banner(model: str, root: Path, mode: str, width: int, home: Path | None = None) -> str:
    """The start line of a session, at most ``width - 1`` cells wide when it can be: the
    working directory is written with ``~`` for the home directory and shortened in the
    middle to fit; the other parts are kept whole."""
    from rich.cells import cell_len

    where = str(root)
    try:
        home = Path.home() if home is None else home
        relative = root.relative_to(home)
    except (RuntimeError, KeyError, ValueError):
        pass
    else:
        where = "~" if relative == Path() else f"~/{relative}"
    head = f"ketch · {model} · "
    tail = f" · permission mode {mode} · /help for commands"
    room = width - 1 - cell_len(head) - cell_len(tail)
    return head + shorten_path(where, max(room, min(cell_len(root.name) + 2, 40), 12)) + tail


ELICIT_PROMPT = "Answer it? [y] yes  [n] decline  [c] cancel › "


def _elicit_action(answer: str) -> Literal["accept", "decline", "cancel"]:
    word = answer.strip().lower()
    if word in ("y", "yes"):
        return "accept"
    if word in ("c", "cancel"):
        return "cancel"
    return "decline"


def _field_prompt(key: str, field: dict[str, Any]) -> str:
    label = field.get("title") or key
    kind = field.get("type", "string")
    choices = field.get("enum")
    hint = "/".join(str(c) for c in choices) if isinstance(choices, list) else kind
    about = f" - {field['description']}" if field.get("description") else ""
    return f"{label}{about} ({hint}) › "


def _field_value(text: str, field: dict[str, Any], required: bool) -> tuple[Any, str | None]:
    """The typed value of an elicitation field's answer, or a problem to show."""
    text = text.strip()
    if not text:
        if field.get("default") is not None:
            return field["default"], None
        return None, "an answer is required" if required else None
    kind = field.get("type", "string")
    choices = field.get("enum")
    if isinstance(choices, list) and text not in [str(c) for c in choices]:
        return None, f"{text!r}: expected one of {', '.join(str(c) for c in choices)}"
    if kind == "boolean":
        if text.lower() in ("y", "yes", "true"):
            return True, None
        if text.lower() in ("n", "no", "false"):
            return False, None
        return None, f"{text!r}: expected yes or no"
    if kind in ("integer", "number"):
        try:
            return (int(text) if kind == "integer" else float(text)), None
        except ValueError:
            return None, f"{text!r}: expected {'an integer' if kind == 'integer' else 'a number'}"
    return text, None


def _write_text(root: Path, name: str, text: str) -> Path:
    """Write ``text`` to the file ``name`` (``~`` expanded, relative to ``root``); returns
    its path."""
    path = root / Path(name).expanduser()
    path.write_text(text, encoding="utf-8")
    return path


class Session:
    """One interactive session: the agent, the prompt, the renderer and the pending question."""

    def __init__(
        self,
        settings: Settings,
        root: Path,
        *,
        tool_choice: str | None = None,
        session: SavedSession | None = None,
        mcp: Any = None,
    ) -> None:
        self.settings = settings
        self.root = root
        self.tool_choice = tool_choice
        self.session = session
        self.mcp = mcp
        if mcp is not None:
            mcp.elicitation = self.elicit
        self.network_granted: set[tuple[str, int]] = set()  # unlisted hosts allowed for this session
        self._network_lock = asyncio.Lock()  # one network question at a time
        if settings.sandbox_network_policy is not None:  # an unlisted host asks here (see ask_network)
            settings.sandbox_network_policy = settings.sandbox_network_policy.with_ask(self.ask_network)
        self.built: Built = build_agent(
            settings, root, approver=self.approve, tool_choice=tool_choice, session=session, mcp=mcp, todo=True
        )
        self.agent = self.built.agent
        self.permissions = self.built.permissions
        self.renderer: EventRenderer | None = None
        self.prompt: PromptSession[str] | None = None
        self.pending: tuple[str, asyncio.Future[str]] | None = None  # (question, answer)
        self.task: asyncio.Task[Any] | None = None
        self.exit_armed = False
        self.compacting = False
        self.exit_code: int | None = None
        from ._commands import load_custom_commands

        self.commands, warnings = load_custom_commands(settings)
        for warning in warnings:
            print(warning, file=sys.stderr)

    # -- pieces of the screen -------------------------------------------------------------
    def _message(self) -> str:
        return self.pending[0] if self.pending is not None else PROMPT

    def _toolbar(self) -> StyleAndTextTuples:
        r = self.renderer
        if r is None:
            return []
        parts: list[str] = []
        label = r.status.label
        if self.pending is not None:
            parts.append("? waiting for your answer")
        elif label and self.agent.is_running:
            frame = _SPINNER[int(time.monotonic() * 10) % len(_SPINNER)]
            parts.append(f"{frame} {label}… {r.status.elapsed():.1f}s")
        model = self.agent.model
        usage = r.usage
        sent = usage.input + usage.cache_read + usage.cache_write
        received = usage.output + r.streamed_chars // 4
        parts.append(f"{model.provider}:{model.id}")
        parts.append(f"↑{format_tokens(sent)} ↓{format_tokens(received)} tokens")
        parts.append(f"${usage.cost.total + r.compaction_cost:.4f}")
        try:
            parts.append(f"ctx {self.built.context().percent:.0f}%")
        except Exception:
            pass
        parts.append(f"mode {self.permissions.mode}")
        return [("class:bottom-toolbar", " " + " │ ".join(parts) + " ")]

    def _invalidate(self) -> None:
        if self.prompt is not None and self.prompt.app.is_running:
            self.prompt.app.invalidate()

    # -- permission prompts ---------------------------------------------------------------
    async def approve(self, request: PermissionRequest) -> Approval:
        """The engine's approver: show the request and wait for the answer typed at the
        prompt; after "always", ask where to save the rule(s) and write them there."""
        self._show_request(request)
        if self.built.hooks is not None:
            self.built.hooks.notify(f"ketch needs your permission to use {request.tool_name}")
        answer = parse_answer(await self._question(PERMISSION_PROMPT))
        if answer.decision == "always" and request.suggested_rules:
            self._save_rules(request, await self._question(SCOPE_PROMPT))
        return answer

    async def ask_network(self, host: str, port: int) -> str:
        """The sandbox proxy's question for a host not in ``[sandbox.network] allow``:
        ``y`` allows it (this host and port) for the session, ``a`` also saves the host to
        ``allow`` where the user picks, anything else refuses it."""
        if (host, port) in self.network_granted:
            return "once"
        r = self.renderer
        if r is None:
            return "deny"
        async with self._network_lock:
            if (host, port) in self.network_granted:  # answered while this one waited
                return "once"
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            r.note(f"⚠ a sandboxed command wants to reach {shown} (not in [sandbox.network] allow)", "bold yellow")
            r.note(f"  'y' allows it for this session, 'a' always allows {host}")
            answer = parse_answer(await self._question(PERMISSION_PROMPT))
            if answer.decision not in ("allow", "always"):
                return "deny"
            self.network_granted.add((host, port))
            if answer.decision == "always":
                choice = await self._question(SCOPE_PROMPT)
                entry = f"[{host}]" if ":" in host else host
                line, failed = save_network_allow(choice, entry, self.settings.project_root or self.root)
                r.note(line, "red" if failed else "dim")
                return "always"
            return "once"

    async def elicit(self, request: Any) -> Any:
        """The MCP servers' elicitation callback: show the server's question, ask whether
        to answer (``y``, ``n`` declines, ``c`` cancels), then ask each field of the form
        (until the answer fits the field's type)."""
        from ..mcp import ElicitationResponse

        r = self.renderer
        if r is None:
            return ElicitationResponse("decline")
        r.note(f"⚠ MCP server {request.server} asks: {request.message}", "bold yellow")
        if request.mode == "url":
            r.note(f"  it wants you to open {request.url}")
        action = _elicit_action(await self._question(ELICIT_PROMPT))
        if action != "accept" or request.mode == "url":
            return ElicitationResponse(action)
        schema = request.requested_schema
        required = set(schema.get("required") or ())
        content: dict[str, Any] = {}
        for key, field in (schema.get("properties") or {}).items():
            while True:
                value, problem = _field_value(await self._question(_field_prompt(key, field)), field, key in required)
                if problem is None:
                    break
                r.note(problem, "red")
            if value is not None:
                content[key] = value
        return ElicitationResponse("accept", content)

    async def _question(self, text: str) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.pending = (text, future)
        self._invalidate()
        try:
            return await future
        finally:
            self.pending = None
            self._invalidate()

    def _save_rules(self, request: PermissionRequest, choice: str) -> None:
        r = self.renderer
        assert r is not None
        rules = [str(rule) for rule in request.suggested_rules]
        line, failed = save_allow_rules(choice, rules, self.settings.project_root or self.root)
        r.note(line, "red" if failed else "dim")

    def _show_request(self, request: PermissionRequest) -> None:
        r = self.renderer
        assert r is not None
        args = request.args
        if request.tool_name == "bash":
            r.note(f"⚠ bash wants to run: {request.subject}", "bold yellow")
        elif request.tool_name == "edit" and isinstance(args.get("old_string"), str):
            r.note(f"⚠ edit wants to change {request.subject}", "bold yellow")
            old = str(args.get("old_string", "")).splitlines()
            new = str(args.get("new_string", "")).splitlines()
            name = request.subject or "file"
            diff = difflib.unified_diff(old, new, fromfile=f"a/{name}", tofile=f"b/{name}", lineterm="", n=2)
            r.print_diff(clip_lines("\n".join(diff), _PREVIEW_LINES))
        elif request.tool_name == "write":
            content = str(args.get("content", ""))
            lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
            r.note(f"⚠ write wants to write {request.subject} ({lines} lines)", "bold yellow")
            r.print_diff(write_preview(self.root, request.subject, content, self._hidden()))
        else:
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
            r.note(f"⚠ {request.tool_name} wants to run with {shown[:300]}", "bold yellow")
        if request.suggested_rules:
            r.note(f"  'a' always allows {', '.join(str(rule) for rule in request.suggested_rules)}")
        else:
            r.note("  no rule can cover this command: 'a' allows it once")

    def _read_tool(self) -> Any:
        """The agent's ``read`` tool (a workspace tool), or None without one."""
        from ..tools import ReadTool

        return next((t for t in self.agent.tools if isinstance(t, ReadTool)), None)

    def _hidden(self) -> Callable[[str], bool] | None:
        """Whether the file tools may not read a real path (a ``Read`` deny rule names it)."""
        tool = self._read_tool()
        return tool.workspace.is_hidden if tool is not None else None

    async def _attach(self, text: str) -> tuple[str, list[Any]]:
        """``text`` with the text files it mentions (``@path``) added and the images,
        documents and recordings to send with it (:mod:`ketch.cli._attach`); a refused
        mention is noted and left out, one that names no file is left as it is."""
        from ._attach import attach_mentions

        r = self.renderer
        assert r is not None
        return await attach_mentions(self.built, text, r.note)

    # -- input ------------------------------------------------------------------------------
    async def handle(self, text: str) -> bool:
        """Act on one input line; False means exit."""
        line = text.strip()
        if self.pending is not None and not line.startswith("/"):
            _, future = self.pending
            if not future.done():
                future.set_result(text)
            return True
        if not line:
            return True
        if line.startswith("/"):
            return await self.command(line)
        if self.compacting:
            assert self.renderer is not None
            self.renderer.note("busy compacting the context: send it when that is done (Ctrl-C cancels)", "yellow")
            return True
        if self.agent.is_running:
            assert self.renderer is not None
            if line.startswith(">>"):
                self.agent.follow_up(line[2:].strip())
                self.renderer.note(f"↳ queued follow-up: {line[2:].strip()}")
            else:
                self.agent.steer(line)
                self.renderer.note(f"↳ steering: {line}")
            return True
        if line.startswith(">>"):
            line = line[2:].strip()
        self.task = asyncio.create_task(self._run(line))
        return True

    async def _run(self, text: str, custom: CustomCommand | None = None) -> None:
        """Run ``text`` (with ``custom``: the arguments of that custom command)."""
        r = self.renderer
        assert r is not None
        try:
            if custom is not None:
                text = custom.expand(text)
            text, attachments = await self._attach(text)
        except Exception as exc:  # guards the session itself
            r.note(f"error: {exception_text(exc)}", "red")
            return
        self.built.arm()
        try:
            if custom is not None:
                from ._commands import run_command

                result = await run_command(self.built, self.settings, custom, text, attachments)
            else:
                result = await self.built.prompt(text, attachments)
            if result.end_reason == "stop_guard" and not result.messages:  # a UserPromptSubmit hook blocked it
                r.note(result.summary.error or "prompt blocked", "red")
        except Exception as exc:  # the loop does not raise; this guards the session itself
            r.note(f"error: {exception_text(exc)}", "red")
        finally:
            r.status.set(None)
            self._invalidate()

    async def _resume_paused(self) -> None:
        """The session's last run paused for approval (``ketch run`` without a terminal):
        ask about each waiting call, then continue that run."""
        from .. import approve
        from .. import deny
        from ._render import tool_summary
        from ._sessions import pre_approve

        r = self.renderer
        assert r is not None and self.session is not None
        state = self.session.pending_state
        if state is None:
            return
        decisions: dict[str, Any] = {}
        try:
            for call in state.awaiting:
                r.note(f"⚠ the paused run waits for approval: {tool_summary(call.tool_name, call.args)}", "bold yellow")
                answer = parse_answer(await self._question(PERMISSION_PROMPT))
                decisions[call.tool_call_id] = deny(answer.reason) if answer.decision == "deny" else approve()
            pre_approve(self.permissions, state, decisions)
            self.built.arm()
            await self.agent.resume(state, decisions=decisions)
        except ValueError as exc:  # another model, system prompt or tools than the paused run's
            r.note(f"cannot continue the paused run: {exc}", "red")
        except Exception as exc:  # guards the session itself
            r.note(f"error: {exception_text(exc)}", "red")
        finally:
            r.status.set(None)
            self._invalidate()

    async def _compact(self, instructions: str | None) -> None:
        r = self.renderer
        assert r is not None
        ended: list[AgentEvent] = []
        unsubscribe = self.agent.subscribe(lambda e: ended.append(e) if e.type == "compaction_end" else None)
        try:
            await self.agent.compact(instructions)
        except Exception as exc:
            r.note(f"error: {exception_text(exc)}", "red")
        else:
            if not ended:
                r.note("nothing to compact: the conversation is shorter than what compaction keeps", "")
        finally:
            unsubscribe()
            self.compacting = False
            r.status.set(None)
            self._invalidate()

    async def command(self, line: str) -> bool:
        """Run a slash command; False means exit."""
        r = self.renderer
        assert r is not None
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        busy = self.agent.is_running or self.compacting
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            from ._commands import help_text

            custom = help_text(self.commands)
            r.note(f"{HELP}\n{custom}" if custom else HELP, "")
        elif name == "/cost":
            u = r.usage
            r.note(
                f"{r.turns} model call{'s' if r.turns != 1 else ''} · input {u.input} · output {u.output} · cache read {u.cache_read} · "
                f"cache write {u.cache_write} · total {u.total_tokens} tokens · ${u.cost.total:.4f}",
                "",
            )
            if r.compactions:
                n = r.compactions
                r.note(f"{n} context compaction{'s' if n != 1 else ''} · ${r.compaction_cost:.4f}", "")
        elif name == "/compact":
            if self.built.context_manager is None:
                r.note("context compaction is off in this session (--no-compaction or compaction = false)", "yellow")
            elif busy:
                r.note("busy: wait for the run to end (or Ctrl-C) before compacting", "yellow")
            else:
                self.compacting = True
                self.task = asyncio.create_task(self._compact(arg or None))
        elif name == "/memory":
            lines = self.built.instructions.describe() if self.built.instructions is not None else ["no instruction files"]
            for line in lines:
                r.note(line, "")
        elif name == "/tools":
            for tool in self.agent.tools:
                first = (tool.description or "").strip().splitlines()
                r.note(f"{tool.name:<8} {first[0] if first else ''}", "")
            if not self.agent.tools:
                r.note("no tools", "")
        elif name == "/model":
            if not arg:
                m = self.agent.model
                r.note(f"model: {m.provider}:{m.id}", "")
            elif busy:
                r.note("busy: wait for the run to end (or Ctrl-C) before switching models", "yellow")
            else:
                try:
                    self.agent.model = build_model(arg, self.settings)
                except ConfigError as exc:
                    r.note(str(exc), "red")
                else:
                    self.built.fit_context(self.settings)
                    r.note(f"model: {self.agent.model.provider}:{self.agent.model.id}", "")
        elif name == "/thinking":
            if not arg:
                r.note(f"thinking: {self.agent.thinking}", "")
            elif arg not in THINKING_LEVELS:
                r.note(f"unknown thinking level {arg!r}; one of {', '.join(THINKING_LEVELS)}", "red")
            else:
                self.agent.thinking = arg
                r.note(f"thinking: {arg}", "")
        elif name == "/mode":
            if not arg:
                r.note(f"permission mode: {self.permissions.mode}", "")
            else:
                try:
                    self.permissions.set_mode(parse_mode(arg))
                except ValueError as exc:
                    r.note(str(exc), "red")
                else:
                    r.note(f"permission mode: {self.permissions.mode}", "")
                    if self.session is not None:
                        await self.session.record_permission_mode(self.permissions.mode)
        elif name == "/clear":
            if busy:
                r.note("busy: wait for the run to end (or Ctrl-C) before clearing", "yellow")
            else:
                await self.built.session_end("clear")
                if self.session is not None:
                    from ._sessions import SessionOptions
                    from ._sessions import open_session

                    await self._switch(await open_session(SessionOptions(), self.root))
                else:
                    self.agent.reset()
                    if self.built.context_manager is not None:
                        self.built.context_manager.failures = 0
                await self.built.session_start("clear")
                r.note("conversation cleared", "")
        elif name == "/mcp":
            from ._mcp import status_lines

            if self.mcp is None:
                r.note("no MCP servers configured (ketch mcp add NAME -- COMMAND ARGS... adds one)", "")
            else:
                r.note("\n".join(status_lines(self.mcp.status(), self.settings.mcp_origins)), "")
        elif name in ("/sessions", "/fork", "/rewind", "/export"):
            await self._session_command(name, arg, busy)
        elif name[1:] in self.commands:
            if busy:
                r.note(f"{name}: a run is active; send it when it is done (Ctrl-C aborts the run)", "yellow")
            else:
                self.task = asyncio.create_task(self._run(arg, self.commands[name[1:]]))
        else:
            r.note(f"unknown command {name}; /help lists the commands", "red")
        return True

    # -- sessions -------------------------------------------------------------------------
    async def _session_command(self, name: str, arg: str, busy: bool) -> None:
        """``/sessions``, ``/fork``, ``/rewind [N]``, ``/export [file]``."""
        from ._sessions import _all_sessions
        from ._sessions import list_lines
        from ._sessions import store

        r = self.renderer
        assert r is not None
        session = self.session
        if session is None:
            r.note("this session is not saved (--no-session)", "yellow")
            return
        if name == "/sessions":
            infos = await _all_sessions(store(), str(self.root))
            r.note("\n".join(list_lines(infos, current=session.id)), "")
            return
        if name == "/export":
            from ..sessions import export_markdown

            text = export_markdown(await store().load(session.id), session_id=session.id)
            name = arg or f"ketch-{session.id[:8]}.md"
            try:
                path = await asyncio.to_thread(_write_text, self.root, name, text)
            except OSError as exc:
                r.note(f"cannot write {name}: {exc.strerror or exc}", "red")
            else:
                r.note(f"exported the session to {path}", "")
            return
        if busy:
            r.note(f"busy: wait for the run to end (or Ctrl-C) before {name[1:]}ing", "yellow")
            return
        if name == "/fork":
            if not session.message_ids:
                r.note("nothing to fork yet: the conversation is empty", "yellow")
                return
            await session.sync()
            fork = await session.fork()
            await self._switch(fork)
            r.note(f"forked session {session.id} as {fork.id}; you are now in the fork", "")
            return
        await self._rewind(arg)

    async def _rewind(self, arg: str) -> None:
        from ._sessions import rewind_prompt

        r = self.renderer
        assert r is not None and self.session is not None
        for line, style in await rewind_prompt(self.session, self.agent, arg):
            r.note(line, style)

    async def _switch(self, session: SavedSession | None) -> None:
        """Continue in ``session`` (a fork, a new one): a new agent on its transcript with
        this one's model, thinking level, permission mode and remembered rules."""
        old = self.built
        if self.session is not None:
            await self.session.close()
        self.session = session
        built = build_agent(
            self.settings,
            self.root,
            approver=self.approve,
            tool_choice=self.tool_choice,
            model=old.agent.model,
            session=session,
            mcp=self.mcp,
            todo=True,
        )
        await built.attach_mcp()
        built.agent.thinking = old.agent.thinking
        built.permissions.set_mode(old.permissions.mode)
        built.permissions.session_rules = old.permissions.session_rules
        self.built, self.agent, self.permissions = built, built.agent, built.permissions
        if self.renderer is not None:
            self.agent.subscribe(self.renderer)
            if built.hooks is not None:
                renderer = self.renderer
                built.hooks.on_notice = lambda notice: renderer.note(notice.text, "yellow")

    def interrupt(self) -> bool:
        """Ctrl-C: abort a run, else arm exit; True when the session should exit."""
        assert self.renderer is not None
        if self.exit_armed:
            return True  # also while an aborted run is still winding down
        if self.agent.is_running:
            self.agent.abort()
            self.exit_armed = True
            self.renderer.note("Aborting… (Ctrl-C again exits)", "yellow")
            return False
        self.exit_armed = True
        self.renderer.note("Press Ctrl-C again to exit (or type /exit).", "yellow")
        return False

    # -- main loop --------------------------------------------------------------------------
    async def run(self) -> int:
        """Read and act on input until the user exits; returns the exit code."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.application import get_app
        from prompt_toolkit.filters import Condition
        from prompt_toolkit.history import FileHistory
        from prompt_toolkit.history import History
        from prompt_toolkit.history import InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings
        from prompt_toolkit.patch_stdout import patch_stdout
        from rich.console import Console

        history: History
        try:
            directory = config_dir()
            directory.mkdir(parents=True, exist_ok=True)
            history = FileHistory(str(directory / "history"))
        except OSError:
            history = InMemoryHistory()
        bindings = KeyBindings()

        @bindings.add("c-t")
        def _toggle(event: Any) -> None:
            r = self.renderer
            if r is not None:
                r.expand_thinking = not r.expand_thinking
                if r.expand_thinking:
                    r.show_last_thinking()
                else:
                    r.note("thinking collapsed")

        # Alt-Enter. Not Ctrl-J: an Enter typed ahead, before the prompt sets the terminal
        # raw, arrives as Ctrl-J (the terminal turns CR into LF) and must still send.
        @bindings.add("escape", "enter")
        def _newline(event: Any) -> None:
            event.current_buffer.insert_text("\n")

        ends_with_backslash = Condition(lambda: get_app().current_buffer.document.text_before_cursor.endswith("\\"))

        @bindings.add("enter", filter=ends_with_backslash)
        def _continue_line(event: Any) -> None:
            buffer = event.current_buffer
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")

        self.prompt = PromptSession(
            history=history,
            bottom_toolbar=self._toolbar,
            refresh_interval=0.25,
            key_bindings=bindings,
            completer=make_completer(
                self.root, self._hidden(), [(f"/{c.name}", c.description) for c in self.commands.values()]
            ),
            complete_while_typing=Condition(_completing),  # the menu shows for / and @ only
            prompt_continuation=lambda width, line_number, is_soft_wrap: " " * width,
        )
        restore = self._install_signals()
        with patch_stdout(raw=True):
            console = Console(highlight=False)
            self.renderer = EventRenderer(console, self._output_limit)
            self.agent.subscribe(self.renderer)
            m = self.agent.model
            text = banner(f"{m.provider}:{m.id}", self.root, self.permissions.mode, console.width)
            # soft_wrap: never break the line; a terminal too narrow for it wraps it itself.
            console.print(text, style="dim", markup=False, highlight=False, soft_wrap=True)
            if self.built.sandbox_warning is not None:
                self.renderer.note(f"warning: {self.built.sandbox_warning}", "yellow")
            for line in await self.built.attach_mcp():
                self.renderer.note(f"warning: {line}", "yellow")
            if self.session is not None and self.agent.messages:
                count = len(self.agent.messages)
                self.renderer.replay(self.agent.messages)
                self.renderer.note(f"resumed session {self.session.id} ({count} message{'s' if count != 1 else ''})", "")
            if self.built.hooks is not None:
                renderer = self.renderer
                self.built.hooks.on_notice = lambda notice: renderer.note(notice.text, "yellow")
            if self.session is not None:
                await self.session.record_permission_mode(self.permissions.mode)
            await self.built.session_start("resume" if self.agent.messages else "startup")
            if self.session is not None and self.session.pending_state is not None:
                self.task = asyncio.create_task(self._resume_paused())
            try:
                while self.exit_code is None:
                    try:
                        text = await self.prompt.prompt_async(self._message)
                    except KeyboardInterrupt:
                        if self.interrupt():
                            break
                        continue
                    except EOFError:
                        break
                    self.exit_armed = False
                    if not await self.handle(text):
                        break
            finally:
                kill_process_groups(children=True)
                restore()
                await self._shutdown()
                await self.built.session_end("prompt_input_exit")
        session = self.session
        if session is not None and session.message_ids:
            sys.stdout.write(f"Resume this session with: ketch --resume {session.id}\n")
            sys.stdout.flush()
        return self.exit_code or 0

    def _output_limit(self) -> int | None:
        from ._render import output_limit

        return output_limit(self.agent.model, self.settings.max_tokens)

    def _install_signals(self) -> Callable[[], None]:
        """SIGTERM ends the session like /exit (exit code 143); SIGHUP (the terminal is
        gone) exits at once (129). Both end the tools' processes first."""
        def on_term() -> None:
            kill_process_groups(children=True)
            self.exit_code = 143
            if self.agent.is_running:
                self.agent.abort()
            if self.prompt is not None and self.prompt.app.is_running:
                self.prompt.app.exit(exception=EOFError())

        return handle_signals({signal.SIGTERM: on_term, signal.SIGHUP: lambda: exit_now(129)})

    async def _shutdown(self) -> None:
        task = self.task
        if task is not None and not task.done():
            self.agent.abort()
            try:
                await asyncio.wait_for(asyncio.shield(task), 5)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()


async def _pick(options: SessionOptions, root: Path) -> SessionOptions:
    """``ketch --resume`` without an id: list the directory's sessions and ask which one
    to resume (Enter: a new session)."""
    from prompt_toolkit import PromptSession

    from ._sessions import SessionOptions
    from ._sessions import _all_sessions
    from ._sessions import list_lines
    from ._sessions import store

    infos = await _all_sessions(store(), str(root))
    if not infos:
        print(f"No saved sessions in {root}; starting a new one.")
        return SessionOptions()
    header, *rows = list_lines(infos)
    width = len(str(len(infos)))
    print(" " * (width + 2) + header)
    for number, row in enumerate(rows, 1):
        print(f"{number:>{width}}. {row}")
    prompt: PromptSession[str] = PromptSession()
    while True:
        answer = (await prompt.prompt_async(f"Resume which session? [1-{len(infos)}, Enter: new] › ")).strip()
        if not answer:
            return SessionOptions()
        if answer.isdigit() and 1 <= int(answer) <= len(infos):
            return SessionOptions(resume=infos[int(answer) - 1].id)
        print(f"{answer!r} is not a number from 1 to {len(infos)}")


async def run_interactive(
    settings: Settings, root: Path, *, tool_choice: str | None = None, sessions: SessionOptions | None = None
) -> int:
    """Run the interactive session (saved as a session unless ``sessions.enabled`` is
    false); returns the exit code."""
    from ._sessions import SessionOptions
    from ._sessions import open_session
    from ._sessions import use_recorded_model

    options = sessions if sessions is not None else SessionOptions()
    if options.resume == "":
        try:
            options = await _pick(options, root)
        except (EOFError, KeyboardInterrupt):
            return EXIT_INTERRUPTED
    mcp = mcp_manager(settings, root, errlog=_mcp_errlog() if settings.mcp_servers else None)
    saved = await open_session(options, root)
    use_recorded_model(settings, saved)
    ui: Session | None = None
    try:
        ui = Session(settings, root, tool_choice=tool_choice, session=saved, mcp=mcp)
        return await ui.run()
    finally:
        if mcp is not None:
            await mcp.aclose()
        current = ui.session if ui is not None else saved  # /fork and /clear switch sessions
        if current is not None:
            await current.close()


def _mcp_errlog() -> Any:
    """Where MCP servers' stderr goes in the interactive session: ``mcp-servers.log`` in
    the user config directory (the terminal belongs to the prompt), else stderr."""
    import sys

    try:
        directory = config_dir()
        directory.mkdir(parents=True, exist_ok=True)
        return open(directory / "mcp-servers.log", "a", encoding="utf-8")  # lives with the process
    except OSError:
        return sys.stderr
