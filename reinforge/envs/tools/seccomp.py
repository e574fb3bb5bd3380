"""A seccomp syscall filter for the sandbox: deny what a Python solution never needs.

bubblewrap installs a classic BPF program given on a file descriptor (`bwrap --seccomp FD`,
after PR_SET_NO_NEW_PRIVS); it applies to the sandboxed program and everything it starts. We
assemble that program here by hand (no libseccomp binding in our venv; the filter is ~60
instructions). It is a deny list, not an allow list: a Python program legitimately uses a wide and
version-dependent set of syscalls, while the ones below are kernel attack surface or escape tools
(io_uring, kernel keyrings, ptrace and cross-process memory access, BPF, perf, userfaultfd,
mounts and namespaces, modules, kexec, reboot, swap, clocks, file handles, anonymous memory files)
that no solution needs, plus the ones whose kernel memory no bound of ours would see (issue 31):
SysV IPC and POSIX message queues, extended attributes, inotify (which would also show when other
processes open files under the shared /usr), and every socket family but AF_UNIX. bubblewrap's
network namespace brings its loopback UP, and TCP buffers on it are charged to no cgroup v1 and
bounded only by the host-wide `tcp_mem` (one call held 1 GB that way): no task needs a network,
so `socket()` of any other family fails with EAFNOSUPPORT. (Unix sockets stay: asyncio and
multiprocessing use them; their buffers are kernel memory a cgroup charges to the call.)

The program, in `struct sock_filter` form (see linux/filter.h, linux/seccomp.h):

    ld  [4]                       ; seccomp_data.arch
    jne #AUDIT_ARCH, kill         ; another ABI (e.g. i386 via int 0x80) would use other numbers
    ld  [0]                       ; seccomp_data.nr
    jge #0x40000000, deny         ; x86_64 only: x32 numbers are nr | 0x40000000, a second table
    jeq #nr_1, deny               ; one test per denied syscall
    ...
    jne #nr_socket, allow
    ld  [16]                      ; seccomp_data.args[0], low word (little-endian): the family
    jne #AF_UNIX, no_family
allow:
    ret #SECCOMP_RET_ALLOW
deny:
    ret #SECCOMP_RET_ERRNO | EPERM
kill:
    ret #SECCOMP_RET_KILL_PROCESS
no_family:
    ret #SECCOMP_RET_ERRNO | EAFNOSUPPORT

Numbers come from the kernel's syscall tables (arch/x86/entry/syscalls/syscall_64.tbl and
include/uapi/asm-generic/unistd.h for aarch64). On any other machine `filter_program` raises:
we refuse to run unfiltered rather than guess numbers.
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF opcodes (linux/bpf_common.h)
_BPF_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_BPF_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_BPF_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_BPF_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K

_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_X32_SYSCALL_BIT = 0x40000000

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # EM_X86_64 / EM_AARCH64 | 64BIT | LE

# name: (x86_64 number, aarch64 number); None where the arch has no such syscall.
DENIED_SYSCALLS: dict[str, tuple[int | None, int | None]] = {
    # async I/O engine with a long CVE history; no Python stdlib module uses it
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    # kernel keyrings are not namespaced: keys would be shared with the host
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    # reading or writing other processes (the code_tests judge runs beside the solution)
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "pidfd_getfd": (438, 438),
    # kernel programs, profiling and page-fault handling from user space
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    # filesystems and namespaces: the sandbox's view is fixed by bubblewrap
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "unshare": (272, 97), "setns": (308, 268), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "open_tree": (428, 428),
    "mount_setattr": (442, 442), "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "fanotify_init": (300, 262), "quotactl": (179, 60), "quotactl_fd": (443, 443),
    # the machine itself
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "syslog": (103, 116),
    "vhangup": (153, 58), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "adjtimex": (159, 171), "clock_adjtime": (305, 266), "personality": (135, 92),
    "lookup_dcookie": (212, 18),
    # anonymous memory files are charged to no mount: with no cgroup they would escape the budget
    # (the work dir and /dev/shm are size-capped tmpfs, which is where Python puts shared memory)
    "memfd_create": (319, 279), "memfd_secret": (447, 447), "iopl": (172, None), "ioperm": (173, None), "uselib": (134, None),
    # kernel memory outside the tmpfs's size and the call's processes (issue 31): SysV shared
    # memory, semaphores and message queues (the ids are made by the *get calls; the stdlib never
    # uses SysV IPC, multiprocessing uses /dev/shm files), POSIX message queues, extended
    # attributes (shutil.copystat ignores EPERM), and inotify watches on the shared /usr
    "shmget": (29, 194), "semget": (64, 190), "msgget": (68, 186), "mq_open": (240, 180),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "fsetxattr": (190, 7), "setxattrat": (463, 463),
    "inotify_init": (253, None), "inotify_init1": (294, 26), "inotify_add_watch": (254, 27),
}
# Not denied, though it shows the host's RAM, free memory, 1/5/15-minute load, uptime and process
# count (issue 31): sysinfo (x86_64 99, aarch64 179). glibc's get_phys_pages/get_avphys_pages
# (sysconf _SC_PHYS_PAGES/_SC_AVPHYS_PAGES, os.sysconf in Python, and glibc < 2.37's qsort, which
# sizes its buffer by them) ignore sysinfo's error and return whatever the stack held: measured with
# EPERM, os.sysconf('SC_PHYS_PAGES') = -1041256318962806784 (getloadavg raises, `free` and `uptime`
# read the /proc files sandbox.py already fakes). A filter can only fail a syscall or hand it to a
# tracer or a user-notification supervisor; showing a fake struct needs the latter (a second filter
# installed with SECCOMP_FILTER_FLAG_NEW_LISTENER before bwrap, which cannot take a listener, and a
# host thread writing the call's bound into the caller's memory), not built. No memory is reachable
# through sysinfo: the call's cgroup or budget bounds it whatever it reads.

SOCKET_SYSCALL = (41, 198)  # socket(2): only AF_UNIX may be created
_AF_UNIX = 1
_SECCOMP_DATA_ARG0 = 16  # offsetof(struct seccomp_data, args[0]); its low word on little-endian


class SeccompUnsupportedError(RuntimeError):
    """No syscall table for this machine's architecture."""


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)  # struct sock_filter, native byte order


