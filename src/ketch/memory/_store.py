"""Where memories are kept: the :class:`MemoryStore` protocol and the file-backed store.

A store sees only checked relative paths (``"notes/user.md"``; ``""`` is the memory
directory itself): the ``memory`` tool turns the model's ``/memories/...`` path into one
(:func:`memory_path`) before any store is asked, so a store never sees ``..``, an
absolute path or an empty component.

:class:`FileMemoryStore` keeps them as files under a root directory. It opens every
component of a path itself, relative to the one before and without following symbolic
links, so neither a path nor a link planted in the directory reaches a file outside it.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from typing import Protocol
from typing import runtime_checkable

import msgspec

from .._paths import xdg_dir

__all__ = [
    "MAX_MEMORY_FILE_BYTES",
    "FileMemoryStore",
    "MemoryEntry",
    "MemoryStore",
    "MemoryStoreError",
    "default_memory_dir",
    "memory_path",
    "scoped_memory_dir",
]

MAX_MEMORY_FILE_BYTES = 256 * 1024
"""Largest memory file the file store writes or reads."""

ROOT = "/memories"
"""The memory directory as the model names it."""

_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")


class MemoryStoreError(Exception):
    """A memory operation failed; the message (naming the ``/memories`` path) is what the
    model sees."""


class MemoryEntry(msgspec.Struct, frozen=True):
    """One entry of a memory folder: its name, whether it is a folder, its size in bytes."""

    name: str
    is_dir: bool
    size: int = 0


@runtime_checkable
class MemoryStore(Protocol):
    """Where the ``memory`` tool keeps files. Paths are checked relative paths (see the
    module docstring); a failure is a :class:`MemoryStoreError` saying what went wrong."""

    async def kind(self, path: str) -> Literal["file", "dir"] | None:
        """What ``path`` is, or None when nothing is there."""
        ...

    async def entries(self, path: str) -> list[MemoryEntry]:
        """The entries of the folder ``path`` (sorted by name; the root folder may be empty or missing)."""
        ...

    async def read(self, path: str) -> str:
        """The text of the file ``path``."""
        ...

    async def write(self, path: str, text: str) -> None:
        """Write the file ``path`` (replacing it; its folders are created)."""
        ...

    async def delete(self, path: str) -> None:
        """Delete the file or folder (with what is in it) ``path``."""
        ...

    async def rename(self, old: str, new: str) -> None:
        """Move ``old`` to ``new``, which must not exist (its folders are created)."""
        ...


def shown(path: str) -> str:
    """How the model names a relative memory path."""
    return f"{ROOT}/{path}" if path else ROOT


def memory_path(text: object) -> str:
    """The relative store path for the model's ``text`` (``/memories/a/b.md`` ->
    ``a/b.md``); a :class:`MemoryStoreError` when it is not inside ``/memories``."""
    if not isinstance(text, str) or not text:
        raise MemoryStoreError(f"path must be a path inside {ROOT}, got {text!r}")
    if "\x00" in text or "\\" in text:
        raise MemoryStoreError(f"invalid memory path {text!r}: NUL and backslash are not allowed")
    if text.rstrip("/") == ROOT:
        return ""
    if not text.startswith(ROOT + "/"):
        raise MemoryStoreError(f"invalid memory path {text!r}: memory paths start with {ROOT}/")
    parts = text[len(ROOT) + 1 :].rstrip("/").split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise MemoryStoreError(f"invalid memory path {text!r}: empty, '.' and '..' components are not allowed")
        if len(part.encode()) > 255:
            raise MemoryStoreError(f"invalid memory path {text!r}: a name longer than 255 bytes")
    return "/".join(parts)


def default_memory_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the command keeps memories: ``$XDG_DATA_HOME/ketch/memory``
    (``~/.local/share/ketch/memory``)."""
    return xdg_dir("XDG_DATA_HOME", ".local/share", os.environ if environ is None else environ) / "ketch" / "memory"


