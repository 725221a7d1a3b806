"""A seccomp filter for the code sandbox: refuse the system calls a test program never needs and that
either escape the memory accounting or open kernel code (threat model: rewards/sandbox/runner.py).

Loaded by path from init.py (stdlib only). Init installs the filter on itself once its
namespaces and mounts are set up; every process it forks afterwards (the test program, its children,
the assert judge) inherits it, and a filter can never be removed. Classic BPF, built here by hand
(no dependency): the kernel runs it on every system call with `struct seccomp_data` as input:

    offset 0: int nr;  4: u32 arch;  8: u64 instruction_pointer;  16 + 8*i: u64 args[i]

The program: a foreign architecture (e.g. 32-bit `int 0x80` calls on x86-64, whose numbers differ)
kills the process; x32 system calls are refused; every call in _NAMES returns EPERM; socket and
socketpair work for AF_UNIX, AF_INET and AF_INET6 only (EAFNOSUPPORT otherwise: AF_VSOCK reaches the
hypervisor host whatever the network namespace, AF_NETLINK, AF_PACKET and AF_ALG are kernel surface);
clone3 returns ENOSYS (its flags sit in user memory, which BPF cannot read; glibc then falls back to
clone); clone with a namespace flag returns EPERM; setrlimit and prlimit64 may not set RLIMIT_CORE
(EPERM; reading it works): init sets it to 1 before the filter, and 1 is the kernel's "no core dump,
not even to a core_pattern pipe" (fs/coredump.c), where 0 still starts the host's pipe helper
(systemd-coredump, apport) as root, outside every limit, for each crash of an exec'd program;
everything else is allowed.
"""

import ctypes
import errno
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF opcodes (class | size | mode)
X32_SYSCALL_BIT = 0x40000000
RLIMIT_CORE = 4
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6: the network namespace isolates the last two
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (CLONE_NEWTIME's bit is the exit
# signal's for clone(2), so it is not listed; unshare, which could take it, is refused outright).
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# Why each is refused, in groups. Memory the per-process limits and RSS do not see: memfd_create,
# memfd_secret, SysV shared memory / message queues / semaphores, POSIX message queues. New namespaces
# (unshare(CLONE_NEWUSER) reaches kernel code written for privileged users): unshare, setns (clone is
# filtered by flags). Reaching into other processes: ptrace, process_vm_readv/writev, pidfd_getfd, kcmp.
# Kernel attack surface no test needs: bpf, perf_event_open, userfaultfd, io_uring, keyrings, the
# mount API, modules, kexec, swap, reboot, accounting, quotas, file handles, syslog, fanotify.
_NAMES = ("memfd_create", "memfd_secret", "shmget", "shmat", "msgget", "semget", "mq_open",
          "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
          "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
          "keyctl", "add_key", "request_key", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount",
          "fspick", "open_tree", "move_mount", "mount_setattr", "init_module", "finit_module", "delete_module",
          "kexec_load", "kexec_file_load", "swapon", "swapoff", "reboot", "acct", "quotactl",
          "open_by_handle_at", "name_to_handle_at", "syslog", "vhangup", "fanotify_init")
# System call numbers (linux/arch/x86/entry/syscalls/syscall_64.tbl; asm-generic/unistd.h for arm64).
_X86_64 = dict(memfd_create=319, memfd_secret=447, shmget=29, shmat=30, msgget=68, semget=64, mq_open=240,
               unshare=272, setns=308, ptrace=101, process_vm_readv=310, process_vm_writev=311,
               pidfd_getfd=438, kcmp=312, bpf=321, perf_event_open=298, userfaultfd=323, io_uring_setup=425,
               io_uring_enter=426, io_uring_register=427, keyctl=250, add_key=248, request_key=249,
               mount=165, umount2=166, pivot_root=155, chroot=161, fsopen=430, fsmount=432, fspick=433,
               open_tree=428, move_mount=429, mount_setattr=442, init_module=175, finit_module=313,
               delete_module=176, kexec_load=246, kexec_file_load=320, swapon=167, swapoff=168, reboot=169,
               acct=163, quotactl=179, open_by_handle_at=304, name_to_handle_at=303, syslog=103,
               vhangup=153, fanotify_init=300, clone=56, clone3=435, socket=41, socketpair=53,
               setrlimit=160, prlimit64=302)
_AARCH64 = dict(memfd_create=279, memfd_secret=447, shmget=194, shmat=196, msgget=186, semget=190, mq_open=180,
                unshare=97, setns=268, ptrace=117, process_vm_readv=270, process_vm_writev=271,
                pidfd_getfd=438, kcmp=272, bpf=280, perf_event_open=241, userfaultfd=282, io_uring_setup=425,
                io_uring_enter=426, io_uring_register=427, keyctl=219, add_key=217, request_key=218,
                mount=40, umount2=39, pivot_root=41, chroot=51, fsopen=430, fsmount=432, fspick=433,
                open_tree=428, move_mount=429, mount_setattr=442, init_module=105, finit_module=273,
                delete_module=106, kexec_load=104, kexec_file_load=294, swapon=224, swapoff=225, reboot=142,
                acct=89, quotactl=60, open_by_handle_at=265, name_to_handle_at=264, syslog=116,
                vhangup=58, fanotify_init=262, clone=220, clone3=435, socket=198, socketpair=199,
                setrlimit=164, prlimit64=261)
_ARCHES = {"x86_64": (0xC000003E, _X86_64), "aarch64": (0xC00000B7, _AARCH64)}  # AUDIT_ARCH_*


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)  # struct sock_filter


