"""O_DIRECT building blocks: alignment, page-aligned memory, the block locks that keep several
writers of one file from writing back each other's old bytes, and the synchronous direct
transfers (a file object used synchronously, and the threads engine).

A direct write that does not cover whole blocks reads the partial blocks at its edges, changes
its part and writes the aligned range back (read-modify-write), then trims the padding past the
file's new end.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import time
from typing import Any

from ._compat import KERNEL_RW_MAX

#: O_DIRECT alignment of offsets, lengths and memory: the largest logical block size in use.
ALIGN = 4096


def align_down(n: int) -> int:
    return n & ~(ALIGN - 1)


def align_up(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def direct_buffer(n: int) -> mmap.mmap:
    """Page-aligned memory for an O_DIRECT transfer."""
    return mmap.mmap(-1, max(align_up(n), ALIGN))


def rmw_blocks(off: int, length: int, disk_size: int) -> tuple[int, int, list[int]]:
    """An O_DIRECT write of [off, off+length): the aligned range to write, and the partial
    blocks at its edges whose current contents must be read first (those inside the file)."""
    a0, a1 = align_down(off), align_up(off + length)
    edges = []
    if off > a0 and a0 < disk_size:
        edges.append(a0)
    last = a1 - ALIGN
    if off + length < a1 and last < disk_size and last not in edges:
        edges.append(last)
    return a0, a1, edges


# Several writers of one file through O_DIRECT (file objects of this process or of others)
# each read a partial block, change their part and write the whole block back: two at once
# write back each other's old bytes. So every direct write of a file object holds an open file
# description lock (F_OFD_SETLK, Linux 3.15) on the blocks it writes while it reads and writes
# them, and on everything from its first block on when it may end the file (it trims the
# padding to the size it measures under the lock: a writer further on could extend the file
# meanwhile). Other aionative writers wait for it; the lock is advisory, so other programs do
# not. Lock ranges of one writer only grow towards the end of the file: no two writers can
# wait for each other. OFD locks belong to the open file, not the process: two file objects
# of one process exclude each other, and closing a descriptor releases only its own.
_F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)
_LOCK_BUSY = (errno.EAGAIN, errno.EACCES)
#: How long a synchronous direct write waits for another writer's lock before it raises the
#: lock's EAGAIN: one such write holds it for a few block transfers; a lock held longer is
#: held across something else (a process stopped in a debugger, a synchronous write run on
#: the loop's thread while the loop's own writer holds the lock, waiting for that loop).
SYNC_LOCK_WAIT = 10.0


def _ofd_lock(fd: int, kind: int, start: int, length: int) -> bool:
    """One non-blocking F_OFD_SETLK of [start, start + length) (length 0: to any end). False:
    another open file holds a lock there. A filesystem or kernel without such locks (EINVAL,
    ENOLCK, …): True, unlocked, as every writer there is."""
    try:
        fcntl.fcntl(fd, _F_OFD_SETLK, struct.pack("hhqqi", kind, os.SEEK_SET, start, length, 0))
    except OSError as exc:
        if exc.errno in _LOCK_BUSY:
            return False
    return True


def lock_blocks(fd: int, start: int, length: int) -> bool:
    """Try once to lock [start, start + length) for writing (see above)."""
    return _ofd_lock(fd, fcntl.F_WRLCK, start, length)


def unlock_blocks(fd: int, start: int, length: int) -> None:
    _ofd_lock(fd, fcntl.F_UNLCK, start, length)


def direct_lock_range(off: int, length: int, size: int) -> tuple[int, int]:
    """The range a direct write of [off, off + length) locks, given the file's ``size``: its
    blocks, or (a write whose last block reaches past the end: it trims) all from its first."""
    a0, a1 = align_down(off), align_up(off + length)
    return a0, (0 if a1 > size else a1 - a0)


def lock_backoff(delay: float) -> float:
    """The next wait between attempts to take a lock another writer holds."""
    return min(delay * 2, 0.02)


def direct_pread_sync(fd: int, n: int, pos: int) -> bytes:
    """``n`` bytes at ``pos`` through an O_DIRECT descriptor: the aligned range around them
    read into page-aligned memory in pieces of at most KERNEL_RW_MAX (one system call moves
    no more; a short piece is the end of the file), then the part asked for."""
    a0 = align_down(pos)
    buf = direct_buffer(pos + n - a0)
    try:
        view = memoryview(buf)
        try:
            got = 0
            while got < len(view):
                want = min(len(view) - got, KERNEL_RW_MAX)
                done = os.preadv(fd, [view[got:got + want]], a0 + got)
                got += done
                if done < want:
                    break
        finally:
            view.release()
        start = pos - a0
        return buf[start:start + max(0, min(got - start, n))]
    finally:
        buf.close()


def direct_pwrite_blocks(fd: int, data: Any, off: int) -> int:
    """Write ``data`` (whole blocks at a block-aligned ``off``) through an O_DIRECT descriptor
    from page-aligned memory of its own: the threads engine's ``pwrite_direct``."""
    buf = direct_buffer(len(data))
    done = 0
    try:
        buf[:len(data)] = data
        view = memoryview(buf)[:len(data)]
        try:
            while done < len(view):
                try:
                    n = os.pwritev(fd, [view[done:]], off + done)
                    if not n:  # no progress: short, as the native engines report it
                        break
                    done += n
                except OSError as exc:
                    if done:  # how much reached the file, as the native engines report it
                        setattr(exc, "characters_written", done)  # noqa: B010
                    raise
        finally:
            view.release()
    finally:
        buf.close()
    return done


def direct_pwrite_sync(fd: int, off: int, data: bytes, disk_size: int) -> int:
    """Write ``data`` at ``off`` through an O_DIRECT descriptor (read-modify-write of partial
    edge blocks; the file is trimmed back if the aligned write went past its new end), under
    the lock of the blocks it writes (see above), waiting for other writers' at most
    SYNC_LOCK_WAIT seconds. Returns the file's new size."""
    start, length = direct_lock_range(off, len(data), disk_size)
    deadline, delay = time.monotonic() + SYNC_LOCK_WAIT, 0.0005
    while True:
        while not lock_blocks(fd, start, length):
            if time.monotonic() > deadline:
                raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            time.sleep(delay)
            delay = lock_backoff(delay)
        size = os.fstat(fd).st_size  # another writer's blocks count: the size under the lock
        if length == 0 or align_up(off + len(data)) <= size:
            break
        unlock_blocks(fd, start, length)  # the file shrank meanwhile: lock to its end
        length = 0
    try:
        return _direct_pwrite_locked(fd, off, data, size)
    finally:
        unlock_blocks(fd, start, length)


def _direct_pwrite_locked(fd: int, off: int, data: bytes, disk_size: int) -> int:
    a0, a1, edges = rmw_blocks(off, len(data), disk_size)
    buf = direct_buffer(a1 - a0)
    try:
        for edge in edges:
            block = direct_buffer(ALIGN)
            try:
                got = os.preadv(fd, [block], edge)
                buf[edge - a0:edge - a0 + got] = block[:got]
            finally:
                block.close()
        buf[off - a0:off - a0 + len(data)] = data
        view = memoryview(buf)[:a1 - a0]
        try:
            done = 0
            while done < len(view):
                done += os.pwritev(fd, [view[done:]], a0 + done)
        finally:
            view.release()
    finally:
        buf.close()
    new_size = max(disk_size, off + len(data))
    if a1 > new_size:
        os.ftruncate(fd, new_size)
    return new_size

