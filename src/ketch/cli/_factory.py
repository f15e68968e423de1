"""Assembling a run from settings: the model, the tools, the permission engine, the agent.

Model selection: ``KETCH_TEST_SCRIPT`` (tests only), else the ``model`` setting (flag,
environment, project or user config), else the first of OpenAI, Anthropic and Google
whose API key is in the environment (with its default model), else the embedded local
model (``local``). On the embedded model, an answer cut by the output limit ends there
(no length-recovery prompts); with no system prompt configured it gets a short one suited
to a 135M model (:func:`embedded_system_prompt`), and after a call forced by
``--tool-choice`` it answers in text (``tool_choice`` ``none``) instead of calling on.
Its sampling is greedy with a fixed seed (the local provider's defaults), so the same
task in the same folder gives the same answer every time.

Context: unless ``compaction`` is off, the agent gets a :class:`ketch.context.Compactor`
sized by :func:`context_window` (the model's ``context_window``: the ``context_window``
setting when given, else the embedded model's ``n_ctx`` or the model's registry window)
with :func:`context_reserve` tokens kept free for the answer.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import Literal

import msgspec

from .. import Agent
from .._paths import glob_escape
from ..context import Compactor
from ..context import default_reserve
from ..hooks import HookNotice
from ..hooks import HookRunner
from ..hooks import HookSpec
from ..llm import DEFAULT_CONTEXT_WINDOW
from ..llm import Model
from ..llm import SettableContextWindow
from ..llm import StreamOptions
from ..llm import ToolResultMessage
from ..llm._tokens import ContextUsage
from ..loop import NextTurn
from ..loop import RunResult
from ..loop import Tool
from ..loop import TurnInfo
from ..loop import stop_after_tool
from ..permissions import Approver
from ..permissions import PermissionEngine
from ..permissions import Rule
from ..sandbox import NetworkPolicy
from ._config import ConfigError
from ._config import ProviderConfig
from ._config import Settings
from ._dirs import config_dir
from ._otel import attach as attach_telemetry
from ._scripted import SCRIPT_ENV
from ._scripted import load_scripted_model

BUILTIN_TOOLS: tuple[str, ...] = ("read", "write", "edit", "bash", "grep", "find", "ls")
"""The built-in coding tools, in the order they are offered."""

DEFAULT_MODELS: dict[str, str] = {
    "openai": "openai:gpt-5-mini",
    "anthropic": "anthropic:claude-sonnet-4-5",
    "google": "google:gemini-2.5-flash",
}
"""The model picked when only a provider's key is known, in preference order."""

LOCAL_MODEL = "local"

HEADLESS_DENIAL = (
    "Permission denied: {tool} needs the user's approval, but this run is non-interactive "
    "(permission mode {mode}). Do not retry it; continue with read-only tools, or tell the user "
    "to rerun with an allow rule (--allow), --permission-mode accept_edits (file edits) or "
    "bypass (everything)."
)


def _env_names(provider: str, settings: Settings) -> tuple[str, ...]:
    from ..llm._registry import get_provider

    configured = settings.providers.get(provider)
    names: list[str] = []
    if configured is not None and configured.api_key_env:
        names.append(configured.api_key_env)
    info = get_provider(provider)
    if info is not None:
        names.extend(n for n in info.api_key_env if n not in names)
    return tuple(names)


def _find_key(provider: str, settings: Settings, environ: Mapping[str, str] | None) -> tuple[str, str] | None:
    """``(key, where it came from)``: a literal ``api_key`` from config (``config``), else
    the first set variable among the configured ``api_key_env`` and the registry's."""
    env = os.environ if environ is None else environ
    configured = settings.providers.get(provider)
    if configured is not None and configured.api_key:
        return configured.api_key, "config"
    for name in _env_names(provider, settings):
        value = env.get(name)
        if value:
            return value, name
    return None


