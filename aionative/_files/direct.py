"""The file layer's O_DIRECT transfers: reads through the engine into aligned memory of its
own, and writes under the lock of the blocks they write — whole blocks as they are, partial
ones read, changed and written back (read-modify-write; see ``aionative._direct``)."""

from __future__ import annotations

import asyncio
from typing import Any

from .. import _kernelops as _k
from .._awaiting import await_op, await_owned
from .._direct import (
    ALIGN,
    align_up,
    direct_buffer,
    direct_lock_range,
    lock_backoff,
    lock_blocks,
    rmw_blocks,
    unlock_blocks,
)
from .._engine import get_engine
from .core import S, _Core


class _DirectIO(_Core[S]):
    """O_DIRECT reads and writes of a file opened with ``direct=True``."""

    async def _direct_read(self, size: int, offset: int) -> bytes:
        """An O_DIRECT read: the engine reads the aligned range around it into aligned memory
        of its own and returns the part asked for."""
        eng = get_engine()
        # Cancelled, the kernel keeps the engine's memory until the read completes.
        return await await_owned(eng, eng.pread_direct(self._raw_fd(), size, offset))

    async def _direct_write(self, off: int, data: bytes) -> int | None:
        """An O_DIRECT write, under the lock of the blocks it writes (see ``_direct``'s locks):
        whole blocks go to the engine, which writes a copy from aligned memory of its own
        (their count returned); otherwise read the partial edge blocks, write the aligned
        range from page-aligned memory, trim the file if the padding went past its new end.
        A lock another writer holds is tried again after a short sleep: the loop's thread
        never waits for it."""
        raw = self._raw
        assert raw is not None
        fd = raw._fd
        start, length = direct_lock_range(off, len(data), raw.disk_size)
        delay = 0.0005
        while True:
            while not lock_blocks(fd, start, length):
                await asyncio.sleep(delay)
                delay = lock_backoff(delay)
            try:
                # The size under the lock: another writer's blocks decide the edges to read
                # and the trim, not the size this file object last knew.
                size = (await _k.fstat(fd)).st_size
            except BaseException:
                unlock_blocks(fd, start, length)
                raise
            if length == 0 or align_up(off + len(data)) <= size:
                break
            unlock_blocks(fd, start, length)  # the file shrank meanwhile: lock to its end
            length = 0
        fut: asyncio.Future[Any] | None = None
        try:
            if not (off | len(data)) & (ALIGN - 1):
                fut = get_engine().pwrite_direct(fd, data, off)
                done = await asyncio.shield(fut)
                raw.disk_size = max(size, off + done)
                return done
            a0, a1, edges = rmw_blocks(off, len(data), size)
            buf = direct_buffer(a1 - a0)
            for edge in edges:
                block = direct_buffer(ALIGN)
                got = await self._engine_readinto(block, edge)
                buf[edge - a0:edge - a0 + got] = block[:got]
            buf[off - a0:off - a0 + len(data)] = data
            eng = get_engine()
            fut = eng.pwrite(fd, memoryview(buf)[:a1 - a0], a0)
            await asyncio.shield(fut)
            new_size = max(size, off + len(data))
            if a1 > new_size:
                await _k.ftruncate(fd, new_size)
            raw.disk_size = new_size
            return None
        finally:
            if fut is None or fut.done():
                unlock_blocks(fd, start, length)
            else:  # this task was cancelled: the blocks stay locked until the kernel is done
                def unlock(_: object) -> None:
                    if not raw._closed_fd:  # (closed: the lock went with the descriptor)
                        unlock_blocks(fd, start, length)

                fut.add_done_callback(unlock)

    async def _engine_readinto(self, buf: Any, offset: int) -> int:
        eng = get_engine()
        res = eng.readinto(self._raw_fd(), buf, offset)
        if isinstance(res, int):  # completed inline (never for O_DIRECT descriptors)
            return res
        return await await_op(eng, res)  # (cancelled: the read may land in `buf` until settled)

    def _raw_fd(self) -> int:
        assert self._raw is not None
        return self._raw._fd
