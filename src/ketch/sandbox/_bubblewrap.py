"""The bubblewrap (``bwrap``) sandbox for Linux."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from .._paths import expand_pattern
from .._paths import glob_escape
from .._paths import has_wildcard
from .._paths import pattern_base
from .._paths import within
from ._limits import Bounds
from ._limits import Cgroups
from ._limits import Group
from ._limits import SandboxLimits
from ._limits import apply_rlimits
from ._limits import reached_from_output
from ._limits import resolve
from ._network import NetworkPolicy
from ._policy import SandboxPolicy
from ._policy import with_git_dir
from ._proxy import FORWARDER
from ._proxy import NetworkProxy
from ._seccomp import host_architecture
from ._seccomp import seccomp_program
from ._tls import TlsBroker

_PROBE_TIMEOUT = 15.0
_START_TIMEOUT = 30.0
_SANDBOX_TMP = "/tmp"
_PRIVATE = (_SANDBOX_TMP, "/var/tmp", "/run")
NOBODY = 65534
"""The unprivileged user a plan-mode command of root runs as (``nobody``)."""

_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "mtrr", "pressure")
"""Kernel settings under ``/proc`` that a command running as root (kuid 0, even with no
capabilities) could otherwise write: bound read-only over the sandbox's own ``/proc``
(Docker's list, and the memory ranges and pressure triggers)."""
_PROC_MASKED = (
    "kcore",
    "keys",
    "key-users",
    "latency_stats",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "kallsyms",
    "slabinfo",
    "acpi",
    "asound",
    "scsi",
)
_SYS_MASKED = ("firmware", "kernel/debug", "kernel/tracing", "devices/virtual/powercap")
"""Entries under ``/proc`` and folders under ``/sys`` (read-only like the rest) that tell
about the host's kernel, its memory, keys and timers: empty inside the sandbox, as Docker
and runc mask them; for a command not running as root, only those anyone may read."""


_empty: list[str] = []


def _empty_file(folder: bool = False) -> str:
    """An empty read-only file (or with ``folder``, folder) of this process, bound over
    what is hidden (its folder can be searched by anyone, so a command running as another
    user can be given it too)."""
    if not _empty or not os.path.isfile(_empty[0]):
        directory = tempfile.mkdtemp(prefix="ketch-hidden-")
        os.chmod(directory, 0o755)
        path = os.path.join(directory, "empty")
        with open(path, "w"):
            pass
        os.chmod(path, 0o444)
        os.mkdir(os.path.join(directory, "empty-folder"), 0o555)
        atexit.register(shutil.rmtree, directory, True)  # nothing left behind in /tmp
        _empty[:] = [path]
    return os.path.join(os.path.dirname(_empty[0]), "empty-folder") if folder else _empty[0]


@dataclass(frozen=True, slots=True)
class _Identity:
    """The user a command of root runs as instead (``setpriv`` inside the sandbox)."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    foreign: bool  # not the workspace's owner: git is told the repository is safe


@dataclass(slots=True)
class _Run:
    """What :meth:`BubblewrapSandbox.wrap` prepared for one command."""

    placeholders: list[str]
    bounds: Bounds
    identity: _Identity | None
    child_fds: list[int] = field(default_factory=list)  # given to bwrap, closed here once it runs
    info: int = -1  # bwrap writes the sandbox's first process id here
    block: int = -1  # the sandbox waits for a byte here before the command starts
    group: Group | None = None
    group_holds: frozenset[str] = frozenset()
    proxy: NetworkProxy | None = None
    proxy_dir: str = ""

    def close_child_fds(self) -> None:
        for fd in self.child_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_fds.clear()

    def close(self) -> None:
        self.close_child_fds()
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        if self.proxy_dir:
            shutil.rmtree(self.proxy_dir, ignore_errors=True)
            self.proxy_dir = ""
        for name in ("info", "block"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, -1)


def _reachable(path: str, identity: _Identity, need: int) -> bool:
    """Whether ``identity`` can search every folder above ``path`` and has the permission
    bits ``need`` on it (by the modes; symlinks resolved)."""
    real = os.path.realpath(path)
    current = "/"
    for part in Path(real).parts[1:]:
        try:
            st = os.stat(current)
        except OSError:
            return False
        if not _allowed(st, identity.uid, identity.gid, identity.groups, 1):
            return False
        current = os.path.join(current, part)
    try:
        return _allowed(os.stat(real), identity.uid, identity.gid, identity.groups, need)
    except OSError:
        return False


def _can_run(argv: Sequence[str], identity: _Identity) -> bool:
    """Whether ``identity`` can run ``argv``: execute its program (looked up on ``PATH``
    when it has no folder) and read a script given as its first argument."""
    if not argv:
        return True
    program = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
    if program is None or not _reachable(program, identity, 1):
        return False
    script = argv[1] if len(argv) > 1 else ""
    return not (os.path.isabs(script) and os.path.isfile(script)) or _reachable(script, identity, 4)


def _kernel_at_least(major: int, minor: int) -> bool:
    match = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (major, minor)


def _allowed(st: os.stat_result, uid: int, gid: int, groups: Sequence[int], need: int) -> bool:
    """Whether user ``uid`` (groups ``gid`` and ``groups``) has every permission bit of
    ``need`` (a mask of 4 read, 2 write, 1 search) on the file of ``st``, by its mode."""
    if st.st_uid == uid:
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid == gid or st.st_gid in groups:
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & need == need


class BubblewrapSandbox:
    """Runs commands under bubblewrap (``bwrap``): new PID, IPC, UTS, cgroup, user (where
    bubblewrap can make one) and (unless the policy allows the network) network
    namespaces, all capabilities dropped (so a root command cannot remount or escape), a
    new session, killed with its parent.

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

    The kernel is kept out of reach in every mode, also of a command running as root:
    ``/proc/sys`` and the other kernel settings under ``/proc`` are read-only, the entries
    that tell about the host's kernel (``/proc/kcore``, ``/proc/keys``, timers, …) are
    empty, and a seccomp filter (:mod:`ketch.sandbox._seccomp`) makes the kernel keyrings,
    module loading, BPF, ``userfaultfd``, ``io_uring``, mounting and new user namespaces
    fail with EPERM. Where bubblewrap can make one, each command has its own user
    namespace, in which it cannot make another.

    When ketch runs as root, a command runs as an unprivileged user where that keeps the
    mode working: in plan mode as the workspace's owner, or ``nobody`` (65534) when root
    owns it; in write mode as the workspace's owner when that is not root. Root's private
    files (``/etc/shadow``, ``/root/.ssh``) are then out of reach. A writable workspace
    that root owns keeps the command root (without capabilities).

    Each command is bounded (``policy.limits``, :class:`~ketch.sandbox.SandboxLimits`):
    processes and memory by a control group of its own where this process can make one,
    and per process by ``RLIMIT_NPROC``, ``RLIMIT_DATA``, ``RLIMIT_CPU`` and
    ``RLIMIT_FSIZE``; the private ``/tmp`` holds at most half the memory bound. A process that
    starts the wrapped argv passes the file descriptors of :meth:`spawn_options` and
    calls :meth:`started` once it runs (the command waits for it), then
    :meth:`notes` for the bounds it reached, then :meth:`release`.

    ``bwrap`` is the path of the program (default: looked up on ``PATH``).
    """

    __slots__ = (
        "_active",
        "_cgroups",
        "_drop_reason",
        "_options",
        "_placeholders",
        "_reason",
        "_reason_known",
        "_seccomp",
        "_setpriv",
        "_tls",
        "_userns",
        "bwrap",
        "name",
    )

    def __init__(self, bwrap: str | None = None) -> None:
        self.name = "bubblewrap"
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        self._reason: str | None = None
        self._reason_known = False
        self._placeholders: dict[str, int] = {}
        self._active: dict[int, tuple[list[str], _Run]] = {}
        self._options: frozenset[str] = frozenset()
        self._userns: tuple[str, ...] = ()
        self._seccomp: bytes | None = None
        self._setpriv: str | None = None
        self._drop_reason: str | None = None
        self._cgroups: Cgroups | None = None
        self._tls: TlsBroker | bool | None = False  # False: not made yet; None: cannot be (no cryptography)

    def __repr__(self) -> str:
        return f"BubblewrapSandbox(bwrap={self.bwrap!r})"

    # --- availability ------------------------------------------------------------------

    def unavailable_reason(self) -> str | None:
        """None when ``bwrap`` runs and can create the namespaces here, else why not.

        The first call runs ``bwrap --help`` and a tiny sandboxed ``true`` (a few
        milliseconds), finding which of bubblewrap's options work here; the answer is
        kept for the life of the object.
        """
        if not self._reason_known:
            self._reason = self._probe()
            self._reason_known = True
        return self._reason

    def _run_probe(self, args: list[str], program: bytes | None) -> str | None:
        """Run ``args`` (a full bwrap argv) with ``program`` as its seccomp filter; None
        when it worked, else the last line bubblewrap printed."""
        fds: list[int] = []
        if program is not None:
            fd = _program_fd(program)
            fds.append(fd)
            args = [args[0], "--seccomp", str(fd), *args[1:]]
        try:
            done = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=_PROBE_TIMEOUT,
                env={},
                check=False,
                pass_fds=fds,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"could not be started: {exc}"
        finally:
            for fd in fds:
                os.close(fd)
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
            return detail[-1] if detail else f"exit status {done.returncode}"
        return None

    def _probe(self) -> str | None:
        if shutil.which(self.bwrap) is None:
            return f"bubblewrap ({self.bwrap}) is not installed; install the 'bubblewrap' package"
        try:
            helped = subprocess.run(
                [self.bwrap, "--help"], stdin=subprocess.DEVNULL, capture_output=True, timeout=_PROBE_TIMEOUT, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"bubblewrap ({self.bwrap}) could not be started: {exc}"
        self._options = frozenset(re.findall(r"--[a-z0-9-]+", helped.stdout.decode("utf-8", "replace")))
        true = shutil.which("true") or "/bin/true"
        program = seccomp_program() if "--seccomp" in self._options else None
        variants: list[tuple[str, ...]] = []
        if "--disable-userns" in self._options:
            variants.append(("--unshare-user", "--disable-userns"))
        variants += [("--unshare-user",), ()]
        first: str | None = None
        for userns in variants:
            for filt in (program, None) if program is not None else (None,):
                self._userns = userns
                argv = [self.bwrap, *self._namespace_args(network=False), *self._base_mounts(write=False), "--", true]
                why = self._run_probe(argv, filt)
                if why is None:
                    self._seccomp = filt
                    self._probe_drop(true)
                    return None
                first = first or why
        self._userns = ()
        return f"bubblewrap cannot create its namespaces here: {first}"

    def _probe_drop(self, true: str) -> None:
        """When this process is root: whether a command can run as another user."""
        if os.geteuid() != 0:
            return
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            self._drop_reason = "setpriv (util-linux) is not installed"
            return
        identity = _Identity(NOBODY, NOBODY, (), False)
        argv = [self.bwrap, *self._namespace_args(network=False, identity=identity), *self._base_mounts(write=False)]
        argv += ["--", *self._drop_argv(setpriv, identity), true]
        why = self._run_probe(argv, self._seccomp)
        if why is not None:
            self._drop_reason = f"bubblewrap cannot start a command as another user: {why}"
            return
        self._setpriv = setpriv

    def protections(self, limits: SandboxLimits | None = None) -> list[str]:
        """What holds here, one short phrase each (for ``ketch doctor``), with the bounds
        of ``limits``; empty when the sandbox is unavailable."""
        if self.unavailable_reason() is not None:
            return []
        held = ["/proc/sys and the kernel's settings read-only"]
        if "--unshare-user" in self._userns:
            held.append("a user namespace per command" + (" (no nested ones)" if "--disable-userns" in self._userns else ""))
        else:
            held.append("no user namespace (bubblewrap cannot make one here)")
        if self._seccomp is not None:
            held.append(f"seccomp filter ({host_architecture()}: keyrings, modules, BPF, mounts, new namespaces)")
        else:
            held.append(f"no seccomp filter (none for {host_architecture()})")
        if os.geteuid() == 0:
            if self._setpriv is not None:
                held.append("root's commands run as the workspace's owner or nobody, root only in a writable workspace root owns")
            else:
                held.append(f"root's commands run as root ({self._drop_reason})")
        bounds = resolve(limits)
        groups = self._groups().holds()
        per_process = _nproc_holds(os.geteuid() != 0 and "--unshare-user" in self._userns)
        if not bounds.processes:
            held.append("processes: no bound")
        elif "processes" in groups or per_process:
            held.append(f"processes {bounds.shown('processes')} ({'cgroup' if 'processes' in groups else 'RLIMIT_NPROC'})")
        else:
            held.append("processes not bounded (no writable pids cgroup)")
        how = "cgroup" if "memory" in groups else "RLIMIT_DATA, per process"
        held.append(f"memory {bounds.shown('memory')}" + (f" ({how})" if bounds.memory else ""))
        held.append(f"CPU time {bounds.shown('cpu_seconds')} per process, file size {bounds.shown('file_size')}")
        return held

    # --- wrapping ----------------------------------------------------------------------

    def _groups(self) -> Cgroups:
        if self._cgroups is None:
            self._cgroups = Cgroups()
        return self._cgroups

    def _namespace_args(self, *, network: bool, identity: _Identity | None = None) -> list[str]:
        args = [
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
        if identity is None:
            args += self._userns
        if not network:
            args.append("--unshare-net")
        args += ["--cap-drop", "ALL"]
        if identity is not None:  # for setpriv, which drops them with root; for bubblewrap to
            # enter a working folder only the other user may search (as root, no longer able to)
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_DAC_READ_SEARCH"]
        return args

    @staticmethod
    def _drop_argv(setpriv: str, identity: _Identity) -> list[str]:
        groups = ["--groups", ",".join(map(str, identity.groups))] if identity.groups else ["--clear-groups"]
        return [
            setpriv,
            f"--reuid={identity.uid}",
            f"--regid={identity.gid}",
            *groups,
            "--inh-caps=-all",
            "--",
        ]

    def _base_mounts(self, *, write: bool, size: int = 0, as_root: bool = True) -> list[str]:
        args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for private in _PRIVATE:
            if os.path.isdir(private) and not os.path.islink(private):
                if size and "--size" in self._options:
                    args += ["--size", str(size)]
                args += ["--tmpfs", private]
        resolv = os.path.realpath("/etc/resolv.conf")
        if resolv.startswith("/run/") and os.path.isfile(resolv):
            args += ["--ro-bind", resolv, resolv]
        args += self._kernel_mounts(as_root)
        return args

    @staticmethod
    def _kernel_mounts(as_root: bool = True) -> list[str]:
        """``/proc``'s kernel settings read-only, what it and ``/sys`` tell about the host's
        kernel empty: all of it for a command running as root, else what anyone may read
        (only what exists here: the sandbox's ``/proc`` has the same)."""
        args: list[str] = []
        for name in _PROC_READ_ONLY:
            path = f"/proc/{name}"
            if os.path.lexists(path):
                args += ["--ro-bind-try", path, path]
        for path in [f"/proc/{n}" for n in _PROC_MASKED] + [f"/sys/{n}" for n in _SYS_MASKED]:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            folder = stat.S_ISDIR(st.st_mode)
            if as_root or st.st_mode & (0o005 if folder else 0o004) == (0o005 if folder else 0o004):
                args += ["--ro-bind", _empty_file(folder), path]
        return args

    def _identity(self, workspace: str, write: bool) -> _Identity | None:
        """Who a command runs as when this process is root: see the class docstring."""
        if self._setpriv is None or os.geteuid() != 0:
            return None
        try:
            st = os.stat(workspace)
        except OSError:
            return None
        owner = st.st_uid
        if owner == 0 and write:
            return None
        uid = owner if owner != 0 else NOBODY
        try:
            entry = pwd.getpwuid(uid)
            gid = entry.pw_gid
            groups = tuple(g for g in os.getgrouplist(entry.pw_name, gid) if g != gid)
        except (KeyError, OSError):
            gid, groups = (st.st_gid if uid == owner else NOBODY), ()
        if gid == 0 or 0 in groups:
            return None
        need = 7 if write else 5  # read and search (and write)
        if not _allowed(st, uid, gid, groups, need):
            return None  # it could not work in the workspace: the command stays root
        return _Identity(uid, gid, groups, foreign=uid != owner)

    @staticmethod
    def _scaffold(roots: Sequence[str], identity: _Identity, home: str | None = None) -> tuple[list[str], list[str]]:
        """For a command running as another user: the folders above each root (the
        workspace, its other roots) that user cannot search become empty tmpfs mounts
        (the topmost of them; the roots are bound back inside), and the folders between
        such a mount (or a private ``/tmp``) and a root are made searchable. The home
        folder (``home``, root's) is emptied the same way when that user cannot search
        it, so programs find no settings there rather than ones they may not read.
        Returns the arguments and the tmpfs mounts to make read-only after the roots
        are bound."""
        covers: list[str] = []
        made: list[str] = []
        if home and os.path.isabs(home) and not any(within(home, p) for p in _PRIVATE):
            real = os.path.realpath(home)
            try:
                searchable = _allowed(os.stat(real), identity.uid, identity.gid, identity.groups, 1)
            except OSError:
                searchable = True
            if not searchable and real != "/" and not any(within(real, r) for r in roots):
                covers.append(real)
        for root in roots:
            parts = Path(root).parts[1:]
            base: str | None = None
            current = "/"
            for part in parts[:-1]:
                current = os.path.join(current, part)
                if base is not None:
                    made.append(current)
                    continue
                if current in _PRIVATE or any(within(current, c) for c in covers):
                    base = current
                    continue
                try:
                    st = os.stat(current)
                except OSError:
                    break
                if not _allowed(st, identity.uid, identity.gid, identity.groups, 1):
                    covers.append(current)
                    base = current
        outer: list[str] = []
        for cover in sorted(set(covers), key=lambda p: (p.count(os.sep), p)):
            if not any(within(cover, o) for o in outer):
                outer.append(cover)
        args: list[str] = []
        for cover in outer:
            args += ["--tmpfs", cover]
        for folder in dict.fromkeys(made):
            if folder not in outer:
                args += ["--perms", "0755", "--dir", folder]
        return args, outer

    def wrap(
        self, argv: Sequence[str], policy: SandboxPolicy, env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """``bwrap <namespaces> <mounts> -- argv`` and ``env`` with ``TMPDIR`` set to the
        sandbox's private ``/tmp``. The environment given is the whole environment of the
        sandbox (``bwrap`` itself runs with it, so nothing of the caller's shows through
        ``/proc``). Start the process with :meth:`spawn_options`, call :meth:`started`
        once it runs and :meth:`release` with the returned argv when it has ended."""
        self.unavailable_reason()
        workspace = os.path.realpath(policy.workspace)
        extras = [real for real in (os.path.realpath(p) for p in policy.extra_writable) if os.path.exists(real)]
        shown = [workspace, *extras]
        hidden = self._hidden_targets(policy.hidden, shown)
        bounds = resolve(policy.limits)
        identity = None if policy.as_caller else self._identity(workspace, policy.write)
        if identity is not None and not _can_run(argv, identity):
            identity = None  # a program root keeps to itself (in root's home): it runs as root
        limited = policy.network if isinstance(policy.network, NetworkPolicy) else None
        python: str | None = None
        if limited is not None:
            python = _forwarder_python(identity)
            if python is None and identity is not None:
                identity = None  # no Python the other user may run: the command runs as root
                python = _forwarder_python(None)
        args = [self.bwrap, *self._namespace_args(network=policy.network is True, identity=identity)]
        as_root = identity is None and os.geteuid() == 0
        args += self._base_mounts(write=policy.write, size=bounds.memory // 2, as_root=as_root)
        covers: list[str] = []
        if identity is not None:
            scaffold, covers = self._scaffold(shown, identity, env.get("HOME"))
            args += scaffold
        run = _Run([], bounds, identity)
        try:
            if limited is not None:
                args += self._proxy_mounts(run, limited, self._broker() if limited.credentials else None)
            if policy.write:
                for real in extras:
                    args += ["--bind", real, real]
                args += ["--bind", workspace, workspace]
                protected = with_git_dir(workspace, policy.protected)
                args += self._protected_mounts(workspace, protected, run.placeholders, hidden, shown)
            else:
                for real in extras:
                    args += ["--ro-bind", real, real]
                args += ["--ro-bind", workspace, workspace]
                for private in _PRIVATE:
                    if os.path.isdir(private) and not os.path.islink(private):
                        args += ["--remount-ro", private]
            for cover in covers:
                args += ["--remount-ro", cover]
            for real in hidden:  # after every other mount, so nothing binds them back
                args += self._hide(real, write=policy.write)
            args += self._control_fds(run)
        except BaseException:
            self._drop(run.placeholders)
            run.close()
            raise
        args.append("--")
        if identity is not None:
            assert self._setpriv is not None
            args += self._drop_argv(self._setpriv, identity)
        wrapped_env = dict(env)
        if limited is not None:
            if python is None:  # fail closed: no way to reach the proxy, so no command
                line = "ketch sandbox: no python3 to start the network proxy's forwarder inside the sandbox"
                argv = ["/bin/sh", "-c", 'echo "$0" >&2; exit 126', line]
            else:
                argv = [python, "-I", "-S", "-c", FORWARDER, _PROXY_SOCKET, *argv]
            for name in limited.secret_names():
                wrapped_env.pop(name, None)
            for name in list(wrapped_env):
                if name.lower() in _PROXY_VARIABLES:
                    del wrapped_env[name]  # the forwarder sets them
            if run.proxy is not None and run.proxy.tls is not None:
                wrapped_env.update(dict.fromkeys(_CA_VARIABLES, _CA_BUNDLE))
        args += argv
        wrapped_env["TMPDIR"] = _SANDBOX_TMP
        if identity is not None and identity.foreign:
            _trust_repositories(wrapped_env)
        self._active[id(args)] = (args, run)
        return args, wrapped_env

    def _broker(self) -> TlsBroker | None:
        """The CA of this sandbox's proxies (made on first use; None without ``cryptography``)."""
        if self._tls is False:
            try:
                broker = TlsBroker()
            except ImportError:
                self._tls = None
            else:
                atexit.register(broker.close)
                self._tls = broker
        return self._tls if isinstance(self._tls, TlsBroker) else None

    @staticmethod
    def _proxy_mounts(run: _Run, policy: NetworkPolicy, tls: TlsBroker | None) -> list[str]:
        """The proxy of a command limited to named hosts: its socket, in a folder only
        this user may enter, bound into the sandbox's private ``/run``; with ``tls`` (the
        policy has credentials), the CA bundle that trusts the run's CA too."""
        run.proxy_dir = tempfile.mkdtemp(prefix="ketch-net-")
        folder = os.open(run.proxy_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:  # through the folder's descriptor: a socket's path is short (108 bytes at most)
            run.proxy = NetworkProxy(f"/proc/self/fd/{folder}/proxy.sock", policy, tls=tls)
        finally:
            os.close(folder)
        run.proxy.path = os.path.join(run.proxy_dir, "proxy.sock")
        args = ["--ro-bind", run.proxy.path, _PROXY_SOCKET]
        if tls is not None:
            args += ["--ro-bind", tls.bundle, _CA_BUNDLE]
        return args

    def _control_fds(self, run: _Run) -> list[str]:
        """The seccomp filter and the two pipes of :meth:`started` (their ends for bwrap
        in ``run.child_fds``)."""
        args: list[str] = []
        if self._seccomp is not None:
            fd = _program_fd(self._seccomp)
            run.child_fds.append(fd)
            args += ["--seccomp", str(fd)]
        info_read, info_write = os.pipe()
        run.info = info_read
        run.child_fds.append(info_write)
        block_read, block_write = os.pipe()
        run.block = block_write
        run.child_fds.append(block_read)
        return [*args, "--info-fd", str(info_write), "--block-fd", str(block_read)]

    def spawn_options(self, wrapped: Sequence[str]) -> dict[str, Any]:
        """Keyword arguments for the ``subprocess``/``asyncio`` call that starts
        ``wrapped``: the file descriptors bubblewrap reads (``pass_fds``)."""
        entry = self._active.get(id(wrapped))
        return {"pass_fds": tuple(entry[1].child_fds)} if entry is not None else {}

    async def started(self, wrapped: Sequence[str], pid: int) -> str | None:
        """Called once the process of ``wrapped`` (``pid``, the leader of its process
        group) runs: puts the sandbox's first process in the command's control group and
        sets its limits, then lets the command start. None when it may run; else why not
        (one line), after killing it: a bound the policy asked for cannot hold here."""
        entry = self._active.get(id(wrapped))
        if entry is None:
            return None
        run = entry[1]
        run.close_child_fds()
        try:
            info = await _read_to_end(run.info, _START_TIMEOUT)
        except TimeoutError:  # it never said which process to bound: it does not run unbounded
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            return f"bubblewrap did not start the sandbox within {_START_TIMEOUT:g} seconds"
        try:
            child = int(json.loads(info.decode("utf-8", "replace"))["child-pid"])
        except (ValueError, KeyError, TypeError):
            child = 0  # bwrap failed before making the sandbox: it says why itself
        error = self._limit(run, child) if child else None
        if error is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            return error
        if run.proxy is not None:
            await run.proxy.start()
        with contextlib.suppress(OSError):
            os.write(run.block, b"1")
        return None

    def _limit(self, run: _Run, child: int) -> str | None:
        bounds = run.bounds
        if bounds.processes or bounds.memory:
            groups = self._groups()
            if groups.parents:
                group = groups.make(bounds)
                try:
                    group.add(child)
                except OSError:
                    group.remove()
                else:
                    run.group = group
                    run.group_holds = group.holds()
        own_namespace = run.identity is None and "--unshare-user" in self._userns
        # RLIMIT_NPROC counts the command's own processes only in a user namespace of its
        # own (Linux 5.14 on), or those of nobody; the kernel ignores it for root
        nproc = _nproc_holds(own_namespace) or (run.identity is not None and run.identity.uid == NOBODY)
        try:
            # a memory cgroup acts first (and says so): RLIMIT_DATA stays as a backstop above it
            data = bounds.memory + bounds.memory // 4 if "memory" in run.group_holds else bounds.memory
            apply_rlimits(child, bounds, processes=nproc, data=data)
        except OSError as exc:
            return f"the sandbox could not set the command's limits: {exc.strerror or exc}"
        if bounds.processes and "processes" in bounds.required and "processes" not in run.group_holds and not nproc:
            why = (
                "the command would run as root"
                if run.identity is None and os.geteuid() == 0
                else "the kernel would count every process of the user"
            )
            return (
                f"the sandbox cannot hold the process limit ({bounds.processes}) here: {why} and no pids cgroup "
                "can be made (set sandbox.limits.processes = 0 to run without the limit)"
            )
        return None

    def notes(self, wrapped: Sequence[str], output: str, code: int | None) -> list[str]:
        """Lines for the model about the command of ``wrapped`` (its exit status ``code``,
        the end of its ``output``): one per bound it reached (``[stopped: the command
        reached the process limit (512)]``), from its control group, else read from its
        exit status and output; and, when it failed running as another user than root,
        that root's files are out of its reach. Call before :meth:`release`."""
        entry = self._active.get(id(wrapped))
        if entry is None:
            return []
        run = entry[1]
        names = run.group.reached() if run.group is not None else []
        names += reached_from_output(output, code, run.bounds)
        lines = [run.bounds.line(name) for name in dict.fromkeys(names)]
        if run.proxy is not None:
            # a refusal the command did not print (a CONNECT's 403 body): for the model
            lines += [f"[sandbox: {line}]" for line in run.proxy.refused() if line not in output]
        identity = run.identity
        if identity is not None and code and ("Permission denied" in output or "No such file or directory" in output):
            lines.append(
                f"[sandbox: commands run as {_user_name(identity.uid)} (uid {identity.uid}), not as root: "
                "folders and files only root may read are out of reach]"
            )
        return lines

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
                if not any(within(real, p) for p in _PRIVATE):
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
        """Undo what :meth:`wrap` prepared for ``wrapped``: its control group, its pipes,
        and the placeholders that no running command still uses."""
        entry = self._active.pop(id(wrapped), None)
        if entry is None:
            return
        run = entry[1]
        run.close()
        if run.group is not None:
            run.group.remove()  # one still in use is removed when the program exits
        self._drop(run.placeholders)

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


_PROXY_SOCKET = "/run/ketch-proxy.sock"
_CA_BUNDLE = "/run/ketch-ca.pem"
_CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO")
_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})


def _forwarder_python(identity: _Identity | None) -> str | None:
    """A Python the command's user may run, for the proxy forwarder (standard library only)."""
    candidates = [os.path.realpath(sys.executable), shutil.which("python3"), "/usr/bin/python3"]
    for candidate in dict.fromkeys(c for c in candidates if c):
        path = os.path.realpath(candidate)
        if os.path.isfile(path) and os.access(path, os.X_OK) and (identity is None or _reachable(path, identity, 5)):
            return path
    return None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user {uid}"


def _program_fd(program: bytes) -> int:
    """A pipe's read end holding ``program`` (far below a pipe's capacity)."""
    read, write = os.pipe()
    try:
        os.write(write, program)
    finally:
        os.close(write)
    return read


async def _read_to_end(fd: int, limit: float) -> bytes:
    """Everything written to the pipe ``fd`` until its writers close it (at most
    ``limit`` seconds: TimeoutError)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            chunks.append(data)
        elif not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)
    try:
        async with asyncio.timeout(limit):
            await done
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)


def _trust_repositories(env: dict[str, str]) -> None:
    """Tell git (``safe.directory``, through the command-line configuration variables)
    that the repositories root owns are safe for a command running as ``nobody``."""
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    env[f"GIT_CONFIG_KEY_{count}"] = "safe.directory"
    env[f"GIT_CONFIG_VALUE_{count}"] = "*"
    env["GIT_CONFIG_COUNT"] = str(count + 1)


def _nproc_holds(own_namespace: bool) -> bool:
    """Whether ``RLIMIT_NPROC`` bounds a command's own processes: in a user namespace of
    its own on Linux 5.14 or later (which counts them per namespace), as a user other
    than root (for whom the kernel ignores it)."""
    return own_namespace and os.geteuid() != 0 and _kernel_at_least(5, 14)
