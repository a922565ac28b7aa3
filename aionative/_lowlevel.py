"""The low-level API: positional reads and writes on file descriptors, served by the running
loop's engine. Errors are the ``OSError`` subclasses ``os.pread``/``os.pwrite`` raise."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from . import _kernelops as _k
from . import _threads
from ._awaiting import await_op, until_done
from ._backend import _core
from ._engine import get_engine


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


FileDescriptorLike = int | _HasFileno


async def pread_python(fd: int, size: int, offset: int) -> bytes:
    """Read up to ``size`` bytes at ``offset`` (like ``os.pread``, but never blocking the loop).

    Reads larger than the kernel's per-call limit are split; a short result means end of file.
    A read the page cache can serve completes inline, within the loop's cooperative budget;
    one of ``TURN_MIN`` (``_threads.TURN_MIN``) bytes or more that finds the budget spent waits
    a turn of the loop and is retried inline rather than queued.
    """
    # The Python path is the threads engine's (which queues its refused reads itself); the
    # native engines' inline reads and large reads' turns are _core.Call's.
    eng = get_engine()
    res = eng.read(fd, size, offset)
    if isinstance(res, bytes):  # completed inline (page cache hit)
        return res
    # await_owned inlined (bytes of the engine's own: cancel, raise at once), the one copy
    # outside _awaiting: one coroutine frame fewer on the threads engine's hottest call. Through
    # the helper, W1 at 64 readers cost about 1.5% more instructions a read
    # (`AIONATIVE_BACKEND=threads python -m bench.instructions --cases w1:asyncio:64`).
    try:
        return await res
    except asyncio.CancelledError:
        eng.cancel(res)
        raise


async def preadinto_python(fd: int, buffer: Any, offset: int) -> int:
    """Read into a writable buffer at ``offset``; returns the number of bytes read.

    The buffer stays exported (a bytearray cannot be resized) until the kernel is done with
    it, even if the awaiting task is cancelled.
    """
    eng = get_engine()
    res = eng.readinto(fd, buffer, offset)
    # The engine holds the buffer as long as it needs it; this frame must not, or an exception
    # kept after a cancellation (its traceback keeps the frame) keeps the buffer exported.
    del buffer
    if isinstance(res, int):  # completed inline (page cache hit)
        return res
    return await await_op(eng, res)  # (settled before a cancellation ends it: the buffer is
                                     # the caller's again)


async def pwrite_python(fd: int, data: Any, offset: int) -> int:
    """Write all of ``data`` at ``offset``; short writes continue until everything is written.

    On an error after part was written, the ``OSError`` carries ``characters_written``.
    A write to a local regular file is copied into the page cache inline, within the loop's
    cooperative budget; one that finds the budget spent waits a turn of the loop.
    """
    # The Python path is the threads engine's (whose write is a worker's future); the native
    # engines' inline writes and budget turns are _core.Call's.
    eng = get_engine()
    res = eng.write(fd, data, offset)
    if isinstance(res, int):
        return res
    return await await_op(eng, res)


async def write_refused(eng: Any, fd: int, data: Any, offset: int) -> int:
    """``pwrite``'s write refused again after its turn (``_core.Call``): the queue of refused
    calls (``_kernelops.refused_queue``), else the kernel queue."""
    res = await _k.refused_queue(eng, "write", fd, data, offset)
    if res is None:
        eng = get_engine()  # the engine may have been closed (and replaced) meanwhile
        res = eng.pwrite(fd, data, offset)
    if type(res) is int:
        return res
    return await await_op(eng, res)


async def read_refused(fd: Any, arg: Any, offset: Any, into: bool) -> Any:
    """A ``pread`` or ``preadinto`` that Linux AIO refused with EINVAL: io_submit refuses a
    file whose driver has no ``read_iter`` (procfs's seq files: ``/proc/self/maps``,
    ``/proc/kallsyms``), which pread(2) reads. ``os.pread``'s answer (``os.preadv``'s, into
    the buffer), or its error, from a worker thread: such a read may wait (a maps file for
    the process's memory map lock). A cancelled ``preadinto`` ends only once the worker has
    let go of the caller's buffer."""
    loop = asyncio.get_running_loop()
    if not into:
        return await loop.run_in_executor(None, os.pread, fd, arg, offset)
    fut = loop.run_in_executor(None, os.preadv, fd, [arg], offset)
    del arg  # (the worker holds the buffer; a kept traceback of this frame must not)
    # Not await_op: a worker's call cannot be cancelled, only waited for (no engine to ask).
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await until_done(fut)  # the first cancellation is raised once the buffer is free
        raise


def set_turn_min(size: int) -> None:
    """Set ``TURN_MIN`` (``_threads.TURN_MIN``, every engine's; benchmarks and tests: 0 sends
    every read the spent budget refused round a turn)."""
    _threads.TURN_MIN = size
    if _core is not None:
        _core.configure(turn_min=size)


pread: Callable[[int, int, int], Coroutine[Any, Any, bytes]]
"""``await pread(fd, size, offset, /) -> bytes``: read up to ``size`` bytes at ``offset`` of the
descriptor ``fd``, as ``os.pread`` (same errors), without blocking the loop. A page-cache hit
completes inside the call, under the loop's inline budget; reads above the kernel's per-call
limit are split; a short result means end of file. ``fd`` must have a position (a pipe or
socket gets ``OSError(ESPIPE)``). A C function returning a coroutine object (``_core.Call``)
with the extension built."""
preadinto: Callable[[int, Any, int], Coroutine[Any, Any, int]]
"""``await preadinto(fd, buffer, offset, /) -> int``: read into the writable ``buffer`` at
``offset``; return the number of bytes read. The buffer stays exported (a bytearray cannot be
resized) until the kernel is done with it, even if the awaiting task is cancelled."""
pwrite: Callable[[int, Any, int], Coroutine[Any, Any, int]]
"""``await pwrite(fd, data, offset, /) -> int``: write all of ``data`` at ``offset``, continuing
short writes; return ``len(data)``. An error after a partial write carries
``characters_written``. A write of up to 64 KiB to a local regular file is copied into the
page cache inside the call, under the inline budget; others are queued (on the threads
backend, to a worker)."""
if _core is not None:
    # The same calls without a coroutine (csrc/call.c): their first step finds the engine and
    # does the call in C, and a call done inline returns at once; the functions above remain
    # the threads engine's path.
    Coroutine.register(_core.Call)
    pread, preadinto, pwrite = _core.pread, _core.preadinto, _core.pwrite
else:
    pread, preadinto, pwrite = pread_python, preadinto_python, pwrite_python


def _fildes(fd: Any) -> int:
    """The descriptor ``os.fsync`` takes (``PyObject_AsFileDescriptor``): an int, or an object
    with ``fileno()`` (not an ``__index__`` object); ValueError when negative."""
    if not isinstance(fd, int):
        try:
            fileno = fd.fileno
        except AttributeError:
            raise TypeError("argument must be an int, or have a fileno() method.") from None
        fd = fileno()
        if not isinstance(fd, int):
            raise TypeError("fileno() returned a non-integer")
    if not -(1 << 31) <= fd < 1 << 31:
        raise OverflowError("Python int too large to convert to C int")
    if fd < 0:
        raise ValueError(f"file descriptor cannot be a negative integer ({fd})")
    return int(fd)


async def fsync(fd: FileDescriptorLike) -> None:
    """``os.fsync`` through the engine (``fd``: a descriptor, or an object with ``fileno()``)."""
    fd = _fildes(fd)
    eng = get_engine()
    await await_op(eng, eng.fsync(fd))


async def fdatasync(fd: FileDescriptorLike) -> None:
    """``os.fdatasync`` through the engine (``fd``: as for :func:`fsync`)."""
    fd = _fildes(fd)
    eng = get_engine()
    await await_op(eng, eng.fdatasync(fd))
