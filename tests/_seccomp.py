"""Test helper: make chosen system calls fail with a chosen errno, using a real seccomp filter.

This reproduces what a container runtime does (Docker >= 25 and containerd 2 deny
``io_uring_setup`` with EPERM; gVisor answers ENOSYS), with nothing but ctypes:

* ``deny_syscalls({"io_uring_setup": errno.EPERM})`` installs the filter in *this* process. It
  cannot be undone, so call it only in a throw-away child process.
* ``run_python(code, deny={...})`` runs ``code`` in a fresh interpreter that installs the filter
  first, before anything imports aionative, and returns the JSON the code printed last.

Both raise ``SeccompUnavailable`` when this machine cannot do it (unsupported architecture,
seccomp compiled out, ``prctl``/``seccomp`` refused); tests turn that into a skip.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import json
import os
import platform
import struct
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# --- constants from <linux/prctl.h>, <linux/seccomp.h>, <linux/filter.h>, <linux/audit.h> ---
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1        # apply to every thread of the process, not just this one
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000       # low 16 bits: the errno the system call returns
SECCOMP_RET_DATA = 0x0000FFFF

# Classic BPF opcodes: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K.
BPF_LD_W_ABS = 0x00 | 0x00 | 0x20
BPF_JEQ_K = 0x05 | 0x10 | 0x00
BPF_RET_K = 0x06 | 0x00

# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
OFF_NR = 0
OFF_ARCH = 4

# Per architecture (platform.machine() of a 64-bit interpreter): the AUDIT_ARCH_* value the
# kernel puts in seccomp_data.arch, and the system call numbers we may need.
ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {"io_uring_setup": 425, "io_setup": 206, "seccomp": 317,
                            "io_uring_enter": 426, "io_submit": 209}),
    "aarch64": (0xC00000B7, {"io_uring_setup": 425, "io_setup": 0, "seccomp": 277,
                             "io_uring_enter": 426, "io_submit": 2}),
}


class SeccompUnavailable(RuntimeError):
    """A seccomp filter cannot be installed here; the message says why."""


class _SockFilter(ctypes.Structure):  # struct sock_filter
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def arch() -> tuple[int, dict[str, int]]:
    """(AUDIT_ARCH value, syscall table) of this interpreter, or SeccompUnavailable."""
    machine = platform.machine()
    if sys.platform != "linux":
        raise SeccompUnavailable(f"seccomp is Linux-only (platform {sys.platform})")
    if machine not in ARCHES or struct.calcsize("P") != 8:
        raise SeccompUnavailable(f"no seccomp syscall table for {machine} "
                                 f"({struct.calcsize('P') * 8}-bit interpreter)")
    return ARCHES[machine]


def build_filter(deny: Mapping[str, int]) -> list[tuple[int, int, int, int]]:
    """The BPF program, as (code, jt, jf, k) tuples. Jump offsets count from the next
    instruction: jt/jf = 0 falls through, 1 skips one instruction."""
    audit_arch, table = arch()
    prog = [
        # A = seccomp_data.arch. System call numbers mean different things per ABI, so they
        # must only be compared once we know which ABI the call came through.
        (BPF_LD_W_ABS, 0, 0, OFF_ARCH),
        # Our ABI: skip the next instruction. Another one (e.g. i386 int 0x80 on x86_64): this
        # is a fault injector, not a sandbox, so let it through rather than kill the process.
        (BPF_JEQ_K, 1, 0, audit_arch),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        # A = seccomp_data.nr, the system call number.
        (BPF_LD_W_ABS, 0, 0, OFF_NR),
    ]
    for name, err in deny.items():
        if name not in table:
            raise ValueError(f"unknown system call {name!r} (known: {', '.join(table)})")
        if not 0 < err <= SECCOMP_RET_DATA:
            raise ValueError(f"errno {err} out of range")
        # Not this call: skip the return below. This call: fail it with errno `err`.
        prog.append((BPF_JEQ_K, 0, 1, table[name]))
        prog.append((BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | err))
    # Everything else runs normally.
    prog.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    return prog


def deny_syscalls(deny: Mapping[str, int]) -> None:
    """Install, irrevocably and for every thread of this process (and its future children),
    a filter making each named system call fail with its errno."""
    _, table = arch()
    insns = build_filter(deny)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    libc.syscall.restype = ctypes.c_long
    # Without CAP_SYS_ADMIN the kernel accepts a filter only from a process that promised
    # never to gain privileges (set-uid binaries would otherwise run under our filter).
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise SeccompUnavailable(f"prctl(PR_SET_NO_NEW_PRIVS): {_errno.errorcode.get(e, e)}")
    array = (_SockFilter * len(insns))(*(_SockFilter(*i) for i in insns))
    fprog = _SockFprog(len(insns), array)
    # seccomp(2) rather than prctl(PR_SET_SECCOMP) for TSYNC: threads that already exist
    # (pytest-timeout, a thread pool) get the filter too.
    rc = libc.syscall(ctypes.c_long(table["seccomp"]), ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
                      ctypes.c_uint(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if rc != 0:
        e = ctypes.get_errno()
        raise SeccompUnavailable(f"seccomp(SECCOMP_SET_MODE_FILTER): rc={rc} "
                                 f"{_errno.errorcode.get(e, e)}")


def raw_syscall_errno(name: str, *args: int) -> int:
    """Call a system call from the table directly; its errno (0 on success)."""
    _, table = arch()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(table[name]), *(ctypes.c_long(a) for a in args))
    if rc >= 0 and name == "io_uring_setup":
        os.close(rc)
    return ctypes.get_errno() if rc < 0 else 0


# --- running code in a filtered child --------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent   # the checkout (or unpacked sdist) the tests are in
EXIT_UNAVAILABLE = 77                           # the child could not install the filter

# argv: [-c, path of this file, JSON {syscall: errno}, code]. Loads this file by path (no
# package import, so nothing of aionative or the tests is imported before the filter).
_BOOTSTRAP = """\
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("_seccomp_child", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
deny = json.loads(sys.argv[2])
if deny:
    try:
        mod.deny_syscalls(deny)
    except mod.SeccompUnavailable as exc:
        print(exc, file=sys.stderr)
        sys.exit(mod.EXIT_UNAVAILABLE)
code = sys.argv[3]
del importlib, spec, mod, deny
exec(compile(code, "<child>", "exec"), {"__name__": "__main__"})
"""


def run_python(code: str, deny: Mapping[str, int] | None = None,
               env: Mapping[str, str] | None = None, timeout: float = 60) -> Any:
    """Run ``code`` in a new interpreter (importing the aionative this one imported) after installing
    a filter denying ``deny``; returns the JSON of its last line of output.

    ``env`` is added to the environment, which never carries AIONATIVE_BACKEND unless ``env``
    sets it. Raises SeccompUnavailable if the child could not install the filter, and
    AssertionError (with its output) if it failed.
    """
    if deny:
        arch()  # unsupported here: say so before starting a child
    import aionative  # the child imports the aionative under test (checkout or installed wheel)
    home = str(Path(aionative.__file__).resolve().parent.parent)
    child_env = {k: v for k, v in os.environ.items() if k != "AIONATIVE_BACKEND"}
    child_env["PYTHONPATH"] = os.pathsep.join(
        [home] + ([child_env["PYTHONPATH"]] if child_env.get("PYTHONPATH") else []))
    child_env.update(env or {})
    proc = subprocess.run(  # -P: the working directory is not put on sys.path
        [sys.executable, "-P", "-W", "error", "-c", _BOOTSTRAP, __file__,
         json.dumps(dict(deny or {})), code],
        check=False, cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode == EXIT_UNAVAILABLE:
        raise SeccompUnavailable(proc.stderr.strip())
    assert proc.returncode == 0, (
        f"child exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    lines = proc.stdout.strip().splitlines()
    assert lines, f"child printed nothing\n--- stderr\n{proc.stderr}"
    return json.loads(lines[-1])
