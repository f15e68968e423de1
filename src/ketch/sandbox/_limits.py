"""Resource bounds of a sandboxed command: processes, memory, CPU time, file size.

:class:`SandboxLimits` is what a caller asks for; :func:`resolve` turns it into the
numbers a command gets (:class:`Bounds`), with this machine's defaults for what was not
given. :class:`Cgroups` makes a control group per command where this process can (a
cgroup v2 subtree with the ``pids`` and ``memory`` controllers that this process may
write, or the v1 ``pids`` and ``memory`` hierarchies), and :func:`apply_rlimits` sets
the per-process limits (``RLIMIT_NPROC``, ``RLIMIT_DATA``, ``RLIMIT_CPU``,
``RLIMIT_FSIZE``, no core files) on the sandbox's first process, which everything the
command starts inherits. The kernel holds both: a command cannot raise a hard limit nor
leave its group without capabilities, which it has none of.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import resource
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import fields

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

DEFAULT_PROCESSES = 512
DEFAULT_MEMORY_CAP = 2 * GiB
DEFAULT_CPU_SECONDS = 3600
DEFAULT_FILE_SIZE = 2 * GiB

_NAMES = {
    "processes": "process limit",
    "memory": "memory limit",
    "cpu_seconds": "CPU time limit",
    "file_size": "file size limit",
}


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource bounds of each sandboxed command (its whole process tree).

    ``processes`` bounds the processes and threads running at once, ``memory`` the
    memory in bytes (of the whole command where a memory cgroup is available, else of
    each process, through ``RLIMIT_DATA``; the private ``/tmp`` holds at most half of it),
    ``cpu_seconds`` the CPU time of each process, ``file_size`` the size in bytes of any
    file a process writes. None takes this machine's default (512 processes, a quarter
    of the RAM up to 2 GiB, 3600 seconds, 2 GiB), which holds where the host can hold it
    (``ketch doctor`` says which do); 0 means no bound. A bound given (a number above 0)
    must hold: where the host cannot hold it (a process limit for a command running as
    root with no writable ``pids`` cgroup) the command does not run.
    """

    processes: int | None = None
    memory: int | None = None
    cpu_seconds: int | None = None
    file_size: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(
                    f"SandboxLimits.{f.name} must be an integer >= 0 (0: no bound) or None (the default), "
                    f"got {value!r}"
                )

    def __repr__(self) -> str:
        given = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) is not None)
        return f"SandboxLimits({given})"


def physical_memory() -> int:
    """The machine's RAM in bytes (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def default_memory() -> int:
    """A quarter of the RAM, at most 2 GiB (2 GiB when the RAM is unknown)."""
    ram = physical_memory()
    return min(ram // 4, DEFAULT_MEMORY_CAP) if ram > 0 else DEFAULT_MEMORY_CAP


@dataclass(frozen=True, slots=True)
class Bounds:
    """The bounds a command gets (0: none) and those that must hold (``required``)."""

    processes: int
    memory: int
    cpu_seconds: int
    file_size: int
    required: frozenset[str] = frozenset()

    def line(self, name: str) -> str:
        """The one-line note telling the model that bound ``name`` was reached."""
        return f"[stopped: the command reached the {_NAMES[name]} ({self.shown(name)})]"

    def shown(self, name: str) -> str:
        """The value of bound ``name`` as the notes show it (``512``, ``2 GiB``, ``60 s``)."""
        value = getattr(self, name)
        if not value:
            return "no bound"
        if name == "processes":
            return str(value)
        if name == "cpu_seconds":
            return f"{value} s"
        return size_text(value)


def resolve(limits: SandboxLimits | None) -> Bounds:
    """The bounds for ``limits`` (None: every default) on this machine."""
    given = limits or SandboxLimits()
    defaults = {
        "processes": DEFAULT_PROCESSES,
        "memory": default_memory(),
        "cpu_seconds": DEFAULT_CPU_SECONDS,
        "file_size": DEFAULT_FILE_SIZE,
    }
    values = {name: (defaults[name] if getattr(given, name) is None else getattr(given, name)) for name in defaults}
    required = frozenset(name for name in defaults if getattr(given, name))
    return Bounds(**values, required=required)


def size_text(value: int) -> str:
    """``value`` bytes as ``2 GiB``, ``512 MiB``, ``1.5 GiB`` or ``100 bytes``."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size:
            number = value / size
            return f"{number:.0f} {unit}" if number == int(number) else f"{number:.1f} {unit}"
    return f"{value} bytes"


