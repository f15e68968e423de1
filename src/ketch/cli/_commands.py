"""Custom slash commands: Markdown files that become ``/NAME`` in the ``ketch`` command
(the interactive session, ``ketch run``, the control protocol and ``ketch serve``).

A command is a Markdown file whose text is the prompt ``/NAME ARGS`` sends, read from,
in order (a later folder's command replaces an earlier one of the same name):

1. ``<user config dir>/commands/`` (``~/.config/ketch/commands/``);
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
from ._config import Settings
from ._config import config_dir
from ._trust import Gate
from ._trust import Trust

USER_COMMANDS = "commands"
PROJECT_COMMANDS: tuple[Path, ...] = (Path(".claude") / "commands", Path(".ketch") / "commands")
KNOWN_FIELDS = ("description", "argument-hint", "allowed-tools", "model", "disable-model-invocation")
BUILTIN_NAMES = frozenset({
    "help", "model", "thinking", "tools", "memory", "mcp", "mode", "cost", "compact", "sessions", "fork",
    "rewind", "export", "clear", "exit", "quit",
})
"""The interactive command's own slash commands, which a command file cannot replace."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[A-Za-z0-9][A-Za-z0-9_.-]*)*$")
_POSITIONAL = re.compile(r"\$([1-9])")


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
        has_all = "$ARGUMENTS" in self.body
        has_positional = _POSITIONAL.search(self.body) is not None
        if not has_all and not has_positional:
            return f"{self.body}\n\nARGUMENTS: {arguments}" if arguments else self.body
        try:
            words = shlex.split(arguments)
        except ValueError:  # an unclosed quote: plain words
            words = arguments.split()
        text = self.body.replace("$ARGUMENTS", arguments) if has_all else self.body
        return _POSITIONAL.sub(lambda m: words[int(m.group(1)) - 1] if int(m.group(1)) <= len(words) else "", text)

    @property
    def usage(self) -> str:
        """``/NAME [hint]``."""
        return f"/{self.name} {self.argument_hint}".rstrip() if self.argument_hint else f"/{self.name}"


def _tools(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v).strip() for v in value if str(v).strip())
    # "Bash(git add:*), Read": commas outside parentheses separate the rules
    out, depth, current = [], 0, ""
    for ch in str(value):
        if ch == "," and depth == 0:
            out.append(current)
            current = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        current += ch
    out.append(current)
    return tuple(t.strip() for t in out if t.strip())


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
    allowed = _tools(data["allowed-tools"]) if data.get("allowed-tools") not in (None, "") else ()
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


def _files(directory: Path) -> list[tuple[str, Path]]:
    if not directory.is_dir():
        return []
    out = []
    for path in sorted(directory.rglob("*.md")):
        rel = path.relative_to(directory).with_suffix("")
        out.append((":".join(rel.parts), path))
    return out


def command_directories(settings: Settings, environ: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """Where command files are read from, in order, each with its origin."""
    from ._plugins import plugin_directories

    dirs = [(config_dir(environ) / USER_COMMANDS, "user"), *plugin_directories("commands", environ)]
    if settings.project_root is not None:
        dirs.extend((settings.project_root / d, "project") for d in PROJECT_COMMANDS)
    return dirs


def project_commands(root: Path, gate: Gate) -> None:
    """Pass the project's command folders through ``gate`` (each is one setting
    ``commands``, which needs trust; what it leaves out joins ``gate.ignored``)."""
    for directory in PROJECT_COMMANDS:
        names = [name for name, _ in _files(root / directory)]
        if names:
            gate.admit("commands", names, root / directory, label=f"commands /{', /'.join(names)}")


def load_custom_commands(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, CustomCommand], list[str]]:
    """The custom commands by name (sorted) and the warning lines; a file named like one
    of :data:`BUILTIN_NAMES` is left out."""
    trust = settings.trust if settings.trust is not None else Trust(settings.project_root or Path.cwd())
    found: dict[str, CustomCommand] = {}
    warnings: list[str] = []
    for directory, origin in command_directories(settings, environ):
        if origin == "project" and not trust.covers(directory):
            continue  # named in the ignored-settings line already (project_commands)
        for name, path in _files(directory):
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
            found[name] = command
    return {n: found[n] for n in sorted(found)}, warnings


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
        return await built.prompt(prompt, attachments)
    finally:
        if rules:  # these objects only: a rule the user added meanwhile stays
            kept = [r for r in built.permissions.session_rules if not any(r is x for x in rules)]
            built.permissions.session_rules[:] = kept
        if command.model is not None:
            agent.model = previous_model
