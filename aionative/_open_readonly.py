"""Opening a file read-only to serve it, and stat-ing the descriptor opened.

A response's headers describe the file whose bytes it sends, so a file is opened first and its
descriptor stat-ed (``fstat``, inline: the inode is pinned, no I/O). The open is the kernel's
``openat`` where the engine has one (io_uring), else a worker thread's ``open``; a descriptor
that arrives for a cancelled caller is closed, not leaked. Used by
:class:`aionative.starlette.FileResponse` and by the lookup beneath a ``StaticFiles``
directory (:mod:`aionative._static_lookup`).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import stat
from collections.abc import Callable
from typing import Any

from . import _kernelops as _k
from ._awaiting import await_owned, finished_anyway
from ._engine import EngineLike
from ._threads import ThreadsEngine

__all__ = [
    "NOT_OPENABLE",
    "OPEN_FLAGS",
    "fstat_regular",
    "kernel_opens",
    "open_stat",
    "open_stat_blocking",
    "path_stat_blocking",
]


def kernel_opens(eng: EngineLike) -> bool:
    """Whether ``eng`` makes a read-only open itself (io_uring's ``openat``; Linux AIO's writer
    threads take only opens that create or truncate); otherwise it runs in a worker thread."""
    return not isinstance(eng, ThreadsEngine) and eng.supports("openat", OPEN_FLAGS)


# O_NONBLOCK on every open: a FIFO without a writer would otherwise hold the open (a worker
# thread, or the io-wq worker in which io_uring retries an openat whose name is not in the
# dentry cache — without the O_NONBLOCK of its first, inline attempt unless it was asked for).
# It is cleared on a regular file (a read of an O_NONBLOCK file on a filesystem without
# non-blocking reads would fail with EAGAIN); anything else is rejected before it is read.
OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK

# What open(2) fails with on something that is not a regular file — a socket, a device without
# a driver (ENXIO, ENODEV) — or on a file it may not read (EACCES): Starlette only stat-s, so
# these are looked at again with an O_PATH descriptor (no permission needed, nothing opened).
NOT_OPENABLE = (errno.ENXIO, errno.ENODEV, errno.EACCES)


def fstat_regular(fd: int) -> os.stat_result:
    """fstat a descriptor opened with ``OPEN_FLAGS``; a regular file is made blocking again."""
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        fcntl.fcntl(fd, fcntl.F_SETFL, 0)  # a read-only descriptor: O_NONBLOCK was the only flag
    return st


def open_stat_blocking(path: str) -> tuple[int, os.stat_result]:
    """Open and fstat in one worker call (backends without a kernel ``openat``)."""
    fd = os.open(path, OPEN_FLAGS)
    try:
        return fd, fstat_regular(fd)
    except BaseException:
        os.close(fd)
        raise


def path_stat_blocking(path: str) -> tuple[int, os.stat_result]:
    """An ``O_PATH`` descriptor and its stat (for a file that cannot be opened for reading)."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def _close_result(fut: asyncio.Future[tuple[int, os.stat_result]]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        os.close(fut.result()[0])


async def _in_worker(fn: Callable[..., tuple[int, os.stat_result]], *args: Any
                     ) -> tuple[int, os.stat_result]:
    """Run a blocking open in the loop's executor; a descriptor that arrives for a cancelled
    caller is closed, not leaked."""
    return await finished_anyway(asyncio.get_running_loop().run_in_executor(None, fn, *args),
                                 _close_result)


async def _openat(eng: EngineLike, path: str, flags: int, encoded: bytes | None = None) -> int:
    """io_uring's ``openat`` of ``path`` (straight to the engine: ``_kernelops.open_fd`` retries
    an ENXIO in a worker, which is for FIFOs opened for writing)."""
    fut = eng.openat(_k.AT_FDCWD,  # type: ignore[union-attr]
                     os.fsencode(path) if encoded is None else encoded, flags, 0, path)
    return await await_owned(eng, fut, on_cancel=_k._close_result)


async def open_stat(eng: EngineLike, path: str, encoded: bytes | None = None
                    ) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only and stat the descriptor: the headers describe the file read."""
    if not kernel_opens(eng):
        return await _in_worker(open_stat_blocking, path)
    fd = await _openat(eng, path, OPEN_FLAGS, encoded)
    try:
        # Inline, not io_uring's statx: that always runs in an io-wq worker (REQ_F_FORCE_ASYNC),
        # which cost a quarter of the 4 KiB throughput and 2-3 kernel threads, while fstat of a
        # descriptor just opened does no I/O (its inode is pinned; NFS revalidated it at open).
        return fd, fstat_regular(fd)
    except BaseException:
        os.close(fd)
        raise