# --- per-process limits ------------------------------------------------------------------

_CPU_GRACE = 5  # seconds between SIGXCPU (the soft limit) and SIGKILL (the hard one)


def apply_rlimits(pid: int, bounds: Bounds, *, processes: bool = True, data: int | None = None) -> None:
    """Set the limits of ``bounds`` on process ``pid`` (soft and hard, so no process
    below can raise them; ``RLIMIT_NPROC`` only with ``processes``; ``RLIMIT_DATA`` to
    ``data``, default the memory bound), and no core files. Raises OSError when the
    kernel refuses."""
    settings: list[tuple[int, int, int]] = [(resource.RLIMIT_CORE, 0, 0)]
    if bounds.processes and processes:
        settings.append((resource.RLIMIT_NPROC, bounds.processes, bounds.processes))
    if bounds.memory:
        limit = bounds.memory if data is None else data
        settings.append((resource.RLIMIT_DATA, limit, limit))
    if bounds.cpu_seconds:
        settings.append((resource.RLIMIT_CPU, bounds.cpu_seconds, bounds.cpu_seconds + _CPU_GRACE))
    if bounds.file_size:
        settings.append((resource.RLIMIT_FSIZE, bounds.file_size, bounds.file_size))
    for which, soft, hard in settings:
        _, current_hard = resource.prlimit(pid, which)
        if current_hard != resource.RLIM_INFINITY:  # never above what the host already holds
            hard = min(hard, current_hard)
            soft = min(soft, hard)
        resource.prlimit(pid, which, (soft, hard))


# --- control groups -------------------------------------------------------------------------

_CONTROLLERS = ("pids", "memory")


@dataclass(slots=True)
class _Mount:
    version: int
    point: str
    root: str
    controllers: frozenset[str]


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _mounts(mountinfo: str) -> list[_Mount]:
    found: list[_Mount] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        parts, tail = left.split(), right.split()
        if len(parts) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mount_options = set(parts[5].split(",")) if len(parts) > 5 else set()
        if "ro" in mount_options:
            continue
        options = set(tail[2].split(",")) | mount_options
        version = 2 if tail[0] == "cgroup2" else 1
        controllers = frozenset(c for c in _CONTROLLERS if c in options) if version == 1 else frozenset()
        found.append(_Mount(version, _unescape(parts[4]), _unescape(parts[3]), controllers))
    return found


