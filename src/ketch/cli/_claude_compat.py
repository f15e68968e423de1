"""The Claude Code compatible mode: ketch as the CLI the Claude Agent SDK drives.

The Claude Agent SDK (Python ``claude-agent-sdk``, TypeScript
``@anthropic-ai/claude-agent-sdk``) runs a command with ``--output-format stream-json
--input-format stream-json`` and no subcommand, and speaks its control protocol over the
pipes. Given that invocation, ``ketch`` answers as Claude Code would, so
``ClaudeAgentOptions(cli_path="ketch")`` drives ketch (with any provider, or the embedded
model). ``ketch run --input-format stream-json -o stream-json`` keeps ketch's own protocol
(:mod:`ketch.cli._control`); :func:`is_sdk_invocation` tells the two apart.

In (one JSON object per line on stdin):

- ``control_request`` from the SDK: ``initialize`` (its hook callbacks), ``interrupt``,
  ``set_permission_mode``, ``set_model``, ``mcp_status``, ``get_context_usage``,
  ``rewind_files``, ``mcp_reconnect``, ``mcp_toggle``; anything else is answered with an
  error naming the supported ones;
- ``control_response``: the SDK's answers to ketch's own requests: ``can_use_tool`` (the
  SDK's permission callback, with ``--permission-prompt-tool stdio``), ``hook_callback``
  (the SDK's hooks) and ``mcp_message`` (its in-process MCP servers, ``"type": "sdk"`` in
  ``--mcp-config``);
- ``user``: ``{"type": "user", "message": {"role": "user", "content": "…" | [blocks]}}``
  starts a run; while one runs it steers it (the run takes it in at its next turn).

Out: ``system``/``init`` as each run starts, ``stream_event`` lines (Anthropic stream
events, with ``--include-partial-messages``), an ``assistant`` line per model response
(``text``, ``thinking`` and ``tool_use`` blocks), a ``user`` line per tool result
(``tool_result`` block), and a ``result`` line ending each run (``subtype``,
``duration_ms``, ``num_turns``, ``total_cost_usd``, ``usage``, ``permission_denials``,
``terminal_reason`` …); ``session_state_changed`` frames when the SDK asks for them.

Tool names are ketch's (``read``, ``write``, ``edit``, ``bash``, ``grep``, ``find``,
``ls``, ``mcp__server__tool``); hook matchers and permission rules match Claude Code's
names too (``Bash`` is ``bash``; ``Glob`` and ``LS`` name ``find`` and ``ls``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from ._args import EXIT_BROKEN_PIPE
from ._args import EXIT_INTERRUPTED
from ._args import EXIT_USAGE
from ._args import OneLineParser
from ._args import finite_non_negative
from ._args import positive_int
from ._stdio import JsonLines
from ._stdio import StdinLines

if TYPE_CHECKING:
    from ..llm import AssistantMessage
    from ..llm import Message
    from ..loop import RunResult
    from ..loop import Tool
    from ..loop import ToolCallInfo
    from ..loop import ToolResult
    from ..permissions import PermissionAllow
    from ..permissions import PermissionDeny
    from ._config import Settings
    from ._factory import Built

PROG = "ketch (Claude Code compatible mode)"

PERMISSION_MODES: dict[str, str] = {
    "default": "default",
    "acceptEdits": "accept_edits",
    "plan": "plan",
    "bypassPermissions": "bypass",
    "dontAsk": "default",
}
"""Claude Code's permission modes and the ketch mode each runs as (``dontAsk`` never asks:
what the rules and the mode do not allow is denied)."""

CLAUDE_MODES: dict[str, str] = {"default": "default", "accept_edits": "acceptEdits", "plan": "plan", "bypass": "bypassPermissions"}

TOOL_NAMES: dict[str, str] = {
    "read": "read",
    "write": "write",
    "edit": "edit",
    "multiedit": "edit",
    "bash": "bash",
    "grep": "grep",
    "glob": "find",
    "find": "find",
    "ls": "ls",
    "todowrite": "todo_write",
}
"""Claude Code's built-in tool names (lower case) and ketch's tool for each (``todo_write``
is :class:`ketch.tools.Todo`'s)."""

CONTROL_SUBTYPES = (
    "initialize",
    "interrupt",
    "set_permission_mode",
    "set_model",
    "mcp_status",
    "get_context_usage",
    "rewind_files",
    "mcp_reconnect",
    "mcp_toggle",
)
"""The control requests ketch answers."""

HOOK_EVENTS_SUPPORTED = (  # ketch.hooks.HOOK_EVENTS, without importing it (start-up; tests/test_vocabularies.py)
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "Stop",
    "SubagentStop",
    "PreCompact",
    "SessionStart",
    "SessionEnd",
    "Notification",
)

_IGNORED_FLAGS = {
    "fallback_model": "--fallback-model",
    "betas": "--betas",
    "json_schema": "--json-schema",
    "task_budget": "--task-budget",
    "session_mirror": "--session-mirror",
    "resume_drops_turn": "--resume-drops-turn",
    "plugin_dir": "--plugin-dir",
    "include_hook_events": "--include-hook-events",
    "session_id": "--session-id",
    "thinking_display": "--thinking-display",
    "debug_file": "--debug-file",
    "agent": "--agent",
    "channels": "--channels",
    "plugin_dir_no_mcp": "--plugin-dir-no-mcp",
    "project_config_root": "--project-config-root",
}


def _flag_value(argv: Sequence[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word[len(name) + 1 :]
    return None


def is_sdk_invocation(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is how the Claude Agent SDK runs Claude Code: no subcommand or task
    first, ``--output-format stream-json`` and ``--input-format stream-json``."""
    if not argv or not argv[0].startswith("-"):
        return False
    return _flag_value(argv, "--output-format") == "stream-json" and _flag_value(argv, "--input-format") == "stream-json"


def _parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="The Claude Agent SDK's command line, served by ketch.", allow_abbrev=False)
    p.add_argument("--output-format", choices=("stream-json",), required=True)
    p.add_argument("--input-format", choices=("stream-json",), required=True)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("-p", "--print", action="store_true")
    p.add_argument("--debug", nargs="?", const="")
    p.add_argument("--debug-to-stderr", action="store_true")
    p.add_argument("--system-prompt")
    p.add_argument("--system-prompt-file")
    p.add_argument("--append-system-prompt")
    p.add_argument("--tools")
    p.add_argument("--allowedTools", "--allowed-tools", dest="allowed_tools", action="append", default=[])
    p.add_argument("--disallowedTools", "--disallowed-tools", dest="disallowed_tools", action="append", default=[])
    p.add_argument("--max-turns", type=positive_int)
    p.add_argument("--max-budget-usd", type=finite_non_negative)
    p.add_argument("--model")
    p.add_argument("--fallback-model")
    p.add_argument("--betas")
    p.add_argument("--permission-prompt-tool")
    p.add_argument("--permission-mode")
    p.add_argument("--dangerously-skip-permissions", action="store_true")
    p.add_argument("--continue", dest="continue_session", action="store_true")
    p.add_argument("--resume")
    p.add_argument("--session-id")
    p.add_argument("--fork-session", action="store_true")
    p.add_argument("--resume-session-at")
    p.add_argument("--resume-drops-turn")
    p.add_argument("--settings")
    p.add_argument("--add-dir", action="append", default=[])
    p.add_argument("--mcp-config", action="append", default=[])
    p.add_argument("--strict-mcp-config", action="store_true")
    p.add_argument("--include-partial-messages", action="store_true")
    p.add_argument("--include-hook-events", action="store_true")
    p.add_argument("--replay-user-messages", action="store_true")
    p.add_argument("--setting-sources")
    p.add_argument("--plugin-dir", action="append")
    p.add_argument("--max-thinking-tokens", type=int)
    p.add_argument("--thinking", choices=("adaptive", "enabled", "disabled"))
    p.add_argument("--thinking-display")
    p.add_argument("--effort", choices=("low", "medium", "high", "xhigh", "max"))
    p.add_argument("--json-schema")
    p.add_argument("--task-budget")
    p.add_argument("--session-mirror", action="store_true")
    # the TypeScript SDK: the options it sends in the initialize request instead of as flags
    # (ketch waits for initialize before building the agent anyway)
    p.add_argument("--await-initialize", action="store_true")
    p.add_argument("--initialize-fields")
    # more of the TypeScript SDK's flags
    p.add_argument("--allow-dangerously-skip-permissions", action="store_true")  # bypassPermissions' consent
    p.add_argument("--no-session-persistence", dest="no_session", action="store_true")  # persistSession: false
    p.add_argument("--permission-prompts", choices=("host", "none"))
    p.add_argument("--debug-file")
    p.add_argument("--agent")
    p.add_argument("--channels", action="append")
    p.add_argument("--plugin-dir-no-mcp", action="append")
    p.add_argument("--project-config-root")
    p.add_argument("--managed-settings")
    p.add_argument("--managed-settings-in-initialize", action="store_true")
    # ketch's own
    p.add_argument("-C", "--cwd")
    p.add_argument("--trust-project", action="store_true")
    p.add_argument("--no-session", action="store_true")
    return p


class UsageError(Exception):
    """A flag value ketch cannot use; the message names it and what is allowed."""


@dataclass
class Options:
    """The invocation, checked."""

    args: argparse.Namespace
    permission_mode: str | None = None  # ketch's name
    dont_ask: bool = False
    stdio_permissions: bool = False
    thinking: str | None = None
    sdk_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings_json: dict[str, Any] = field(default_factory=dict)
    todo: bool = True  # the to-do list (todo_write); --tools without TodoWrite leaves it out


def _thinking(args: argparse.Namespace) -> str | None:
    if args.effort is not None:
        return {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}[args.effort]
    if args.thinking == "disabled":
        return "off"
    if args.thinking == "adaptive":
        return "medium"
    tokens = args.max_thinking_tokens
    if tokens is None:
        return None
    if tokens <= 0:
        return "off"
    return "low" if tokens <= 4096 else "medium" if tokens <= 16384 else "high"


def _json_or_file(text: str, flag: str) -> Any:
    stripped = text.strip()
    if not stripped.startswith("{"):
        try:
            stripped = Path(stripped).read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise UsageError(f"{flag} {text!r}: neither JSON nor a readable file ({exc.strerror or exc})") from None
    try:
        return json.loads(stripped)
    except ValueError as exc:
        raise UsageError(f"{flag}: invalid JSON ({exc})") from None


def check_options(argv: Sequence[str]) -> Options:
    """The invocation parsed and checked (:class:`UsageError` for a bad value; argparse
    exits with 2 for an unknown flag)."""
    args = _parser().parse_args(list(argv))
    options = Options(args)
    mode = args.permission_mode
    if args.dangerously_skip_permissions:
        mode = mode or "bypassPermissions"
    if mode is not None:
        if mode not in PERMISSION_MODES:
            raise UsageError(f"--permission-mode {mode!r} is not one of {', '.join(PERMISSION_MODES)}")
        options.permission_mode = PERMISSION_MODES[mode]
        options.dont_ask = mode == "dontAsk"
    tool = args.permission_prompt_tool
    if tool is not None and tool != "stdio":
        raise UsageError(
            f"--permission-prompt-tool {tool!r}: ketch asks the SDK over the control protocol only "
            "(--permission-prompt-tool stdio, which the SDK passes for can_use_tool)"
        )
    options.stdio_permissions = tool == "stdio" and args.permission_prompts != "none"
    if args.managed_settings is not None or args.managed_settings_in_initialize:
        raise UsageError(
            "--managed-settings: ketch does not enforce Claude Code's managed (policy) settings; "
            "put the rules in ketch's configuration instead"
        )
    options.thinking = _thinking(args)
    for text in args.mcp_config:
        data = _json_or_file(text, "--mcp-config")
        servers = data.get("mcpServers", data) if isinstance(data, dict) else None
        if not isinstance(servers, dict):
            raise UsageError('--mcp-config: expected {"mcpServers": {name: config, ...}}')
        _add_mcp_servers(options, servers, "--mcp-config")
    if args.settings is not None:
        data = _json_or_file(args.settings, "--settings")
        if not isinstance(data, dict):
            raise UsageError("--settings: expected a JSON object")
        options.settings_json = data
    if args.system_prompt_file is not None:
        try:
            args.system_prompt = Path(args.system_prompt_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--system-prompt-file {args.system_prompt_file}: {exc.strerror or exc}") from None
    return options


def _add_mcp_servers(options: Options, servers: dict[str, Any], where: str) -> None:
    """The SDK's MCP servers (``{name: config}``): in-process ones (``type`` ``sdk``) and
    the ones ketch connects to."""
    for name, entry in servers.items():
        if isinstance(entry, dict) and entry.get("type") == "sdk":
            options.sdk_servers[name] = entry
        elif isinstance(entry, dict):
            options.mcp_servers[name] = entry
        else:
            raise UsageError(f"{where}: server {name!r} must be an object")


INITIALIZE_FIELDS = (
    "hooks",
    "agents",
    "skills",
    "systemPrompt",
    "appendSystemPrompt",
    "mcpServers",
    "sdkMcpServers",
    "sdkMcpServerManifests",
    "sdkMcpServerConfigs",
    "disallowedTools",
    "settings",
    "jsonSchema",
)
"""The fields of the SDK's ``initialize`` request ketch reads (``agents``, ``skills`` and
``jsonSchema`` only to warn that they are ignored; the server manifests and configs are
the in-process servers', which ketch asks over ``mcp_message``)."""


def apply_initialize(options: Options, request: dict[str, Any]) -> None:
    """The options the TypeScript SDK sends in its ``initialize`` request rather than as
    flags: the system prompt (``systemPrompt``, a list of sections, ``[""]`` for none:
    ketch's own), ``appendSystemPrompt``, ``mcpServers``, the in-process
    ``sdkMcpServers``, ``disallowedTools`` and ``settings``. :class:`UsageError` for a
    value of the wrong type; a named warning for fields ketch does not support."""
    args = options.args
    prompt = request.get("systemPrompt")
    if prompt is not None:
        sections = [prompt] if isinstance(prompt, str) else prompt
        if not isinstance(sections, list) or not all(isinstance(p, str) for p in sections):
            raise UsageError("initialize: systemPrompt must be a string or a list of strings")
        args.system_prompt = "\n\n".join(p for p in sections if p)  # "" -> ketch's own, as --system-prompt ""
    append = request.get("appendSystemPrompt")
    if append is not None:
        if not isinstance(append, str):
            raise UsageError("initialize: appendSystemPrompt must be a string")
        if append:
            args.append_system_prompt = f"{args.append_system_prompt}\n\n{append}" if args.append_system_prompt else append
    servers = request.get("mcpServers")
    if servers is not None:
        if not isinstance(servers, dict):
            raise UsageError("initialize: mcpServers must be an object {name: config}")
        _add_mcp_servers(options, servers, "initialize: mcpServers")
    names = request.get("sdkMcpServers")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UsageError("initialize: sdkMcpServers must be a list of server names")
        for name in names:
            options.sdk_servers.setdefault(name, {"type": "sdk", "name": name})
    disallowed = request.get("disallowedTools")
    if disallowed is not None:
        if not isinstance(disallowed, list) or not all(isinstance(t, str) for t in disallowed):
            raise UsageError("initialize: disallowedTools must be a list of tool names or rules")
        args.disallowed_tools = [*args.disallowed_tools, *disallowed]
    settings = request.get("settings")
    if settings is not None:
        data = _json_or_file(settings, "initialize: settings") if isinstance(settings, str) else settings
        if not isinstance(data, dict):
            raise UsageError("initialize: settings must be a JSON object")
        options.settings_json = {**options.settings_json, **data}
    if request.get("jsonSchema") is not None:
        _warn("initialize: jsonSchema (structured output) is not supported by ketch and is ignored")
    for key in ("agents", "skills"):
        if request.get(key):
            _warn(f"initialize: {key} are not supported by ketch and are ignored")
    unknown = sorted(
        k for k, v in request.items() if k != "subtype" and k not in INITIALIZE_FIELDS and v not in (None, False, "", [], {})
    )
    if unknown:
        _warn(f"initialize: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not supported by ketch and ignored")


def _applied(request: dict[str, Any]) -> dict[str, Any]:
    """What the answer to ``initialize`` confirms of the options it carried (the TypeScript
    SDK ends a session whose settings or disallowed tools are not confirmed)."""
    confirmed: dict[str, Any] = {}
    for field_name, key in (
        ("mcpServers", "mcp_servers_applied"),
        ("settings", "settings_applied"),
        ("disallowedTools", "disallowed_tools_applied"),
    ):
        if request.get(field_name) is not None:
            confirmed[key] = True
    if request.get("plugins"):
        confirmed["plugins_applied"] = False
    manifests = request.get("sdkMcpServerManifests")
    if isinstance(manifests, dict) and manifests:  # ketch asks the servers over mcp_message
        confirmed["sdk_mcp_manifests_parked"] = dict.fromkeys(manifests, "not_honoured")
    return confirmed


def _warn(text: str) -> None:
    sys.stderr.write(f"ketch: warning: {text}\n")
    sys.stderr.flush()


def _split_rules(texts: Sequence[str]) -> list[str]:
    """The rules of ``--allowedTools`` values: split at commas and spaces outside
    parentheses (``Bash(git log:*),Read``)."""
    rules: list[str] = []
    for text in texts:
        depth = 0
        current: list[str] = []
        for ch in text:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth = max(0, depth - 1)
            if depth == 0 and (ch == "," or ch.isspace()):
                if current:
                    rules.append("".join(current))
                current = []
                continue
            current.append(ch)
        if current:
            rules.append("".join(current))
    return rules


def _ketch_rule(text: str) -> str:
    """A Claude Code rule with ketch's tool name where they differ (``Glob(src/**)`` ->
    ``find(src/**)``, ``LS`` -> ``ls``, ``MultiEdit`` -> ``Edit``)."""
    name, paren, rest = text.partition("(")
    mapped = {"glob": "find", "ls": "ls", "multiedit": "Edit", "todowrite": "todo_write"}.get(name.strip().lower())
    return (mapped + paren + rest) if mapped is not None else text


def _tools(text: str) -> list[str] | None:
    """``--tools``: None for all (``default``), else ketch's names."""
    if text.strip() == "default":
        return None
    names: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        mapped = TOOL_NAMES.get(word.lower())
        if mapped is None:
            _warn(f"--tools {word!r}: ketch has no such tool (its tools: read, write, edit, bash, grep, find, ls, TodoWrite); left out")
        elif mapped not in names:
            names.append(mapped)
    return names


def build_settings(options: Options, root: Path) -> Settings:
    """ketch's settings for the invocation: the config files, then the flags."""
    from ..permissions import Rule
    from ._config import ConfigError
    from ._config import finish_settings
    from ._config import load_settings

    args = options.args
    extra = options.settings_json
    flags: dict[str, Any] = {
        "model": args.model,
        "thinking": options.thinking,
        "max_turns": args.max_turns,
        "max_budget_usd": args.max_budget_usd,
        "system_prompt": args.system_prompt or None,  # the SDK passes "" for "no preset": ketch's own prompt
        "permission_mode": options.permission_mode,
    }
    model = extra.get("model")
    if flags["model"] is None and isinstance(model, str):
        flags["model"] = model
    found = extra.get("permissions")
    permissions: dict[str, Any] = found if isinstance(found, dict) else {}
    mode = permissions.get("defaultMode")
    if flags["permission_mode"] is None and isinstance(mode, str):
        if mode not in PERMISSION_MODES:
            raise ConfigError(f"--settings permissions.defaultMode {mode!r} is not one of {', '.join(PERMISSION_MODES)}")
        flags["permission_mode"] = PERMISSION_MODES[mode]
        options.dont_ask = mode == "dontAsk"
    if args.tools is not None:
        names = _tools(args.tools)
        if names is not None:
            options.todo = "todo_write" in names
            names = [n for n in names if n != "todo_write"]
        flags["tools"] = names
    settings = load_settings(root, flags, trust=args.trust_project)
    allow = [_ketch_rule(r) for r in _split_rules(args.allowed_tools)]
    deny = [_ketch_rule(r) for r in _split_rules(args.disallowed_tools)]
    finish_settings(settings, allow, deny)
    for kind in ("allow", "deny", "ask"):
        rules = permissions.get(kind, [])
        if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
            raise ConfigError(f"--settings permissions.{kind}: expected a list of rule strings")
        for text in rules:
            try:
                getattr(settings, kind).append(Rule.parse(_ketch_rule(text), "flag"))
            except ValueError as exc:
                raise ConfigError(f"--settings permissions.{kind}: {exc}") from None
    _apply_settings_json(settings, extra, root)
    if options.mcp_servers:
        if args.strict_mcp_config:
            settings.mcp_servers.clear()
            settings.mcp_origins.clear()
        for name, entry in options.mcp_servers.items():
            settings.mcp_servers[name] = entry
            settings.mcp_origins[name] = "--mcp-config"
    elif args.strict_mcp_config:
        settings.mcp_servers.clear()
    for name, flag in _IGNORED_FLAGS.items():
        if getattr(args, name, None):
            _warn(f"{flag} is not supported by ketch and is ignored")
    if args.setting_sources is not None:
        _warn("--setting-sources is ignored: ketch reads its user config and (when trusted) the project's")
    return settings


_SETTINGS_KEYS = ("permissions", "model", "hooks", "sandbox", "env")


def _apply_settings_json(settings: Settings, data: dict[str, Any], root: Path) -> None:
    from ..hooks import HookConfigError
    from ..hooks import parse_hooks
    from ._config import ConfigError

    for key in data:
        if key not in _SETTINGS_KEYS:
            _warn(f"--settings: key {key!r} is not used by ketch (it reads {', '.join(_SETTINGS_KEYS)})")
    hooks = data.get("hooks")
    if hooks is not None:
        try:
            settings.hooks.extend(parse_hooks(hooks, "--settings"))
        except HookConfigError as exc:
            raise ConfigError(str(exc)) from None
    sandbox = data.get("sandbox")
    if isinstance(sandbox, dict):
        enabled = sandbox.get("enabled")
        if isinstance(enabled, bool):
            settings.sandbox = enabled
        for key in sandbox:
            if key != "enabled":
                _warn(f"--settings: sandbox.{key} is not used by ketch (its sandbox is bubblewrap, see ketch config)")
    if data.get("env"):
        _warn("--settings: env is not used by ketch (the tools get an allow-listed environment)")


# -- the control channel -------------------------------------------------------------------


class ControlError(Exception):
    """The SDK answered a control request with an error."""


class Channel:
    """The lines to the SDK, and the control requests ketch sends it: :meth:`request`
    waits for the matching ``control_response``."""

    def __init__(self, out: JsonLines) -> None:
        self.out = out
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def write(self, obj: Any) -> None:
        self.out.write(obj)

    async def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """Send ``body`` as a ``control_request``; the response's ``response`` object.
        :class:`ControlError` when the SDK answers with an error; when the waiting task is
        cancelled the SDK is told (``control_cancel_request``)."""
        request_id = str(uuid.uuid4())
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self.write({"type": "control_request", "request_id": request_id, "request": body})
        try:
            return await future
        except asyncio.CancelledError:
            if not future.done():
                self.write({"type": "control_cancel_request", "request_id": request_id})
            raise
        finally:
            self._pending.pop(request_id, None)

    def answered(self, response: Any) -> None:
        """A ``control_response`` arrived."""
        if not isinstance(response, dict):
            _warn("a control_response without a response object was ignored")
            return
        future = self._pending.get(str(response.get("request_id")))
        if future is None or future.done():
            return
        if response.get("subtype") == "error":
            future.set_exception(ControlError(str(response.get("error") or "the SDK reported an error")))
        else:
            body = response.get("response")
            future.set_result(body if isinstance(body, dict) else {})

    def close(self) -> None:
        """Fail the requests still waiting (the SDK went away)."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ControlError("the SDK closed the connection"))


# -- in-process SDK MCP servers --------------------------------------------------------------


class SdkMcpServer:
    """An MCP server living in the SDK's process (``"type": "sdk"``), reached with
    ``mcp_message`` control requests; its tools become ketch tools ``mcp__<name>__<tool>``."""

    def __init__(self, name: str, channel: Channel) -> None:
        self.name = name
        self.channel = channel
        self.state = "pending"
        self.error: str | None = None
        self.server_info: dict[str, Any] | None = None
        self.tools: list[Tool] = []
        self.enabled = True
        self._ids = 0

    async def _call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self._ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._ids, "method": method}
        if params is not None:
            message["params"] = params
        answer = await self.channel.request({"subtype": "mcp_message", "server_name": self.name, "message": message})
        response = answer.get("mcp_response")
        if not isinstance(response, dict):
            raise ControlError(f"MCP server {self.name}: no mcp_response in the SDK's answer to {method}")
        error = response.get("error")
        if error is not None:
            text = error.get("message") if isinstance(error, dict) else str(error)
            raise ControlError(f"MCP server {self.name}: {method} failed: {text}")
        return response.get("result")

    async def connect(self) -> None:
        """The handshake and the tool list (``state`` ``connected`` or ``failed``)."""
        try:
            init = await self._call(
                "initialize",
                {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ketch", "version": _version()}},
            )
            self.server_info = init.get("serverInfo") if isinstance(init, dict) else None
            await self.channel.request(
                {
                    "subtype": "mcp_message",
                    "server_name": self.name,
                    "message": {"jsonrpc": "2.0", "method": "notifications/initialized"},
                }
            )
            listed = await self._call("tools/list", {})
            remote = listed.get("tools", []) if isinstance(listed, dict) else []
            self.tools = [self._tool(t) for t in remote if isinstance(t, dict) and isinstance(t.get("name"), str)]
            self.state, self.error = "connected", None
        except (ControlError, AttributeError, TypeError) as exc:
            self.state, self.error, self.tools = "failed", str(exc), []

    def _tool(self, remote: dict[str, Any]) -> Tool:
        from ..loop import Tool
        from ..loop import ToolContext
        from ..loop import ToolResult
        from ..mcp import tool_name

        mcp_name: str = remote["name"]
        schema = remote.get("inputSchema")
        parameters = dict(schema) if isinstance(schema, dict) else {}
        parameters.pop("$schema", None)
        parameters.setdefault("type", "object")
        parameters.setdefault("properties", {})
        given = remote.get("annotations")
        annotations: dict[str, Any] = given if isinstance(given, dict) else {}
        read_only = bool(annotations.get("readOnlyHint"))

        async def execute(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
            try:
                async with ctx.signal.scope():
                    result = await self._call("tools/call", {"name": mcp_name, "arguments": args})
            except ControlError as exc:
                return ToolResult.error(str(exc))
            return _mcp_result(result)

        return Tool(
            tool_name(self.name, mcp_name),
            str(remote.get("description") or ""),
            parameters,
            execute,
            read_only=read_only,
            sequential=not read_only,
        )

    def status(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "status": self.state if self.enabled else "disabled",
            "scope": "dynamic",
            "source": "sdk",
            "config": {"type": "sdk", "name": self.name},
            "tools": [{"name": t.name.split("__", 2)[-1]} for t in self.tools],
        }
        if self.server_info is not None:
            entry["serverInfo"] = self.server_info
        if self.error is not None:
            entry["error"] = self.error
        return entry


def _mcp_result(result: Any) -> ToolResult:
    from ..llm import DocumentContent
    from ..llm import ImageContent
    from ..llm import TextContent
    from ..loop import ToolResult

    if not isinstance(result, dict):
        return ToolResult.error("the MCP server returned no result")
    blocks: list[TextContent | ImageContent | DocumentContent] = []
    for block in result.get("content") or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            blocks.append(TextContent(text=str(block.get("text", ""))))
        elif kind == "image" and isinstance(block.get("data"), str):
            blocks.append(ImageContent(data=block["data"], mime_type=str(block.get("mimeType") or "image/png")))
        else:
            blocks.append(TextContent(text=json.dumps(block)))
    structured = result.get("structuredContent")
    if not blocks and structured is not None:
        blocks.append(TextContent(text=json.dumps(structured, ensure_ascii=False)))
    details = {"structured_content": structured} if structured is not None else None
    return ToolResult(content=blocks, details=details, is_error=bool(result.get("isError")))


def _version() -> str:
    import ketch

    return str(ketch.__version__)


# -- messages out ------------------------------------------------------------------------------


_STOP_REASONS = {
    "stop": "end_turn",
    "stop_sequence": "stop_sequence",
    "length": "max_tokens",
    "tool_use": "tool_use",
    "error": None,
    "aborted": None,
}

_RESULT_SUBTYPES = {
    "stop": "success",
    "stop_sequence": "success",
    "max_turns": "error_max_turns",
    "max_budget": "error_max_budget_usd",
    "usage_limit": "error_max_budget_usd",
}

_TERMINAL_REASONS = {
    "stop": "completed",
    "stop_sequence": "completed",
    "max_turns": "max_turns",
    "max_budget": "max_budget",
    "usage_limit": "max_budget",
}


def usage_json(usage: Any) -> dict[str, Any]:
    """A ketch :class:`~ketch.llm.Usage` as Anthropic's usage object."""
    return {
        "input_tokens": usage.input,
        "output_tokens": usage.output,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation_input_tokens": usage.cache_write,
    }


def assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    """The content of a ketch assistant message as Anthropic content blocks."""
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        kind = block.type
        if kind == "text":
            blocks.append({"type": "text", "text": block.text})  # type: ignore[union-attr]
        elif kind == "thinking":
            blocks.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature or ""})  # type: ignore[union-attr]
        elif kind == "tool_call":
            blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.args})  # type: ignore[union-attr]
    return blocks


