"""``open(..., direct=True)`` files without a mapping an operation: ``Engine.pread_direct``
reads the aligned range around what was asked for into memory the engine owns until the kernel
is done with it, and returns the part asked for; ``Engine.pwrite_direct`` writes whole blocks
from an aligned copy of its own. Before, each read and write mapped a fresh page-aligned
buffer."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _direct

pytestmark = pytest.mark.asyncio

SIZE = 3 * 4096 + 123  # not a multiple of the block size: the last block is short

# (offset, size): empty, unaligned on either side or both, whole blocks, across blocks, up to
# and across the end of the file, past it.
RANGES = [(0, 0), (0, 1), (5, 4091), (4091, 9), (4096, 4096), (4000, 8500), (0, SIZE),
          (3 * 4096 + 100, 23), (3 * 4096 + 100, 4096), (SIZE, 10), (SIZE + 5000, 7),
          (1 << 20, 0)]


class _NoMaps:
    """In place of the ``mmap`` module where the file layer maps aligned buffers."""

    def mmap(self, *args: object) -> None:
        raise AssertionError("a direct file's operation mapped memory")


@pytest.fixture
def direct_fd(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    """A file of SIZE random bytes opened O_DIRECT, and its contents."""
    data = os.urandom(SIZE)
    (tmp_path / "d.bin").write_bytes(data)
    fd = os.open(tmp_path / "d.bin", os.O_RDONLY | os.O_DIRECT)
    try:
        yield fd, data
    finally:
        os.close(fd)


async def test_pread_direct_returns_the_part_asked_for(backend: str,
                                                       direct_fd: tuple[int, bytes]) -> None:
    fd, data = direct_fd
    eng: Any = aionative.get_engine()
    for off, size in RANGES:
        assert await eng.pread_direct(fd, size, off) == data[off:off + size], (off, size)
    got = await asyncio.gather(*(eng.pread_direct(fd, n, o) for o, n in RANGES))
    assert got == [data[o:o + n] for o, n in RANGES]


async def test_pread_direct_reports_what_os_pread_reports(backend: str,
                                                          direct_fd: tuple[int, bytes],
                                                          tmp_path: Path) -> None:
    fd, _ = direct_fd
    eng: Any = aionative.get_engine()
    closed = os.open(tmp_path / "d.bin", os.O_RDONLY | os.O_DIRECT)
    os.close(closed)
    for args in ((fd, -1, 0), (fd, 1, -1), (fd, 1.0, 0), (fd, 1, None), (closed, 10, 0),
                 (tmp_path, 1, 0)):
        with pytest.raises((OSError, TypeError)) as expected:
            os.pread(*args)  # type: ignore[arg-type]
        with pytest.raises(expected.type) as raised:
            await eng.pread_direct(*args)
        assert getattr(raised.value, "errno", None) == getattr(expected.value, "errno", None)


async def test_a_direct_files_reads_map_no_memory(native_backend: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """On the kernel engines a direct file's reads land in the engine's own memory: a fresh
    ``mmap`` a read (its page faults, its munmap) cost several times the CPU of a 4 KiB
    read."""
    data = os.urandom(SIZE)
    path = tmp_path / "d.bin"
    path.write_bytes(data)

    async with aionative.open(path, "rb", buffering=0, direct=True) as f:
        monkeypatch.setattr(_direct, "mmap", _NoMaps())
        assert await f.pread(100, 4090) == data[4090:4190]
        await f.seek(5)
        assert await f.read(4096) == data[5:4101]
        assert await f.read() == data[4101:]
        monkeypatch.undo()


BLOCK = 4096


async def test_a_synchronous_direct_read_goes_in_pieces(direct_fd: tuple[int, bytes],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The threads engine's direct reads (and the file layer's synchronous ones) read in
    pieces of at most KERNEL_RW_MAX, the most one preadv moves (0x7ffff000): read in one call,
    a 2.25 GiB read stopped there and came back short, as if the file ended. Shrunk to a block
    here, the kernel's limit stood for by a preadv that moves no more than that."""
    fd, data = direct_fd
    real = os.preadv

    def capped(fd: int, buffers: list[Any], offset: int) -> int:
        with memoryview(buffers[0]) as view, view[:BLOCK] as piece:
            return real(fd, [piece], offset)

    monkeypatch.setattr(_direct, "KERNEL_RW_MAX", BLOCK)
    monkeypatch.setattr(os, "preadv", capped)
    assert _direct.direct_pread_sync(fd, SIZE - 5, 5) == data[5:]
    assert _direct.direct_pread_sync(fd, 2 * BLOCK, BLOCK - 1) == data[BLOCK - 1:3 * BLOCK - 1]


