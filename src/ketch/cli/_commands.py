"""Custom slash commands: Markdown files that become ``/NAME`` in the ``ketch`` command
(the interactive session, ``ketch run``, the control protocol and ``ketch serve``).

A command is a Markdown file whose text is the prompt ``/NAME ARGS`` sends, read from,
in order (a later folder's command replaces an earlier one of the same name):

1. ``~/.claude/commands/`` (the user's Claude Code commands), then ``<user config
   dir>/commands/`` (``~/.config/ketch/commands/``);
2. the enabled plugins' ``commands/`` (:mod:`ketch.cli._plugins`);
3. the project root's ``.claude/commands/`` and ``.ketch/commands/``.

``NAME.md`` is ``/NAME``; a file in a sub-folder, ``git/commit.md``, is ``/git:commit``.
In the text, ``$ARGUMENTS`` is everything after the name and ``$1`` ... ``$9`` its
words (quotes group words, as in a shell); a text with neither gets the arguments
appended as ``ARGUMENTS: ...``. Optional front matter::

    ---
    description: Review the staged changes   # shown by /help (default: the first line)
    argument-hint: [focus]                    # shown by /help
    allowed-tools: Bash(git diff:*), Read     # allow rules for this command's run
    model: anthropic:claude-haiku-4-5         # the model of this command's run
    ---

``allowed-tools`` are permission rules (``Tool`` or ``Tool(specifier)``) that allow
those calls without asking during the command's run only; deny rules still win. A
project's commands need the project's trust (:mod:`ketch.cli._trust`): in an untrusted
project they are not loaded and the command names them with the other ignored settings.
A command named like a built-in one (``/help``) is left out with a warning; so is a bad
file (one line naming the file and the field).

A plugin's command ``tidy`` is ``/PLUGIN:tidy`` (as in Claude Code), and also ``/tidy``
when no other command has that name. A shell line ``!`git status``` in a command's text
is run through the agent's ``bash`` tool (sandboxed) when the permission rules allow it
without asking (the command's ``allowed-tools`` count, as ``Bash(git status:*)``), and
replaced by its output; otherwise it is replaced by ``(not run: why)`` and the command
says so on stderr (:func:`run_shell_lines`). Only trusted sources' commands are loaded,
so only those run shell lines.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._paths import read_regular_text
from ..skills import SkillError
from ..skills import parse_front_matter
from ..skills import split_tools
from ._config import Settings
from ._dirs import config_dir
from ._dirs import user_home
from ._plugins import plugin_directories
from ._project import PROJECT_COMMANDS
from ._project import command_files
from ._trust import Trust

USER_COMMANDS = "commands"
KNOWN_FIELDS = ("description", "argument-hint", "allowed-tools", "model", "disable-model-invocation")
BUILTIN_NAMES = frozenset({
    "help", "model", "thinking", "tools", "memory", "mcp", "mode", "cost", "compact", "sessions", "fork",
    "rewind", "export", "clear", "exit", "quit",
})
"""The interactive command's own slash commands, which a command file cannot replace."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[A-Za-z0-9][A-Za-z0-9_.-]*)*$")
_POSITIONAL = re.compile(r"\$([1-9])")
_SHELL = re.compile(r"!`([^`\n]+)`")
SHELL_OUTPUT_LIMIT = 30_000
"""Characters of a shell line's output inserted (the rest is cut, and said)."""


class CommandFileError(ValueError):
    """A command file that cannot be used (one line naming the file and the field)."""


@dataclass(frozen=True, slots=True)
class CustomCommand:
    """One custom slash command (see the module docstring)."""

    name: str
    description: str
    body: str
    path: Path
    origin: str
    allowed_tools: tuple[str, ...] = ()
    model: str | None = None
    argument_hint: str | None = None

    def expand(self, arguments: str) -> str:
        """The prompt for ``/NAME arguments``: ``$ARGUMENTS`` and ``$1``..``$9`` replaced."""
        arguments = arguments.strip()
        shells = [m.group(0) for m in _SHELL.finditer(self.body)]  # shell lines keep their text
        body = _SHELL.sub(lambda m: f"\x00{shells.index(m.group(0))}\x00", self.body) if shells else self.body
        has_all = "$ARGUMENTS" in body
        has_positional = _POSITIONAL.search(body) is not None
        if not has_all and not has_positional:
            text = f"{body}\n\nARGUMENTS: {arguments}" if arguments else body
        else:
            try:
                words = shlex.split(arguments)
            except ValueError:  # an unclosed quote: plain words
                words = arguments.split()
            text = body.replace("$ARGUMENTS", arguments) if has_all else body
            text = _POSITIONAL.sub(lambda m: words[int(m.group(1)) - 1] if int(m.group(1)) <= len(words) else "", text)
        return re.sub(r"\x00(\d+)\x00", lambda m: shells[int(m.group(1))], text) if shells else text

    @property
    def usage(self) -> str:
        """``/NAME [hint]``."""
        return f"/{self.name} {self.argument_hint}".rstrip() if self.argument_hint else f"/{self.name}"


