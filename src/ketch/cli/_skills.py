"""Agent Skills in the ``ketch`` command: where they are found, trust, ``ketch skills list``.

Skills (folders with a ``SKILL.md``, see :mod:`ketch.skills`) are read from, in order
(a later folder's skill replaces an earlier one of the same name):

1. ``~/.claude/skills/`` (the user's Claude Code skills), then ``<user config dir>/skills/``
   (``~/.config/ketch/skills/``): the user's own;
2. the enabled plugins' ``skills/`` (:mod:`ketch.cli._plugins`);
3. the project root's ``.claude/skills/``, ``.agents/skills/`` and ``.ketch/skills/``
   (the folders other agents use, then ketch's own).

A project's skills need the project's trust (:mod:`ketch.cli._trust`): in an untrusted
project they are not loaded, and the command names them in its one line about ignored
settings. A bad ``SKILL.md`` is left out with one warning line on stderr naming the file
and the field; so is a front matter key the format does not have.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..skills import Skill
from ..skills import find_skills
from ._config import Settings
from ._dirs import config_dir
from ._dirs import user_home
from ._plugins import plugin_directories
from ._project import PROJECT_SKILLS
from ._trust import Trust

USER_SKILLS = "skills"


def skill_directories(settings: Settings, environ: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """Where skills are read from, in order, each with its origin (``user``, ``project``)."""
    dirs = [
        (user_home(environ) / ".claude" / "skills", "user"),
        (config_dir(environ) / USER_SKILLS, "user"),
        *plugin_directories("skills", environ),
    ]
    if settings.project_root is not None:
        dirs.extend((settings.project_root / d, "project") for d in PROJECT_SKILLS)
    return dirs


def load_cli_skills(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> tuple[list[Skill], list[str]]:
    """The skills of the user's and (when trusted) the project's folders, sorted by name,
    and the warning lines (bad files, unknown keys)."""
    trust = settings.trust if settings.trust is not None else Trust(settings.project_root or Path.cwd())
    found: dict[str, Skill] = {}
    warnings: list[str] = []
    for directory, origin in skill_directories(settings, environ):
        if origin == "project" and not trust.covers(directory):
            continue  # named in the ignored-settings line already (project_skills)
        # a project's, or a plugin's, own files only
        within = settings.project_root if origin == "project" else directory.parent if origin.startswith("plugin ") else None
        skills, errors = find_skills([(directory, origin)], within=within)
        warnings.extend(f"ketch: skill left out: {e}" for e in errors)
        for skill in skills:
            bad = _bad_rules(skill)
            if bad is not None:
                warnings.append(f"ketch: skill left out: {bad}")
                continue
            warnings.extend(f"ketch: {w}" for w in skill.warnings)
            found[skill.name] = skill
    return [found[n] for n in sorted(found)], warnings


def _bad_rules(skill: Skill) -> str | None:
    """Why the skill's ``allowed-tools`` are not permission rules (None when they are)."""
    if not skill.allowed_tools:
        return None
    from ..permissions import parse_rules

    try:
        parse_rules(skill.allowed_tools)
    except ValueError as exc:
        where = skill.path / "SKILL.md" if skill.path is not None else skill.name
        return f"{where}: 'allowed-tools': {exc}"
    return None


def skills_capability(
    settings: Settings,
    resolve_model: Callable[[str], Any],
    environ: Mapping[str, str] | None = None,
    permissions: Any = None,
) -> object | None:
    """The :class:`ketch.skills.Skills` capability of the found skills (warnings go to
    stderr), or None when there are none. A loaded skill's ``allowed-tools`` become allow
    rules of ``permissions`` (a :class:`~ketch.permissions.PermissionEngine`) until the
    run ends (deny rules still win); its ``model`` (``provider:id``, resolved by
    ``resolve_model`` as ``--model`` is) is the model of the run's later turns."""
    skills, warnings = load_cli_skills(settings, environ)
    for line in warnings:
        print(line, file=sys.stderr)
    if not skills:
        return None
    from ..permissions import parse_rules
    from ..skills import Skills
    granted: list[Any] = []

    def grant(rules: tuple[str, ...]) -> None:
        if permissions is None:
            return
        kept = [r for r in permissions.session_rules if not any(r is g for g in granted)]
        granted[:] = parse_rules(rules, "skill")
        permissions.session_rules[:] = [*kept, *granted]

    return Skills(skills, grant=grant, resolve_model=resolve_model)


def _where(skill: Skill) -> str:
    return str(skill.path) if skill.path is not None else skill.source


def skills_command(argv: Sequence[str]) -> int:
    """``ketch skills list [--json]``: the skills found, their origin and folder."""
    import json

    from ._args import OneLineParser
    from ._config import ConfigError
    from ._config import load_settings

    parser = OneLineParser(prog="ketch skills", description="Agent Skills (SKILL.md folders) ketch finds")
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="the skills found and where from")
    listing.add_argument("--json", action="store_true", help="one JSON object per skill")
    listing.add_argument("-C", "--cwd", help="the project directory (default: the current one)")
    listing.add_argument("--trust-project", action="store_true", help="read the project's skills (they need trust)")
    args = parser.parse_args(list(argv))
    cwd = Path(args.cwd) if args.cwd else Path.cwd()
    try:
        settings = load_settings(cwd, trust=args.trust_project)
    except ConfigError as exc:
        print(f"ketch: {exc}", file=sys.stderr)
        return 2
    skills, warnings = load_cli_skills(settings)
    for line in warnings:
        print(line, file=sys.stderr)
    if settings.ignored_line:
        print(settings.ignored_line, file=sys.stderr)
    if args.json:
        for s in skills:
            print(json.dumps({"name": s.name, "description": s.description, "origin": s.source, "path": _where(s)}))
        return 0
    if not skills:
        print("no skills found (looked in: " + ", ".join(str(d) for d, _ in skill_directories(settings)) + ")")
        return 0
    for s in skills:
        print(f"{s.name}  [{s.source}] {_where(s)}\n    {' '.join(s.description.split())}")
    return 0
