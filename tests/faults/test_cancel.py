"""Cancellation at random points: nothing crashes, nothing leaks, the rest is exact."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import threading
from pathlib import Path

import pytest

import aionative
from tests.support import cold_file, evict, held_in_the_ring

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend")]


async def _settle() -> None:
    eng = aionative.get_engine()
    for _ in range(5000):
        if eng.in_flight == 0:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"operations still in flight: {eng.stats()}")


@pytest.mark.blocks_the_loop("ten thousand tasks made ready at once run their first steps in one "
                              "loop iteration, whatever they call")
async def test_10k_reads_with_random_cancellation(data_file: tuple[Path, bytes]) -> None:
    path, data = data_file
    fd = os.open(path, os.O_RDONLY)
    rng = random.Random(6)
    try:
        plan = [(rng.randrange(len(data)), rng.randrange(1, 20000)) for _ in range(10_000)]
        bufs: dict[int, bytearray] = {}

        async def one(i: int, off: int, n: int) -> bytes | int:
            if i % 3 == 0:
                bufs[i] = bytearray(n)
                return await aionative.preadinto(fd, bufs[i], off)
            return await aionative.pread(fd, n, off)

        tasks = [asyncio.ensure_future(one(i, o, n)) for i, (o, n) in enumerate(plan)]
        doomed = rng.sample(range(len(tasks)), 4000)
        # Cancel some before they start, some while queued in user space, some with the kernel.
        for k, i in enumerate(doomed):
            if k % 4 == 0:
                tasks[i].cancel()
        for _ in range(3):
            await asyncio.sleep(0)
            for k, i in enumerate(doomed):
                if k % 4 and rng.random() < 0.4:
                    tasks[i].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await _settle()
    finally:
        os.close(fd)
    cancelled = 0
    for i, ((off, n), res) in enumerate(zip(plan, results)):
        if isinstance(res, asyncio.CancelledError):
            cancelled += 1
            continue
        assert not isinstance(res, BaseException), res
        expected = data[off:off + n]
        if isinstance(res, int):
            assert res == len(expected) and bufs[i][:res] == expected
        else:
            assert res == expected
    assert 1000 <= cancelled <= 4000
    stats = aionative.engine_stats()
    assert stats["in_flight"] == 0 and stats.get("pinned", 0) == 0, stats


async def test_cancelled_read_keeps_buffer_pinned_until_reaped(
        backend: str, tmp_path: Path) -> None:
    """A bytearray being read into cannot be resized while the kernel may write into it: a
    read held in io_uring's queue (submissions refused until the block ends) keeps it
    exported until its cancellation is done."""
    if backend != "io_uring":
        pytest.skip("the fault point that holds a read in the queue is io_uring's")
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(100)
        with held_in_the_ring():
            task = asyncio.ensure_future(aionative.preadinto(fd, buf, 0))
            await asyncio.sleep(0.01)
            assert not task.done()
            with pytest.raises(BufferError):
                buf.extend(b"no")  # exported to the kernel
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await _settle()
        buf.extend(b"ok")  # released: resizing is allowed again
    finally:
        os.close(fd)


async def test_a_cancelled_read_never_lands_in_a_reused_buffer(
        backend: str, tmp_path: Path) -> None:
    """preadinto of cold data, cancelled while the device reads it: the await ends (with
    CancelledError) only once the kernel, or the worker, is done with the buffer. The caller
    then fills the buffer with its own bytes, and nothing the cancelled read brought may
    overwrite them afterwards."""
    size = 1 << 20
    fd, _ = cold_file(tmp_path / "cold", 8 * size)
    try:
        for attempt in range(8):
            evict(tmp_path / "cold")
            buf = bytearray(size)
            task = asyncio.ensure_future(aionative.preadinto(fd, buf, attempt * size))
            await asyncio.sleep(0)  # submitted (or handed to a worker)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            buf[:] = b"Z" * size  # the caller's own data, in the buffer it got back
            await asyncio.sleep(0.05)  # time for any late completion to land
            assert buf == b"Z" * size, f"a cancelled read wrote into the buffer (try {attempt})"
    finally:
        os.close(fd)


async def test_a_cancelled_read_whose_worker_then_fails_ends_cancelled(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancelled caller waits until the worker that runs its read is done with the buffer;
    when that read then fails (EIO), the failure is the operation's, nobody's to see: the
    caller ends cancelled, as it was asked to."""
    if backend != "threads":
        pytest.skip("a worker's call outlives its cancellation on the threads backend alone")
    from aionative import _threads

    started, release = threading.Event(), threading.Event()

    def failing_preadinto(fd: int, buf: memoryview, offset: int) -> int:
        with buf:
            started.set()
            release.wait(10)
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(_threads, "_preadinto", failing_preadinto)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)
    fd = os.open(path, os.O_RDONLY)
    aionative.set_inline_budget(0)  # to a worker
    try:
        task = asyncio.ensure_future(aionative.preadinto(fd, bytearray(4096), 0))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.01)
        assert not task.done()  # waiting for the worker, which still holds the buffer
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    finally:
        release.set()
        aionative.set_inline_budget(None)
        os.close(fd)


@pytest.fixture(scope="module", params=["rb", "r"])
def many_lines(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, str, bytes | str, list[bytes | str]]:
    """A file of 400,000 short lines, a mode, and its first line and the rest as the builtin
    reads them."""
    p = tmp_path_factory.mktemp("lines") / "lines"
    p.write_bytes(b"".join(b"%d\n" % i for i in range(400_000)))
    mode: str = request.param
    with open(p, mode) as f:
        return p, mode, f.readline(), f.readlines()


async def test_a_cancelled_readlines_leaves_the_position_where_it_was(
        many_lines: tuple[Path, str, bytes | str, list[bytes | str]]) -> None:
    """``readlines()`` of a long file yields between slices of lines; cancelled during such a
    turn, it puts the position back: the next call returns every line, none is lost."""
    p, mode, head, expected = many_lines
    aionative.set_inline_budget(1)  # every turn's budget spent at once: readlines yields
    try:
        async with aionative.open(p, mode) as f:
            assert await f.readline() == head
            cancelled = 0
            for turns in range(1, 200):  # cancelled later and later: in the fetch, then
                task = asyncio.ensure_future(f.readlines())  # between slices of lines
                for _ in range(turns):
                    await asyncio.sleep(0)
                if task.done():
                    break
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                cancelled += 1
                assert await f.tell() == len(head)
            assert cancelled > 0
            assert await task == expected
            assert await f.tell() == p.stat().st_size
    finally:
        aionative.set_inline_budget(None)
