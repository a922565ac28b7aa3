"""The portable fallback: the engine interface served by a small thread pool.

Used where neither io_uring nor Linux AIO is available (macOS, old kernels, sandboxes that
forbid both), or when asked for. Semantics match the native engine: large operations are
split at the kernel's per-call limit, writes continue until everything is written.
"""

from __future__ import annotations

import asyncio
import errno
import os
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from operator import index
from typing import Any, TypeVar

from ._compat import KERNEL_RW_MAX

T = TypeVar("T")


def _check_offset(offset: int) -> None:
    if offset < 0:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))


def _pread(fd: int, size: int, offset: int) -> bytes:
    if size <= KERNEL_RW_MAX:
        return os.pread(fd, size, offset)
    parts = []
    while size > 0:
        want = min(size, KERNEL_RW_MAX)
        part = os.pread(fd, want, offset)
        parts.append(part)
        if len(part) < want:
            break
        size -= want
        offset += want
    return b"".join(parts)


def _preadinto(fd: int, buf: memoryview, offset: int) -> int:
    done = 0
    while True:
        want = min(len(buf) - done, KERNEL_RW_MAX)
        n = os.preadv(fd, [buf[done : done + want]], offset + done)
        done += n
        if n < want or done >= len(buf) or n == 0:
            return done


def _pwrite(fd: int, data: memoryview, offset: int) -> int:
    done = 0
    while True:
        try:
            n = os.pwrite(fd, data[done : done + KERNEL_RW_MAX], offset + done)
        except OSError as exc:
            if done:  # like BlockingIOError: how much of `data` did reach the file
                setattr(exc, "characters_written", done)  # noqa: B010 - not typed on OSError
            raise
        done += n
        if done >= len(data) or n == 0:
            return done


class ThreadsEngine:
    """Same interface as ``aionative._core.Engine``; operations run in a private pool."""

    backend = "threads"

    def __init__(self, loop: asyncio.AbstractEventLoop, max_workers: int | None = None) -> None:
        self._loop_ref = weakref.ref(loop)  # the registry must not keep a finished loop alive
        self._pid = os.getpid()
        self._executor = ThreadPoolExecutor(max_workers or min(32, (os.cpu_count() or 1) + 4),
                                            thread_name_prefix="aionative-io")
        self._closed = False
        self._stats = {"submitted": 0, "completed": 0, "cancels": 0}
        self._live = 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def forked(self) -> bool:
        return os.getpid() != self._pid

    @property
    def in_flight(self) -> int:
        return self._live

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop_ref()

    def _done(self, _: object) -> None:
        self._live -= 1
        self._stats["completed"] += 1

    def _submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        loop = self._loop_ref()
        if self._closed or loop is None:
            raise RuntimeError("aionative: engine is closed")
        fut = loop.run_in_executor(self._executor, fn, *args)
        self._live += 1
        self._stats["submitted"] += 1
        fut.add_done_callback(self._done)
        return fut

    def pread(self, fd: int, size: int, offset: int) -> asyncio.Future[bytes]:
        fd, size, offset = index(fd), index(size), index(offset)
        _check_offset(offset)
        if size < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return self._submit(_pread, fd, size, offset)

    def preadinto(self, fd: int, buffer: Any, offset: int) -> asyncio.Future[int]:
        fd, offset = index(fd), index(offset)
        _check_offset(offset)
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise BufferError("Object is not writable.")
        return self._submit(_preadinto, fd, view, offset)

    def pwrite(self, fd: int, data: Any, offset: int) -> asyncio.Future[int]:
        fd, offset = index(fd), index(offset)
        _check_offset(offset)
        return self._submit(_pwrite, fd, memoryview(data).cast("B"), offset)

    def fsync(self, fd: int) -> asyncio.Future[None]:
        return self._submit(os.fsync, index(fd))

    def fdatasync(self, fd: int) -> asyncio.Future[None]:
        return self._submit(os.fdatasync, index(fd))

    def cancel(self, future: asyncio.Future[Any]) -> bool:
        # A running os.pread cannot be interrupted; its buffer stays referenced by the worker
        # until it returns, so nothing is freed under it.
        self._stats["cancels"] += 1
        return False

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.forked:
            self._executor.shutdown(wait=True)

    def stats(self) -> dict[str, int]:
        return {**self._stats, "in_flight": self._live}

    def info(self) -> dict[str, object]:
        return {"backend": "threads", "max_workers": self._executor._max_workers}