def _result_content(blocks: Sequence[Any]) -> str | list[dict[str, Any]]:
    if all(b.type == "text" for b in blocks):
        return "".join(b.text for b in blocks)
    out: list[dict[str, Any]] = []
    for b in blocks:
        if b.type == "text":
            out.append({"type": "text", "text": b.text})
        else:
            out.append({"type": "image", "source": {"type": "base64", "media_type": b.mime_type, "data": b.data}})
    return out


def _user_content(content: Any) -> tuple[str, list[Any]] | str:
    """The text and images of a ``user`` line's ``message.content``, or why not."""
    from ..llm import ImageContent

    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        return "message.content must be a string or a list of content blocks"
    texts: list[str] = []
    images: list[Any] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "image" and isinstance(block.get("source"), dict) and block["source"].get("type") == "base64":
            source = block["source"]
            images.append(ImageContent(data=str(source.get("data", "")), mime_type=str(source.get("media_type", "image/png"))))
        else:
            return f"content block of type {kind!r} is not supported (text and base64 image blocks are)"
    return "\n".join(texts), images


# -- the session -------------------------------------------------------------------------------


class SdkSession:
    """One process driven by the SDK: reads its lines, runs the agent, writes the messages."""

    def __init__(self, options: Options, out: JsonLines) -> None:
        self.options = options
        self.args = options.args
        self.channel = Channel(out)
        self.lines: StdinLines | None = None
        self.intake: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.hook_config: dict[str, Any] | None = None
        self.initialized = False
        self.build_task: asyncio.Task[None] | None = None
        self.built: Built | None = None
        self.settings: Settings | None = None
        self.root: Path | None = None
        self.session: Any = None
        self.mcp: Any = None
        self.sdk_servers: dict[str, SdkMcpServer] = {
            name: SdkMcpServer(name, self.channel) for name in options.sdk_servers
        }
        self.run_task: asyncio.Task[None] | None = None
        self.abort_requested = False
        self.ending = False
        self.code = 0
        self.last_error = False
        self.session_id = ""
        self.mode_name = "default"
        self.dont_ask = options.dont_ask
        self.run_started = 0.0
        self.uuids: dict[int, str] = {}  # id() of a user message -> the SDK's uuid for it
        self.handlers: set[asyncio.Task[Any]] = set()
        self.report_state = os.environ.get("CLAUDE_CODE_SDK_READS_SESSION_STATE") == "1"
        self.state = "idle"
        self._stack: Any = None
        self.model_name = ""

    # -- lines in --
    async def handle(self, data: bytes) -> None:
        if not data.strip():
            return
        try:
            message = json.loads(data)
        except ValueError as exc:
            _warn(f"a line on stdin is not JSON ({exc}); each line must be one JSON object")
            return
        if not isinstance(message, dict):
            _warn("a line on stdin is not a JSON object; it was ignored")
            return
        kind = message.get("type")
        if kind == "control_response":
            self.channel.answered(message.get("response"))
        elif kind == "control_request":
            self._control(message)
        elif kind == "user":
            self.intake.put_nowait(message)
        elif kind in ("keep_alive", "control_cancel_request", "update_environment_variables"):
            return
        else:
            _warn(f"a line of type {kind!r} was ignored (ketch reads user, control_request and control_response lines)")

    def _control(self, message: dict[str, Any]) -> None:
        request_id = message.get("request_id")
        request = message.get("request")
        if not isinstance(request, dict):
            self._respond_error(request_id, "a control_request needs a request object")
            return
        subtype = request.get("subtype")
        if subtype == "interrupt":  # at once, in line order
            running = self.run_task is not None
            self.interrupt()
            self._respond(request_id, {"still_queued": [], "interrupted": running})
            return
        if subtype == "initialize":
            self._initialize(request_id, request)
            return
        task = asyncio.create_task(self._control_async(request_id, subtype, request))
        self.handlers.add(task)
        task.add_done_callback(self.handlers.discard)

    def _respond(self, request_id: Any, body: dict[str, Any]) -> None:
        self.channel.write(
            {"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": body}}
        )

    def _respond_error(self, request_id: Any, text: str) -> None:
        self.channel.write(
            {"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": text}}
        )

    def _initialize(self, request_id: Any, request: dict[str, Any]) -> None:
        if self.initialized:
            self._respond_error(request_id, "already initialized")
            return
        self.initialized = True
        hooks = request.get("hooks")
        self.hook_config = hooks if isinstance(hooks, dict) else None
        unsupported = sorted(e for e in (self.hook_config or {}) if e not in HOOK_EVENTS_SUPPORTED)
        if unsupported:
            _warn(
                f"hook event(s) {', '.join(unsupported)} are not supported by ketch; their callbacks will not run "
                f"(supported: {', '.join(HOOK_EVENTS_SUPPORTED)})"
            )
        try:
            apply_initialize(self.options, request)
        except UsageError as exc:
            self._respond_error(request_id, str(exc))
            return
        for name in self.options.sdk_servers:
            if name not in self.sdk_servers:
                self.sdk_servers[name] = SdkMcpServer(name, self.channel)
        mode = self.options.permission_mode or "default"
        self._respond(
            request_id,
            {
                "commands": [],
                "agents": [],
                "output_style": "default",
                "available_output_styles": ["default"],
                "models": [],
                "account": {},
                "pid": os.getpid(),
                "current_permission_mode": "dontAsk" if self.dont_ask else CLAUDE_MODES.get(mode, mode),
                "hooks_applied": True,
                "hook_on_failure_supported": True,
                "agent": "ketch",
                **_applied(request),
            },
        )
        self._ensure_build()

    async def _control_async(self, request_id: Any, subtype: Any, request: dict[str, Any]) -> None:
        try:
            if subtype not in CONTROL_SUBTYPES:
                raise UsageError(
                    f"Unsupported control request subtype: {subtype}; ketch supports {', '.join(CONTROL_SUBTYPES)}"
                )
            await self._wait_built()
            body = await getattr(self, f"_c_{subtype}")(request)
        except Exception as exc:
            from ..llm import exception_text

            self._respond_error(request_id, str(exc) if isinstance(exc, (UsageError, ControlError)) else exception_text(exc))
            return
        self._respond(request_id, body)

    async def _c_set_permission_mode(self, request: dict[str, Any]) -> dict[str, Any]:
        mode = request.get("mode")
        if mode not in PERMISSION_MODES:
            raise UsageError(f"set_permission_mode: mode {mode!r} is not one of {', '.join(PERMISSION_MODES)}")
        assert self.built is not None
        self.built.permissions.set_mode(PERMISSION_MODES[mode])
        self.dont_ask = mode == "dontAsk"
        self.mode_name = mode
        if self.session is not None:
            await self.session.record_permission_mode(self.built.permissions.mode)
        return {"mode": mode}

    async def _c_set_model(self, request: dict[str, Any]) -> dict[str, Any]:
        from ._config import ConfigError
        from ._factory import build_model
        from ._factory import choose_model

        assert self.built is not None and self.settings is not None
        spec = request.get("model")
        if spec is None:
            spec, _ = choose_model(self.settings)
        if not isinstance(spec, str) or not spec:
            raise UsageError("set_model: model must be a model name (provider:model) or null")
        try:
            model = build_model(spec, self.settings)
        except ConfigError as exc:
            raise UsageError(f"set_model: {exc}") from None
        self.next_model = model
        if self.run_task is None:
            self._apply_model()
        return {"model": f"{model.provider}:{model.id}"}

    next_model: Any = None

    def _apply_model(self) -> None:
        if self.next_model is not None and self.built is not None and self.settings is not None:
            self.built.agent.model = self.next_model
            self.next_model = None
            self.built.fit_context(self.settings)

    async def _c_mcp_status(self, request: dict[str, Any]) -> dict[str, Any]:
        servers: list[dict[str, Any]] = []
        if self.mcp is not None:
            states = {"running": "connected", "failed": "failed", "starting": "pending", "stopped": "pending"}
            for status in self.mcp.status():
                entry: dict[str, Any] = {
                    "name": status.name,
                    "status": states.get(status.state, "pending"),
                    "scope": "ketch",
                    "config": {"type": status.type},
                    "tools": [{"name": t.split("__", 2)[-1]} for t in status.tools],
                }
                if status.error:
                    entry["error"] = status.error
                servers.append(entry)
        servers.extend(s.status() for s in self.sdk_servers.values())
        return {"mcpServers": servers}

    async def _c_get_context_usage(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.built is not None
        usage = self.built.context()
        tokens, window = usage.tokens, usage.window
        return {
            "categories": [
                {"name": "Messages", "tokens": tokens, "color": "purple"},
                {"name": "Free space", "tokens": max(0, window - tokens), "color": "promptBorder"},
            ],
            "totalTokens": tokens,
            "maxTokens": window,
            "rawMaxTokens": window,
            "percentage": round(100 * tokens / window) if window else 0,
            "model": self.model_name,
        }

    async def _c_rewind_files(self, request: dict[str, Any]) -> dict[str, Any]:
        target = request.get("user_message_id")
        if self.session is None:
            raise UsageError("rewind_files needs a saved session (this one runs with --no-session)")
        if self.run_task is not None:
            raise UsageError("rewind_files: a run is active; interrupt it or wait for its result first")
        if not isinstance(target, str) or target not in self.session.message_ids:
            raise UsageError(
                f"rewind_files: no user message {target!r} in this session (the uuid of a user line, "
                "as --replay-user-messages echoes them)"
            )
        report = await self.session.rewind(target, files=True, conversation=False)
        return {
            "canRewind": True,
            "filesChanged": [*report.restored, *report.deleted],
            "conflicts": list(report.conflicts),
        }

    async def _c_mcp_reconnect(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("serverName")
        server = self.sdk_servers.get(str(name))
        if server is None:
            raise UsageError(f"mcp_reconnect: no SDK MCP server {name!r} (ketch reconnects in-process SDK servers only)")
        await server.connect()
        self._sync_sdk_tools()
        if server.state != "connected":
            raise UsageError(f"mcp_reconnect: {server.error}")
        return {}

    async def _c_mcp_toggle(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("serverName")
        server = self.sdk_servers.get(str(name))
        if server is None:
            raise UsageError(f"mcp_toggle: no SDK MCP server {name!r} (ketch toggles in-process SDK servers only)")
        server.enabled = bool(request.get("enabled"))
        self._sync_sdk_tools()
        return {}

    def _capability_tools(self) -> list[str]:
        """The tools the agent's capabilities add that the init line names (the to-do list's)."""
        from ..tools import Todo

        assert self.built is not None
        return ["todo_write" for c in self.built.agent.config.capabilities if isinstance(c, Todo)]

    def _sync_sdk_tools(self) -> None:
        """The agent's tools: its own, then the tools of the enabled SDK servers."""
        if self.built is None:
            return
        agent = self.built.agent
        sdk_names = {t.name for s in self.sdk_servers.values() for t in s.tools}
        prefixes = tuple(f"mcp__{name}__" for name in self.sdk_servers)
        kept = [t for t in agent.tools if not t.name.startswith(prefixes) and t.name not in sdk_names]
        for server in self.sdk_servers.values():
            if server.enabled and server.state == "connected":
                kept.extend(server.tools)
        agent.tools = kept

    # -- building the agent --
    def _ensure_build(self) -> None:
        if self.build_task is None:
            self.build_task = asyncio.create_task(self._build())

    async def _wait_built(self) -> None:
        self._ensure_build()
        assert self.build_task is not None
        await asyncio.shield(self.build_task)
        if self.built is None:
            raise UsageError("the agent could not start (see the error on stderr)")

    async def _build(self) -> None:
        from ._config import ConfigError

        try:
            await self._build_agent()
        except (ConfigError, UsageError) as exc:
            self._fatal(str(exc))
        except Exception as exc:
            from ..llm import exception_text

            self._fatal(f"the agent could not start: {exception_text(exc)}")

    def _fatal(self, text: str) -> None:
        """The agent cannot start: say why (stderr, and a ``result`` line the SDK raises
        with), then end the session with exit code 2."""
        sys.stderr.write(f"ketch: {text}\n")
        sys.stderr.flush()
        self._error_result(text, 0)
        self.code = EXIT_USAGE
        self.end()

    async def _build_agent(self) -> None:
        from contextlib import AsyncExitStack

        from ._config import directory
        from ._factory import build_agent
        from ._headless import mcp_and_session
        from ._precheck import check_model
        from ._sessions import SessionOptions
        from ._sessions import use_recorded_model

        args = self.args
        root = directory(args.cwd)
        settings = build_settings(self.options, root)
        check_model(settings, None)
        sessions = SessionOptions(
            resume=args.resume or None, continue_latest=args.continue_session, enabled=not args.no_session
        )
        stack = AsyncExitStack()
        self._stack = stack
        mcp, session = await stack.enter_async_context(mcp_and_session(settings, root, sessions))
        if session is not None and (args.fork_session or args.resume_session_at):
            if args.fork_session:
                at = args.resume_session_at or None
                if at is not None and at not in session.message_ids:
                    raise UsageError(f"--resume-session-at {at}: no such message in session {session.id}")
                forked = await session.fork(at)
                await session.close()
                session = forked
                stack.push_async_callback(forked.close)
            else:
                at = args.resume_session_at
                if at not in session.message_ids:
                    raise UsageError(f"--resume-session-at {at}: no such message in session {session.id}")
                await session.rewind(at, files=False, conversation=True)
        use_recorded_model(settings, session)
        hooks = [*settings.hooks, *self._sdk_hooks()]
        built = build_agent(
            settings, root, approver=None, session=session, no_approver="deny", mcp=mcp, hooks=hooks, todo=self.options.todo
        )
        for line in await built.attach_mcp():
            _warn(line)
        if self.options.stdio_permissions:
            built.permissions.can_use_tool = self._can_use_tool
        append = args.append_system_prompt
        if append:
            built.agent.system_prompt = f"{built.agent.system_prompt}\n\n{append}" if built.agent.system_prompt else append
        for folder in args.add_dir:
            self._add_dir(built, folder)
        if built.sandbox_warning is not None:
            _warn(built.sandbox_warning)
        self.settings, self.root, self.session, self.mcp = settings, root, session, mcp
        self.session_id = session.id if session is not None else str(uuid.uuid4())
        self.mode_name = "dontAsk" if self.dont_ask else CLAUDE_MODES.get(built.permissions.mode, "default")
        self.built = built
        for server in self.sdk_servers.values():
            await server.connect()
            if server.state != "connected":
                _warn(f"SDK MCP server {server.name} failed to start: {server.error}")
        self._sync_sdk_tools()
        built.agent.subscribe(self._on_event)
        if session is not None:
            await session.record_permission_mode(built.permissions.mode)
        await built.session_start("resume" if sessions.resuming else "startup")

    def _add_dir(self, built: Built, folder: str) -> None:
        from ._config import ConfigError

        path = Path(folder).expanduser()
        if not path.is_dir():
            raise ConfigError(f"--add-dir {folder}: not a directory")
        workspaces = {id(ws): ws for ws in (getattr(t, "workspace", None) for t in built.agent.tools) if ws is not None}
        for ws in workspaces.values():
            ws.allow_root(path.resolve())

    def _sdk_hooks(self) -> list[Any]:
        from ..hooks import HookSpec

        specs: list[Any] = []
        for event, matchers in (self.hook_config or {}).items():
            if event not in HOOK_EVENTS_SUPPORTED or not isinstance(matchers, list):
                continue
            for matcher in matchers:
                if not isinstance(matcher, dict):
                    continue
                timeout = matcher.get("timeout")
                block = matcher.get("onFailure") not in (None, "continue")
                for callback_id in matcher.get("hookCallbackIds") or ():
                    specs.append(
                        HookSpec(
                            event,  # type: ignore[arg-type]  # one of HOOK_EVENTS_SUPPORTED
                            self._hook_callback(str(callback_id), block),
                            matcher=matcher.get("matcher"),
                            timeout=float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else 60.0,
                            origin="the SDK's hooks",
                        )
                    )
        return specs

    def _hook_callback(self, callback_id: str, block: bool) -> Callable[[dict[str, Any]], Awaitable[Any]]:
        async def call(event: dict[str, Any]) -> Any:
            try:
                answer = await self.channel.request(
                    {
                        "subtype": "hook_callback",
                        "callback_id": callback_id,
                        "input": event,
                        "tool_use_id": event.get("tool_use_id"),
                    }
                )
            except ControlError as exc:
                if not block:
                    raise
                reason = f"the SDK's hook callback failed: {exc}"
                if event.get("hook_event_name") == "PreToolUse":
                    return {
                        "hookSpecificOutput": {
                            "hookEventName": "PreToolUse",
                            "permissionDecision": "deny",
                            "permissionDecisionReason": reason,
                        }
                    }
                return {"decision": "block", "reason": reason}
            return answer or None

        return call

    async def _can_use_tool(self, info: ToolCallInfo) -> PermissionAllow | PermissionDeny | None:
        from ..permissions import PermissionAllow
        from ..permissions import PermissionDeny

        if self.dont_ask:
            return PermissionDeny(
                f"Permission denied: {info.tool.name} needs approval and the permission mode is dontAsk "
                "(only what the rules allow runs)."
            )
        self._set_state("requires_action")
        try:
            async with info.signal.scope():
                answer = await self.channel.request(
                    {
                        "subtype": "can_use_tool",
                        "tool_name": info.tool.name,
                        "input": info.args,
                        "permission_suggestions": self._suggestions(info),
                        "blocked_path": None,
                        "tool_use_id": info.tool_call.id,
                        "display_name": info.tool.label or info.tool.name,
                    }
                )
        except ControlError as exc:
            return PermissionDeny(f"Permission denied: the SDK's can_use_tool callback failed: {exc}")
        finally:
            self._set_state("running")
        if answer.get("behavior") == "allow":
            self._apply_updates(answer.get("updatedPermissions"))
            updated = answer.get("updatedInput")
            return PermissionAllow(updated_input=updated if isinstance(updated, dict) else None)
        message = answer.get("message")
        return PermissionDeny(
            message if isinstance(message, str) and message else "Permission denied by the SDK's can_use_tool callback.",
            stop=bool(answer.get("interrupt")),
        )

    def _suggestions(self, info: ToolCallInfo) -> list[dict[str, Any]]:
        assert self.built is not None
        try:
            request = self.built.permissions.request_for(info.tool, info.args)
        except Exception:
            return []
        rules = [
            {"toolName": r.tool, "ruleContent": r.specifier} if r.specifier is not None else {"toolName": r.tool}
            for r in request.suggested_rules
        ]
        if not rules:
            return []
        return [{"type": "addRules", "rules": rules, "behavior": "allow", "destination": "session"}]

    def _apply_updates(self, updates: Any) -> None:
        """The permission updates of an allow answer: ``addRules`` (allow, deny or ask)
        for this session and ``setMode``; others are reported and skipped."""
        from ..permissions import Rule

        if not isinstance(updates, list) or self.built is None:
            return
        engine = self.built.permissions
        for update in updates:
            kind = update.get("type") if isinstance(update, dict) else None
            if kind == "addRules":
                behavior = update.get("behavior")
                for rule in update.get("rules") or ():
                    tool = rule.get("toolName") if isinstance(rule, dict) else None
                    if not isinstance(tool, str):
                        continue
                    content = rule.get("ruleContent")
                    text = _ketch_rule(f"{tool}({content})" if content else tool)
                    try:
                        parsed = Rule.parse(text, "session")
                    except ValueError as exc:
                        _warn(f"can_use_tool: updatedPermissions rule {text!r} skipped: {exc}")
                        continue
                    if behavior == "allow":
                        engine.session_rules.append(parsed)
                    elif behavior == "deny":
                        engine.deny.append(parsed)
                    elif behavior == "ask":
                        engine.ask.append(parsed)
            elif kind == "setMode" and update.get("mode") in PERMISSION_MODES:
                engine.set_mode(PERMISSION_MODES[update["mode"]])
                self.dont_ask = update["mode"] == "dontAsk"
                self.mode_name = update["mode"]
            else:
                _warn(f"can_use_tool: updatedPermissions of type {kind!r} are not supported by ketch; skipped")

    # -- runs --
    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            if self.report_state:
                self.channel.write(
                    {
                        "type": "system",
                        "subtype": "session_state_changed",
                        "state": state,
                        "sdk_host_only": True,
                        "uuid": str(uuid.uuid4()),
                        "session_id": self.session_id,
                    }
                )

    async def _intake_loop(self) -> None:
        """The user lines in order, once the agent is ready."""
        while True:
            message = await self.intake.get()
            if message is None:
                return
            try:
                await self._wait_built()
            except UsageError:
                return
            self._deliver(message)

    def _deliver(self, line: dict[str, Any]) -> None:
        from ..llm import TextContent
        from ..llm import UserMessage

        assert self.built is not None
        inner = line.get("message")
        parsed = _user_content(inner.get("content") if isinstance(inner, dict) else None)
        if isinstance(parsed, str):
            _warn(f"a user line was ignored: {parsed}")
            return
        text, images = parsed
        agent = self.built.agent
        message = UserMessage(content=[TextContent(text=text), *images] if text else list(images))
        sdk_uuid = line.get("uuid")
        if isinstance(sdk_uuid, str):
            self.uuids[id(message)] = sdk_uuid
        if self.run_task is not None:
            agent.steer(message)
            return
        if images:
            self._start(lambda: agent.prompt(message))
        else:
            self._start(lambda: self._prompt_text(text, message))

    async def _prompt_text(self, text: str, message: Message) -> RunResult:
        assert self.built is not None
        if self.built.hooks is not None:
            return await self.built.prompt(text)
        return await self.built.agent.prompt(message)

    def _start(self, first: Callable[[], Awaitable[RunResult]]) -> None:
        self.abort_requested = False
        self.run_task = asyncio.create_task(self._runs(first))

    async def _runs(self, first: Callable[[], Awaitable[RunResult]]) -> None:
        assert self.built is not None
        built = self.built
        step: Callable[[], Awaitable[RunResult]] | None = first
        try:
            while step is not None:
                built.arm()
                mark = len(built.permissions.decisions)
                self._set_state("running")
                self.run_started = time.monotonic()
                try:
                    result = await step()
                except Exception as exc:
                    from ..llm import exception_text

                    self._write_failure(f"the run failed: {exception_text(exc)}")
                    return
                self._write_result(result, mark)
                self._apply_model()
                step = None
                if result.end_reason != "aborted" and not self.abort_requested and built.agent.has_queued_messages():
                    step = built.agent.continue_loop
        finally:
            self.run_task = None
            self.abort_requested = False
            self._set_state("idle")

    def interrupt(self) -> None:
        if self.built is None:
            return
        if self.run_task is not None:
            self.abort_requested = True
            self.built.agent.abort()
        self.built.agent.clear_queues()

    # -- events out --
    def _on_event(self, event: Any) -> None:
        kind = event.type
        if kind == "agent_start":
            if self.abort_requested:
                assert self.built is not None
                self.built.agent.abort()
            self._write_init()
        elif kind == "message_update":
            if self.args.include_partial_messages:
                self._stream_event(event.event)
        elif kind == "message_start":
            if self.args.include_partial_messages and event.message.role == "assistant":
                self._stream_start(event.message)
        elif kind == "message_end":
            if self.args.include_partial_messages and event.message.role == "assistant":
                self._stream_end(event.message)
            self._message(event.message)

    def _write_init(self) -> None:
        assert self.built is not None
        agent = self.built.agent
        servers = [{"name": s.name, "status": {"running": "connected"}.get(s.state, s.state)} for s in (self.mcp.status() if self.mcp is not None else ())]
        servers += [{"name": s.name, "status": s.state, "source": "sdk"} for s in self.sdk_servers.values()]
        self.model_name = f"{agent.model.provider}:{agent.model.id}"
        self.channel.write(
            {
                "type": "system",
                "subtype": "init",
                "cwd": str(self.root),
                "session_id": self.session_id,
                "tools": [t.name for t in agent.tools] + self._capability_tools(),
                "mcp_servers": servers,
                "model": self.model_name,
                "permissionMode": self.mode_name,
                "slash_commands": [],
                "apiKeySource": "none",
                "claude_code_version": _version(),
                "output_style": "default",
                "agents": [],
                "skills": [],
                "plugins": [],
                "agent": "ketch",
                "thinking": agent.thinking,
                "uuid": str(uuid.uuid4()),
            }
        )

    def _base(self) -> dict[str, Any]:
        return {"parent_tool_use_id": None, "session_id": self.session_id}

    def _stream_event(self, inner: Any) -> None:
        kind = inner.type
        event: dict[str, Any] | None = None
        if kind == "text_start":
            event = {"type": "content_block_start", "index": inner.index, "content_block": {"type": "text", "text": ""}}
        elif kind == "thinking_start":
            event = {
                "type": "content_block_start",
                "index": inner.index,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            }
        elif kind == "toolcall_start":
            block = inner.partial.content[inner.index]
            event = {
                "type": "content_block_start",
                "index": inner.index,
                "content_block": {"type": "tool_use", "id": block.id, "name": block.name, "input": {}},
            }
        elif kind == "text_delta":
            event = {"type": "content_block_delta", "index": inner.index, "delta": {"type": "text_delta", "text": inner.delta}}
        elif kind == "thinking_delta":
            event = {
                "type": "content_block_delta",
                "index": inner.index,
                "delta": {"type": "thinking_delta", "thinking": inner.delta},
            }
        elif kind == "toolcall_delta":
            event = {
                "type": "content_block_delta",
                "index": inner.index,
                "delta": {"type": "input_json_delta", "partial_json": inner.delta},
            }
        elif kind in ("text_end", "thinking_end", "toolcall_end"):
            event = {"type": "content_block_stop", "index": inner.index}
        if event is not None:
            self._stream_line(event)

    def _stream_start(self, message: Any) -> None:
        self._stream_line(
            {
                "type": "message_start",
                "message": {
                    "id": message.response_id or f"msg_{uuid.uuid4().hex[:24]}",
                    "type": "message",
                    "role": "assistant",
                    "model": message.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                },
            }
        )

    def _stream_end(self, message: Any) -> None:
        self._stream_line(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _STOP_REASONS.get(message.stop_reason), "stop_sequence": None},
                "usage": {"output_tokens": message.usage.output},
            }
        )
        self._stream_line({"type": "message_stop"})

    def _stream_line(self, event: dict[str, Any]) -> None:
        self.channel.write({"type": "stream_event", "uuid": str(uuid.uuid4()), **self._base(), "event": event})

    def _entry_uuid(self, message: Any) -> str:
        session = self.session
        if session is not None and session.messages and session.messages[-1] is message:
            return str(session.message_ids[-1])
        return str(uuid.uuid4())

    def _message(self, message: Any) -> None:
        from ..llm import AssistantMessage
        from ..llm import ToolResultMessage
        from ..llm import UserMessage

        kind = type(message)
        if kind is AssistantMessage:
            body: dict[str, Any] = {
                "type": "assistant",
                "message": {
                    "id": message.response_id or f"msg_{uuid.uuid4().hex[:24]}",
                    "type": "message",
                    "role": "assistant",
                    "model": message.model,
                    "content": assistant_blocks(message),
                    "stop_reason": _STOP_REASONS.get(message.stop_reason),
                    "stop_sequence": None,
                    "usage": usage_json(message.usage),
                },
                **self._base(),
                "uuid": self._entry_uuid(message),
            }
            if message.stop_reason == "error":
                body["error"] = {"rate_limit": "rate_limit", "auth": "authentication_failed"}.get(
                    message.error_kind or "", "unknown"
                )
            self.channel.write(body)
        elif kind is ToolResultMessage:
            from ._stdio import json_fallback as _fallback

            entry = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": _result_content(message.content),
                "is_error": message.is_error,
            }
            line: dict[str, Any] = {
                "type": "user",
                "message": {"role": "user", "content": [entry]},
                **self._base(),
                "uuid": self._entry_uuid(message),
            }
            if message.details is not None:
                try:
                    import msgspec

                    line["tool_use_result"] = msgspec.to_builtins(message.details, enc_hook=_fallback)
                except (TypeError, msgspec.EncodeError):
                    pass
            self.channel.write(line)
        elif kind is UserMessage and self.args.replay_user_messages:
            sdk_uuid = self.uuids.pop(id(message), None)
            content = [
                {"type": "text", "text": b.text}
                if b.type == "text"
                else {"type": "image", "source": {"type": "base64", "media_type": b.mime_type, "data": b.data}}
                for b in message.content
            ]
            self.channel.write(
                {
                    "type": "user",
                    "message": {"role": "user", "content": content},
                    **self._base(),
                    "uuid": self._entry_uuid(message) if self.session is not None else sdk_uuid or str(uuid.uuid4()),
                    "isReplay": True,
                }
            )

    def _write_result(self, result: RunResult, mark: int) -> None:
        assert self.built is not None
        summary = result.summary
        reason = summary.end_reason
        subtype = _RESULT_SUBTYPES.get(reason, "error_during_execution")
        is_error = subtype != "success"
        decisions = self.built.permissions.decisions[mark:]
        args_of = {}
        for message in self.built.agent.messages[-(summary.tool_calls + summary.turns + 2) :]:
            for call in getattr(message, "tool_calls", ()):
                args_of[call.id] = call.args
        last = result.last_assistant
        terminal = _TERMINAL_REASONS.get(reason)
        if reason == "aborted":
            tail = self.built.agent.messages[-1] if self.built.agent.messages else None
            terminal = "aborted_tools" if tail is not None and tail.role == "tool_result" else "aborted_streaming"
        elif terminal is None:
            terminal = reason
        duration_ms = round(summary.duration * 1000)
        model = self.model_name or f"{self.built.agent.model.provider}:{self.built.agent.model.id}"
        usage = summary.usage
        body: dict[str, Any] = {
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "duration_ms": duration_ms,
            "duration_api_ms": duration_ms,
            "num_turns": summary.turns,
            "session_id": self.session_id,
            "total_cost_usd": usage.cost.total,
            "usage": usage_json(usage),
            "modelUsage": {
                model: {
                    "inputTokens": usage.input,
                    "outputTokens": usage.output,
                    "cacheReadInputTokens": usage.cache_read,
                    "cacheCreationInputTokens": usage.cache_write,
                    "webSearchRequests": 0,
                    "costUSD": usage.cost.total,
                    "contextWindow": self.built.window,
                }
            },
            "permission_denials": [
                {"tool_name": d.tool_name, "tool_use_id": d.tool_call_id, "tool_input": args_of.get(d.tool_call_id, {})}
                for d in decisions
                if d.outcome == "deny"
            ],
            "stop_reason": _STOP_REASONS.get(last.stop_reason) if last is not None else None,
            "terminal_reason": terminal,
            "end_reason": reason,
            "uuid": str(uuid.uuid4()),
        }
        if is_error:
            body["errors"] = [summary.error or f"the run ended with {reason}"]
        else:
            body["result"] = last.text if last is not None else ""
        self.last_error = is_error
        self.channel.write(body)

    def _error_result(self, text: str, duration_ms: int) -> None:
        """The ``result`` line of a run that failed before or outside the model (``text`` says why)."""
        self.channel.write(
            {
                "type": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "duration_ms": duration_ms,
                "duration_api_ms": 0,
                "num_turns": 0,
                "session_id": self.session_id,
                "total_cost_usd": 0.0,
                "usage": {"input_tokens": 0, "output_tokens": 0},
                "errors": [text],
                "uuid": str(uuid.uuid4()),
            }
        )

    def _write_failure(self, text: str) -> None:
        self.last_error = True
        self._error_result(text, round((time.monotonic() - self.run_started) * 1000))

    # -- the session --
    def end(self) -> None:
        if not self.ending:
            self.ending = True
            self.interrupt()
            if self.lines is not None:
                self.lines.end()
            self.intake.put_nowait(None)

    async def serve(self) -> int:
        from ._signals import exit_now
        from ._signals import handle_signals

        hits = [0]

        def on_signal() -> None:
            hits[0] += 1
            if hits[0] > 1:
                exit_now(EXIT_INTERRUPTED)
            self.code = EXIT_INTERRUPTED
            self.end()

        handle_signals({signal.SIGINT: on_signal, signal.SIGTERM: on_signal, signal.SIGHUP: lambda: exit_now(129)})
        lines = self.lines = StdinLines()
        intake = asyncio.create_task(self._intake_loop())
        try:
            while not self.ending:
                data = await lines.get()
                if data is None:
                    break
                await self.handle(data)
            self.intake.put_nowait(None)
            await intake
            while self.run_task is not None:
                await asyncio.shield(self.run_task)
        finally:
            self.channel.close()
            for task in list(self.handlers):
                task.cancel()
            await self._close()
        if self.channel.out.broken:
            return EXIT_BROKEN_PIPE
        if self.code == 0 and self.last_error:
            return 1
        return self.code

    async def _close(self) -> None:
        if self.build_task is not None and not self.build_task.done():
            self.build_task.cancel()
            try:
                await self.build_task
            except (asyncio.CancelledError, Exception):
                pass
        if self.built is not None:
            try:
                await self.built.session_end("other")
            except Exception:
                pass
        if self._stack is not None:
            await self._stack.aclose()


def sdk_command(argv: Sequence[str]) -> int:
    """Serve the Claude Agent SDK on stdin/stdout; returns the exit code."""
    try:
        options = check_options(argv)
    except UsageError as exc:
        sys.stderr.write(f"ketch: {exc}\n")
        return EXIT_USAGE
    return asyncio.run(_serve(options))


async def _serve(options: Options) -> int:
    session: SdkSession | None = None

    def gone() -> None:
        if session is not None:
            session.end()

    out = JsonLines(on_broken=gone)
    session = SdkSession(options, out)
    return await session.serve()
