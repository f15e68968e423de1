"""Attacks on the kernel and on the host's resources through the bash tool, in the
stand-in ketch process run as the user of the suite (root in CI) and as an unprivileged
user, in plan and write mode. Each asserts the kernel's answer: a setting unchanged and
its write refused, a key that no host process finds, a secret file unread, the
processes, memory, CPU time, file size and output of a command bounded, and the ketch
process still working. Counted in the ``kernel`` and ``dos`` classes (see conftest.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ketch.sandbox._seccomp import host_architecture
from unprivileged import User
from unprivileged import unprivileged_user

from .conftest import Probe
from .conftest import Runner
from .conftest import World
from .conftest import _visible_base

MODES = [pytest.param(False, id="plan"), pytest.param(True, id="write")]


@dataclass
class Box:
    """A stand-in ketch process and the user it runs as (None: the suite's own)."""

    runner: Runner
    user: User | None


@pytest.fixture(scope="module")
def user_runner() -> Iterator[Runner]:
    r = Runner(unprivileged_user())
    if r.reason is not None:
        r.close()
        pytest.fail(f"the sandbox does not work for an unprivileged user: {r.reason}")
    yield r
    r.close()


@pytest.fixture(params=["suite-user", "unprivileged"])
def box(request: pytest.FixtureRequest, runner: Runner) -> Box:
    if request.param == "suite-user":
        return Box(runner, None)
    return Box(request.getfixturevalue("user_runner"), unprivileged_user())


@pytest.fixture
def kprobe(box: Box, tmp_path: Path) -> Iterator[Probe]:
    """A probe whose world (workspace and targets) the box's user owns."""
    if box.user is None:
        world = World(_visible_base(), tmp_path / "hidden-outside")
    else:
        world = World(box.user.folder("ketch-security-user-"), tmp_path / "hidden-outside")
        box.user.own(world.base)
    yield Probe(box.runner, world)
    world.cleanup()


def _host(box: Box, code: str) -> str:
    """Run Python ``code`` on the host (outside any sandbox) as the box's user."""
    python = box.user.python if box.user is not None else sys.executable
    argv = [python, "-c", code]
    env = box.user.env() if box.user is not None else dict(os.environ)
    if box.user is not None:
        argv = box.user.argv(*argv)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/", check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- the kernel: settings --------------------------------------------------------------------

PROC_SYS = [
    "kernel/core_pattern",  # a pipe here runs a program as host root on the next crash
    "kernel/pid_max",
    "kernel/modprobe",
    "fs/protected_symlinks",
    "fs/protected_hardlinks",
    "vm/overcommit_memory",
    "dev/tty/legacy_tiocsti",
]


def _write_same(path: str) -> str:
    """A shell command writing ``path``'s own value back (so an escape changes nothing),
    printing WRITTEN when the write went through."""
    return f'v=$(cat {path}) && printf "%s\\n" "$v" > {path} && echo WRITTEN'


@pytest.mark.parametrize("write", MODES)
@pytest.mark.parametrize("entry", [e for e in PROC_SYS if os.path.exists(f"/proc/sys/{e}")])
def test_proc_sys_cannot_be_written(kprobe: Probe, box: Box, entry: str, write: bool) -> None:
    path = f"/proc/sys/{entry}"
    before = Path(path).read_text()
    reply = kprobe.attempt(f"proc-sys-{entry}", _write_same(path), write=write, kind="kernel")
    assert "WRITTEN" not in reply["text"]
    assert reply["is_error"]
    assert Path(path).read_text() == before


KERNEL_WRITES = {
    "sysrq-trigger": "echo h > /proc/sysrq-trigger && echo WRITTEN",  # h: help, harmless
    "irq-affinity": _write_same("/proc/irq/default_smp_affinity"),
    "python-proc-sys": "python3 -c \"p='/proc/sys/kernel/pid_max'; open(p, 'w').write(open(p).read())\" && echo WRITTEN",
    "sysctl-command": "sysctl -w kernel.pid_max=$(cat /proc/sys/kernel/pid_max) && echo WRITTEN",
    "any-writable-kernel-file": "find /proc /sys \\( -path '/proc/[0-9]*' -o -path /proc/self -o -path /proc/thread-self "
    "\\) -prune -o -type f -writable -print 2>/dev/null | grep . && echo WRITTEN; exit 1",
}


@pytest.mark.parametrize("write", MODES)
@pytest.mark.parametrize("name", list(KERNEL_WRITES))
def test_no_kernel_setting_is_writable(kprobe: Probe, name: str, write: bool) -> None:
    reply = kprobe.attempt(name, KERNEL_WRITES[name], write=write, kind="kernel")
    assert "WRITTEN" not in reply["text"]


KERNEL_READS = {
    "kcore": "/proc/kcore",
    "keys": "/proc/keys",
    "key-users": "/proc/key-users",
    "timer-list": "/proc/timer_list",
    "sched-debug": "/proc/sched_debug",
    "slabinfo": "/proc/slabinfo",
    "kallsyms": "/proc/kallsyms",
}


@pytest.mark.parametrize("name", [n for n, p in KERNEL_READS.items() if os.path.exists(p)])
def test_what_proc_tells_of_the_host_kernel_is_empty(kprobe: Probe, name: str) -> None:
    reply = kprobe.attempt(f"read-{name}", f"cat {KERNEL_READS[name]} 2>/dev/null | wc -c", write=True, kind="kernel")
    assert reply["text"] == "0"


# --- the kernel: keyrings, system calls, namespaces ---------------------------------------------

_KEY_NUMBERS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[host_architecture()]

KEYS = textwrap.dedent(
    f"""
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    ADD_KEY, REQUEST_KEY, KEYCTL = {_KEY_NUMBERS}
    desc = sys.argv[1].encode()
    for ring in (-4, -3):  # the user keyring, the session keyring
        got = libc.syscall(ADD_KEY, b"user", desc, b"payload", 7, ring)
        print("add_key", ring, got, ctypes.get_errno())
    got = libc.syscall(KEYCTL, 1, b"ketch-test-ring")  # KEYCTL_JOIN_SESSION_KEYRING
    print("join", got, ctypes.get_errno())
    got = libc.syscall(REQUEST_KEY, b"user", desc, None, -4)
    print("request_key", got, ctypes.get_errno())
    """
)

FIND_KEY = textwrap.dedent(
    f"""
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    KEYCTL = {_KEY_NUMBERS[2]}
    desc = sys.argv[1].encode()
    found = [libc.syscall(KEYCTL, 10, ring, b"user", desc, 0) for ring in (-4, -3)]  # KEYCTL_SEARCH
    found = [k for k in found if k > 0]
    for key in found:
        libc.syscall(KEYCTL, 21, key)  # KEYCTL_INVALIDATE: a control's key is gone after
    print(len(found))
    """
)


def _key_script(probe: Probe, name: str) -> tuple[str, str]:
    desc = f"ketch-test-key-{name}-{os.getpid()}"
    script = probe.world.ws / "keys.py"
    script.write_text(KEYS)
    os.chmod(script, 0o644)
    return f"python3 keys.py {desc}", desc


def _find_key(box: Box, desc: str) -> int:
    return int(_host(box, FIND_KEY.replace("sys.argv[1]", repr(desc))))


@pytest.mark.parametrize("write", MODES)
def test_a_key_added_inside_is_not_found_by_the_host(kprobe: Probe, box: Box, write: bool) -> None:
    command, desc = _key_script(kprobe, f"in-{write}")
    kprobe.world.reset_baseline()
    reply = kprobe.attempt("keyring-add", command, write=write, kind="kernel")
    assert reply["text"].splitlines() == ["add_key -4 -1 1", "add_key -3 -1 1", "join -1 1", "request_key -1 1"]
    assert _find_key(box, desc) == 0


def test_the_key_check_finds_a_key_added_without_the_sandbox(kprobe: Probe, box: Box) -> None:
    """Control, not counted: unsandboxed, the same program adds keys the host finds."""
    command, desc = _key_script(kprobe, "control")
    reply = box.runner.run(command, kprobe.world.ws, write=True, sandbox=False)
    assert reply["sandboxed"] is False
    assert reply["text"].startswith("add_key -4 ")
    assert _find_key(box, desc) >= 1


SYSCALLS = textwrap.dedent(
    """
    import ctypes, os, platform
    libc = ctypes.CDLL(None, use_errno=True)
    numbers = {
        "x86_64": {"mount": 165, "bpf": 321, "perf_event_open": 298, "io_uring_setup": 425,
                   "init_module": 175, "unshare": 272, "userfaultfd": 323, "setns": 308},
        "aarch64": {"mount": 40, "bpf": 280, "perf_event_open": 241, "io_uring_setup": 425,
                    "init_module": 105, "unshare": 97, "userfaultfd": 282, "setns": 268},
    }[platform.machine()]
    args = {
        "mount": (b"none", b"/tmp", b"tmpfs", 0, None),
        "bpf": (0, None, 0),
        "perf_event_open": (None, 0, -1, -1, 0),
        "io_uring_setup": (8, None),
        "init_module": (None, 0, b""),
        "unshare": (0x10000000,),  # CLONE_NEWUSER
        "userfaultfd": (0,),
        "setns": (-1, 0),
    }
    for name, nr in numbers.items():
        got = libc.syscall(nr, *args[name])
        print(name, got, ctypes.get_errno())
    """
)


@pytest.mark.parametrize("write", MODES)
def test_the_filter_refuses_kernel_system_calls(kprobe: Probe, write: bool) -> None:
    (kprobe.world.ws / "calls.py").write_text(SYSCALLS)
    os.chmod(kprobe.world.ws / "calls.py", 0o644)
    kprobe.world.reset_baseline()
    reply = kprobe.attempt("kernel-system-calls", "python3 calls.py", write=write, kind="kernel")
    assert reply["text"].splitlines() == [
        f"{n} -1 1" for n in ("mount", "bpf", "perf_event_open", "io_uring_setup", "init_module", "unshare", "userfaultfd", "setns")
    ]


@pytest.mark.parametrize("write", MODES)
def test_no_nested_user_namespace(kprobe: Probe, write: bool) -> None:
    reply = kprobe.attempt(
        "nested-user-namespace", "unshare -U -r id && echo NESTED; unshare -U -r -m true && echo NESTED", write=write,
        kind="kernel",
    )
    assert "NESTED" not in reply["text"]


# --- root's private files ---------------------------------------------------------------------


def _shadow_head() -> str:
    return Path("/etc/shadow").read_text().split(":", 2)[1] if os.geteuid() == 0 else ""


def test_etc_shadow_is_unread_in_plan_mode(kprobe: Probe) -> None:
    reply = kprobe.attempt("read-etc-shadow", "cat /etc/shadow; head -c 64 /etc/gshadow", write=False, kind="kernel")
    assert "Permission denied" in reply["text"]
    assert re.search(r"^root:[^:\n]*:", reply["text"], re.M) is None
    secret = _shadow_head()
    assert not secret or secret not in reply["text"]


def test_a_file_only_root_reads_stays_unread_in_plan_mode(kprobe: Probe, box: Box, tmp_path: Path) -> None:
    folder = Path(_visible_base())  # root's home when the suite is root: a 0700 folder
    try:
        os.chmod(folder, 0o700)
        key = folder / "id_ed25519"
        key.write_text("sk-test-private-ssh-key-9f3e\n")
        os.chmod(key, 0o600)
        reply = kprobe.attempt("read-root-private-file", f"cat {key}", write=False, kind="kernel")
        assert "sk-test-private-ssh-key-9f3e" not in reply["text"]
        assert reply["is_error"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_root_runs_a_plan_mode_command_as_nobody_and_a_write_mode_one_as_the_owner(
    kprobe: Probe, box: Box
) -> None:
    """As root: plan mode as nobody (the workspace is root's), write mode in a workspace
    another user owns as that user (files it writes are that user's)."""
    plan = kprobe.attempt("whoami-plan", "id -u", write=False, kind="kernel")
    write = kprobe.attempt("whoami-write", "id -u && touch made-here", write=True, kind="kernel")
    uid = os.getuid() if box.user is None else box.user.uid
    if os.geteuid() == 0 and box.user is None:
        assert plan["text"] == "65534"
        assert write["text"] == "0"
    else:
        assert plan["text"] == write["text"] == str(uid)
    assert (kprobe.world.ws / "made-here").stat().st_uid == uid


def test_root_in_a_workspace_another_user_owns_runs_as_that_user(runner: Runner, tmp_path: Path) -> None:
    """ketch as root (``sudo ketch``) in someone's project: commands run as its owner, so
    they write files that user owns and cannot read root's."""
    user = unprivileged_user()
    ws = user.folder("ketch-owned-ws-")
    try:
        reply = runner.run("id -u; touch made-here; cat /etc/shadow", ws, write=True)
        if os.geteuid() == 0:
            assert reply["text"].splitlines()[0] == str(user.uid)
            assert "Permission denied" in reply["text"]
        assert (ws / "made-here").stat().st_uid == user.uid
    finally:
        shutil.rmtree(ws, ignore_errors=True)


# --- denial of service: processes, memory, CPU, files, output -----------------------------------

FORK_BOMB = textwrap.dedent(
    """
    import os, sys
    read, write = os.pipe()
    count = 0
    try:
        while count < 5000:
            if os.fork() == 0:
                os.close(write)
                os.read(read, 1)
                os._exit(0)
            count += 1
    except OSError as exc:
        print("refused:", exc.strerror)
    print("forked", count)
    os.close(write)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    sys.exit(1 if count < 5000 else 0)
    """
)

THREAD_BOMB = textwrap.dedent(
    """
    import threading, sys
    stop = threading.Event()
    threads = []
    try:
        while len(threads) < 5000:
            t = threading.Thread(target=stop.wait)
            t.start()
            threads.append(t)
    except RuntimeError as exc:
        print("refused:", exc)
    print("started", len(threads))
    stop.set()
    sys.exit(1 if len(threads) < 5000 else 0)
    """
)

MEMORY_BOMB = textwrap.dedent(
    """
    held, total = [], 0
    while total < (64 << 30):
        held.append(bytearray(16 << 20))
        total += 16 << 20
        print("holding", total >> 20, "MiB", flush=True)
    """
)


def _script(probe: Probe, name: str, text: str) -> None:
    path = probe.world.ws / name
    path.write_text(text)
    os.chmod(path, 0o644)
    probe.world.reset_baseline()


def _number(pattern: str, text: str) -> int:
    match = re.search(pattern, text)
    assert match is not None, text
    return int(match.group(1))


@pytest.mark.parametrize("write", MODES)
def test_a_fork_bomb_is_held_to_the_process_limit(kprobe: Probe, write: bool) -> None:
    _script(kprobe, "bomb.py", FORK_BOMB)

    def held(reply: dict[str, Any]) -> list[str]:
        forked = _number(r"forked (\d+)", reply["text"])
        return [] if forked < 512 else [f"{forked} processes"]

    reply = kprobe.dos_attempt("fork-bomb", "python3 bomb.py", held, write=write)
    assert "refused: Resource temporarily unavailable" in reply["text"]
    assert reply["text"].endswith("[stopped: the command reached the process limit (512)]")


def test_a_fork_bomb_is_held_to_a_lower_configured_limit(kprobe: Probe) -> None:
    _script(kprobe, "bomb.py", FORK_BOMB)

    def held(reply: dict[str, Any]) -> list[str]:
        forked = _number(r"forked (\d+)", reply["text"])
        return [] if forked < 40 else [f"{forked} processes"]

    reply = kprobe.dos_attempt("fork-bomb-40", "python3 bomb.py", held, write=True, limits={"processes": 40})
    assert reply["text"].endswith("[stopped: the command reached the process limit (40)]")


@pytest.mark.parametrize("box", ["unprivileged"], indirect=True)
def test_the_process_limit_counts_only_the_commands_own_processes(kprobe: Probe, box: Box) -> None:
    """An ordinary user has no cgroup here: ``RLIMIT_NPROC`` holds the bound, and in the
    command's own user namespace (Linux 5.14 on) it counts only the command's processes,
    not the 60 the same user runs outside."""
    assert box.user is not None
    _script(kprobe, "bomb.py", FORK_BOMB)
    outside = [subprocess.Popen(box.user.argv("sleep", "300"), cwd="/") for _ in range(60)]
    try:

        def held(reply: dict[str, Any]) -> list[str]:
            forked = _number(r"forked (\d+)", reply["text"])
            return [] if forked < 40 else [f"{forked} processes"]

        reply = kprobe.dos_attempt("fork-bomb-beside-others", "python3 bomb.py", held, write=True, limits={"processes": 40})
        assert _number(r"forked (\d+)", reply["text"]) >= 30  # the 60 outside do not count
    finally:
        for proc in outside:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("write", MODES)
def test_a_thread_bomb_is_held_to_the_process_limit(kprobe: Probe, write: bool) -> None:
    _script(kprobe, "threads.py", THREAD_BOMB)

    def held(reply: dict[str, Any]) -> list[str]:
        started = _number(r"started (\d+)", reply["text"])
        return [] if started < 100 else [f"{started} threads"]

    reply = kprobe.dos_attempt("thread-bomb", "python3 threads.py", held, write=write, limits={"processes": 100})
    assert "refused: can't start new thread" in reply["text"]


@pytest.mark.parametrize("write", MODES)
def test_a_memory_bomb_is_held_to_the_memory_limit(kprobe: Probe, write: bool) -> None:
    _script(kprobe, "memory.py", MEMORY_BOMB)

    def held(reply: dict[str, Any]) -> list[str]:
        got = max(int(n) for n in re.findall(r"holding (\d+) MiB", reply["text"]))
        return [] if got <= 256 else [f"{got} MiB"]

    reply = kprobe.dos_attempt("memory-bomb", "python3 memory.py", held, write=write, limits={"memory": 256 << 20})
    assert reply["text"].endswith("[stopped: the command reached the memory limit (256 MiB)]")


def test_memory_spread_over_processes_is_held_by_the_cgroup(probe: Probe) -> None:
    """Many processes each below the limit: the memory cgroup of the command holds their
    sum (CI runs as root, which has one here; an unprivileged user has the per-process
    bound only, see the docs)."""

    def held(reply: dict[str, Any]) -> list[str]:
        return [] if "[stopped: the command reached the memory limit (256 MiB)]" in reply["text"] else ["not stopped"]

    command = "for i in 1 2 3 4 5 6; do python3 -c 'import time; x = bytearray(100 << 20); time.sleep(30)' & done; wait"
    probe.dos_attempt("memory-over-processes", command, held, write=True, limits={"memory": 256 << 20}, timeout=60)


@pytest.mark.parametrize("write", MODES)
@pytest.mark.parametrize("spinner", ["python3 -c 'while True: pass'", "while :; do :; done"])
def test_a_cpu_spinner_is_stopped_at_the_cpu_time_limit(kprobe: Probe, write: bool, spinner: str) -> None:
    def held(reply: dict[str, Any]) -> list[str]:
        return [] if reply["text"].endswith("[stopped: the command reached the CPU time limit (1 s)]") else ["ran on"]

    kprobe.dos_attempt("cpu-spinner", spinner, held, write=write, limits={"cpu_seconds": 1}, timeout=120)


@pytest.mark.parametrize("how", ["head -c 10M /dev/zero > big", "python3 -c \"open('big', 'wb').write(bytes(10 << 20))\""])
def test_a_huge_file_in_the_workspace_is_held_to_the_file_size_limit(kprobe: Probe, how: str) -> None:
    def held(reply: dict[str, Any]) -> list[str]:
        size = (kprobe.world.ws / "big").stat().st_size
        return [] if size <= 1 << 20 else [f"a file of {size} bytes"]

    reply = kprobe.dos_attempt("huge-file", how, held, write=True, limits={"file_size": 1 << 20})
    assert reply["text"].endswith("[stopped: the command reached the file size limit (1 MiB)]")


def test_a_sparse_huge_file_is_refused(kprobe: Probe) -> None:
    def held(reply: dict[str, Any]) -> list[str]:
        big = kprobe.world.ws / "sparse"
        return [f"a file of {big.stat().st_size} bytes"] if big.exists() and big.stat().st_size > 1 << 20 else []

    kprobe.dos_attempt("sparse-file", "truncate -s 100G sparse", held, write=True, limits={"file_size": 1 << 20})


def test_the_private_tmp_holds_at_most_half_the_memory_limit(kprobe: Probe) -> None:
    def held(reply: dict[str, Any]) -> list[str]:
        size = _number(r"^(\d+)$", reply["text"].splitlines()[-1] if reply["text"] else "")
        return [] if size <= 64 << 20 else [f"{size} bytes in /tmp"]

    command = "head -c 500M /dev/zero > /tmp/fill 2>/dev/null; stat -c %s /tmp/fill"
    kprobe.dos_attempt("tmp-fill", command, held, write=True, limits={"memory": 128 << 20})


def test_a_huge_output_keeps_a_capped_log_removed_at_exit(box: Box, kprobe: Probe) -> None:
    """200 MB of output: the log keeps its first and last 8 MiB, says what was cut, and is
    gone once the ketch process has exited."""
    own = Runner(box.user)  # a stand-in of its own, to see its exit
    logs: list[str] = []
    try:
        probe = Probe(own, kprobe.world)

        def held(reply: dict[str, Any]) -> list[str]:
            path = reply["output_file"]
            logs.append(path)
            size = os.path.getsize(path)
            return [] if size <= (16 << 20) + 200 else [f"a log of {size} bytes"]

        command = "head -c 200000000 /dev/zero | tr '\\0' x | fold -w 99; echo END"
        reply = probe.dos_attempt("huge-output", command, held, write=False)
        assert "[output cut: the command wrote 192.7 MiB; its log keeps the first and the last 8 MiB" in reply["text"]
        log = Path(logs[0]).read_bytes()
        assert log.startswith(b"x" * 99 + b"\n")
        assert log.endswith(b"x" * 99 + b"\nxxEND\n")
        assert b"bytes of output cut here" in log
    finally:
        own.close()
    assert logs and not os.path.exists(logs[0])
    assert not os.path.exists(os.path.dirname(logs[0]))
