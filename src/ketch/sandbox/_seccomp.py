"""The seccomp filter of the bubblewrap sandbox: a classic-BPF program, built here with
:mod:`struct`, that makes the system calls a sandboxed command has no business making
fail, whatever its user and capabilities.

Kept apart: the kernel keyrings (``add_key``, ``keyctl``, ``request_key``: a key added
inside would be found by the host's processes of the same user), loading or replacing
the kernel (``init_module``, ``kexec_load``, …), BPF programs, performance counters,
``userfaultfd``, ``io_uring``, mounting and joining namespaces, the kernel log, the
clock, swap, accounting, quotas, ``reboot``, and new user namespaces (``unshare`` or
``clone`` with ``CLONE_NEWUSER``; ``clone3``, whose flags a filter cannot read, fails
with ENOSYS so that the C library falls back to ``clone``). Each such call fails with
EPERM; every other call is allowed.

The program checks the architecture of each call first: a call made through another
ABI than the host's (32-bit programs on x86_64, the x32 ABI, 32-bit ARM on aarch64)
fails with ENOSYS, so a filter written for one table of numbers is never read with
another. Hosts other than x86_64 and aarch64 get no filter (:func:`seccomp_program`
returns None) and ``ketch doctor`` says so.
"""

from __future__ import annotations

import os
import struct

# classic BPF (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

# linux/seccomp.h
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_EPERM = 1
_ENOSYS = 38

# offsets in struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR = 0
_ARCH = 4
_ARG0_LOW = 16  # the low 32 bits of args[0] (both architectures are little-endian)

_CLONE_NEWUSER = 0x10000000
_X32_BIT = 0x40000000

_BLOCKED = (
    "add_key",
    "request_key",
    "keyctl",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "syslog",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "pivot_root",
    "mount",
    "umount2",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "setns",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "nfsservctl",
    "vhangup",
)
"""Failing with EPERM (checked against the headers of both architectures)."""

_NUMBERS: dict[str, tuple[int, int]] = {
    # name: (x86_64, aarch64), from asm/unistd_64.h and asm-generic/unistd.h
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "syslog": (103, 116),
    "acct": (163, 89),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
    "pivot_root": (155, 41),
    "mount": (165, 40),
    "umount2": (166, 39),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "open_by_handle_at": (304, 265),
    "setns": (308, 268),
    "quotactl": (179, 60),
    "quotactl_fd": (443, 443),
    "lookup_dcookie": (212, 18),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "nfsservctl": (180, 42),
    "vhangup": (153, 58),
    "unshare": (272, 97),
    "clone": (56, 220),
    "clone3": (435, 435),
}
_ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}  # AUDIT_ARCH_*, column
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def host_architecture() -> str:
    """The machine's architecture as the filter names it (``x86_64``, ``aarch64``, …)."""
    machine = os.uname().machine.lower()
    return _ALIASES.get(machine, machine)


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def build_program(architecture: str) -> bytes:
    """The filter for ``architecture`` (``x86_64`` or ``aarch64``)
    as ``struct sock_filter`` records, the form ``bwrap --seccomp FD`` reads."""
    audit_arch, column = _ARCHES[architecture]
    numbers = {name: pair[column] for name, pair in _NUMBERS.items()}
    blocked = sorted({numbers[name] for name in _BLOCKED})
    # layout: arch check, nr load, [x32 check], one jeq per blocked number, the three
    # special calls, allow; then the shared tails: deny-with-EPERM, deny-with-ENOSYS,
    # the flags check of unshare/clone
    head: list[tuple[int, int, int, int]] = [_insn(_LD_W_ABS, _ARCH)]
    checks: list[tuple[str, int, int]] = []  # (kind, value, target label)
    if architecture == "x86_64":
        checks.append(("jge", _X32_BIT, 1))
    for nr in blocked:
        checks.append(("jeq", nr, 0))
    checks.append(("jeq", numbers["clone3"], 1))
    checks.append(("jeq", numbers["unshare"], 2))
    checks.append(("jeq", numbers["clone"], 2))
    # positions: 0 ld arch, 1 jeq arch, 2 ld nr, 3.. checks, then allow, eperm, enosys, flags
    first_check = 3
    allow = first_check + len(checks)
    targets = {0: allow + 1, 1: allow + 2, 2: allow + 3}  # eperm, enosys, flags check
    head.append(_insn(_JEQ, audit_arch, 0, targets[1] - 2))  # another ABI: ENOSYS
    head.append(_insn(_LD_W_ABS, _NR))
    for index, (kind, value, label) in enumerate(checks):
        here = first_check + index
        jump = targets[label] - here - 1
        if jump > 255:
            raise ValueError("seccomp program too long for 8-bit jumps")
        head.append(_insn(_JGE if kind == "jge" else _JEQ, value, jump, 0))
    head.append(_insn(_RET, _ALLOW))
    head.append(_insn(_RET, _ERRNO | _EPERM))
    head.append(_insn(_RET, _ERRNO | _ENOSYS))
    # flags check (unshare, clone): args[0] & CLONE_NEWUSER -> EPERM, else allow
    head.append(_insn(_LD_W_ABS, _ARG0_LOW))
    head.append(_insn(_JSET, _CLONE_NEWUSER, 0, 1))
    head.append(_insn(_RET, _ERRNO | _EPERM))
    head.append(_insn(_RET, _ALLOW))
    return b"".join(struct.pack("=HBBI", *insn) for insn in head)


_program: list[bytes | None] = []


def seccomp_program() -> bytes | None:
    """The filter for this machine (built once), or None on an architecture it has no
    table for."""
    if not _program:
        arch = host_architecture()
        _program.append(build_program(arch) if arch in _ARCHES else None)
    return _program[0]


def blocked_calls() -> tuple[str, ...]:
    """The names of the system calls the filter makes fail with EPERM (and ``unshare``
    and ``clone`` with ``CLONE_NEWUSER``)."""
    return _BLOCKED
