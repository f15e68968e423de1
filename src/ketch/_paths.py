"""Paths: how a path a model wrote names a file of the workspace, shared by the workspace
tools (:mod:`ketch.tools._workspace`), the permission rules (:mod:`ketch.permissions._rules`)
and the protected-path check (:mod:`ketch.sandbox._policy`), so the permission layer
judges the file a tool will touch; the path-pattern syntax of the permission rules, the
sandbox and the workspace's own check (:func:`glob_regex`, :func:`expand_pattern`,
:func:`names_path`, :func:`could_contain`); and the XDG base directories
the sessions and the command keep their files in. It imports nothing of ketch."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

GLOB_CHARS = frozenset("*?[")
_KERNEL_FOLDERS = frozenset({"/proc", "/sys", "/dev"})  # no user files; a pattern searches past them


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


@lru_cache(maxsize=512)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """The regex of a path pattern: ``*`` and ``?`` within one name, ``[…]`` (``[!…]``
    negated), ``**/`` any number of folders, ``**`` anything below."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 1)
            body = pattern[i + 1 : end] if end > 0 else ""
            # "[" and "\\" in a set are themselves (a glob has no escapes)
            body = body.replace("\\", "\\\\").replace("[", "\\[")
            if body.startswith("!"):
                body = "^" + body[1:]
            # "[", "[]", "[z-a]", and a set holding "/" (a name never does): the characters themselves
            if end < 0 or "/" in body or not _valid_set(body):
                out.append(re.escape(c))
                i += 1
            else:
                out.append(f"[{body}]")
                i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def _valid_set(body: str) -> bool:
    try:
        re.compile(f"[{body}]")
    except re.error:
        return False
    return True


_ESCAPED = re.compile(r"\[([*?\[])\]")


def glob_escape(path: str) -> str:
    """``path`` as a pattern naming just it: ``*``, ``?`` and ``[`` written as ``[*]``,
    ``[?]`` and ``[[]`` (a workspace folder named ``proj[1]`` is no character set)."""
    return re.sub(r"([*?\[])", r"[\1]", path) if GLOB_CHARS.intersection(path) else path


def absolute_patterns(items: Iterable[str | os.PathLike[str]], root: str | os.PathLike[str]) -> tuple[str, ...]:
    """Path patterns made absolute: ``~/…`` from the home folder, a relative one from
    ``root``, both taken literally (:func:`glob_escape`); an absolute one as it is."""
    base = glob_escape(os.fspath(root))
    out: list[str] = []
    for item in items:
        text = os.fspath(item)
        if text == "~" or text.startswith("~/"):
            text = glob_escape(os.path.expanduser("~")) + text[1:]
        out.append(os.path.normpath(os.path.join(base, text)))
    return tuple(dict.fromkeys(out))


def _first_wildcard(pattern: str) -> int:
    """The index of the pattern's first wildcard that is not an escaped character, -1 without."""
    i = 0
    while True:
        found = min((j for j in (pattern.find(c, i) for c in "*?[") if j >= 0), default=-1)
        if found < 0 or not _ESCAPED.match(pattern, found):
            return found
        i = found + 3


def has_wildcard(pattern: str) -> bool:
    """Whether ``pattern`` has a wildcard (an escaped character, ``[*]``, is none)."""
    return bool(GLOB_CHARS.intersection(pattern)) and _first_wildcard(pattern) >= 0


def _unescape(text: str) -> str:
    return _ESCAPED.sub(r"\1", text) if "[" in text else text


def pattern_base(pattern: str) -> str:
    """The deepest path every path an absolute pattern names is or lies under: the pattern
    itself without wildcards, else the folder before the first wildcard (as a path:
    escaped characters written out)."""
    cut = _first_wildcard(pattern) if GLOB_CHARS.intersection(pattern) else -1
    if cut < 0:
        return _unescape(pattern)
    return _unescape(pattern[: pattern.rfind("/", 0, cut)]) or "/"


def resolve_base(pattern: str) -> str:
    """An absolute pattern with its part before the first wildcard resolved (symlinks),
    as the paths it is matched against are: ``/home/me/proj/.env`` names the workspace's
    ``.env`` also when ``proj`` is a link to the real folder."""
    base = pattern_base(pattern)
    real = os.path.realpath(base)
    if real == base:
        return pattern
    escaped = glob_escape(base)
    rest = pattern[len(escaped) :].lstrip("/") if pattern.startswith(escaped) else ""
    return os.path.join(glob_escape(real), rest) if rest else glob_escape(real)


def names_path(pattern: str, path: str) -> bool:
    """Whether the absolute ``pattern`` names ``path`` (absolute, normalised) or a folder
    above it (a named folder stands for everything below it; ``X/**`` names ``X``)."""
    if pattern.endswith("/**"):
        pattern = pattern[:-3] or "/"
    if not has_wildcard(pattern):
        return within(path, _unescape(pattern))
    regex = glob_regex(pattern)
    while True:
        if regex.fullmatch(path):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def could_contain(pattern: str, folder: str) -> bool:
    """Whether something below ``folder`` (in the pattern's form: both absolute, or both
    relative to one root) may match ``pattern``: each of the folder's names matches the
    pattern's name at its place, and the pattern goes deeper (``s*/secret`` may match
    below ``sub``; ``*.pem`` nothing below ``sub``)."""
    if folder in (".", "/"):
        return True
    parts = pattern.split("/")
    names = folder.rstrip("/").split("/")
    if len(names) >= len(parts) and "**" not in pattern:
        return False
    for name, part in zip(names, parts, strict=False):
        if "**" in part:  # spans folders from here: only what comes before it must match
            return glob_regex(part[: part.index("**")] + "*").fullmatch(name) is not None
        if not glob_regex(part).fullmatch(name):
            return False
    return True


