"""``ketch replay``: rerun a saved session on another model, tools answered from the recording.

::

    ketch replay SESSION [--model M] [--on-divergence stop|live] [--json OUT]
                         [--max-turns N] [-C DIR] [--permission-mode MODE] [--allow RULE]
                         [--trust-project]

``SESSION`` is a saved session's id (or a unique prefix of it: ``ketch sessions list``
shows them) or a file: a session's ``.jsonl`` log, or the JSON document of ``ketch
sessions export --format json``. The agent is the one ``ketch run`` builds (settings,
tools, permissions; a call that needs approval is denied) working in ``-C DIR`` (default:
the current directory), on ``--model`` (default: as for ``ketch run``). Its prompts are
the recording's; while the model asks for the recorded calls they are answered from the
recording (see :func:`ketch.evals.replay`). The report says whether every decision was
the recording's or where the first one diverged (turns counted from 0).

Exit codes: 0 the same decisions, 1 diverged, 2 usage or configuration error.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._args import OneLineParser
from ._args import add_permission_options
from ._args import positive_int

EXIT_DIVERGED = 1
EXIT_USAGE = 2


def _parser() -> OneLineParser:
    p = OneLineParser(
        prog="ketch replay",
        description="Rerun a saved session on a model, tool calls answered from the recording, and report "
        "where its decisions diverge.",
    )
    p.add_argument(
        "session", help="a session id (or a unique prefix), or a session's .jsonl / exported .json file"
    )
    p.add_argument("--model", "-m", help="the model (provider:model, local, ...); default: as for ketch run")
    p.add_argument(
        "--on-divergence",
        choices=("stop", "live"),
        default="stop",
        help="at the first other decision: stop there (default), or go on with the real tools",
    )
    p.add_argument("--json", dest="json_out", metavar="OUT", help="write the report as JSON")
    p.add_argument("--max-turns", type=positive_int, help="model calls per prompt")
    p.add_argument("-C", "--cwd", help="working directory of the tools (default: the current one)")
    add_permission_options(p, modes="for the calls run live")
    p.add_argument("--trust-project", action="store_true", help="apply this project's settings")
    return p


def _error(message: str) -> int:
    sys.stderr.write(f"ketch replay: {message}\n")
    return EXIT_USAGE


def replay_command(argv: Sequence[str]) -> int:
    """Run ``ketch replay``; returns the exit code."""
    from ._config import ConfigError

    args = _parser().parse_args(list(argv))
    try:
        return _run(args)
    except ConfigError as e:
        return _error(str(e))


def read_recording(path: Path) -> list[dict[str, Any]]:
    """The transcript in a session file: a session's JSON-lines log (as the command's
    store writes it) or a ``ketch sessions export --format json`` document. Raises
    :class:`ConfigError` naming the file when it is neither."""
    import msgspec

    from ..sessions import Entry
    from ..sessions._export import transcript
    from ._config import ConfigError

    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the session file: {e.strerror or e}") from None
    kind = "a session's .jsonl log or the JSON of 'ketch sessions export --format json'"
    try:
        whole = msgspec.json.decode(data)
    except msgspec.DecodeError:
        whole = None
    if isinstance(whole, dict):
        messages = whole.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ConfigError(f"{path}: not a session file ({kind}): no 'messages' list")
        return messages
    decoder = msgspec.json.Decoder(Entry)
    entries = []
    complete = data[: data.rfind(b"\n") + 1] if b"\n" in data else data  # a torn last line is left out
    for number, line in enumerate(complete.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(decoder.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise ConfigError(f"{path}: not a session file ({kind}): line {number}: {e}") from None
    return transcript(entries)


def _file(text: str) -> tuple[str, list[dict[str, Any]]] | None:
    """The recording in the file ``text`` names, or None when it names no file and does
    not look like a path (then it is a session id)."""
    path = Path(text).expanduser()
    if path.is_file() or os.sep in text or text.endswith((".json", ".jsonl")):
        return text, read_recording(path)
    return None


async def _stored(text: str) -> tuple[str, list[dict[str, Any]]]:
    """The session ``text`` names in the command's store (its id or a unique prefix):
    what to call it in the report, and its transcript."""
    from ..sessions import SessionNotFoundError
    from ..sessions._export import transcript
    from ._sessions import resolve_id
    from ._sessions import store
    from ._sessions import unknown_session

    sessions = store()
    session_id = await resolve_id(sessions, text)
    try:
        entries = await sessions.load(session_id)
    except SessionNotFoundError:  # deleted meanwhile
        raise unknown_session(text) from None
    return f"session {session_id}", transcript(entries)


def _run(args: Any) -> int:
    import msgspec

    from ..evals import replay
    from ..llm import message_from_dict
    from ._config import ConfigError
    from ._config import directory
    from ._config import finish_settings
    from ._config import load_settings
    from ._factory import build_agent
    from ._factory import build_model
    from ._factory import choose_model

    root = directory(args.cwd)
    found = _file(args.session)
    name, recorded = found if found is not None else asyncio.run(_stored(args.session))
    try:
        messages = [message_from_dict(m) for m in recorded]
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{name}: a message of the recording cannot be read: {e}") from None
    if not any(m.role == "user" for m in messages):
        raise ConfigError(f"{name}: the recording has no user message to send")
    settings = load_settings(
        root,
        {"model": args.model, "max_turns": args.max_turns, "permission_mode": args.permission_mode},
        trust=args.trust_project,
    )
    finish_settings(settings, args.allow, None)
    spec, _ = choose_model(settings)
    built = build_agent(settings, root, approver=None, model=build_model(spec, settings))
    built.arm()
    report = asyncio.run(replay(messages, built.agent, on_divergence=args.on_divergence))
    turns = sum(m.role == "assistant" for m in messages)
    _print(report, name, spec, turns)
    if args.json_out:
        out = {
            "recording": name,
            "model": spec,
            "on_divergence": args.on_divergence,
            "recorded_turns": turns,
            "divergence": msgspec.to_builtins(report.divergence),
            "replayed": report.replayed,
            "live": report.live,
            "text": report.text,
            "end_reason": report.results[-1].end_reason if report.results else None,
        }
        try:
            Path(args.json_out).write_bytes(msgspec.json.encode(out) + b"\n")
        except OSError as e:
            raise ConfigError(f"cannot write the report {args.json_out}: {e.strerror or e}") from None
    return 0 if report.divergence is None else EXIT_DIVERGED


def _print(report: Any, name: str, spec: str, turns: int) -> None:
    out = sys.stdout
    d = report.divergence
    if d is None:
        out.write(f"replay of {name} on {spec}: the same decisions at every turn ({turns} turns)\n")
    else:
        out.write(f"replay of {name} on {spec}: diverged at turn {d.turn} (turns counted from 0)\n")
        out.write(f"  recorded: {_calls(d.expected)}\n")
        out.write(f"  replayed: {_calls(d.actual)}\n")
    out.write(f"{report.replayed} calls answered from the recording, {report.live} run live\n")
    for result in report.results:
        error = result.error
        if error is not None and not error.startswith("replay diverged"):
            out.write(f"the run ended with {result.end_reason}: {error}\n")


def _calls(calls: list[Any]) -> str:
    return ", ".join(map(str, calls)) if calls else "no tool call (an answer)"
