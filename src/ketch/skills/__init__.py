"""Agent Skills (``SKILL.md`` folders) as a capability: see :mod:`ketch.skills._skill`."""

from ._skill import SKILL_FILE
from ._skill import SKILL_TOOL
from ._skill import Skill
from ._skill import SkillError
from ._skill import Skills
from ._skill import find_skills
from ._skill import load_skill
from ._skill import parse_front_matter
from ._skill import parse_skill
from ._skill import split_tools

__all__ = ["SKILL_FILE", "SKILL_TOOL", "Skill", "SkillError", "Skills", "find_skills", "load_skill", "parse_front_matter", "parse_skill", "split_tools"]