def api_key_for(provider: str, settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """The key for ``provider``: a literal ``api_key`` from config, else the first set
    variable among the configured ``api_key_env`` and the registry's variables."""
    found = _find_key(provider, settings, environ)
    return found[0] if found is not None else None


def key_source(provider: str, settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """Where ``provider``'s key comes from (``config`` or the variable's name), or None."""
    found = _find_key(provider, settings, environ)
    return found[1] if found is not None else None


def choose_model(settings: Settings, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The model spec to use and why (``flag --model``, ``OPENAI_API_KEY is set`` …)."""
    env = os.environ if environ is None else environ
    script = env.get(SCRIPT_ENV)
    if script:
        return f"scripted:{script}", f"environment {SCRIPT_ENV}"
    if settings.model:
        return settings.model, settings.sources.get("model", "settings")
    for provider, spec in DEFAULT_MODELS.items():
        source = key_source(provider, settings, env)
        if source is not None:
            return spec, f"{source} is set" if source != "config" else f"{provider} key in config"
    return LOCAL_MODEL, "no provider key found"


def register_providers(providers: Mapping[str, ProviderConfig]) -> None:
    """Register configured providers (custom OpenAI-compatible ones, or overrides of
    known ones' base URL, API or key variable) with the model registry."""
    from ..llm import register_provider
    from ..llm._registry import get_provider

    for name, cfg in providers.items():
        known = get_provider(name)
        if known is None and not cfg.base_url:
            raise ConfigError(f"provider {name!r} in config is unknown and has no base_url")
        if known is not None and not (cfg.base_url or cfg.api or cfg.api_key_env or cfg.default_model):
            continue
        envs: tuple[str, ...] = (cfg.api_key_env,) if cfg.api_key_env else ()
        if known is not None:
            envs = envs + tuple(n for n in known.api_key_env if n not in envs)
        try:
            register_provider(
                name,
                api=cfg.api or (known.api if known is not None else "openai-chat"),
                base_url=cfg.base_url or (known.base_url if known is not None else ""),
                api_key_env=envs,
                requires_key=(known.requires_key if known is not None else bool(envs)) or cfg.api_key is not None,
                compat=known.compat if known is not None else None,
                default_model=cfg.default_model or (known.default_model if known is not None else ""),
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def build_model(spec: str, settings: Settings) -> Model:
    """The model for ``spec`` (``provider:model``, ``local``, or ``scripted:<path>``)."""
    if spec.startswith("scripted:"):
        try:
            return load_scripted_model(spec.removeprefix("scripted:"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    register_providers(settings.providers)
    from ..llm import get_model
    from ..llm._resolve import parse_spec

    try:
        provider, _ = parse_spec(spec)
        configured = settings.providers.get(provider)
        kwargs: dict[str, Any] = {}
        if configured is not None and configured.api_key:
            kwargs["api_key"] = configured.api_key
        if configured is not None and configured.idle_timeout is not None:
            kwargs["idle_timeout"] = configured.idle_timeout
        return get_model(spec, **kwargs)
    except (ValueError, KeyError, LookupError, ImportError, TypeError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        raise ConfigError(f"cannot use model {spec!r}: {message}") from None


def build_tools(
    root: Path,
    names: Sequence[str] | None,
    *,
    write_allowed: Callable[[], bool] | None = None,
    secret_names: Sequence[str] = (),
    settings: Settings | None = None,
    permissions: PermissionEngine | None = None,
    protected: Sequence[str] = (),
) -> list[Tool]:
    """The built-in coding tools rooted at ``root``, optionally only those in ``names``;
    bash runs in the OS sandbox when one is usable (and ``settings.sandbox`` is on),
    writable when ``write_allowed()``, never sees the variables named in
    ``secret_names``, and cannot read or write what the ``Read`` and ``Edit`` deny rules
    of ``permissions`` name, nor the ``protected`` paths (workspace-relative; besides
    the sandbox's ``DEFAULT_PROTECTED``), which the file tools ask about."""
    wanted = list(BUILTIN_TOOLS) if names is None else [n.strip() for n in names if n.strip()]
    unknown = [n for n in wanted if n not in BUILTIN_TOOLS]
    if unknown:
        raise ConfigError(f"unknown tool(s) {', '.join(unknown)}; the built-in tools are {', '.join(BUILTIN_TOOLS)}")
    if not wanted:
        return []
    from ..sandbox import DEFAULT_PROTECTED
    from ..sandbox import expand_protected
    from ..tools import Workspace
    from ..tools import coding_tools

    enabled = settings is None or settings.sandbox
    # the files the agent may not read (the config directory at least: a literal api_key)
    hidden = permissions.hidden_paths() if permissions is not None else (glob_escape(str(config_dir())),)
    denied_edits = permissions.protected_paths() if permissions is not None else ()
    # the file tools check the rules' paths again when they run (a path may become a
    # symlink): every rule's, as matching a path costs nothing
    if permissions is not None:
        workspace = Workspace(
            root,
            hidden=permissions.hidden_paths(all_rules=True),
            protected=permissions.protected_paths(all_rules=True),
            ask_read=permissions.ask_read_paths(),
            ask_edit=(*DEFAULT_PROTECTED, *protected, *permissions.ask_edit_paths()),
        )
    else:
        workspace = Workspace(root, hidden=hidden)
    tools = coding_tools(
        workspace,
        write_allowed=write_allowed or (lambda: True),
        secret_names=secret_names,
        sandbox="default" if enabled else None,
        unsandboxed_reason=None if enabled else "the sandbox is turned off in the configuration",
        network=_network(settings),
        env_allow=settings.sandbox_env_allow if settings is not None else (),
        limits=settings.sandbox_limits if settings is not None else None,
        hidden=hidden,
        # the configuration files in sub-folders (**/.ketch, **/AGENTS.md) found once, not at each command
        protected=tuple(dict.fromkeys((*expand_protected(root, DEFAULT_PROTECTED), *protected, *denied_edits))),
    )
    by_name = {t.name: t for t in tools}
    return [by_name[n] for n in wanted if n in by_name]


def _network(settings: Settings | None) -> bool | NetworkPolicy:
    """The bash sandbox's network: the hosts of ``[sandbox.network]``, else on or off."""
    if settings is None:
        return False
    if settings.sandbox_network_policy is not None:
        return settings.sandbox_network_policy
    return settings.sandbox_network


def default_system_prompt(root: Path, tools: Sequence[Tool]) -> str:
    """The system prompt of the coding agent when none is configured."""
    names = ", ".join(t.name for t in tools) or "none"
    return (
        "You are ketch, a coding agent working in a software project on the user's machine.\n"
        f"The working directory is {root}. Your tools: {names}.\n"
        "Use the tools to look at files and run commands instead of guessing. Read a file "
        "before you edit it; make small, precise edits. Be brief: answer in a few sentences, "
        "and say what you changed."
    )


def embedded_system_prompt() -> str:
    """The system prompt of the embedded 135M model when none is configured: short, no
    absolute path (the model would copy it into calls), no example call (the model
    repeats it as its answer), which of its tools (:data:`EMBEDDED_TOOLS`) does what
    (without it, it chose ``write`` for "what does notes.txt say?"), and the one
    instruction that made its answers after a tool complete most often."""
    return (
        "You are ketch, working in the current directory. read shows a file; ls lists a folder; "
        "find finds files by name; write creates a file; bash runs wc -l (count lines) or mv (rename). "
        "Copy every line a tool returns into your answer."
    )


EMBEDDED_TOOLS: tuple[str, ...] = ("read", "ls", "find", "write", "bash")
"""The tools the embedded model gets when none are configured: few, so that its forced
first call picks among what a 135M model can use (read, list, find, create; rename and
count with bash)."""

EMBEDDED_NOTICE = (
    "ketch: running the small embedded model (SmolLM2-135M, offline): it does one file task per "
    "question (read, list, count, create or rename a file) and its answers can be wrong; "
    "set a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY) or --model for more"
)
"""The one line on stderr when a command first runs the embedded model."""

_told = False


def _tell_embedded() -> None:
    global _told
    if not _told:
        _told = True
        sys.stderr.write(EMBEDDED_NOTICE + "\n")
        sys.stderr.flush()


def _is_embedded(model: Model) -> bool:
    """Whether ``model`` is the embedded SmolLM2 model (``local``)."""
    if model.provider != "local":
        return False
    from ..llm._providers.local import DEFAULT_MODEL_IDS

    return model.id in DEFAULT_MODEL_IDS


def context_window(model: Model, settings: Settings) -> int:
    """The context window in tokens: ``model.context_window``, after the ``context_window``
    setting (when the user gave one) is set on the model, so that the loop, the agent and
    the command give one answer."""
    if settings.context_window:
        if not isinstance(model, SettableContextWindow):
            return settings.context_window  # a model that cannot take it: the command still honours it
        model.set_context_window(settings.context_window)
    return model.context_window


def context_reserve(window: int, max_tokens: int | None) -> int:
    """Tokens kept free for the answer: :func:`ketch.context.default_reserve`, at most a
    quarter of a small window, and at least ``max_tokens`` (up to half the window)."""
    reserve = min(default_reserve(window), window // 4)
    if max_tokens:
        reserve = max(reserve, min(max_tokens, window // 2))
    return reserve


_ROUTES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bash", ("rename", "move ", " mv ", "how many", "count ", "number of")),
    ("write", ("create", "write", "new file", "save ")),
    ("find", ("find ", "search", "where is", "locate")),
    ("ls", ("list", "what files", "which files", "files in", "files are", "folder", "directory")),
    ("read", ("what does", "say", "show me", "read", "content", "what is in", "about", "open ")),
)
"""For the embedded model: words of a request and the tool its first call uses (the
first row with a match wins); a 135M model left to pick among its tools mostly picks
``write``."""


def route_embedded(text: str, tools: Sequence[str]) -> str:
    """The tool the embedded model's first call uses for ``text`` (:data:`_ROUTES`), or
    ``required`` (the model picks) when no row matches or its tool is not offered."""
    low = f" {text.lower()} "
    for tool, words in _ROUTES:
        if tool in tools and any(w in low for w in words):
            return tool
    return "required"


class _FirstCallToolChoice:
    """``prepare_next_turn``: forces ``tool_choice`` on the first model call of each run
    only; later calls use ``after`` (None: the model chooses)."""

    __slots__ = ("after", "choice", "options", "routes")

    def __init__(
        self, options: StreamOptions, choice: str, after: str | None = None, routes: Sequence[str] = ()
    ) -> None:
        self.options = options
        self.choice = choice
        self.after = after
        self.routes = tuple(routes)  # the embedded model's tools: its first call follows the request's words

    def arm(self) -> None:
        self.options.tool_choice = self.choice

    def route(self, text: str) -> None:
        """Pick the first call's tool from ``text`` (:func:`route_embedded`), when routing."""
        if self.routes and self.options.tool_choice == self.choice:
            self.options.tool_choice = route_embedded(text, self.routes)

    def __call__(self, info: TurnInfo) -> NextTurn | None:
        self.options.tool_choice = self.after
        return None


@dataclass(slots=True)
class Built:
    """What :func:`build_agent` assembled."""

    agent: Agent[None]
    permissions: PermissionEngine
    spec: str
    spec_reason: str
    root: Path
    tool_choice: _FirstCallToolChoice | None
    context_manager: Compactor | None = None
    window: int = DEFAULT_CONTEXT_WINDOW
    hooks: HookRunner | None = None
    mcp: Any = None  # the MCPManager of the servers from settings (its owner closes it)
    subagents: Any = None  # the ketch.subagents.Subagents of the agent files, if any
    instructions: Any = None  # the AGENTS.md files merged into the system prompt (cli._instructions)
    answers_with_tool: bool = False  # the embedded model: a run ends after its call, whose result is the answer

    def tool_answer(self, result: RunResult) -> str | None:
        """The answer of a run that ended after the embedded model's call succeeded: the
        call's result, as the tool returned it; None for any other run."""
        if not self.answers_with_tool or result.end_reason != "stop" or not result.messages:
            return None
        last = result.messages[-1]
        if not isinstance(last, ToolResultMessage) or last.is_error:
            return None
        return last.text

    @property
    def sandbox_warning(self) -> str | None:
        """Why bash runs without the OS sandbox (so every bash call needs approval), or
        None when it runs sandboxed or there is no bash tool."""
        from ..tools import BashTool

        return next((t.sandbox_warning for t in self.agent.tools if isinstance(t, BashTool)), None)

    async def attach_mcp(self) -> list[str]:
        """Add the tools of the MCP servers from settings to the agent (starting the
        servers) and keep them fresh between turns; returns a warning line for each
        server that failed to start (its tools are left out)."""
        if self.mcp is None:
            return []
        await self.mcp.attach(self.agent)
        return [f"MCP server {s.name} failed to start: {s.error}" for s in self.mcp.status() if s.state == "failed"]

    async def prompt(self, text: str, attachments: Sequence[Any] = ()) -> RunResult:
        """Run the agent on ``text`` with ``attachments`` (images, documents, recordings
        after it in the prompt), through UserPromptSubmit hooks when there are hooks."""
        if self.tool_choice is not None:
            self.tool_choice.route(text)
        if self.hooks is not None:
            return await self.hooks.prompt(self.agent, text, attachments=attachments or None)
        if attachments:
            from ..llm import TextContent
            from ..llm import UserMessage

            return await self.agent.prompt(UserMessage(content=[TextContent(text=text), *attachments]))
        return await self.agent.prompt(text)

    async def session_start(self, source: str = "startup") -> None:
        """Run SessionStart hooks (their context goes with the next prompt)."""
        if self.hooks is not None:
            await self.hooks.session_start(source)

    async def session_end(self, reason: str = "other") -> None:
        """Run SessionEnd hooks."""
        if self.hooks is not None:
            await self.hooks.session_end(reason)

    def arm(self) -> None:
        """Prepare a new run (re-arms ``--tool-choice`` for its first model call)."""
        if self.tool_choice is not None:
            self.tool_choice.arm()

    def fit_context(self, settings: Settings) -> None:
        """Size the window and the context manager for the agent's current model (call it
        after switching models)."""
        self.window = context_window(self.agent.model, settings)
        manager = self.context_manager
        if manager is not None:
            manager.window = self.window
            manager.reserve = context_reserve(self.window, settings.max_tokens)

    def context(self) -> ContextUsage:
        """How full :attr:`window` is with the agent's transcript."""
        return ContextUsage(tokens=self.agent.context_usage().tokens, window=self.window)


def mcp_manager(settings: Settings, root: Path, *, elicitation: Any = None, errlog: Any = None) -> Any:
    """An :class:`ketch.mcp.MCPManager` for the MCP servers in ``settings``, or None when
    there are none (see :func:`ketch.cli._mcp_servers.manager_for`)."""
    if not settings.mcp_servers:
        return None
    from ._mcp_servers import manager_for

    return manager_for(settings, root, elicitation=elicitation, errlog=errlog)


def _hook_notice(notice: HookNotice) -> None:
    sys.stderr.write(f"ketch: {notice.text}\n")
    sys.stderr.flush()


def key_file_rules(settings: Settings) -> list[Rule]:
    """``Read`` deny rules for the files that may hold keys: the command's config
    directory, the MCP OAuth tokens (``ketch mcp login``) and every config file with a
    literal ``api_key``; the file tools refuse them and bash's sandbox hides them
    (source ``ketch``)."""
    from ..mcp import default_auth_dir

    paths = dict.fromkeys(os.path.realpath(p) for p in (config_dir(), default_auth_dir(), *settings.key_files))
    return [Rule.parse(f"Read(/{glob_escape(path)})", "ketch") for path in paths]


def config_paths(settings: Settings, root: Path, hooks: Sequence[HookSpec]) -> tuple[str, ...]:
    """Configuration besides ``DEFAULT_PROTECTED``, as paths relative to the workspace
    ``root``: the files the command runs outside the sandbox (the scripts the shell
    ``hooks`` and the MCP servers of ``settings`` name, see
    :func:`ketch.sandbox.command_paths`) and the config files in sub-folders the user
    trusted by name (also while they are absent). The sandbox keeps them read-only (and
    absent ones uncreatable) and the file tools ask before changing one."""
    from .._paths import within
    from ..sandbox import command_paths

    found: dict[str, None] = {}
    trust = settings.trust
    if trust is not None:
        for name in sorted(trust.known):
            path = os.path.normpath(os.path.join(trust.root, name))
            if within(path, str(root)) and path != str(root):
                found[glob_escape(os.path.relpath(path, root))] = None
    for spec in hooks:
        if isinstance(spec.handler, str):
            found.update(dict.fromkeys(command_paths(root, spec.handler)))
    for entry in settings.mcp_servers.values():
        command = entry.get("command")
        if isinstance(command, str) and command:
            args = entry.get("args")
            words = [command, *(a for a in args if isinstance(a, str))] if isinstance(args, list) else [command]
            cwd = entry.get("cwd")
            where = root / cwd if isinstance(cwd, str) and cwd else root
            found.update(dict.fromkeys(command_paths(root, words, cwd=where)))
    return tuple(found)


def build_gated_tools(
    settings: Settings,
    root: Path,
    *,
    no_approver_message: str,
    approver: Approver | None = None,
    no_approver: Literal["deny", "pause"] = "deny",
    hooks: Sequence[HookSpec] | None = None,
    session_id: str | None = None,
) -> tuple[list[Tool], HookRunner | None, PermissionEngine]:
    """The built-in tools of ``root`` (see :func:`build_tools`; writable unless the
    permission mode is ``plan``, bash never sees the providers' key variables), the
    :class:`HookRunner` of ``hooks`` (default ``settings.hooks``; None without hooks; its
    notices go to stderr) and the :class:`PermissionEngine` that gates the calls: rules
    from the settings, the workspace ``root``, the hooks as its first step."""
    secret_names = [p.api_key_env for p in settings.providers.values() if p.api_key_env]
    if settings.sandbox_network_policy is not None:  # the proxy's credentials: no tool or hook sees them
        secret_names += settings.sandbox_network_policy.secret_names()
    permissions: PermissionEngine | None = None

    def mode() -> str:
        return permissions.mode if permissions is not None else settings.permission_mode

    runner: HookRunner | None = None
    specs = settings.hooks if hooks is None else hooks
    if specs:
        runner = HookRunner(
            specs,
            cwd=root,
            permission_mode=mode,
            secret_names=secret_names,
            on_notice=_hook_notice,
            session_id=session_id,
        )
    from ..sandbox import DEFAULT_PROTECTED

    scripts = config_paths(settings, root, specs)
    permissions = PermissionEngine(
        settings.permission_mode,
        # memory turned on: its tool edits only the memory's own directory (ask/deny rules still apply)
        allow=[*settings.allow, Rule("memory", text="memory", source="memory")] if settings.memory else settings.allow,
        ask=settings.ask,
        deny=[*settings.deny, *key_file_rules(settings)],
        approver=approver,
        hooks=runner,
        no_approver_message=no_approver_message,
        no_approver=no_approver,
        root=root,
        protected=(*DEFAULT_PROTECTED, *scripts),
    )
    tools = build_tools(
        root,
        settings.tools,
        write_allowed=lambda: mode() != "plan",
        secret_names=secret_names,
        settings=settings,
        permissions=permissions,
        protected=scripts,
    )
    return tools, runner, permissions


def _capabilities(
    settings: Settings,
    root: Path,
    environ: Mapping[str, str] | None,
    instructions: Any,
    permissions: PermissionEngine,
    *,
    embedded: bool,
    todo: bool,
    routed: bool = True,
    model: Model | None = None,
) -> list[Any]:
    """The agent's capabilities: the project's instructions, memory, skills, the to-do
    list; for the embedded model, the grounding of its arguments; web search and hosted
    tools, checked against ``model``'s provider (a :class:`ConfigError` before any request)."""
    project = instructions.capability() if instructions is not None else None
    capabilities: list[Any] = []
    if project is not None:  # the project's AGENTS.md / CLAUDE.md, after the system prompt of every request
        capabilities.append(project)
    if settings.memory:
        capabilities.append(memory_capability(root, environ))
    if settings.web_fetch:
        capabilities.append(web_fetch_capability(settings))
    if model is not None and (settings.web_search or settings.hosted_tools):
        from ._hosted import hosted_capabilities

        capabilities += hosted_capabilities(settings, model, environ)
    if not embedded:
        from ._skills import skills_capability

        skills = skills_capability(settings, lambda spec: build_model(spec, settings), environ, permissions)
        if skills is not None:  # the skills' names and descriptions, and the skill tool
            capabilities.append(skills)
    if todo and not embedded:  # the plan the model keeps (an editor's plan, the terminal's checklist)
        from ..tools import Todo

        capabilities.append(Todo())
    if embedded:  # compact tools grounded in the request (an enum in its call grammar), the first one routed
        from ._embedded import Grounding

        capabilities.append(Grounding(root, route_embedded if routed else None))  # (not under --tool-choice)
    return capabilities


def build_agent(
    settings: Settings,
    root: Path,
    *,
    approver: Approver | None,
    tool_choice: str | None = None,
    environ: Mapping[str, str] | None = None,
    model: Model | None = None,
    hooks: Sequence[HookSpec] | None = None,
    session: Any = None,
    no_approver: Literal["deny", "pause"] = "deny",
    mcp: Any = None,
    todo: bool = False,
) -> Built:
    """An agent for ``settings`` working in ``root``, gated by a :class:`PermissionEngine`
    (rules from the settings, the workspace ``root``, ``approver`` asking the user) whose
    first step is the PreToolUse hooks.

    ``hooks`` (default: ``settings.hooks``) are attached through a :class:`HookRunner`;
    its notices go to stderr until the caller sets ``built.hooks.on_notice``. The bash
    tool runs in the OS sandbox when one is usable, read-only in ``plan`` mode.
    ``session`` (a :class:`ketch.sessions.Session`) is attached to the agent: its
    transcript is restored and every message is saved in it; hooks get its id. A call
    that needs approval when there is no ``approver`` is denied, or with ``no_approver``
    ``"pause"`` ends the run with ``approval_required``. ``mcp`` (see :func:`mcp_manager`)
    gives the agent the MCP servers' tools once :meth:`Built.attach_mcp` is awaited.
    ``todo`` gives it the to-do list (:class:`ketch.tools.Todo`, the ``todo_write`` tool;
    not to the embedded model, whose tool set is kept small)."""
    spec, reason = choose_model(settings, environ)
    resolved = model if model is not None else build_model(spec, settings)
    embedded = _is_embedded(resolved)
    if embedded:
        _tell_embedded()
        if settings.tools is None:
            settings = msgspec.structs.replace(settings, tools=list(EMBEDDED_TOOLS))
    tools, runner, permissions = build_gated_tools(
        settings,
        root,
        no_approver_message=HEADLESS_DENIAL,
        approver=approver,
        no_approver=no_approver,
        hooks=hooks,
        session_id=session.id if session is not None else None,
    )
    options = StreamOptions(max_tokens=settings.max_tokens, temperature=settings.temperature)
    config: dict[str, Any] = {}
    chooser = _tool_chooser(settings, tools, tool_choice, embedded, options, environ)
    if chooser is not None:
        config["prepare_next_turn"] = chooser

    manager = Compactor() if settings.compaction else None
    if manager is not None:
        config["context_manager"] = manager

    if resolved.provider == "local":
        # A tiny embedded model that hit its output limit tends to repeat itself when asked
        # to resume; end the answer there instead of re-prompting it.
        config["length_recoveries"] = 0

    def get_api_key(provider: str) -> str | None:
        return api_key_for(provider, settings, environ)

    if runner is not None:
        config.update(
            after_tool_call=runner.after_tool_call,
            on_stop=runner.on_stop,
            stop_when=(runner.stop_requested,),
            middlewares=(runner.middleware,),
        )
        if manager is not None:
            manager.pre_compact = runner.pre_compact
    answers_with_tool = embedded and chooser is not None and bool(chooser.routes)
    if answers_with_tool:
        # A 135M model restating a tool's result gets it wrong more often than right: its
        # run ends after its routed call succeeds, and the result is the answer (a failed
        # call goes back to it, to answer in text).
        config["stop_when"] = (*config.get("stop_when", ()), stop_after_tool(*(t.name for t in tools)))

    system_prompt, instructions = _system_prompt(settings, root, tools, embedded, environ, permissions)
    routed = tool_choice is None  # (--tool-choice names the tool, or auto lets the model choose)
    capabilities = _capabilities(
        settings, root, environ, instructions, permissions, embedded=embedded, todo=todo, routed=routed, model=resolved
    )
    if capabilities:
        config["capabilities"] = capabilities
    if session is not None:
        config["session"] = session
    agent = Agent(
        resolved,
        system_prompt=system_prompt,
        tools=tools,
        thinking=settings.thinking,  # type: ignore[arg-type]
        options=options,
        max_turns=settings.max_turns,
        max_budget_usd=settings.max_budget_usd,
        before_tool_call=permissions.before_tool_call,
        get_api_key=get_api_key,
        **config,
    )
    attach_telemetry(agent)  # --otel-endpoint
    from ._subagents import attach_subagents

    subagents = attach_subagents(agent, settings, environ)
    built = Built(
        agent,
        permissions,
        spec,
        reason,
        root,
        chooser,
        manager,
        hooks=runner,
        mcp=mcp,
        subagents=subagents,
        instructions=instructions,
        answers_with_tool=answers_with_tool,
    )
    built.fit_context(settings)
    return built


def web_fetch_capability(settings: Settings) -> Any:
    """The ``web_fetch`` tool for the command (``web_fetch = true``, ``--web-fetch``):
    :class:`ketch.web.WebFetch`, limited to the hosts of ``[sandbox.network] allow`` when
    it is set (exact names and ``*.suffix``, whatever their port; a host also on the deny
    list is left out), else by its own host check (any public host; internal addresses
    refused)."""
    from ..web import WebFetch

    policy = settings.sandbox_network_policy
    allowed: list[str] = []
    if policy is not None:
        denied = {(e.host, e.wildcard) for e in policy.deny if e.port is None}
        allowed = [f"*.{e.host}" if e.wildcard else e.host for e in policy.allow if (e.host, e.wildcard) not in denied]
        if not allowed:  # the sandbox reaches no host: neither does web_fetch
            allowed = ["invalid."]
    return WebFetch(allowed_hosts=tuple(dict.fromkeys(allowed)))


def memory_capability(root: Path, environ: Mapping[str, str] | None = None) -> Any:
    """Long-term memory for the command (``memory = true``, ``--memory``): a
    :class:`ketch.memory.Memory` over the files of the user (the login name) in the project
    at ``root``, kept in the user's data directory (``~/.local/share/ketch/memory``), never
    in the project, so a repository cannot plant notes."""
    from ..memory import Memory
    from ..memory import default_memory_dir
    from ..memory import scoped_memory_dir

    env = os.environ if environ is None else environ
    user = re.sub(r"[^A-Za-z0-9._-]", "_", env.get("USER") or env.get("LOGNAME") or "user")[:64].lstrip(".-") or "user"
    return Memory(scoped_memory_dir(default_memory_dir(env), user=user, project=root))


def _tool_chooser(
    settings: Settings,
    tools: Sequence[Tool],
    tool_choice: str | None,
    embedded: bool,
    options: StreamOptions,
    environ: Mapping[str, str] | None,
) -> _FirstCallToolChoice | None:
    """The ``prepare_next_turn`` that forces the first call (``--tool-choice``, or the
    embedded model's routed first call), or None."""
    if tool_choice is not None and tool_choice != "auto":
        from ._subagents import added_tool_names

        names = {t.name for t in tools} | set(added_tool_names(settings, environ))
        if tool_choice not in ("none", "required") and tool_choice not in names:
            raise ConfigError(f"--tool-choice {tool_choice!r}: no such tool in this run")
        # The 135M model keeps calling tools when left to choose: after the forced call it
        # answers from the result.
        return _FirstCallToolChoice(options, tool_choice, "none" if embedded else None)
    if embedded and tool_choice is None and tools:
        # Left to choose, the 135M model answers from nothing (no call, an invented
        # answer): its first call of each run is a grammar-constrained call of the tool
        # the request's words name (else of one of its tools), and it answers from the
        # result.
        return _FirstCallToolChoice(options, "required", "none", routes=[t.name for t in tools])
    return None


def _system_prompt(
    settings: Settings,
    root: Path,
    tools: Sequence[Tool],
    embedded: bool,
    environ: Mapping[str, str] | None,
    permissions: PermissionEngine,
) -> tuple[str, Any]:
    """The system prompt (the setting, the embedded model's own, or the default) and the
    project's instructions (none for the embedded model)."""
    if settings.system_prompt is not None:
        system_prompt = settings.system_prompt
    elif embedded:
        system_prompt = embedded_system_prompt()
    else:
        system_prompt = default_system_prompt(root, tools)
    instructions = None
    if not embedded:
        from ._instructions import load_instructions

        instructions = load_instructions(root, environ=environ, hidden=permissions.hidden_paths(all_rules=True))
    return system_prompt, instructions