def parse_command_file(
    path: Path, name: str, origin: str, within: Path | None = None
) -> tuple[CustomCommand, list[str]]:
    """The command ``name`` of the file at ``path`` and its warnings (unknown keys);
    :class:`CommandFileError` for a file that cannot be used. The file is read only as a
    regular file that is not a symbolic link, and with ``within`` only when its real path
    is in that folder."""
    try:
        text = read_regular_text(path, within_root=None if within is None else str(within))
    except UnicodeDecodeError:
        raise CommandFileError(f"{path}: cannot read the command (not UTF-8 text)") from None
    except OSError as exc:
        raise CommandFileError(f"{path}: cannot read the command ({exc.strerror or exc})") from None
    data: dict[str, Any] = {}
    body = text.strip()
    if text.lstrip().startswith("---"):
        try:
            data, body = parse_front_matter(text.lstrip(), str(path))
        except SkillError as exc:
            raise CommandFileError(str(exc).replace("a SKILL.md must start", "a command must start")) from None
    warnings = [
        f"{path}: unknown front matter key {k!r} ignored; known: {', '.join(KNOWN_FIELDS)}"
        for k in data
        if k not in KNOWN_FIELDS
    ]
    for field in ("description", "argument-hint", "model"):
        if field in data and not isinstance(data[field], str):
            raise CommandFileError(f"{path}: {field!r} must be a string, got {data[field]!r}")
    allowed = split_tools(data.get("allowed-tools"))
    if allowed:
        from ..permissions import parse_rules

        try:
            parse_rules(allowed)
        except ValueError as exc:
            raise CommandFileError(f"{path}: 'allowed-tools': {exc}") from None
    if not body:
        raise CommandFileError(f"{path}: the command has no text after its front matter")
    description = data.get("description") or body.splitlines()[0].lstrip("# ").strip()
    return (
        CustomCommand(
            name=name,
            description=description,
            body=body,
            path=path,
            origin=origin,
            allowed_tools=allowed,
            model=data.get("model") or None,
            argument_hint=data.get("argument-hint") or None,
        ),
        warnings,
    )


def command_directories(settings: Settings, environ: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """Where command files are read from, in order, each with its origin."""
    dirs = [
        (user_home(environ) / ".claude" / "commands", "user"),
        (config_dir(environ) / USER_COMMANDS, "user"),
        *plugin_directories("commands", environ),
    ]
    if settings.project_root is not None:
        dirs.extend((settings.project_root / d, "project") for d in PROJECT_COMMANDS)
    return dirs


def load_custom_commands(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, CustomCommand], list[str]]:
    """The custom commands by name (sorted) and the warning lines; a file named like one
    of :data:`BUILTIN_NAMES` is left out."""
    trust = settings.trust if settings.trust is not None else Trust(settings.project_root or Path.cwd())
    found: dict[str, CustomCommand] = {}
    plain: dict[str, list[CustomCommand]] = {}
    warnings: list[str] = []
    for directory, origin in command_directories(settings, environ):
        if origin == "project" and not trust.covers(directory):
            continue  # named in the ignored-settings line already (project_commands)
        for name, path in command_files(directory):
            if not _NAME.match(name):
                warnings.append(f"ketch: command left out: {path}: the name {name!r} is not a valid command name")
                continue
            if name in BUILTIN_NAMES:
                warnings.append(f"ketch: command left out: {path}: /{name} is a built-in command")
                continue
            try:
                # a project's, or a plugin's, own files only
                within = settings.project_root if origin == "project" else directory.parent if origin.startswith("plugin ") else None
                command, notes = parse_command_file(path, name, origin, within)
            except CommandFileError as exc:
                warnings.append(f"ketch: command left out: {exc}")
                continue
            warnings.extend(f"ketch: {n}" for n in notes)
            if origin.startswith("plugin "):  # /plugin-name:command, and the plain name when no other has it
                plugin = origin.removeprefix("plugin ")
                found[f"{plugin}:{name}"] = _renamed(command, f"{plugin}:{name}")
                plain.setdefault(name, []).append(command)
                continue
            found[name] = command
    for name, owners in plain.items():
        if len(owners) == 1 and name not in found:
            found[name] = owners[0]
    return {n: found[n] for n in sorted(found)}, warnings


