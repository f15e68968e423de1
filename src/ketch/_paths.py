"""Paths: how a path a model wrote names a file of the workspace, shared by the workspace
tools (:mod:`ketch.tools._workspace`), the permission rules (:mod:`ketch.permissions._rules`)
and the protected-path check (:mod:`ketch.sandbox._policy`), so the permission layer
judges the file a tool will touch; and the XDG base directories the sessions and the
command keep their files in. It imports nothing of ketch."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies below it (both absolute and normalised)."""
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


def join_in_root(root: str, path: str) -> str:
    """``path`` taken from the workspace ``root`` (absolute, ``~`` expanded, not normalised).

    A path that does not exist and starts with the root's own folder name (``myproj/src``
    or ``/myproj/src`` for the root ``/x/myproj``, as models often write it) is that path
    inside the root, unless the root has an entry of that name or ``/myproj`` exists.
    """
    expanded = os.path.expanduser(path)
    joined = os.path.join(root, expanded)
    if os.path.lexists(os.path.normpath(joined)):
        return joined
    return _by_root_name(root, expanded) or joined


def _by_root_name(root: str, path: str) -> str | None:
    parts = os.path.normpath(path).split(os.sep)
    if parts and parts[0] == "":  # absolute: only a single leading name is a candidate
        parts = parts[1:]
        if not parts or os.path.lexists(os.sep + parts[0]):
            return None
    name = os.path.basename(root.rstrip(os.sep))
    if not parts or not parts[0] or parts[0] != name:
        return None
    if os.path.lexists(os.path.join(root, parts[0])):  # a real entry of that name wins
        return None
    return os.path.normpath(os.path.join(root, *parts[1:]))


def xdg_dir(variable: str, fallback: str, environ: Mapping[str, str]) -> Path:
    """An XDG base directory: ``$variable`` when it holds an absolute path (the XDG spec
    ignores a relative one), else ``fallback`` under the home directory (``HOME``)."""
    value = environ.get(variable) or ""
    if os.path.isabs(value):
        return Path(value)
    return Path(environ.get("HOME") or str(Path.home())) / fallback