def filter_program(machine: str | None = None) -> bytes:
    """The BPF program (bytes of `struct sock_filter[]`) for `machine` (default: this one)."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        raise SeccompUnsupportedError(
            f"sandbox: no seccomp syscall table for architecture {machine!r} (only x86_64 and aarch64); "
            "refusing to run model code without a syscall filter")
    column = 0 if machine == "x86_64" else 1
    numbers = sorted({nrs[column] for nrs in DENIED_SYSCALLS.values() if nrs[column] is not None})
    body: list[tuple[int, int]] = []  # (opcode, k) of the tests after the arch check and nr load
    if machine == "x86_64":
        body.append((_BPF_JGE_K, _X32_SYSCALL_BIT))
    body += [(_BPF_JEQ_K, nr) for nr in numbers]
    # Layout: 0 ld arch, 1 jne kill, 2 ld nr, 3.. tests, then the socket family check (3
    # instructions), allow, deny, kill, no_family. BPF jumps only forward, so every target follows.
    socket_at = 3 + len(body)
    allow_at = socket_at + 3
    deny_at, kill_at, no_family_at = allow_at + 1, allow_at + 2, allow_at + 3
    program = [_insn(_BPF_LD_W_ABS, 0, 0, 4),
               _insn(_BPF_JEQ_K, 0, kill_at - 2, _AUDIT_ARCH[machine]),  # jump offsets count from pc+1
               _insn(_BPF_LD_W_ABS, 0, 0, 0)]
    for index, (opcode, k) in enumerate(body):
        pc = 3 + index
        program.append(_insn(opcode, deny_at - pc - 1, 0, k))
    program += [_insn(_BPF_JEQ_K, 0, allow_at - socket_at - 1, SOCKET_SYSCALL[column]),
                _insn(_BPF_LD_W_ABS, 0, 0, _SECCOMP_DATA_ARG0),
                _insn(_BPF_JEQ_K, 0, no_family_at - (socket_at + 2) - 1, _AF_UNIX),
                _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
                _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM),
                _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_KILL_PROCESS),
                _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT)]
    if kill_at - 2 > 255:  # jt/jf are 8-bit offsets: the arch check jumps the farthest
        raise SeccompUnsupportedError("sandbox: the syscall deny list is too long for 8-bit BPF jumps")
    return b"".join(program)
