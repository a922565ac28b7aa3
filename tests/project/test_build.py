"""The C sources build where wheels are built: against any kernel headers.

``csrc/uring_abi.h`` writes out the io_uring ABI instead of including ``<linux/io_uring.h>``
(build images carry old headers), and ``inline.c`` writes out ``openat2``'s argument. These
tests compare every size, offset and constant of ``uring_abi.h`` with this machine's own
``<linux/io_uring.h>``, and compile every C file with the io_uring and openat2 headers made
unavailable."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
CC = shutil.which("cc") or shutil.which("gcc")
SYSTEM_HEADER = Path("/usr/include/linux/io_uring.h")

pytestmark = [
    pytest.mark.skipif(CC is None, reason="no C compiler"),
    pytest.mark.skipif(not (CSRC / "uring_abi.h").is_file(), reason="no C sources beside the tests"),
]

# What the engine takes from the ABI: (struct, field) offsets, struct sizes, and constants.
FIELDS = {
    "io_uring_sqe": ["opcode", "flags", "ioprio", "fd", "off", "addr", "len", "rw_flags",
                     "fsync_flags", "cancel_flags", "open_flags", "statx_flags", "rename_flags",
                     "unlink_flags", "hardlink_flags", "user_data", "buf_index", "personality",
                     "splice_fd_in", "addr3"],
    "io_uring_cqe": ["user_data", "res", "flags"],
    "io_sqring_offsets": ["head", "tail", "ring_mask", "ring_entries", "flags", "dropped",
                          "array"],
    "io_cqring_offsets": ["head", "tail", "ring_mask", "ring_entries", "overflow", "cqes"],
    "io_uring_params": ["sq_entries", "cq_entries", "flags", "features", "wq_fd", "sq_off",
                        "cq_off"],
    "io_uring_probe_op": ["op", "flags"],
    "io_uring_probe": ["last_op", "ops_len", "ops"],
    "io_uring_getevents_arg": ["sigmask", "sigmask_sz", "ts"],
}
CONSTANTS = [
    "IOSQE_IO_LINK", "IOSQE_ASYNC", "IO_URING_OP_SUPPORTED", "IORING_OFF_SQ_RING",
    "IORING_OFF_CQ_RING", "IORING_OFF_SQES", "IORING_SETUP_CQSIZE", "IORING_SETUP_SUBMIT_ALL",
    "IORING_SETUP_COOP_TASKRUN", "IORING_SETUP_TASKRUN_FLAG", "IORING_SETUP_SINGLE_ISSUER",
    "IORING_SETUP_DEFER_TASKRUN", "IORING_FEAT_SINGLE_MMAP", "IORING_FEAT_NODROP",
    "IORING_FEAT_RW_CUR_POS", "IORING_FEAT_EXT_ARG", "IORING_ENTER_EXT_ARG",
    "IORING_SQ_CQ_OVERFLOW", "IORING_SQ_TASKRUN",
    "IORING_ENTER_GETEVENTS", "IORING_REGISTER_EVENTFD", "IORING_REGISTER_PROBE",
    "IORING_FSYNC_DATASYNC", "IORING_OP_FSYNC", "IORING_OP_ASYNC_CANCEL", "IORING_OP_FALLOCATE",
    "IORING_OP_OPENAT", "IORING_OP_CLOSE", "IORING_OP_STATX", "IORING_OP_READ",
    "IORING_OP_WRITE", "IORING_OP_RENAMEAT", "IORING_OP_UNLINKAT", "IORING_OP_MKDIRAT",
    "IORING_OP_SYMLINKAT", "IORING_OP_LINKAT",
]


def _abi_program(header: str) -> str:
    lines = [f"#include {header}", "#include <stddef.h>", "#include <stdio.h>",
             "#define P(name, x) printf(\"%s %llu\\n\", name, (unsigned long long)(x));",
             "int main(void) {"]
    for struct, fields in FIELDS.items():
        lines.append(f'P("sizeof {struct}", sizeof(struct {struct}))')
        lines += [f'P("{struct}.{f}", offsetof(struct {struct}, {f}))' for f in fields]
    lines += [f'P("{c}", {c})' for c in CONSTANTS]
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


def _run_abi_program(tmp_path: Path, header: str, name: str) -> dict[str, int]:
    src = tmp_path / f"{name}.c"
    src.write_text(_abi_program(header))
    exe = tmp_path / name
    subprocess.run([CC, "-std=gnu11", f"-I{CSRC}", "-o", str(exe), str(src)], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.rsplit(" ", 1) for line in out.splitlines())}


@pytest.mark.skipif(not SYSTEM_HEADER.is_file(), reason="no <linux/io_uring.h> to compare with")
def test_the_written_out_io_uring_abi_matches_the_kernel_header(tmp_path: Path) -> None:
    ours = _run_abi_program(tmp_path, '"uring_abi.h"', "ours")
    theirs = _run_abi_program(tmp_path, "<linux/io_uring.h>", "theirs")
    assert ours == theirs


@pytest.mark.parametrize("source", sorted(p.name for p in CSRC.glob("*.c")))
def test_each_c_file_builds_without_the_io_uring_and_openat2_headers(tmp_path: Path,
                                                                     source: str) -> None:
    shadow = tmp_path / "include" / "linux"
    shadow.mkdir(parents=True)
    for header in ("io_uring.h", "openat2.h"):
        (shadow / header).write_text(f'#error "{header} is not available on this build host"\n')
    cmd = [CC, "-std=gnu11", "-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-parameter",
           f"-I{tmp_path / 'include'}", f"-I{sysconfig.get_paths()['include']}", str(CSRC / source)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