def _renamed(command: CustomCommand, name: str) -> CustomCommand:
    from dataclasses import replace

    return replace(command, name=name)


def split_line(line: str) -> tuple[str, str]:
    """``"/name args"`` -> (``name``, ``args``)."""
    head, _, rest = line.strip().partition(" ")
    return head[1:], rest.strip()


def help_text(commands: Mapping[str, CustomCommand]) -> str:
    """The ``/help`` section listing the custom commands ("" when there are none)."""
    if not commands:
        return ""
    lines = ["Custom commands:"]
    for c in commands.values():
        usage = c.usage
        lines.append(f"  {usage:<21} {c.description} ({c.origin})" if len(usage) <= 21 else f"  {usage}  {c.description} ({c.origin})")
    return "\n".join(lines)


async def run_shell_lines(built: Any, command: CustomCommand, prompt: str) -> str:
    """``prompt`` with each ``!`cmd``` shell line of ``command``'s text replaced by the
    command's output, run through the agent's ``bash`` tool (in its sandbox) when the
    permission rules allow it without asking (the command's ``allowed-tools`` count);
    otherwise the line is replaced by ``(not run: ...)`` naming why, also said on stderr.
    Arguments are not put into shell lines: a shell line with ``$ARGUMENTS`` or ``$1``
    is not run."""
    import sys

    from ..llm import AbortSignal
    from ..loop import ToolContext
    from ..loop import ToolResult

    bash = next((t for t in built.agent.tools if t.name == "bash"), None)
    for number, match in enumerate(_SHELL.finditer(command.body), start=1):
        line, cmd = match.group(0), match.group(1).strip()
        refusal = None
        if "$ARGUMENTS" in cmd or _POSITIONAL.search(cmd):
            refusal = "arguments are not put into shell lines"
        elif bash is None:
            refusal = "this agent has no bash tool"
        else:
            verdict = built.permissions.check(bash, {"command": cmd})
            if verdict.outcome != "allow":
                refusal = (
                    verdict.reason
                    if verdict.outcome == "deny" and verdict.reason
                    else f"it needs an allow rule: add Bash({cmd}) to the command's allowed-tools, or --allow"
                )
        if refusal is not None:
            text = f"(not run: {refusal})"
            print(f"ketch: /{command.name}: shell line `{cmd}` not run: {refusal}", file=sys.stderr)
        else:
            assert bash is not None
            ctx: ToolContext[Any] = ToolContext(call_id=f"command-shell-{number}", tool_name="bash", signal=AbortSignal())
            try:
                result = await bash.execute({"command": cmd}, ctx)
            except Exception as exc:  # a tool error: said in place of the output
                result = ToolResult.error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            if isinstance(result, ToolResult):
                content = result.content
                text = (content if isinstance(content, str) else "".join(getattr(b, "text", "") for b in content)).rstrip("\n")
            else:
                text = str(result).rstrip("\n")
            if len(text) > SHELL_OUTPUT_LIMIT:
                text = text[:SHELL_OUTPUT_LIMIT] + f"\n(output cut at {SHELL_OUTPUT_LIMIT} characters)"
        prompt = prompt.replace(line, text, 1)
    return prompt


async def run_command(
    built: Any, settings: Settings, command: CustomCommand, prompt: str, attachments: Sequence[Any] = ()
) -> Any:
    """Run ``prompt`` (``command`` expanded) on ``built`` (a :class:`~ketch.cli._factory.Built`)
    with the command's ``model`` for this run only and its ``allowed-tools`` as allow
    rules for this run only. Returns the run's result."""
    from ..permissions import parse_rules
    from ._factory import build_model

    agent = built.agent
    previous_model = agent.model
    if command.model is not None:
        agent.model = build_model(command.model, settings)
    rules = parse_rules(command.allowed_tools) if command.allowed_tools else []
    built.permissions.session_rules.extend(rules)
    try:
        if _SHELL.search(command.body):
            prompt = await run_shell_lines(built, command, prompt)
        return await built.prompt(prompt, attachments)
    finally:
        if rules:  # these objects only: a rule the user added meanwhile stays
            kept = [r for r in built.permissions.session_rules if not any(r is x for x in rules)]
            built.permissions.session_rules[:] = kept
        if command.model is not None:
            agent.model = previous_model