def scoped_memory_dir(base: str | os.PathLike[str], *, user: str, project: str | os.PathLike[str] | None = None) -> Path:
    """The memory directory of ``user`` in ``project`` under ``base``:
    ``base/<user>/<project name>-<hash of its resolved path>`` (``base/<user>/global``
    without a project). ``user`` is a plain name (letters, digits, ``.``, ``_``, ``-``)."""
    if not isinstance(user, str) or not _USER.match(user):
        raise ValueError(f"memory user {user!r}: use 1-64 letters, digits, '.', '_' or '-' (not starting with '.' or '-')")
    if project is None:
        return Path(base) / user / "global"
    resolved = Path(project).expanduser().resolve()
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", resolved.name)[:40].lstrip(".") or "root"
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:12]
    return Path(base) / user / f"{slug}-{digest}"


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class FileMemoryStore:
    """Memories as files under ``root`` (created, mode 0700, when first written).

    Every path is walked one component at a time from ``root``, each opened without
    following a symbolic link: a link anywhere in a path is refused, and so is anything
    but a regular file or folder. Files are written atomically (a temporary file renamed
    over the old one) and at most :data:`MAX_MEMORY_FILE_BYTES` long.
    """

    __slots__ = ("max_bytes", "root")

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = MAX_MEMORY_FILE_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    def __repr__(self) -> str:
        return f"FileMemoryStore({str(self.root)!r})"

    # -- the protocol ------------------------------------------------------------------

    async def kind(self, path: str) -> Literal["file", "dir"] | None:
        return await asyncio.to_thread(self._kind, path)

    async def entries(self, path: str) -> list[MemoryEntry]:
        return await asyncio.to_thread(self._entries, path)

    async def read(self, path: str) -> str:
        return await asyncio.to_thread(self._read, path)

    async def write(self, path: str, text: str) -> None:
        await asyncio.to_thread(self._write, path, text)

    async def delete(self, path: str) -> None:
        await asyncio.to_thread(self._delete, path)

    async def rename(self, old: str, new: str) -> None:
        await asyncio.to_thread(self._rename, old, new)

    # -- the walk ----------------------------------------------------------------------

    def _open_root(self, create: bool) -> int | None:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                return None
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _folder(self, parts: list[str], path: str, create: bool = False) -> int | None:
        """A descriptor of the folder ``parts`` (None: it does not exist)."""
        fd = self._open_root(create)
        if fd is None:
            return None
        for i, part in enumerate(parts):
            try:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        return None
                    os.mkdir(part, 0o700, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                where = shown("/".join(parts[: i + 1]))
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    mode = os.lstat(part, dir_fd=fd).st_mode
                    what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
                    raise MemoryStoreError(f"{where} is {what}; {shown(path)} cannot be used") from None
                raise MemoryStoreError(f"cannot open {where}: {exc.strerror or exc}") from None
            finally:
                os.close(fd)
            fd = child
        return fd

    def _split(self, path: str) -> tuple[list[str], str]:
        parts = path.split("/") if path else []
        return parts[:-1], parts[-1] if parts else ""

    def _kind(self, path: str) -> Literal["file", "dir"] | None:
        if not path:
            return "dir"
        parents, name = self._split(path)
        fd = self._folder(parents, path)
        if fd is None:
            return None
        try:
            mode = os.lstat(name, dir_fd=fd).st_mode
        except FileNotFoundError:
            return None
        finally:
            os.close(fd)
        if stat.S_ISDIR(mode):
            return "dir"
        if stat.S_ISREG(mode):
            return "file"
        raise MemoryStoreError(f"{shown(path)} is {_special(mode)}, not a memory file")

    def _entries(self, path: str) -> list[MemoryEntry]:
        fd = self._folder(path.split("/") if path else [], path)
        if fd is None:
            if not path:
                return []
            raise MemoryStoreError(f"{shown(path)} does not exist")
        try:
            entries: list[MemoryEntry] = []
            with os.scandir(fd) as it:
                for entry in it:
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
                        entries.append(MemoryEntry(entry.name, stat.S_ISDIR(info.st_mode), info.st_size))
            return sorted(entries, key=lambda e: e.name)
        finally:
            os.close(fd)

    def _read(self, path: str) -> str:
        parents, name = self._split(path)
        fd = self._folder(parents, path)
        if fd is None:
            raise MemoryStoreError(f"{shown(path)} does not exist")
        try:
            try:
                file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                raise MemoryStoreError(f"{shown(path)} does not exist") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise MemoryStoreError(f"{shown(path)} is a symbolic link, not a memory file") from None
                raise MemoryStoreError(f"cannot read {shown(path)}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        with open(file, "rb", closefd=True) as f:
            mode = os.fstat(f.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise MemoryStoreError(f"{shown(path)} is a folder")
            if not stat.S_ISREG(mode):
                raise MemoryStoreError(f"{shown(path)} is {_special(mode)}, not a memory file")
            data = f.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            raise MemoryStoreError(f"{shown(path)} is larger than {self.max_bytes} bytes")
        return data.decode("utf-8", errors="replace")

    def _write(self, path: str, text: str) -> None:
        data = text.encode("utf-8", errors="surrogatepass")
        if len(data) > self.max_bytes:
            raise MemoryStoreError(f"{shown(path)}: {len(data)} bytes is more than a memory file may hold ({self.max_bytes})")
        parents, name = self._split(path)
        fd = self._folder(parents, path, create=True)
        assert fd is not None
        try:
            try:
                mode = os.lstat(name, dir_fd=fd).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and stat.S_ISDIR(mode):
                raise MemoryStoreError(f"{shown(path)} is a folder")
            temp = f".{name[:200]}.{os.getpid()}.tmp"
            try:
                out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
                with open(out, "wb", closefd=True) as f:
                    f.write(data)
                # a link at ``name`` is replaced, not followed
                os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except OSError as exc:
                try:
                    os.unlink(temp, dir_fd=fd)
                except OSError:
                    pass
                raise MemoryStoreError(f"cannot write {shown(path)}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def _delete(self, path: str) -> None:
        if not path:
            raise MemoryStoreError(f"{ROOT} itself cannot be deleted")
        parents, name = self._split(path)
        fd = self._folder(parents, path)
        if fd is None:
            raise MemoryStoreError(f"{shown(path)} does not exist")
        try:
            try:
                mode = os.lstat(name, dir_fd=fd).st_mode
            except FileNotFoundError:
                raise MemoryStoreError(f"{shown(path)} does not exist") from None
            try:
                if stat.S_ISDIR(mode):
                    shutil.rmtree(name, dir_fd=fd)  # does not follow links inside
                else:  # a file, or a link (removed itself, never its target)
                    os.unlink(name, dir_fd=fd)
            except OSError as exc:
                raise MemoryStoreError(f"cannot delete {shown(path)}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def _rename(self, old: str, new: str) -> None:
        if not old or not new:
            raise MemoryStoreError(f"{ROOT} itself cannot be renamed")
        if new == old or new.startswith(old + "/"):
            raise MemoryStoreError(f"cannot move {shown(old)} into itself")
        if self._kind(old) is None:
            raise MemoryStoreError(f"{shown(old)} does not exist")
        if self._kind(new) is not None:
            raise MemoryStoreError(f"{shown(new)} already exists")
        old_parents, old_name = self._split(old)
        new_parents, new_name = self._split(new)
        src = self._folder(old_parents, old)
        assert src is not None
        try:
            dst = self._folder(new_parents, new, create=True)
            assert dst is not None
            try:
                os.rename(old_name, new_name, src_dir_fd=src, dst_dir_fd=dst)
            except OSError as exc:
                raise MemoryStoreError(f"cannot rename {shown(old)} to {shown(new)}: {exc.strerror or exc}") from None
            finally:
                os.close(dst)
        finally:
            os.close(src)


def _special(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"