def expand_pattern(pattern: str) -> list[str]:
    """The existing paths an absolute path pattern (:func:`glob_regex`) names, the
    top-most of each subtree only (a matching folder stands for everything below it);
    ``X/**`` names the folder ``X`` itself. Symlinks are listed, never followed while
    searching, nor ``/proc``, ``/sys`` and ``/dev``. Hidden names count like any other.

    A folder that cannot be searched (``chmod 000``) may hold what the pattern names, so
    it is named itself: whoever hides or protects the paths fails closed."""
    if pattern.endswith("/**"):
        pattern = pattern[:-3] or "/"
    pattern = os.path.normpath(pattern)
    if not has_wildcard(pattern):
        reached = _reach(_unescape(pattern))
        return [] if reached is None else [reached]
    regex = glob_regex(pattern)
    depth = None if "**" in pattern else pattern.count("/")
    found: list[str] = []
    pending = [pattern_base(pattern)]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            reached = _reach(folder)
            if reached is not None:
                found.append(reached)
            continue
        for entry in entries:
            path = entry.path
            if regex.fullmatch(path):
                found.append(path)
            elif (depth is None or path.count("/") < depth) and path not in _KERNEL_FOLDERS and _is_folder(entry):
                pending.append(path)
    return sorted(set(found))


_LINK_TARGETS: dict[str, tuple[str, ...]] = {}


def link_targets(pattern: str, *, search: bool = False) -> tuple[str, ...]:
    """Where the paths the absolute wildcard ``pattern`` names lead when a symlink is on
    the way (``/ws/**/keys/**`` with ``keys -> vault``: ``/ws/vault``), as real paths
    (no pattern: match them with :func:`within`); a sandbox hides and protects those, as
    it resolves what it hides.

    Searched (:func:`expand_pattern`: a walk, for a ``**``) at the pattern's first call
    and again with ``search``, which a new permission engine or workspace asks for, so
    links made or changed since count from then on. A link to the folder the pattern
    searches from or one above it (``keys -> ..``) is left out: it would name every file;
    so is a ``**`` searched from ``/``.
    Callers leave out a pattern whose ``**`` would search outside their workspace."""
    known = _LINK_TARGETS.get(pattern)
    if known is not None and not search:
        return known
    base = pattern_base(pattern)
    if base == "/" and "**" in pattern:  # a walk of the whole filesystem: not done
        return ()
    found: dict[str, None] = {}
    try:
        paths = expand_pattern(pattern)
    except ValueError:  # a name the system cannot take (NUL, a lone surrogate): none exists
        paths = []
    for path in paths:
        real = os.path.realpath(path)
        if real != path and not within(base, real):
            found[real] = None
    _LINK_TARGETS[pattern] = targets = tuple(found)
    return targets


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return True  # unknown: search it (an error there names it)


def _reach(path: str) -> str | None:
    """``path`` when it exists, None when it does not, else the deepest folder above it
    that exists (one that cannot be searched keeps the answer from us)."""
    try:
        os.lstat(path)
        return path
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        parent = os.path.dirname(path)
        return path if parent == path else _reach(parent) or parent


def xdg_dir(variable: str, fallback: str, environ: Mapping[str, str]) -> Path:
    """An XDG base directory: ``$variable`` when it holds an absolute path (the XDG spec
    ignores a relative one), else ``fallback`` under the home directory (``HOME``)."""
    value = environ.get(variable) or ""
    if os.path.isabs(value):
        return Path(value)
    return Path(environ.get("HOME") or str(Path.home())) / fallback


def read_regular_text(path: str | os.PathLike[str], limit: int = 256 * 1024, within_root: str | None = None) -> str:
    """The UTF-8 text of the regular file ``path``, read without following a link in its
    last component and without blocking on a FIFO or a device; with ``within_root``, only
    when its real path is inside that folder. Raises ``OSError`` naming why it may not be
    read (a link, not a regular file, outside the folder, longer than ``limit`` bytes)."""
    return read_regular_bytes(path, limit, within_root).decode("utf-8")


def read_regular_bytes(path: str | os.PathLike[str], limit: int, within_root: str | None = None) -> bytes:
    """The bytes of the regular file ``path``, read as :func:`read_regular_text` reads
    (no link in its last component, no FIFO or device, inside ``within_root``, at most
    ``limit`` bytes; else ``OSError`` naming why)."""
    if within_root is not None and not within(os.path.realpath(path), os.path.realpath(within_root)):
        raise OSError(f"{path} leads outside {within_root}")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a link
            raise OSError(f"{path} is a symbolic link") from None
        raise
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(f"{path} is longer than {limit} bytes")
    return data
