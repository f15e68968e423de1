"""The bubblewrap (``bwrap``) sandbox for Linux."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

from .._paths import expand_pattern
from .._paths import glob_escape
from .._paths import has_wildcard
from .._paths import pattern_base
from .._paths import within
from ._policy import SandboxPolicy
from ._policy import with_git_dir

_PROBE_TIMEOUT = 15.0
_SANDBOX_TMP = "/tmp"


_empty: list[str] = []


def _empty_file() -> str:
    """An empty read-only file of this process, bound over hidden files."""
    if not _empty or not os.path.isfile(_empty[0]):
        directory = tempfile.mkdtemp(prefix="ketch-hidden-")
        path = os.path.join(directory, "empty")
        with open(path, "w"):
            pass
        os.chmod(path, 0o444)
        atexit.register(shutil.rmtree, directory, True)  # nothing left behind in /tmp
        _empty[:] = [path]
    return _empty[0]


class BubblewrapSandbox:
    """Runs commands under bubblewrap (``bwrap``): new PID, IPC, UTS, cgroup and (unless
    the policy allows the network) network namespaces, all capabilities dropped (so a
    root command cannot remount or escape), a new session, killed with its parent.

    The host filesystem is bound read-only; ``/dev`` and ``/proc`` are the sandbox's own
    (``/proc`` shows only the sandbox's processes); ``/tmp``, ``/var/tmp`` and ``/run``
    are empty private tmpfs mounts (host sockets in them are out of reach; the file
    ``/etc/resolv.conf`` points to is kept). With ``policy.write`` the workspace, the
    policy's extra writable paths and the private ``/tmp`` are writable; protected paths
    are bound read-only on top and every directory between them and the workspace is made
    a mount point, so they can be neither written nor renamed away. A protected path that
    does not exist yet gets an empty read-only placeholder directory while the command
    runs (removed by :meth:`release`), so it cannot be created either; the placeholder of
    a file git reads when present is a file instead (``commondir`` holding ``.``, which
    names the git directory itself, so git works as without it). Without
    ``policy.write`` everything is read-only.

    ``bwrap`` is the path of the program (default: looked up on ``PATH``).
    """

    __slots__ = ("_active", "_placeholders", "_reason", "_reason_known", "bwrap", "name")

    def __init__(self, bwrap: str | None = None) -> None:
        self.name = "bubblewrap"
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        self._reason: str | None = None
        self._reason_known = False
        self._placeholders: dict[str, int] = {}
        self._active: dict[int, tuple[list[str], list[str]]] = {}

    def __repr__(self) -> str:
        return f"BubblewrapSandbox(bwrap={self.bwrap!r})"

    # --- availability ------------------------------------------------------------------

    def unavailable_reason(self) -> str | None:
        """None when ``bwrap`` runs and can create the namespaces here, else why not.

        The first call runs a tiny sandboxed ``true`` (a few milliseconds); the answer is
        kept for the life of the object.
        """
        if not self._reason_known:
            self._reason = self._probe()
            self._reason_known = True
        return self._reason

    def _probe(self) -> str | None:
        if shutil.which(self.bwrap) is None:
            return f"bubblewrap ({self.bwrap}) is not installed; install the 'bubblewrap' package"
        true = shutil.which("true") or "/bin/true"
        argv = [self.bwrap, *self._namespace_args(network=False), *self._base_mounts(write=False), "--", true]
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_PROBE_TIMEOUT, env={}, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"bubblewrap ({self.bwrap}) could not be started: {exc}"
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
            why = detail[-1] if detail else f"exit status {done.returncode}"
            return f"bubblewrap cannot create its namespaces here: {why}"
        return None

    # --- wrapping ----------------------------------------------------------------------

    @staticmethod
    def _namespace_args(*, network: bool) -> list[str]:
        args = [
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
        if not network:
            args.append("--unshare-net")
        args += ["--cap-drop", "ALL"]
        return args

    @staticmethod
    def _base_mounts(*, write: bool) -> list[str]:
        args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for private in (_SANDBOX_TMP, "/var/tmp", "/run"):
            if os.path.isdir(private) and not os.path.islink(private):
                args += ["--tmpfs", private]
        resolv = os.path.realpath("/etc/resolv.conf")
        if resolv.startswith("/run/") and os.path.isfile(resolv):
            args += ["--ro-bind", resolv, resolv]
        return args

    def wrap(
        self, argv: Sequence[str], policy: SandboxPolicy, env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """``bwrap <namespaces> <mounts> -- argv`` and ``env`` with ``TMPDIR`` set to the
        sandbox's private ``/tmp``. The environment given is the whole environment of the
        sandbox (``bwrap`` itself runs with it, so nothing of the caller's shows through
        ``/proc``). Call :meth:`release` with the returned argv when the process has ended."""
        workspace = os.path.realpath(policy.workspace)
        extras = [real for real in (os.path.realpath(p) for p in policy.extra_writable) if os.path.exists(real)]
        shown = [workspace, *extras]
        hidden = self._hidden_targets(policy.hidden, shown)
        args = [self.bwrap, *self._namespace_args(network=policy.network), *self._base_mounts(write=policy.write)]
        placeholders: list[str] = []
        try:
            if policy.write:
                for real in extras:
                    args += ["--bind", real, real]
                args += ["--bind", workspace, workspace]
                protected = with_git_dir(workspace, policy.protected)
                args += self._protected_mounts(workspace, protected, placeholders, hidden, shown)
            else:
                for real in extras:
                    args += ["--ro-bind", real, real]
                args += ["--ro-bind", workspace, workspace]
                for private in (_SANDBOX_TMP, "/var/tmp", "/run"):
                    if os.path.isdir(private) and not os.path.islink(private):
                        args += ["--remount-ro", private]
            for real in hidden:  # after every other mount, so nothing binds them back
                args += self._hide(real, write=policy.write)
        except BaseException:
            self._drop(placeholders)
            raise
        args += ["--", *argv]
        wrapped_env = dict(env)
        wrapped_env["TMPDIR"] = _SANDBOX_TMP
        self._active[id(args)] = (args, placeholders)
        return args, wrapped_env

    @staticmethod
    def _hidden_targets(hidden: Sequence[Path], shown: Sequence[str]) -> list[str]:
        """The real paths to hide: what each entry (a pattern: each path it names now)
        resolves to, none inside another. A path in the private ``/tmp``, ``/var/tmp`` or
        ``/run`` is not there inside the sandbox anyway, except the directories bound back
        (``shown``: the workspace and its other roots): those inside it, or it inside them."""
        reals: set[str] = set()
        for pattern in hidden:
            for path in expand_pattern(os.fspath(pattern)):
                real = os.path.realpath(path)
                if not any(within(real, p) for p in (_SANDBOX_TMP, "/var/tmp", "/run")):
                    reals.add(real)
                    continue
                reals.update(s for s in shown if within(s, real))
                if any(within(real, s) for s in shown):
                    reals.add(real)
        targets: list[str] = []
        for real in sorted(reals):  # a path inside a hidden directory is gone already
            if not any(within(real, t) for t in targets):
                targets.append(real)
        return targets

    @staticmethod
    def _hide(real: str, *, write: bool) -> list[str]:
        """An empty tmpfs over a hidden directory, an empty file over a hidden file."""
        if os.path.isdir(real):
            return ["--tmpfs", real] + ([] if write else ["--remount-ro", real])
        if os.path.exists(real):
            return ["--ro-bind", _empty_file(), real]
        return []

    def _protected_mounts(
        self,
        workspace: str,
        protected: Sequence[str],
        made: list[str],
        hidden: Sequence[str] = (),
        roots: Sequence[str] = (),
    ) -> list[str]:
        """Mounts keeping ``protected`` read-only: every directory between the workspace
        and a protected path is bound onto itself first (a mount point cannot be renamed
        or removed), then each protected path read-only. Entries with wildcards (``*``,
        ``?``, ``[``; ``**`` for any depth) cover the paths that exist; other absent
        entries (``X/**`` counts as ``X``) get a placeholder directory. The directories
        between a writable root (``roots``) and a ``hidden`` path are pinned the same way,
        so a rename cannot carry a hidden file out from under its mount. A directory that
        cannot be searched on the way is bound read-only (it stays unsearchable). The
        placeholders made are added to ``made`` as they are made."""
        pins: list[str] = []
        read_only: list[str] = []
        for entry in protected:
            folder = entry.removesuffix("/**")  # a folder's contents: the folder itself
            rel = folder if not has_wildcard(folder) else entry
            if has_wildcard(rel):
                targets = [(t, False) for t in expand_pattern(os.path.join(glob_escape(workspace), rel))]
            else:
                targets = [(os.path.join(workspace, pattern_base(rel)), True)]
            for raw, may_create in targets:
                target = os.path.normpath(raw)
                if not target.startswith(workspace + os.sep):
                    continue
                self._protect(workspace, target, may_create, pins, read_only, made)
        for path in hidden:
            root = next((r for r in roots if path.startswith(r + os.sep)), None)
            if root is not None:
                _pin_between(root, path, pins, read_only)
        args: list[str] = []
        for pin in sorted(set(pins), key=lambda p: (p.count(os.sep), p)):
            args += ["--bind", pin, pin]
        for path in dict.fromkeys(read_only):
            args += ["--ro-bind", path, path]
        return args

    def _protect(
        self,
        workspace: str,
        target: str,
        may_create: bool,
        pins: list[str],
        read_only: list[str],
        made: list[str],
        hops: int = 0,
    ) -> None:
        parts = Path(os.path.relpath(target, workspace)).parts
        current = workspace
        for index, part in enumerate(parts):
            parent, current = current, os.path.join(current, part)
            last = index == len(parts) - 1
            try:
                st: os.stat_result | None = os.lstat(current)
            except (FileNotFoundError, NotADirectoryError):
                st = None
            except OSError:  # ``parent`` cannot be searched: keep it so
                read_only.append(parent)
                return
            if st is not None and stat.S_ISLNK(st.st_mode):
                # protect what the link leads to when that is in the workspace (a link
                # elsewhere leads to the read-only rest of the filesystem)
                real = os.path.join(os.path.realpath(current), *parts[index + 1 :])
                if real.startswith(workspace + os.sep) and hops < _MAX_HOPS:
                    self._protect(workspace, real, may_create, pins, read_only, made, hops + 1)
                return
            if current in self._placeholders or st is None:
                if not may_create:
                    return
                if current not in self._placeholders:
                    try:
                        _make_placeholder(current)
                    except OSError:  # it cannot be made: nothing may change in its folder
                        read_only.append(parent)
                        return
                    self._placeholders[current] = 0
                self._placeholders[current] += 1
                made.append(current)
                read_only.append(current)
                return
            if last:
                read_only.append(current)
            elif not stat.S_ISDIR(st.st_mode):
                return
            else:
                pins.append(current)

    def release(self, wrapped: Sequence[str]) -> None:
        """Remove the placeholders made for ``wrapped`` that no running command still uses."""
        entry = self._active.pop(id(wrapped), None)
        if entry is not None:
            self._drop(entry[1])

    def _drop(self, made: Sequence[str]) -> None:
        for path in made:
            count = self._placeholders.get(path, 0) - 1
            if count > 0:
                self._placeholders[path] = count
                continue
            self._placeholders.pop(path, None)
            try:
                if os.path.basename(path) in _FILE_PLACEHOLDERS:
                    os.unlink(path)
                else:
                    os.rmdir(path)
            except OSError:
                pass


def _pin_between(root: str, path: str, pins: list[str], read_only: list[str]) -> None:
    """Pin each directory between ``root`` and ``path`` (both real); one that cannot be
    searched is kept read-only instead, and nothing below it is reached."""
    current = root
    for part in Path(os.path.relpath(path, root)).parts[:-1]:
        parent, current = current, os.path.join(current, part)
        try:
            os.lstat(current)
        except OSError:
            read_only.append(parent)
            return
        pins.append(current)


_MAX_HOPS = 8  # symlinks followed on the way to a protected path

_FILE_PLACEHOLDERS: dict[str, bytes] = {"commondir": b".\n"}
"""Absent protected paths whose placeholder is a file with this content: git fails on a
``commondir`` it cannot read, and ``.`` (the git directory itself) changes nothing."""


def _make_placeholder(path: str) -> None:
    content = _FILE_PLACEHOLDERS.get(os.path.basename(path))
    if content is None:
        os.mkdir(path)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        os.write(fd, content)
    finally:
        os.close(fd)