async def test_pwrite_direct_writes_a_copy_of_whole_blocks(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    try:
        eng: Any = aionative.get_engine()
        a, b = os.urandom(2 * BLOCK), os.urandom(BLOCK)
        grow = bytearray(a)
        fut = eng.pwrite_direct(fd, grow, BLOCK)
        grow.extend(b"not held")  # a copy was taken: the caller's object is free at once
        assert await fut == 2 * BLOCK
        assert await eng.pwrite_direct(fd, memoryview(b), 0) == BLOCK
        assert path.read_bytes() == b + a
        assert await eng.pwrite_direct(fd, b"", 0) == 0
        with pytest.raises(OSError) as raised:
            eng.pwrite_direct(fd, b, -BLOCK)
        assert raised.value.errno == errno.EINVAL
        with pytest.raises(OSError) as raised:
            await eng.pwrite_direct(fd, b, 100)  # not a whole block: the kernel refuses it
        assert raised.value.errno == errno.EINVAL
        with pytest.raises(TypeError):
            eng.pwrite_direct(fd, "text", 0)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as raised:
        await eng.pwrite_direct(fd, b, 0)
    assert raised.value.errno == errno.EBADF
    assert path.read_bytes() == b + a


async def test_a_direct_files_whole_block_writes_map_no_memory(
        native_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w.bin"
    a, b = os.urandom(2 * BLOCK), os.urandom(BLOCK)
    async with aionative.open(path, "wb", buffering=0, direct=True) as f:
        monkeypatch.setattr(_direct, "mmap", _NoMaps())
        assert await f.write(a) == 2 * BLOCK
        assert await f.pwrite(b, BLOCK) == BLOCK
        monkeypatch.undo()
    assert path.read_bytes() == a[:BLOCK] + b


async def test_whole_block_writes_size_the_partial_ones_after_them(backend: str,
                                                                   tmp_path: Path) -> None:
    """The file layer reads the partial blocks around an unaligned direct write, and trims the
    padding after it, by the size it knows the file has. A whole-block write raises that size
    when it is sent; the next operation waits for it, even if its caller was cancelled while
    the kernel had it. With a stale size the partial write after it would skip reading the
    block the first one filled, write zeros over it, and trim the file short."""
    path = tmp_path / "w.bin"
    a = os.urandom(1 << 20)  # long enough for the device to still hold it after a turn
    cancelled = 0
    for turns in (None, 1, 1, 2, 3):  # (None: awaited; a turn runs the task's first step)
        path.write_bytes(b"")
        async with aionative.open(path, "r+b", buffering=0, direct=True) as f:
            if turns is None:
                assert await f.pwrite(a, 0) == len(a)
            else:
                task = asyncio.ensure_future(f.pwrite(a, 0))
                for _ in range(turns):
                    await asyncio.sleep(0)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                cancelled += task.cancelled()
            await f.pwrite(b"Z", BLOCK + 10)
        assert path.read_bytes() == a[:BLOCK + 10] + b"Z" + a[BLOCK + 11:], turns
    # On Linux AIO an O_DIRECT write that extends the file is done inside io_submit (ext4):
    # the caller has its result before any cancellation can reach it.
    assert cancelled or backend == "linux_aio", "no write was cancelled: the path is untested"


@contextlib.contextmanager
def _file_size_limit(limit: int) -> Iterator[None]:
    """RLIMIT_FSIZE at ``limit``: a write past it fails with EFBIG (SIGXFSZ ignored)."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, old_handler)


LINUX_AIO_EXTENDS_AT_ONCE = (
    "Linux AIO: an O_DIRECT write that extends the file is done inside io_submit (ext4), so "
    "its caller has the answer before a cancellation can reach it")


async def _cancelled_in_flight(f: Any, data: bytes, off: int, how: str = "pwrite",
                               attempts: int = 20) -> bool:
    """Cancel ``f.pwrite(data, off)`` (``how="write"``: ``f.write(data)`` at the position)
    right after it reached the kernel, ``attempts`` times at most, until the cancellation
    catches it there: True then (the file holds it as unfinished, for its next call). Each
    attempt that lost the race (the answer came first, on a busy machine or a worker that
    started at once) writes again; the caller sees an error that answer carried."""
    for _ in range(attempts):
        if how == "write":
            await f.seek(off)
        task = asyncio.ensure_future(f.pwrite(data, off) if how == "pwrite" else f.write(data))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        except OSError as exc:
            assert exc.errno == errno.EFBIG
    return False


@pytest.mark.parametrize("how", ["pwrite", "write"])
async def test_a_write_failing_after_its_caller_was_cancelled_is_reported_once(
        backend: str, how: str, tmp_path: Path) -> None:
    """A write the kernel still had when its caller was cancelled is waited for by the next
    call, which reports its error. Once: before, the failed write stayed first in the file's
    list of unfinished writes, and every later call, close() included, raised its error again
    (the descriptor was never closed). And the file then goes by the size the file has, not
    the end the whole-block write counted when it was sent (a partial write past that size
    is trimmed back to its own end), and a ``write()``'s position by where the file stopped,
    as when its caller waits for it: before, it stayed at the write's end, and the next write
    left a hole of zeros."""
    if backend == "linux_aio":
        pytest.skip(LINUX_AIO_EXTENDS_AT_ONCE)
    path = tmp_path / "w.bin"
    a = os.urandom(1 << 20)
    half = 512 << 10
    for _ in range(10):
        path.write_bytes(b"")
        async with aionative.open(path, "r+b", buffering=0, direct=True) as f:
            with _file_size_limit(half):
                if not await _cancelled_in_flight(f, a, 0, how, attempts=1):
                    continue
                with pytest.raises(OSError) as raised:
                    await f.pwrite(b"Z", 10)  # reports the failure, writes nothing
                assert raised.value.errno == errno.EFBIG
                if how == "write":
                    assert await f.tell() == half
            assert await f.pwrite(b"Z", 600 << 10) == 1
            if how == "write":
                assert await f.write(b"Y") == 1
        break
    else:
        pytest.skip("the answer came before the cancellation, ten times")
    data = path.read_bytes()
    expect = bytearray(a[:half])
    if how == "write":
        expect += b"Y"
    expect += bytes((600 << 10) - len(expect)) + b"Z"
    assert data == bytes(expect)


async def test_close_reports_a_cancelled_writes_failure_and_closes(backend: str,
                                                                  tmp_path: Path) -> None:
    """As the builtin's close() raises its flush's error with the file closed all the same,
    a close() that reports the failure of a write a cancelled call left closes the file
    (before, it raised with the descriptor still open: ``async with`` leaked it)."""
    if backend == "linux_aio":
        pytest.skip(LINUX_AIO_EXTENDS_AT_ONCE)
    path = tmp_path / "w.bin"
    path.write_bytes(b"")
    f = await aionative.open(path, "r+b", buffering=0, direct=True)
    fd = f.fileno()
    with _file_size_limit(512 << 10):
        caught = await _cancelled_in_flight(f, os.urandom(1 << 20), 0)
        with pytest.raises(OSError) as raised:
            await f.close()
    if not caught:
        pytest.skip("the answer came before the cancellation, twenty times")
    assert raised.value.errno == errno.EFBIG
    assert f.closed
    with pytest.raises(OSError) as gone:
        os.fstat(fd)
    assert gone.value.errno == errno.EBADF


async def test_a_call_cancelled_while_it_waits_for_an_unfinished_write_stays_cancelled(
        backend: str, tmp_path: Path) -> None:
    """A call that waits for the write a cancelled call left, and is cancelled itself once that
    write is done but before it runs again, raises CancelledError and does nothing (before, it
    went on and wrote: the cancellation was lost, and ``asyncio.timeout`` and TaskGroup, which
    count them, with it)."""
    path = tmp_path / "w.bin"
    a = os.urandom(1 << 20)
    path.write_bytes(a)  # (overwrites: on Linux AIO too the device has them a while)
    async with aionative.open(path, "r+b", buffering=0, direct=True) as f:
        for _ in range(20):
            if not await _cancelled_in_flight(f, a[::-1], 0, attempts=1):
                continue
            write = f._unfinished[0][0]
            second = asyncio.ensure_future(f.pwrite(b"Z", 10))
            await asyncio.sleep(0)  # the call waits for the write
            if write.done():
                # Done before the call looked (reaped by then, or in that loop iteration): the
                # call did not wait, it wrote; the next attempt writes the whole file again.
                await second
                continue
            write.add_done_callback(lambda _, second=second: second.cancel())
            with pytest.raises(asyncio.CancelledError):
                await second
            break
        else:
            pytest.skip("the write was done before the next call could wait for it")
    assert path.read_bytes() == a[::-1]


async def test_a_write_the_kernel_took_only_part_of_is_an_error(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The engines carry on after a short piece; one that moves nothing ends the write short,
    and the file layer, which counted all of it, raises EIO (before, the threads engine's
    direct write looped on such a piece for ever, and a short count was taken for the whole
    write). Like FileIO's, the file object's error does not say how much was written. On the
    threads engine, where a worker's ``os.pwritev`` can be made to move nothing."""
    aionative.set_default_backend("threads")
    try:
        path = tmp_path / "w.bin"
        async with aionative.open(path, "wb", buffering=0, direct=True) as f:
            monkeypatch.setattr(os, "pwritev", lambda *args: 0)
            with pytest.raises(OSError) as raised:
                await f.write(os.urandom(2 * BLOCK))
            monkeypatch.undo()
        assert raised.value.errno == errno.EIO
        assert not hasattr(raised.value, "characters_written")
    finally:
        aionative.set_default_backend(None)


async def test_cancelled_direct_reads_leave_nothing_behind(backend: str, tmp_path: Path
                                                           ) -> None:
    """Readers cancelled before, during and after their reads reach the device: the others'
    results are exact, and (the autouse fixture checks it) no operation, pinned buffer or
    kernel slot outlives the test; the engine frees its memory only once the kernel is done."""
    data = os.urandom(1 << 20)
    path = tmp_path / "d.bin"
    path.write_bytes(data)
    rng = random.Random(24)
    plan = [(rng.randrange(len(data) - 9000), rng.randrange(1, 9000)) for _ in range(400)]
    async with aionative.open(path, "rb", buffering=0, direct=True) as f:
        tasks = [asyncio.ensure_future(f.pread(n, off)) for off, n in plan]
        doomed = set(rng.sample(range(len(tasks)), 200))
        for turn in range(4):
            for i in doomed:
                if i % 4 == turn:
                    tasks[i].cancel()
            await asyncio.sleep(0)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        eng: Any = aionative.get_engine()
        for _ in range(5000):
            if eng.in_flight == 0:
                break
            await asyncio.sleep(0.001)
        assert eng.in_flight == 0
    cancelled = 0
    for i, ((off, n), res) in enumerate(zip(plan, results)):
        if isinstance(res, asyncio.CancelledError):
            assert i in doomed
            cancelled += 1
        else:
            assert res == data[off:off + n], (off, n)
    assert cancelled > 0
