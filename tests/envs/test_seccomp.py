"""The hand-assembled seccomp filter, run through a tiny classic-BPF interpreter.

The sandbox tests show the kernel applying it on this machine's architecture; here every
architecture's program is checked against the rules it must implement: foreign ABI -> kill,
x32 numbers (x86_64) -> EPERM, every denied syscall -> EPERM, socket() of any family but AF_UNIX
-> EAFNOSUPPORT, everything else -> allow.
"""

from __future__ import annotations

import errno
import struct

import pytest

from reinforge.envs.tools.seccomp import DENIED_SYSCALLS, SOCKET_SYSCALL, SeccompUnsupportedError, filter_program

ALLOW, KILL, EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | errno.EPERM
EAFNOSUPPORT = 0x00050000 | errno.EAFNOSUPPORT
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def run_bpf(program: bytes, nr: int, arch: int, *args: int) -> int:
    """Execute a classic BPF program over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack_from("=HBBI", program, offset) for offset in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35):  # jeq / jge #k
            taken = acc == k if code == 0x15 else acc >= k
            pc += 1 + (jt if taken else jf)
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_filter_denies_the_list_and_allows_the_rest(machine) -> None:
    program = filter_program(machine)
    column = 0 if machine == "x86_64" else 1
    denied = {numbers[column] for numbers in DENIED_SYSCALLS.values() if numbers[column] is not None}
    for nr in range(0, 600):
        expected = EPERM if nr in denied else ALLOW
        assert run_bpf(program, nr, ARCH[machine], AF_UNIX) == expected, nr
    other = ARCH["aarch64" if machine == "x86_64" else "x86_64"]
    assert run_bpf(program, 0, other) == KILL  # another ABI's numbers mean other syscalls
    assert run_bpf(program, 0, 0x40000003) == KILL  # i386 (int 0x80 on x86_64)
    if machine == "x86_64":
        assert run_bpf(program, 0 | 0x40000000, ARCH[machine]) == EPERM  # x32 read()
    # spot checks against the kernel's tables
    expected_numbers = {"x86_64": {"io_uring_setup": 425, "keyctl": 250, "ptrace": 101},
                        "aarch64": {"io_uring_setup": 425, "keyctl": 219, "ptrace": 117}}[machine]
    for name, nr in expected_numbers.items():
        assert DENIED_SYSCALLS[name][column] == nr and run_bpf(program, nr, ARCH[machine]) == EPERM


def test_unknown_architecture_is_refused() -> None:
    with pytest.raises(SeccompUnsupportedError, match="riscv64"):
        filter_program("riscv64")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_only_unix_sockets_can_be_made(machine) -> None:
    # issue 31: TCP on the sandbox's own loopback held 1 GB of host memory outside its cgroup
    program, nr = filter_program(machine), SOCKET_SYSCALL[0 if machine == "x86_64" else 1]
    assert run_bpf(program, nr, ARCH[machine], AF_UNIX) == ALLOW
    for family in (AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, 0, 45):
        assert run_bpf(program, nr, ARCH[machine], family) == EAFNOSUPPORT, family
        # the kernel reads an int: high bits of the register cannot smuggle AF_UNIX past the check
        assert run_bpf(program, nr, ARCH[machine], (1 << 32) | family) == EAFNOSUPPORT, family
    assert run_bpf(program, nr, ARCH[machine], (1 << 32) | AF_UNIX) == ALLOW


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_kernel_memory_side_doors_are_denied(machine) -> None:
    column = 0 if machine == "x86_64" else 1
    program = filter_program(machine)
    for name in ("shmget", "semget", "msgget", "mq_open", "setxattr", "lsetxattr", "fsetxattr", "inotify_init1",
                 "inotify_add_watch"):
        assert run_bpf(program, DENIED_SYSCALLS[name][column], ARCH[machine]) == EPERM, name
    expected = {"x86_64": {"shmget": 29, "mq_open": 240, "fsetxattr": 190, "socket": 41},
                "aarch64": {"shmget": 194, "mq_open": 180, "fsetxattr": 7, "socket": 198}}[machine]
    for name, nr in expected.items():
        assert (SOCKET_SYSCALL[column] if name == "socket" else DENIED_SYSCALLS[name][column]) == nr