def _own_cgroups(text: str) -> dict[str, str]:
    """``/proc/self/cgroup``: controller (``""`` for v2) -> path."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths[""] = parts[2]
        for controller in parts[1].split(","):
            if controller in _CONTROLLERS:
                paths[controller] = parts[2]
    return paths


def _directory(mount: _Mount, path: str) -> str | None:
    root = mount.root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None
    rel = path[len(root) :].lstrip("/")
    if ".." in rel.split("/"):
        return None
    return os.path.join(mount.point, rel) if rel else mount.point


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_REGISTERED: list[bool] = []
_GROUP_NAME = re.compile(r"ketch-(\d+)-\d+")


class Cgroups:
    """Where this process can make a control group per command (found on first use).

    ``parents`` maps each controller (``pids``, ``memory``) to the folder the groups
    are made in: for cgroup v2, the nearest folder at or above this process's own group
    whose ``cgroup.subtree_control`` enables both and which this process may write; for
    v1, this process's group in that controller's hierarchy, when writable. ``version``
    is 2, 1 or 0 (none)."""

    def __init__(self, proc: str = "/proc/self") -> None:
        self.parents: dict[str, str] = {}
        self.version = 0
        self._count = 0
        try:
            mountinfo = _read(os.path.join(proc, "mountinfo"))
            own = _own_cgroups(_read(os.path.join(proc, "cgroup")))
        except OSError:
            return
        mounts = _mounts(mountinfo)
        v2 = next((m for m in mounts if m.version == 2), None)
        if v2 is not None and "" in own:
            start = _directory(v2, own[""])
            if start is not None:
                parent = self._v2_parent(start, v2.point)
                if parent is not None:
                    self.parents = dict.fromkeys(_CONTROLLERS, parent)
                    self.version = 2
        if not self.parents:
            for controller in _CONTROLLERS:
                mount = next((m for m in mounts if m.version == 1 and controller in m.controllers), None)
                if mount is None or controller not in own:
                    continue
                folder = _directory(mount, own[controller])
                if folder is not None and os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
                    self.parents[controller] = folder
            if self.parents:
                self.version = 1
        for folder in set(self.parents.values()):
            self._remove_stale(folder)

    @staticmethod
    def _v2_parent(start: str, top: str) -> str | None:
        folder = start
        while True:
            try:
                enabled = set(_read(os.path.join(folder, "cgroup.subtree_control")).split())
            except OSError:
                enabled = set()
            if set(_CONTROLLERS) <= enabled and os.access(folder, os.W_OK | os.X_OK):
                return folder
            if folder == top or not folder.startswith(top):
                return None
            folder = os.path.dirname(folder)

    @staticmethod
    def _remove_stale(folder: str) -> None:
        """Groups left behind by a ketch process that is gone (killed before it could
        remove them)."""
        with contextlib.suppress(OSError):
            for name in os.listdir(folder):
                match = _GROUP_NAME.fullmatch(name)
                if match and not _alive(int(match.group(1))):
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(folder, name))

    def holds(self) -> frozenset[str]:
        """The bounds a group can hold here: ``processes`` and/or ``memory``."""
        names = {"pids": "processes", "memory": "memory"}
        return frozenset(names[c] for c in self.parents)

    def make(self, bounds: Bounds) -> Group:
        """A new group per controller holding ``bounds`` (controllers whose group cannot
        be made are left out: see :attr:`Group.holds`)."""
        self._count += 1
        name = f"ketch-{os.getpid()}-{self._count}"
        group = Group()
        made: dict[str, str] = {}
        for controller, parent in self.parents.items():
            path = os.path.join(parent, name)
            if path not in made.values():
                try:
                    os.mkdir(path)
                except FileExistsError:
                    pass
                except OSError:
                    continue
            made[controller] = path
        for controller, path in made.items():
            try:
                self._limit(controller, path, bounds)
            except OSError:
                continue
            group.paths[controller] = path
        group.version = self.version
        group.made = sorted(set(made.values()))
        if group.made:
            if not _LIVE and not _REGISTERED:
                atexit.register(_remove_live)
                _REGISTERED.append(True)
            _LIVE.add(group)
        return group

    def _limit(self, controller: str, path: str, bounds: Bounds) -> None:
        if controller == "pids":
            _write(os.path.join(path, "pids.max"), str(bounds.processes) if bounds.processes else "max")
            return
        if self.version == 2:
            _write(os.path.join(path, "memory.max"), str(bounds.memory) if bounds.memory else "max")
            if bounds.memory and os.path.exists(os.path.join(path, "memory.swap.max")):
                _write(os.path.join(path, "memory.swap.max"), "0")
            return
        if bounds.memory:
            _write(os.path.join(path, "memory.limit_in_bytes"), str(bounds.memory))
            memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):
                _write(memsw, str(bounds.memory))


class Group:
    """The control groups of one command (one per controller with v1, one with v2)."""

    __slots__ = ("made", "paths", "version")

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}
        self.made: list[str] = []
        self.version = 0

    def holds(self) -> frozenset[str]:
        """The bounds this group holds: ``processes`` and/or ``memory``."""
        names = {"pids": "processes", "memory": "memory"}
        return frozenset(names[c] for c in self.paths)

    def add(self, pid: int) -> None:
        """Move process ``pid`` into the group (raises OSError when the kernel refuses)."""
        for path in dict.fromkeys(self.paths.values()):
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def reached(self) -> list[str]:
        """The bounds the command reached: ``processes`` (a fork was refused) and/or
        ``memory`` (the kernel killed a process for memory)."""
        found: list[str] = []
        if "pids" in self.paths and _counter(os.path.join(self.paths["pids"], "pids.events"), "max"):
            found.append("processes")
        if "memory" in self.paths:
            events = "memory.events" if self.version == 2 else "memory.oom_control"
            if _counter(os.path.join(self.paths["memory"], events), "oom_kill"):
                found.append("memory")
        return found

    def remove(self, wait: float = 0.0) -> bool:
        """Remove the groups (ending any process still in them, waiting up to ``wait``
        seconds for them to be gone); False if one remains."""
        done = True
        for path in self.made:
            if not _remove_group(path, wait):
                done = False
        if done:
            _LIVE.discard(self)
        return done


def _counter(path: str, key: str) -> int:
    try:
        text = _read(path)
    except OSError:
        return 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


_LIVE: set[Group] = set()
"""The groups made and not removed yet: removed when the program exits (a hangup ends
ketch while a command runs)."""


def _remove_live() -> None:
    for group in list(_LIVE):
        group.remove(wait=2.0)


def _remove_group(path: str, wait: float = 0.0) -> bool:
    deadline = time.monotonic() + wait
    tries = 0
    while True:
        tries += 1
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if tries >= 50 and time.monotonic() >= deadline:
                return False
        try:
            pids = [int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if tries < 50:
            os.sched_yield()
        else:
            time.sleep(0.01)


# --- reading what was reached from the output (no cgroup) -----------------------------------

_HINTS: dict[str, re.Pattern[str]] = {
    "processes": re.compile(r"Resource temporarily unavailable|can't start new thread|Cannot fork", re.I),
    "memory": re.compile(
        r"MemoryError|Cannot allocate memory|out of memory|bad_alloc|xmalloc: cannot allocate", re.I
    ),
    "cpu_seconds": re.compile(r"CPU time limit exceeded"),
    "file_size": re.compile(r"File size limit exceeded|File too large"),
}
_SIGNAL_CODES = {
    "cpu_seconds": (int(signal.SIGXCPU), 128 + int(signal.SIGXCPU)),
    "file_size": (int(signal.SIGXFSZ), 128 + int(signal.SIGXFSZ)),
}


def reached_from_output(
    output: str, code: int | None, bounds: Bounds, skip: Iterable[str] = ()
) -> list[str]:
    """The bounds a failed command (``code`` not 0) most likely reached, read from the end
    of its output and its exit status (a process killed by SIGXCPU or SIGXFSZ): for the
    bounds no control group reports (``skip`` names those one does)."""
    if not code:
        return []
    skipped = set(skip)
    found: list[str] = []
    for name, pattern in _HINTS.items():
        if name in skipped or not getattr(bounds, name):
            continue
        signal_code = _SIGNAL_CODES.get(name)
        if pattern.search(output) or (signal_code is not None and code in (-signal_code[0], signal_code[1])):
            found.append(name)
    return found


# --- settings ---------------------------------------------------------------------------------

_UNITS = {
    **dict.fromkeys(("", "b"), 1),
    **dict.fromkeys(("k", "kb", "kib"), KiB),
    **dict.fromkeys(("m", "mb", "mib"), MiB),
    **dict.fromkeys(("g", "gb", "gib"), GiB),
}


def parse_size(value: int | str, name: str) -> int:
    """A size in bytes from an integer or a text such as ``512M``, ``2 GiB`` (binary
    units); ValueError naming ``name`` and what is allowed otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a size (bytes, or a number with K, M or G), got {value!r}")
    if isinstance(value, int):
        number = value
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value)
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS:
            raise ValueError(f"{name} must be a size (bytes, or a number with K, M or G), got {value!r}")
        number = int(float(match.group(1)) * _UNITS[unit])
    if number < 0:
        raise ValueError(f"{name} must be >= 0 (0: no bound), got {value!r}")
    return number