def filter_program() -> bytes | None:
    """The filter as packed `struct sock_filter`s, or None on an architecture without a table here."""
    arch = _ARCHES.get(platform.machine())
    if arch is None or sys.byteorder != "little":  # args[0]'s low word is at offset 16 only on little-endian
        return None
    audit_arch, numbers = arch
    deny = _insn(RET_K, RET_ERRNO | errno.EPERM)
    prog = [_insn(LD_W_ABS, 4), _insn(JEQ_K, audit_arch, 1, 0), _insn(RET_K, RET_KILL_PROCESS),
            _insn(LD_W_ABS, 0)]
    if audit_arch == 0xC000003E:
        prog += [_insn(JGE_K, X32_SYSCALL_BIT, 0, 1), deny]
    for name in _NAMES:
        prog += [_insn(JEQ_K, numbers[name], 0, 1), deny]  # equal: fall into the deny; else skip it
    prog += [_insn(JEQ_K, numbers["socket"], 1, 0), _insn(JEQ_K, numbers["socketpair"], 0, 6),
             _insn(LD_W_ABS, 16)]  # the address family (args[0]); each match jumps to the allow below
    prog += [_insn(JEQ_K, family, len(SOCKET_FAMILIES) - i, 0) for i, family in enumerate(SOCKET_FAMILIES)]
    prog += [_insn(RET_K, RET_ERRNO | errno.EAFNOSUPPORT), _insn(RET_K, RET_ALLOW)]
    # RLIMIT_CORE stays 1 (see the module docstring): setrlimit(resource = args[0]) and
    # prlimit64(pid, resource = args[1], new = args[2] != NULL) may not set it; other limits may be set.
    prog += [_insn(JEQ_K, numbers["setrlimit"], 0, 4), _insn(LD_W_ABS, 16),
             _insn(JEQ_K, RLIMIT_CORE, 0, 1), deny, _insn(RET_K, RET_ALLOW)]
    prog += [_insn(JEQ_K, numbers["prlimit64"], 0, 8), _insn(LD_W_ABS, 24),
             _insn(JEQ_K, RLIMIT_CORE, 0, 5), _insn(LD_W_ABS, 32),  # the new limit's pointer: low word,
             _insn(JEQ_K, 0, 0, 2), _insn(LD_W_ABS, 36),             # then high word
             _insn(JEQ_K, 0, 1, 0), deny, _insn(RET_K, RET_ALLOW)]
    prog += [_insn(JEQ_K, numbers["clone3"], 0, 1), _insn(RET_K, RET_ERRNO | errno.ENOSYS),
             _insn(JEQ_K, numbers["clone"], 0, 3), _insn(LD_W_ABS, 16),  # clone's flags (low word)
             _insn(JSET_K, CLONE_NAMESPACE_FLAGS, 0, 1), deny,
             _insn(RET_K, RET_ALLOW)]
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes) -> None:
    """Filter this process and everything it forks from now on. Raises OSError if the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    steps = ((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0))
    for args in steps:
        if libc.prctl(*(ctypes.c_ulong(a) for a in args)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({args[0]}): {os.strerror(err)}")
