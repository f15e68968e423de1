"""What a project's folders bring that needs the project's trust: its agent files
(``.ketch/agents``), skills (``.claude/skills``, ``.agents/skills``, ``.ketch/skills``) and
custom commands (``.claude/commands``, ``.ketch/commands``). Loading settings passes each
through the trust gate (:mod:`ketch.cli._trust`); the command's subagents, skills and
commands (:mod:`ketch.cli._subagents`, :mod:`ketch.cli._skills`,
:mod:`ketch.cli._commands`) read them from here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..skills import Skill
from ..skills import find_skills
from ..subagents import SubagentFileError
from ..subagents import SubagentSpec
from ..subagents import load_agent_file
from ._trust import Gate

PROJECT_AGENTS = Path(".ketch") / "agents"
PROJECT_SKILLS: tuple[Path, ...] = (Path(".claude") / "skills", Path(".agents") / "skills", Path(".ketch") / "skills")
PROJECT_COMMANDS: tuple[Path, ...] = (Path(".claude") / "commands", Path(".ketch") / "commands")


def agent_fields(spec: SubagentSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}


def gated_agent(spec: SubagentSpec, path: Path, gate: Gate) -> SubagentSpec:
    """``spec`` of the project agent file ``path`` with the fields ``gate`` does not admit left out."""
    changes: dict[str, Any] = {}
    if spec.model is not None and not gate.admit(
        "agent.model", spec.model, path, label=f"model {spec.model} of agent {spec.name}"
    ):
        changes["model"] = None
    if spec.thinking is not None and not gate.admit(
        "agent.thinking", spec.thinking, path, label=f"thinking {spec.thinking} of agent {spec.name}"
    ):
        changes["thinking"] = None
    mode = spec.permission_mode
    if mode is not None and not gate.admit(
        "agent.permission_mode", mode, path, label=f"permission_mode {mode} of agent {spec.name}"
    ):
        changes["permission_mode"] = None
    return SubagentSpec(**{**agent_fields(spec), **changes}) if changes else spec


def project_agents(root: Path, gate: Gate) -> list[SubagentSpec]:
    """The project's agent files that load, each through ``gate`` (what it leaves out is
    listed in ``gate.ignored``); a bad file is skipped here (:func:`load_cli_agents`
    reports it)."""
    found = []
    for path in sorted((root / PROJECT_AGENTS).glob("*.md")):
        try:
            spec = load_agent_file(path)
        except SubagentFileError:
            continue
        found.append(gated_agent(spec, path, gate))
    return found


def project_skills(root: Path, gate: Gate) -> list[Skill]:
    """The project's skills ``gate`` admits (each folder of skills is one setting
    ``skills``, which needs trust; what it leaves out is listed in ``gate.ignored``)."""
    admitted: list[Skill] = []
    for directory in PROJECT_SKILLS:
        skills, _ = find_skills([(root / directory, "project")], within=root)
        if skills and gate.admit(
            "skills", [s.name for s in skills], root / directory, label=f"skills {', '.join(s.name for s in skills)}"
        ):
            admitted.extend(skills)
    return admitted


def command_files(directory: Path) -> list[tuple[str, Path]]:
    if not directory.is_dir():
        return []
    out = []
    for path in sorted(directory.rglob("*.md")):
        rel = path.relative_to(directory).with_suffix("")
        out.append((":".join(rel.parts), path))
    return out


def project_commands(root: Path, gate: Gate) -> None:
    """Pass the project's command folders through ``gate`` (each is one setting
    ``commands``, which needs trust; what it leaves out joins ``gate.ignored``)."""
    for directory in PROJECT_COMMANDS:
        names = [name for name, _ in command_files(root / directory)]
        if names:
            gate.admit("commands", names, root / directory, label=f"commands /{', /'.join(names)}")