def _looser(new: int, current: int) -> bool:
    """Whether bound ``new`` allows more than ``current`` (0: no bound)."""
    return current != 0 and (new == 0 or new > current)


def merge_limits(
    current: SandboxLimits | None,
    given: dict[str, int | str | None],
    origin: str,
    *,
    only_stricter: bool = False,
    ignored: list[str] | None = None,
) -> SandboxLimits | None:
    """``current`` with the values of a ``[sandbox.limits]`` table (``given``: field ->
    value, None for unset; sizes may be texts such as ``2G``) applied. With
    ``only_stricter`` (a project's file) a value that would allow more than
    the current bound (or the default) is left out and named in ``ignored``. Raises
    ValueError naming ``origin``, the key and what is allowed for a bad value."""
    values = {f.name: getattr(current, f.name) if current is not None else None for f in fields(SandboxLimits)}
    defaults = resolve(current)
    changed = False
    for name, raw in given.items():
        if raw is None:
            continue
        key = f"sandbox.limits.{name}"
        try:
            if name in ("memory", "file_size"):
                value = parse_size(raw, key)
            elif isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise ValueError(f"{key} must be an integer >= 0 (0: no bound), got {raw!r}")
            else:
                value = raw
        except ValueError as exc:
            raise ValueError(f"{origin}: {exc}") from None
        if only_stricter and _looser(value, getattr(defaults, name)):
            if ignored is not None:
                ignored.append(
                    f"{key} = {raw!r} ({origin}: it allows more than {defaults.shown(name)}; "
                    "a project may only make the limits stricter)"
                )
            continue
        values[name] = value
        changed = True
    if not changed:
        return current
    return SandboxLimits(**values)
