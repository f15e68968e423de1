"""The user's folders the command reads: its config directory and the home directory
(whose ``.claude/`` holds the user's Claude Code skills and commands)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .._paths import xdg_dir


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The user config directory: ``$XDG_CONFIG_HOME/ketch`` (an absolute path) or
    ``~/.config/ketch``."""
    return xdg_dir("XDG_CONFIG_HOME", ".config", os.environ if environ is None else environ) / "ketch"


def user_home(environ: Mapping[str, str] | None = None) -> Path:
    """The home directory (``HOME``), whose ``.claude/`` holds the user's Claude Code skills
    and commands."""
    env = os.environ if environ is None else environ
    return Path(env.get("HOME") or str(Path.home()))
