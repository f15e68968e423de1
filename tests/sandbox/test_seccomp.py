"""White-box test: imports ketch implementation modules (private) directly.

The seccomp filter's program, read by a small classic-BPF interpreter for each
architecture it is built for (the kernel's answer to it is in tests/security): the
calls it refuses, those it lets through, another ABI's calls, and flags of clone and
unshare."""

from __future__ import annotations

import struct

import pytest

from ketch.sandbox import _seccomp
from ketch.sandbox._seccomp import build_program
from ketch.sandbox._seccomp import seccomp_program

AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
I386 = 0x40000003
ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026

# a few numbers per architecture, from the kernel's tables (asm/unistd_64.h, asm-generic/unistd.h)
CALLS = {
    "x86_64": {"add_key": 248, "keyctl": 250, "request_key": 249, "read": 0, "write": 1, "openat": 257,
               "clone": 56, "clone3": 435, "unshare": 272, "ptrace": 101, "init_module": 175, "bpf": 321,
               "mount": 165, "execve": 59, "prlimit64": 302, "io_uring_setup": 425},
    "aarch64": {"add_key": 217, "keyctl": 219, "request_key": 218, "read": 63, "write": 64, "openat": 56,
                "clone": 220, "clone3": 435, "unshare": 97, "ptrace": 117, "init_module": 105, "bpf": 280,
                "mount": 40, "execve": 221, "prlimit64": 261, "io_uring_setup": 425},
}  # fmt: skip


def run(program: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """What the filter returns for a call (classic BPF: ld abs, jeq, jge, jset, ret)."""
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0 & 0xFFFFFFFFFFFFFFFF, 0, 0, 0, 0, 0)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):
            hit = acc == k if code == 0x15 else (acc >= k if code == 0x35 else bool(acc & k))
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_kernel_keyrings_and_module_loading_are_refused(arch: str) -> None:
    program, calls = build_program(arch), CALLS[arch]
    assert len(program) % 8 == 0
    for name in ("add_key", "keyctl", "request_key", "init_module", "bpf", "mount", "io_uring_setup"):
        assert run(program, calls[name], AUDIT[arch]) == EPERM, name


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_ordinary_calls_pass(arch: str) -> None:
    program, calls = build_program(arch), CALLS[arch]
    for name in ("read", "write", "openat", "execve", "ptrace", "prlimit64"):
        assert run(program, calls[name], AUDIT[arch]) == ALLOW, name


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_new_user_namespaces_are_refused_other_clones_pass(arch: str) -> None:
    program, calls = build_program(arch), CALLS[arch]
    newuser, newns, thread = 0x10000000, 0x00020000, 0x00010000 | 0x00000100
    assert run(program, calls["unshare"], AUDIT[arch], newuser | newns) == EPERM
    assert run(program, calls["unshare"], AUDIT[arch], newns) == ALLOW  # refused by the kernel: no capability
    assert run(program, calls["clone"], AUDIT[arch], newuser) == EPERM
    assert run(program, calls["clone"], AUDIT[arch], thread) == ALLOW
    assert run(program, calls["clone3"], AUDIT[arch]) == ENOSYS  # the C library falls back to clone


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_another_abi_fails_closed(arch: str) -> None:
    program = build_program(arch)
    other = AUDIT["aarch64" if arch == "x86_64" else "x86_64"]
    for nr in (0, 1, 56, 248):
        assert run(program, nr, I386) == ENOSYS
        assert run(program, nr, other) == ENOSYS


def test_x32_calls_are_refused() -> None:
    program = build_program("x86_64")
    assert run(program, 0x40000000 | 248, AUDIT["x86_64"]) == ENOSYS
    assert run(program, 0x40000000, AUDIT["x86_64"]) == ENOSYS


def test_an_unknown_architecture_gets_no_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_seccomp, "_program", [])
    monkeypatch.setattr(_seccomp, "host_architecture", lambda: "riscv64")
    assert seccomp_program() is None
    monkeypatch.setattr(_seccomp, "_program", [])
    monkeypatch.setattr(_seccomp, "host_architecture", lambda: "aarch64")
    assert seccomp_program() == build_program("aarch64")
