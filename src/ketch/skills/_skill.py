"""Agent Skills: ``SKILL.md`` folders, read, validated and offered to the model on demand.

A skill is a folder holding a ``SKILL.md`` file: YAML front matter with ``name`` and
``description``, then instructions (the body), and optional scripts and resources next to
it. The format is the one Claude Code, the Claude Agent SDK, Codex and other agents share.

Only the names and descriptions go into the system prompt; the model loads a skill's body
with the ``skill`` tool when it decides a task needs it (progressive disclosure), and reads
the resource files the body names through the file tools (the tool's result gives the
skill's folder). Scripts a skill ships run through ``bash`` like any command, under the
sandbox and the permission rules.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._paths import read_regular_text
from ..loop import Capability
from ..loop import Contribution
from ..loop import NextTurn
from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolResult
from ..loop import TurnInfo

__all__ = [
    "SKILL_FILE",
    "SKILL_TOOL",
    "Skill",
    "SkillError",
    "Skills",
    "find_skills",
    "load_skill",
    "parse_front_matter",
    "parse_skill",
    "skills_of",
    "split_tools",
]

SKILL_FILE = "SKILL.md"
SKILL_TOOL = "skill"
MAX_NAME = 64
MAX_DESCRIPTION = 1024
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
KNOWN_FIELDS = ("name", "description", "license", "allowed-tools", "metadata", "compatibility", "model")


class SkillError(ValueError):
    """A ``SKILL.md`` that cannot be used: one line naming the file and the field."""


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill: its ``name`` and ``description`` (what goes into the context), its
    ``body`` (the instructions the ``skill`` tool returns), the folder holding its
    resources (``path``, None for a skill built in code), where it was found (``source``:
    ``project``, ``user``, ``plugin NAME``, ``code``), and the other front matter fields
    (``allowed-tools``, ``license``, ...) in ``fields``; ``warnings`` name front matter
    keys the format does not have (they are kept, not applied)."""

    name: str
    description: str
    body: str = ""
    path: Path | None = None
    source: str = "code"
    fields: tuple[tuple[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "Skill")
        if not isinstance(self.description, str) or not self.description.strip():
            raise SkillError(f"Skill {self.name!r}: 'description' must be a non-empty string")

    def field(self, key: str) -> Any:
        """The front matter field ``key`` (None when absent)."""
        return next((v for k, v in self.fields if k == key), None)

    @property
    def allowed_tools(self) -> tuple[str, ...]:
        """``allowed-tools``: permission rules (``Read``, ``Bash(git diff:*)``) that run
        without asking while the skill is active (from its loading to the end of the run)."""
        return split_tools(self.field("allowed-tools"))

    @property
    def model(self) -> str | None:
        """``model``: the model (``provider:id``) of the run's turns after the skill is
        loaded; None (also for ``inherit``) keeps the run's model."""
        value = self.field("model")
        return value if isinstance(value, str) and value.strip() not in ("", "inherit") else None


def split_tools(value: Any) -> tuple[str, ...]:
    """An ``allowed-tools`` value as rules: a list, or a string whose commas outside
    parentheses separate the rules (``Bash(git add:*), Read``)."""
    if value is None or value == "":
        return ()
    if isinstance(value, list):
        return tuple(str(v).strip() for v in value if str(v).strip())
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


def _check_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not name:
        raise SkillError(f"{where}: 'name' is missing from the front matter")
    if len(name) > MAX_NAME or not _NAME.match(name):
        raise SkillError(
            f"{where}: 'name' {name!r} must be 1-{MAX_NAME} lowercase letters, digits and single hyphens"
        )


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        inner = text[1:-1]
        return inner.replace("''", "'") if text[0] == "'" else inner.replace('\\"', '"')
    return text


def parse_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """The YAML front matter of a Markdown text (``---`` lines around it) as a dict, and
    the body after it; :class:`SkillError` names ``where`` and the bad line. The YAML
    subset skill and command files use: ``key: value`` scalars, ``>``/``|`` blocks, indented
    continuation lines, inline ``[a, b]`` and ``- item`` lists, one level of nested
    ``key: value`` maps) and the body after it."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillError(f"{where}: a SKILL.md must start with '---' front matter (name, description)")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise SkillError(f"{where}: the front matter has no closing '---'")
    data: dict[str, Any] = {}
    key: str | None = None
    block: list[str] = []
    style = ""

    def finish() -> None:
        if key is not None and style:
            data[key] = ("\n" if style == "|" else " ").join(b for b in block if b or style == "|").strip()

    for number, raw in enumerate(lines[1:end], start=2):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and not style):
            if style == "|":
                block.append("")
            continue
        if line[:1].isspace() and key is not None:
            current = data.get(key)
            if style:
                block.append(stripped)
            elif stripped.startswith("- ") and (current in ("", None) or isinstance(current, list)):
                data[key] = [*(current or []), _scalar(stripped[2:])]
            elif isinstance(current, dict) or (current == "" and ":" in stripped):
                sub, _, value = stripped.partition(":")
                data[key] = {**(current or {}), sub.strip(): _scalar(value)}
            elif isinstance(current, str):
                data[key] = f"{current} {_scalar(stripped)}".strip()
            continue
        if stripped.startswith("- ") and key is not None and data.get(key) in ("", []):
            data[key] = [*(data[key] or []), _scalar(stripped[2:])]
            continue
        finish()
        style = ""
        block = []
        if ":" not in line or line[:1].isspace():
            raise SkillError(f"{where}:{number}: expected 'key: value', got {stripped!r}")
        key, _, value = line.partition(":")
        key = key.strip()
        value = value.strip()
        if value in (">", "|", ">-", "|-", ">+", "|+"):
            style = value[0]
            data[key] = ""
        elif value.startswith("[") and value.endswith("]"):
            data[key] = [_scalar(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            data[key] = _scalar(value)
    finish()
    body = "\n".join(lines[end + 1 :]).strip()
    return data, body


def parse_skill(text: str, *, source: str = "<SKILL.md>", path: Path | None = None, origin: str = "code") -> Skill:
    """A :class:`Skill` from a ``SKILL.md`` text::

        ---
        name: pdf-forms
        description: Fill in PDF forms. Use when the user gives a PDF with form fields.
        ---
        # Filling PDF forms
        Run `python scripts/fill.py FORM.pdf VALUES.json` ...

    ``name`` (lowercase letters, digits, hyphens; at most 64) and ``description`` (at
    most 1024 characters) are required; a key the format does not have is kept in
    ``warnings``. Raises :class:`SkillError` (one line naming ``source`` and the field)."""
    data, body = parse_front_matter(text, source)
    name = data.get("name")
    _check_name(name, source)
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{source}: 'description' is missing from the front matter")
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(f"{source}: 'description' is {len(description)} characters long; at most {MAX_DESCRIPTION}")
    if "model" in data and not isinstance(data["model"], str):
        raise SkillError(f"{source}: 'model' must be a string (provider:id), got {data['model']!r}")
    if "allowed-tools" in data and not isinstance(data["allowed-tools"], (str, list)):
        raise SkillError(f"{source}: 'allowed-tools' must be a list or a comma-separated string")
    unknown = [k for k in data if k not in KNOWN_FIELDS]
    warnings = tuple(
        f"{source}: unknown front matter key {k!r} ignored; known: {', '.join(KNOWN_FIELDS)}" for k in unknown
    )
    fields = tuple((k, v) for k, v in data.items() if k not in ("name", "description"))
    assert isinstance(name, str)
    return Skill(name, description.strip(), body, path, origin, fields, warnings)


def load_skill(folder: str | Path, *, origin: str = "code", within: str | Path | None = None) -> Skill:
    """The skill of ``folder`` (its ``SKILL.md``); :class:`SkillError` when it is
    missing, unreadable or invalid. A ``name`` other than the folder's name is an error
    (the format requires them to match). ``SKILL.md`` is read only as a regular file that
    is not a symbolic link, and with ``within`` only when its real path is in that folder."""
    directory = Path(folder)
    file = directory / SKILL_FILE
    try:
        text = read_regular_text(file, within_root=None if within is None else str(within))
    except UnicodeDecodeError:
        raise SkillError(f"{file}: cannot read the skill (not UTF-8 text)") from None
    except OSError as exc:
        raise SkillError(f"{file}: cannot read the skill ({exc.strerror or exc})") from None
    skill = parse_skill(text, source=str(file), path=directory, origin=origin)
    if skill.name != directory.name:
        raise SkillError(f"{file}: 'name' {skill.name!r} must match the folder's name {directory.name!r}")
    return skill


def find_skills(
    directories: Iterable[tuple[str | Path, str]], *, within: str | Path | None = None
) -> tuple[list[Skill], list[str]]:
    """The skills of the folders inside each ``(directory, origin)`` (missing ones are
    skipped; a later directory's skill replaces an earlier one of the same name), sorted
    by name, and one error line per bad ``SKILL.md`` (left out). With ``within``, a
    ``SKILL.md`` whose real path leaves that folder is a bad one."""
    found: dict[str, Skill] = {}
    errors: list[str] = []
    for directory, origin in directories:
        d = Path(directory)
        if not d.is_dir():
            continue
        for folder in sorted(p for p in d.iterdir() if (p / SKILL_FILE).is_file()):
            try:
                skill = load_skill(folder, origin=origin, within=within)
            except SkillError as exc:
                errors.append(str(exc))
                continue
            found[skill.name] = skill
    return [found[n] for n in sorted(found)], errors


INSTRUCTIONS_HEADER = (
    "# Skills\n\n"
    f"These skills are available. When a task matches a skill's description, call the `{SKILL_TOOL}` tool "
    "with its name to load its instructions first, then follow them; read the files they name from the "
    "skill's folder with the file tools.\n"
)


class Skills(Capability):
    """Agent Skills for an agent: ``Agent(model, capabilities=[Skills(skills)])`` (or
    ``Agent(model, skills=[...])``).

    ``skills`` are :class:`Skill` values (``load_skill``, ``find_skills``, ``parse_skill``
    or built in code); a name given twice is an error. Each run's system prompt gets one
    line per skill (name and description, sorted by name) and the agent gets the ``skill`` tool, which
    returns a skill's body and its folder. With no skills it contributes nothing.

    Once the model loads a skill, the skill is active until the run ends:

    - its ``model`` front matter is the model of the run's next turns (resolved with
      ``resolve_model``, default :func:`ketch.llm.get_model`; a spec that cannot be
      resolved is said in the tool's result and the run keeps its model);
    - its ``allowed-tools`` are handed to ``grant`` (called with the rules of every
      skill active in the run, and with ``()`` when a run starts): give a function that
      makes them allow rules of your permission gate (the ``ketch`` command adds them to
      its permission engine's session rules). Without ``grant`` they are not applied.
    """

    name = "skills"

    def __init__(
        self,
        skills: Sequence[Skill] = (),
        *,
        grant: Callable[[tuple[str, ...]], None] | None = None,
        resolve_model: Callable[[str], Any] | None = None,
    ) -> None:
        by_name: dict[str, Skill] = {}
        for skill in skills:
            if not isinstance(skill, Skill):
                raise TypeError(f"Skills: expected Skill objects, got {type(skill).__name__}")
            if skill.name in by_name:
                raise ValueError(f"Skills: the skill name {skill.name!r} is given twice")
            by_name[skill.name] = skill
        self.skills: dict[str, Skill] = {n: by_name[n] for n in sorted(by_name)}
        self.grant = grant
        self.resolve_model = resolve_model
        self._instructions = self.instructions() if self.skills else ""

    def instructions(self) -> str:
        """The system prompt section: the header and one ``- name: description`` line each."""
        lines = [f"- {s.name}: {' '.join(s.description.split())}" for s in self.skills.values()]
        return INSTRUCTIONS_HEADER + "\n" + "\n".join(lines)

    def contribute(self) -> Contribution:
        """The skills' section of the system prompt and the ``skill`` tool (per run: the
        skills the run loads are active until it ends)."""
        if not self.skills:
            return Contribution()
        if self.grant is not None:
            self.grant(())
        return _Run(self).contribution()


class _Run:
    """One run's skills: which are active, and the model a loaded skill asks for."""

    __slots__ = ("active", "model", "owner")

    def __init__(self, owner: Skills) -> None:
        self.owner = owner
        self.active: list[Skill] = []
        self.model: Any = None

    def contribution(self) -> Contribution:
        tool = Tool(
            SKILL_TOOL,
            "Load a skill's instructions by name (the skills are listed in the system prompt).",
            {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "The skill's name"}},
                "required": ["name"],
                "additionalProperties": False,
            },
            self.load,
            read_only=True,
            reports_progress=False,
            deferred=False,
        )
        return Contribution(tools=[tool], instructions=self.owner._instructions, next_turn=[self.next_turn])

    def next_turn(self, info: TurnInfo) -> NextTurn | None:
        model, self.model = self.model, None
        return NextTurn(model=model) if model is not None else None

    async def load(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        owner = self.owner
        name = args.get("name")
        skill = owner.skills.get(name) if isinstance(name, str) else None
        if skill is None:
            return ToolResult.error(f"no skill named {name!r}; available: {', '.join(sorted(owner.skills))}")
        head = f"# Skill: {skill.name}\n"
        if skill.path is not None:
            head += f"Base directory: {skill.path} (read its files with the file tools; run its scripts with bash)\n"
        if skill not in self.active:
            self.active.append(skill)
            if skill.allowed_tools and owner.grant is not None:
                owner.grant(tuple(r for s in self.active for r in s.allowed_tools))
                head += f"Allowed without asking for the rest of this task: {', '.join(skill.allowed_tools)}\n"
            if skill.model is not None:
                try:
                    if owner.resolve_model is not None:
                        self.model = owner.resolve_model(skill.model)
                    else:
                        from ..llm import get_model

                        self.model = get_model(skill.model)
                    head += f"Model for the rest of this task: {skill.model}\n"
                except Exception as exc:  # a bad spec: the run keeps its model
                    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    head += f"The skill's model {skill.model!r} cannot be used ({first}); the model stays\n"
        return ToolResult(content=f"{head}\n{skill.body}", details={"skill": skill.name})


def with_skills(capabilities: Iterable[Any], items: Iterable[Skill | str | os.PathLike[str]]) -> tuple[Any, ...]:
    """``capabilities`` with the skills of ``Agent(skills=[...])`` (:func:`skills_of`): they
    join the first :class:`Skills` capability given (one ``skill`` tool), else a new one is
    appended."""
    given = tuple(capabilities)
    added = skills_of(items)
    for i, cap in enumerate(given):
        if isinstance(cap, Skills):
            return (*given[:i], Skills([*cap.skills.values(), *added.skills.values()]), *given[i + 1 :])
    return (*given, added)


def skills_of(items: Iterable[Skill | str | os.PathLike[str]]) -> Skills:
    """The :class:`Skills` capability of ``Agent(skills=[...])``: each item a :class:`Skill`,
    or a folder path, either a skill's own folder (it holds a ``SKILL.md``) or a folder of
    skill folders (each of its sub-folders with a ``SKILL.md``). Raises :class:`SkillError`
    for a bad ``SKILL.md`` or a path that holds none, ``TypeError`` for another value and
    ``ValueError`` for a name given twice."""
    found: list[Skill] = []
    for item in items:
        if isinstance(item, Skill):
            found.append(item)
            continue
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"skills: expected Skill objects or folder paths, got {type(item).__name__}")
        folder = Path(item)
        if (folder / SKILL_FILE).is_file():
            found.append(load_skill(folder))
            continue
        inside, errors = find_skills([(folder, "code")])
        if errors:
            raise SkillError(errors[0])
        if not inside:
            raise SkillError(f"skills: {str(folder)!r} holds no {SKILL_FILE}, nor do its sub-folders")
        found.extend(inside)
    return Skills(found)
