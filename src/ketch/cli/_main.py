"""The ``ketch`` command line: argument parsing and dispatch.

::

    ketch                       interactive session in the current directory
    ketch "task"                the same as ``ketch run "task"``
    ketch run "task" | -        headless run (``-`` reads the task from stdin)
    ketch models                known models and which have keys
    ketch doctor                check the installation, providers and the local model
    ketch config                the effective settings and where they come from
    ketch sessions …            list, show, export and delete saved sessions
    ketch mcp …                 serve ketch over MCP; list, add and remove MCP servers
    ketch skills list           the Agent Skills found and where from
    ketch plugin …              add, list, remove, enable and disable plugins
    ketch serve                 HTTP/SSE server and web page for the sessions (ketch.server)
    ketch eval …                run the agent over a dataset and report; compare two reports
    ketch replay SESSION        rerun a saved session on a model, tools answered from the recording
    ketch help | --help         the commands and options; ``--version`` the installed version

A task of one word that is a command's name or one typo away from it (``ketch modles``)
is not sent to the model: the command asks "did you mean ``ketch models``?" (exit 2);
``ketch run WORD`` sends such a word as a task.

Without the ``cli`` extra (rich, prompt_toolkit) the interactive session cannot start:
the command says which extra to install (exit 2); ``ketch run`` works without it. With no
provider key and no local model installed, a run stops before it starts, naming the key
variables and the install line of the local model (exit 2).

Every run is saved as a session (``--no-session``: not): ``--resume ID`` continues one,
``--continue`` the latest of the directory, ``ketch --resume`` picks one interactively.

Exit codes: 0 success, 1 error, 2 usage or configuration error, 3 max turns reached,
4 budget exhausted, 5 paused for approval (``--resume ID --approve CALL_ID``), 130 aborted,
141 stdout closed early (the reader went away, as in ``ketch run … | head``: the run is
aborted and the command exits quietly, like a Unix tool stopped by SIGPIPE).

Text that is not valid UTF-8 (the task on stdin, command-line arguments) is decoded with
U+FFFD for the bad bytes and one warning line on stderr; the rest is kept.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from ._args import EXIT_BROKEN_PIPE
from ._args import EXIT_INTERRUPTED
from ._args import EXIT_USAGE
from ._args import OUTPUT_FORMATS
from ._args import OneLineParser
from ._args import add_permission_options
from ._args import finite_non_negative
from ._args import positive_int
from ._args import silence_stdout

if TYPE_CHECKING:
    from ._config import Settings
    from ._sessions import SessionOptions

# Only what parsing the command line needs is imported here: ``ketch acp`` and the Claude
# Code compatible mode answer their client's first request before the agent's modules load.

# The commands besides ``run``: the module that has each (imported when it runs, so that
# ``ketch`` starts fast) and its entry point, which takes the arguments after the command.
_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "models": ("._catalog", "models_command"),
    "doctor": ("._doctor", "doctor_command"),
    "config": ("._show_config", "config_command"),
    "sessions": ("._sessions", "sessions_command"),
    "mcp": ("._mcp", "mcp_command"),
    "skills": ("._skills", "skills_command"),
    "plugin": ("._plugins", "plugin_command"),
    "serve": ("._serve", "serve_command"),
    "worker": ("._worker", "worker_command"),
    "acp": ("._acp", "acp_command"),
    "worktree": ("._worktree", "worktree_command"),
    "eval": ("._eval", "eval_command"),
    "replay": ("._replay", "replay_command"),
}

_EPILOG = """\
commands:
  ketch                       interactive session
  ketch run TASK | -          headless run (also: ketch TASK); '-' reads the task from stdin
  ketch models [--all]        known models and which providers have keys
  ketch doctor [--quick]      check the installation, providers and the local model
  ketch config                effective settings and their sources (keys redacted)
  ketch sessions list|show|export|delete   saved sessions (see ketch sessions --help)
  ketch mcp serve|list|add|remove|login    ketch as an MCP server; the MCP servers it uses
  ketch skills list [--json]               the Agent Skills (SKILL.md folders) found, and where from
  ketch plugin add|list|remove|enable|disable   plugins (Claude Code's layout): skills, commands, agents
  ketch serve [--host H] [--port P]        HTTP/SSE server and web page for this directory's sessions
  ketch worker --task-queue Q [--app M:F]  run durable agents on Temporal (temporal extra)
  ketch worktree list|merge|remove NAME   the git worktrees of --worktree and isolated subagents
  ketch acp                   serve the Agent Client Protocol on stdio (Zed, JetBrains, Neovim, Emacs)
  ketch eval DATASET [--json OUT] [--html OUT]   run the agent over a dataset; ketch eval compare A B
  ketch replay SESSION [--model M]         rerun a saved session on a model; where its decisions diverge
  ketch --resume [ID]         resume a session interactively (without ID: choose one)
  ketch help | --version      this help; the installed version

exit codes: 0 success, 1 error, 2 usage/config error, 3 max turns, 4 max budget,
  5 paused for approval (continue: ketch run --resume ID --approve CALL_ID), 130 aborted
"""


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose the model, its limits, the tools and the permissions:
    ``ketch``, ``ketch run`` and ``ketch serve`` take them alike."""
    from ..llm._model import THINKING_LEVELS

    parser.add_argument("-m", "--model", help="provider:model, e.g. anthropic:claude-sonnet-4-5, or 'local'")
    parser.add_argument("--thinking", choices=THINKING_LEVELS, help="reasoning effort (default off)")
    parser.add_argument("--max-turns", type=positive_int, help="stop after this many model calls")
    parser.add_argument("--max-budget-usd", type=finite_non_negative, help="stop once the run cost this much")
    parser.add_argument("--max-tokens", type=positive_int, help="output token limit per model call")
    parser.add_argument("--temperature", type=finite_non_negative, help="sampling temperature (0 is greedy)")
    parser.add_argument("--system-prompt", help="replace the default system prompt")
    parser.add_argument("--tools", help="comma list of built-in tools (read,write,edit,bash,grep,find,ls); '' for none")
    parser.add_argument("-C", "--cwd", help="working directory (the tools' root)")
    add_permission_options(parser)


def add_agent_settings(parser: argparse.ArgumentParser) -> None:
    """Project trust, the first call's tool choice and context management (the same
    for ``ketch run`` and ``ketch serve``)."""
    from ._config import TRUST_ENV

    parser.add_argument(
        "--trust-project",
        action="store_true",
        help=f"apply this project's settings that widen permissions (bypass, allow rules, provider URLs); also {TRUST_ENV}=1",
    )
    parser.add_argument(
        "--tool-choice",
        metavar="CHOICE",
        help="auto | required | none | <tool name>: applies to the first model call of a run only",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="long-term memory: a memory tool over notes kept per user and project (also memory = true in config)",
    )
    parser.add_argument(
        "--web-fetch",
        action="store_true",
        help="the web_fetch tool: fetch a URL as Markdown marked untrusted (also web_fetch = true in config)",
    )
    parser.add_argument(
        "--web-search",
        action="store_true",
        help="web search: the provider's hosted search, else the [web_search] search API (also web_search = true in config)",
    )
    parser.add_argument(
        "--hosted-tools",
        metavar="KINDS",
        help="tools the provider runs itself, comma-separated: code_execution, web_fetch (also hosted_tools in config)",
    )
    parser.add_argument(
        "--no-compaction",
        action="store_true",
        help="no automatic context management (no summaries of older history; /compact is off)",
    )
    parser.add_argument(
        "--context-window", type=positive_int, metavar="TOKENS", help="use this context window instead of the model's"
    )


class _VersionAction(argparse.Action):
    """``--version``: print ``ketch <version>`` and exit 0 (the version is looked up only then)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        import ketch

        sys.stdout.write(f"ketch {ketch.__version__}\n")
        raise SystemExit(0)


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    add_agent_options(parser)
    parser.add_argument(
        "--deny",
        action="append",
        metavar="RULE",
        help="deny rule, e.g. 'Bash(rm:*)'; with --resume, CALL_ID[:reason] denies a call the run paused on (repeatable)",
    )
    parser.add_argument(
        "--approve", action="append", metavar="CALL_ID", help="with --resume: run this call the run paused on (repeatable)"
    )
    parser.add_argument(
        "--continue",
        dest="continue_session",
        action="store_true",
        help="continue the latest session of this directory",
    )
    parser.add_argument("--no-session", action="store_true", help="do not save this run as a session")
    parser.add_argument(
        "-w",
        "--worktree",
        nargs="?",
        const="",
        metavar="NAME",
        help="work in the git worktree NAME (.ketch/worktrees/NAME, branch ketch/NAME; made when missing, "
        "a new name without NAME); see ketch worktree",
    )
    add_agent_settings(parser)
    parser.add_argument(
        "-o", "--output", choices=OUTPUT_FORMATS, default="text", help="headless output format"
    )
    parser.add_argument(
        "--otel-endpoint", metavar="URL", help="send OpenTelemetry traces and metrics to this OTLP/HTTP collector"
    )


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="ketch",
        description="ketch: a coding agent in your terminal.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_options(parser)
    parser.add_argument("-V", "--version", action=_VersionAction, help="print the installed version and exit")
    parser.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="ID",
        help="continue the session ID (interactive without ID: choose one of this directory)",
    )
    parser.add_argument("task", nargs="?", help="the task; without it an interactive session starts")
    return parser


def _run_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="ketch run", description="Run one task headless.")
    _add_run_options(parser)
    parser.add_argument("--resume", metavar="ID", help="continue the session ID")
    parser.add_argument(
        "--input-format",
        choices=("text", "stream-json"),
        default="text",
        help="stream-json (with -o stream-json): a multi-turn session driven by JSON lines on stdin",
    )
    parser.set_defaults(headless=True)
    parser.add_argument(
        "task", nargs="?", help="the task, or '-' to read it from stdin (optional with --resume ID --approve/--deny)"
    )
    return parser


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {
        "model": args.model,
        "thinking": args.thinking,
        "max_turns": args.max_turns,
        "max_budget_usd": args.max_budget_usd,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "system_prompt": args.system_prompt,
        "permission_mode": args.permission_mode,
        "compaction": False if args.no_compaction else None,
        "memory": True if args.memory else None,
        "web_fetch": True if args.web_fetch else None,
        "web_search": True if args.web_search else None,
        "context_window": args.context_window,
    }
    if args.hosted_tools is not None:
        flags["hosted_tools"] = [t.strip() for t in args.hosted_tools.split(",") if t.strip()]
    if args.tools is not None:
        flags["tools"] = [t.strip() for t in args.tools.split(",") if t.strip()]
    return flags


def _error(message: str, prefix: str = "ketch") -> int:
    sys.stderr.write(f"{prefix}: {message}\n")
    return EXIT_USAGE


def _ask_trust(root: Path, widening: list[str]) -> bool:
    """Ask on the terminal whether to trust the project at ``root``."""
    sys.stderr.write(
        f"The project {root} has settings that apply only once you trust it:\n"
        + "".join(f"  {item}\n" for item in widening)
        + "Trust this project and apply them (remembered)? [y/N] "
    )
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, KeyboardInterrupt):
        return False
    return answer.strip().lower() in ("y", "yes")


_warned: set[str] = set()


def _warn_once(what: str) -> None:
    if what not in _warned:
        _warned.add(what)
        sys.stderr.write(f"ketch: warning: {what} is not valid UTF-8; the invalid bytes were replaced with U+FFFD\n")


def _valid_text(text: str) -> str:
    """``text`` with lone surrogates (undecodable bytes of an argument, kept by Python
    as surrogate escapes) decoded with U+FFFD instead."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return data.decode("utf-8", "replace")


def _clean_args(args: argparse.Namespace) -> None:
    """Decode the text arguments that are not valid UTF-8 with replacement (one warning).
    ``--cwd`` is a path and is kept as given."""
    changed = False
    for name, value in vars(args).items():
        if name == "cwd":
            continue
        if isinstance(value, str):
            clean = _valid_text(value)
            changed = changed or clean is not value
            setattr(args, name, clean)
        elif isinstance(value, list):
            cleaned = [_valid_text(v) if isinstance(v, str) else v for v in value]
            changed = changed or any(a is not b for a, b in zip(cleaned, value, strict=True))
            setattr(args, name, cleaned)
    if changed:
        _warn_once("a command-line argument")


def _read_stdin() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        _warn_once("the task on stdin")
        return data.decode("utf-8", "replace")


CLI_INSTALL = "pip install -e '.[cli]'"
"""The install line of the ``cli`` extra (rich, prompt_toolkit), from a checkout."""


def _check_cli_extra() -> None:
    """The interactive session needs rich and prompt_toolkit (the ``cli`` extra)."""
    from ._config import ConfigError
    from ._precheck import found

    missing = [name for name in ("prompt_toolkit", "rich") if not found(name)]
    if missing:
        raise ConfigError(_cli_extra_message(missing[0]))


def _cli_extra_message(module: str) -> str:
    return (
        f"the interactive session needs the cli extra ({module} is not installed): {CLI_INSTALL} "
        "(ketch run TASK works without it)"
    )


def _settings(args: argparse.Namespace, *, ask: bool = False) -> tuple[Settings, Path]:
    from ._config import directory
    from ._config import finish_settings
    from ._config import load_settings

    root = directory(args.cwd)
    settings = load_settings(root, _flags(args), trust=args.trust_project, ask_trust=_ask_trust if ask else None)
    resuming = bool(getattr(args, "resume", None) or args.continue_session)
    # resuming: a --deny CALL_ID:reason is matched against the paused run's calls later
    finish_settings(settings, getattr(args, "allow", None), getattr(args, "deny", None), keep_bad_deny=resuming)
    return settings, root


def _session_options(args: argparse.Namespace) -> SessionOptions:
    """The session flags, checked for combinations that make no sense."""
    from ._config import ConfigError
    from ._sessions import SessionOptions

    resume: str | None = getattr(args, "resume", None)
    options = SessionOptions(
        resume=resume,
        continue_latest=args.continue_session,
        enabled=not args.no_session,
        approve=list(args.approve or ()),
        deny=list(args.deny or ()),
    )
    if resume is not None and args.continue_session:
        raise ConfigError("--resume and --continue: choose one")
    if not options.enabled and (resume is not None or args.continue_session):
        raise ConfigError(f"--no-session and {'--resume' if resume is not None else '--continue'}: choose one")
    if options.approve and resume is None and not args.continue_session:
        raise ConfigError(f"--approve {options.approve[0]}: needs --resume ID (or --continue) of a run paused for approval")
    return options


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from ._config import ConfigError

    _clean_args(args)
    task = args.task
    headless = getattr(args, "headless", False)
    try:
        sessions = _session_options(args)
    except ConfigError as exc:
        return _error(str(exc))
    # ketch run --resume ID --approve CALL_ID: continue the paused run, no new task
    deciding = task is None and bool(sessions.approve or (sessions.resuming and sessions.deny))
    interactive = task is None and not headless and not deciding and sys.stdin.isatty() and sys.stderr.isatty()
    controlled = getattr(args, "input_format", "text") == "stream-json"
    try:
        if task is None and not headless and not deciding and not controlled and sys.stdin.isatty():
            _check_cli_extra()
        if controlled:
            from ._control import check_args

            check_args(args)
        if getattr(args, "worktree", None) is not None:
            from ._worktree import enter_worktree

            args.cwd = enter_worktree(args.cwd, args.worktree)
        settings, root = _settings(args, ask=interactive)
        from ._precheck import check_model

        check_model(settings, args.tool_choice)
        if args.otel_endpoint is not None:
            from ._otel import configure

            configure(args.otel_endpoint)
    except ConfigError as exc:
        return _error(str(exc))
    if controlled:
        from ._control import run_control

        try:
            return asyncio.run(run_control(settings, root, tool_choice=args.tool_choice, sessions=sessions))
        except ConfigError as exc:
            return _error(str(exc))
    if task == "-" or (task is None and not deciding and not sys.stdin.isatty()):
        task = _read_stdin()
        if not task.strip():
            return _error("no task on stdin")
        interactive_approval = False
    else:
        interactive_approval = sys.stdin.isatty() and sys.stderr.isatty()
    if task is None and not deciding and headless:
        return _error("a task is required ('-' reads it from stdin)", prefix="ketch run")
    if task is None and not deciding:
        from ._interactive import run_interactive

        try:
            return asyncio.run(run_interactive(settings, root, tool_choice=args.tool_choice, sessions=sessions))
        except ConfigError as exc:
            return _error(str(exc))
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    if sessions.resume == "":
        return _error("--resume: a session id is needed with a task (ketch sessions list shows them)")
    from ._headless import run_headless

    try:
        return asyncio.run(
            run_headless(
                task,
                settings,
                root,
                output=args.output,
                tool_choice=args.tool_choice,
                interactive_approval=interactive_approval,
                sessions=sessions,
            )
        )
    except ConfigError as exc:
        return _error(str(exc))
    except KeyboardInterrupt:  # Ctrl-C after the event loop closed
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ketch`` command; returns the exit code."""
    try:
        return _main(argv)
    finally:
        _end_tool_processes()
        if "ketch.cli._otel" in sys.modules:
            from ._otel import shutdown

            shutdown()


def _end_tool_processes() -> None:
    """However the command ends (normally, by an exception, after an abort), processes
    the tools started and left running die with it. A Ctrl-C, SIGTERM or hangup arriving
    now, with the event loop already closed, is ignored: the command is exiting anyway."""
    if "ketch.tools._bash" not in sys.modules:
        return
    import signal

    from .._proc import kill_process_groups

    saved: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            saved[sig] = signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread
            pass
    try:
        kill_process_groups(children=True)
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _main(argv: Sequence[str] | None) -> int:
    try:
        os.getcwd()
    except OSError as exc:
        return _error(f"the current directory is gone ({exc.strerror}): cd to an existing directory")
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:  # text that cannot be encoded is shown, not a crash
            reconfigure(errors="backslashreplace")
    try:
        try:
            code = _dispatch(list(sys.argv[1:] if argv is None else argv))
        except SystemExit as exc:  # argparse: --help, usage errors
            if exc.code is not None and not isinstance(exc.code, int):
                raise
            code = exc.code or 0
        except ModuleNotFoundError as exc:  # the cli extra is missing where no check foresaw it
            top = (exc.name or "").partition(".")[0]
            if top not in ("prompt_toolkit", "rich"):
                raise
            code = _error(_cli_extra_message(top))
        sys.stdout.flush()  # here, where a closed pipe is caught, not at interpreter exit
        return code
    except BrokenPipeError:
        silence_stdout()
        return EXIT_BROKEN_PIPE


_COMMANDS = ("run", "help", *_SUBCOMMANDS)


def _typo_distance(a: str, b: str) -> int:
    """The optimal string alignment distance of ``a`` and ``b`` (insertions, deletions,
    substitutions and swaps of neighbours count one each)."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def meant_command(word: str) -> str | None:
    """The command a one-word task most likely meant: its name, or one edit away from it
    (``modles`` -> ``models``); None for anything else (a task of several words, too)."""
    if not word or any(c.isspace() for c in word) or len(word) > 12:
        return None
    lowered = word.lower()
    close = [c for c in _COMMANDS if _typo_distance(lowered, c) <= (0 if len(c) <= 3 else 1)]
    return min(close, key=lambda c: _typo_distance(lowered, c)) if close else None


def _dispatch(argv: list[str]) -> int:
    command = argv[0] if argv else None
    if any(a == "--output-format" or a.startswith("--output-format=") for a in argv):
        from ._claude_compat import is_sdk_invocation
        from ._claude_compat import sdk_command

        if is_sdk_invocation(argv):  # the Claude Agent SDK's invocation of Claude Code
            return sdk_command(argv)
    if command == "run":
        return _run(_run_parser().parse_args(argv[1:]))
    if command in _SUBCOMMANDS:
        module, entry = _SUBCOMMANDS[command]
        main: Callable[[list[str]], int] = getattr(importlib.import_module(module, __package__), entry)
        return main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    meant = meant_command(args.task) if isinstance(args.task, str) else None
    if meant == "help" and args.task.lower() == "help":
        parser.print_help()
        return 0
    if meant is not None:
        _clean_args(args)
        return _error(
            f"{args.task!r} is not a command; did you mean 'ketch {meant}'? "
            f"(to give it to the agent as a task: ketch run {args.task})"
        )
    return _run(args)

