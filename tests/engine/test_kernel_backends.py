"""Kernel-backend specifics: no user-space threads, the Linux AIO NOWAIT -> O_DIRECT path."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import gc
import mmap
import os
import random
import struct
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _core
from bench.meter import reset_rss_peak, rss_peak_mib
from tests.support import cold_file, open_fds_to

pytestmark = pytest.mark.asyncio


def _tasks() -> dict[int, str]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[int(tid)] = f.read().strip()
        except FileNotFoundError:  # exited meanwhile
            pass
    return out


@pytest.fixture
def four_mib(tmp_path: Path) -> tuple[Path, bytes]:
    """A file of 4 MiB of random bytes, and its contents. Made by a synchronous fixture, off
    the test's loop: drawing 4 MiB from the kernel's generator takes 10-20 ms of the thread's
    time, which inside the test would join the first await's work in one gap of the loop guard."""
    data = os.urandom(4 << 20)
    src = tmp_path / "src"
    src.write_bytes(data)
    return src, data


async def test_no_user_thread_during_10k_reads_and_writes(
        native_backend: str, tmp_path: Path, four_mib: tuple[Path, bytes],
        record_property: pytest.RecordProperty) -> None:
    src, data = four_mib
    rfd = os.open(src, os.O_RDONLY)
    wfd = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT)
    threads_before = {t.ident for t in threading.enumerate()}
    tasks_before = _tasks()
    seen: dict[int, str] = {}
    rng = random.Random(4)
    try:
        # 80 rounds x (125 reads + 125 writes) = 10k + 10k. (Not more at once: the gathered
        # calls all take their first step in one iteration of the loop, which the loop guard
        # counts as one hold.)
        for _ in range(80):
            offs = [rng.randrange(0, len(data) - 4096) for _ in range(125)]
            reads = [aionative.pread(rfd, 4096, o) for o in offs]
            writes = [aionative.pwrite(wfd, data[o:o + 4096], o) for o in offs]
            got = await asyncio.gather(*reads, *writes)
            assert all(g == data[o:o + 4096] for g, o in zip(got[:125], offs))
            seen.update(_tasks())
            assert {t.ident for t in threading.enumerate()} == threads_before
    finally:
        os.close(rfd)
        os.close(wfd)
    new = {tid: name for tid, name in seen.items() if tid not in tasks_before}
    kernel_workers = {tid: n for tid, n in new.items() if n.startswith(("iou-wrk", "iou-sqp"))}
    user = {tid: n for tid, n in new.items() if tid not in kernel_workers}
    record_property("kernel_io_workers", len(kernel_workers))
    print(f"{native_backend}: kernel io_uring workers seen: {len(kernel_workers)} "
          f"{sorted(set(kernel_workers.values()))}")
    assert user == {}, f"user-space threads appeared: {user}"


@pytest.mark.usefixtures("linux_aio")
async def test_linux_aio_cold_reads_take_the_nowait_reissue_path(tmp_path: Path) -> None:
    fd, data = cold_file(tmp_path / "cold", 16 << 20)
    try:
        before = aionative.engine_stats()
        rng = random.Random(5)
        cases = [(rng.randrange(len(data)), rng.randrange(1, 300000)) for _ in range(200)]
        cases += [(len(data) - 10, 100), (0, len(data)), (12345, 1)]
        got = await asyncio.gather(*[aionative.pread(fd, n, o) for o, n in cases])
        for (o, n), g in zip(cases, got):
            assert g == data[o:o + n], (o, n)
        buf = bytearray(70000)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert await aionative.preadinto(fd, buf, 4097) == 70000 and buf == data[4097:74097]
        after = aionative.engine_stats()
    finally:
        os.close(fd)
    assert after["nowait_eagain"] > before["nowait_eagain"], after
    assert after["direct_reissues"] > before["direct_reissues"], after
    assert after["direct_refused"] == before["direct_refused"], after


@pytest.mark.usefixtures("linux_aio")
async def test_linux_aio_a_large_cold_read_takes_the_detour_in_pieces(tmp_path: Path) -> None:
    """A cold read larger than DETOUR_MAX reaches the device as O_DIRECT pieces of at most
    DETOUR_MAX, one after another, after one RWF_NOWAIT probe that came back EAGAIN: the bytes
    are right at unaligned offsets, across piece boundaries and past the end of the file, and
    the process's peak RSS grows by the result and one piece's buffer, not by a second buffer
    as large as the read (one piece of the whole read held twice its size)."""
    piece = _core.DETOUR_MAX
    size = 6 * piece + 123
    fd, data = cold_file(tmp_path / "cold", size)
    cases = [(0, size), (4097, 3 * piece), (piece - 1, 2 * piece + 2), (4 * piece + 5, 4 * piece)]
    aionative.get_engine()
    aionative.set_inline_budget(0)  # straight to io_submit: the probe is the kernel queue's
    detours = 0
    try:
        for off, n in cases:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            before = aionative.engine_stats()
            rss = reset_rss_peak()
            got = await aionative.pread(fd, n, off)
            grew = None if rss is None else (rss_peak_mib() - rss) * (1 << 20)
            after = aionative.engine_stats()
            assert got == data[off:off + n], (off, n)
            probes = after["nowait_eagain"] - before["nowait_eagain"]
            pieces = after["direct_reissues"] - before["direct_reissues"]
            assert probes <= 1, (off, n, after)  # never a probe a piece
            if not probes:
                continue  # the page cache kept ahead of every RWF_NOWAIT piece
            detours += 1
            # RWF_NOWAIT pieces may first return what readahead brought in (up to a few MiB,
            # more on a slow, sanitized build): two pieces' slack.
            assert pieces >= (min(n, size - off) - 2 * piece) // piece, (off, n, pieces)
            assert after["splits"] - before["splits"] <= pieces - 1, (off, n, after)
            if grew is not None:
                assert grew < len(got) + 3 * piece, (off, n, grew)
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
    assert detours, "no cold read came back EAGAIN from its RWF_NOWAIT probe"


@pytest.mark.usefixtures("linux_aio")
async def test_linux_aio_detour_pieces_keep_their_own_descriptor(tmp_path: Path) -> None:
    """Once a cold read has taken the O_DIRECT detour, its further pieces read through the
    descriptor the detour duplicated, never the caller's number again: the caller's number
    replaced by another file's (dup2) in the middle of the read leaves the result the first
    file's bytes."""
    piece = _core.DETOUR_MAX
    other = tmp_path / "other"
    other.write_bytes(b"\xff" * 5 * piece)
    ofd = os.open(other, os.O_RDONLY)
    aionative.get_engine()
    aionative.set_inline_budget(0)
    try:
        # A device that answers within the submission serves some of the first RWF_NOWAIT
        # probe from the readahead it started: fewer pieces are left for the detour, and now
        # and then none after the swap. Each attempt reads a new cold file.
        for attempt in range(3):
            fd, data = cold_file(tmp_path / f"cold{attempt}", 5 * piece)
            try:
                before = aionative.engine_stats()["direct_reissues"]
                task = asyncio.ensure_future(aionative.pread(fd, len(data), 0))
                while not task.done():
                    await asyncio.sleep(0)
                    if aionative.engine_stats()["direct_reissues"] > before:
                        break
                after_swap = 0
                if not task.done():  # on its detour: swap the number under it
                    os.dup2(ofd, fd)  # the caller's number now names the other file
                    swapped = aionative.engine_stats()["direct_reissues"]
                    await asyncio.wait([task])
                    after_swap = aionative.engine_stats()["direct_reissues"] - swapped
                got = await task
            finally:
                os.close(fd)
            assert got == data
            if after_swap >= 1:
                break
        assert after_swap >= 1, "no piece of the detour was read after the swap"
    finally:
        aionative.set_inline_budget(None)
        os.close(ofd)


@pytest.mark.usefixtures("linux_aio")
@pytest.mark.blocks_the_loop("where the O_DIRECT descriptor cannot be had, Linux AIO reads a "
                             "cold range plainly, inside io_submit (docs/design.md)")
async def test_linux_aio_direct_refused_stays_correct(tmp_path: Path) -> None:
    """Where the O_DIRECT descriptor cannot be had, the read is done plainly and counted.
    (The inline path is off: the read goes to io_submit with RWF_NOWAIT. A device that
    answers within the submission — this VM's, some of the time — serves a cold read there,
    rightly; each attempt reads a new cold file.)"""
    aionative.get_engine()
    aionative.set_inline_budget(0)
    try:
        for attempt in range(4):
            fd, data = cold_file(tmp_path / f"cold{attempt}", 4 << 20)
            before = aionative.engine_stats()
            try:
                _core.set_fault("direct_open", errno.EINVAL, -1)
                got = await aionative.pread(fd, 1 << 20, 333)
                stats = aionative.engine_stats()
            finally:
                _core.clear_faults()
                os.close(fd)
            assert got == data[333:333 + (1 << 20)]
            if stats["nowait_eagain"] > before["nowait_eagain"]:
                assert stats["direct_refused"] > before["direct_refused"], stats
                return
    finally:
        aionative.set_inline_budget(None)
    pytest.skip("the device answered every cold read within its submission")


@pytest.mark.timeout(90)
async def test_sustained_hot_reads_never_stall(native_backend: str, tmp_path: Path) -> None:
    """64 readers doing cached 4 KiB reads back to back for a few seconds (regression: the
    reaper once looped on a stale IORING_SQ_TASKRUN flag and spun the loop thread forever, in
    about one run in five of this workload)."""
    data = os.urandom(32 << 20)
    path = tmp_path / "hot"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    loop = asyncio.get_running_loop()
    stop = loop.time() + 3.0
    reads = 0

    async def reader(seed: int) -> None:
        nonlocal reads
        rng = random.Random(seed)
        while loop.time() < stop:
            off = rng.randrange(len(data) // 4096) * 4096
            assert await aionative.pread(fd, 4096, off) == data[off:off + 4096]
            reads += 1

    try:
        await asyncio.wait_for(asyncio.gather(*[reader(i) for i in range(64)]), 60)
    finally:
        os.close(fd)
    assert reads > 10_000


def _direct_file(tmp_path: Path, size: int) -> tuple[int, bytes]:
    """A file of `size` random bytes, opened O_DIRECT (its reads go to the device)."""
    data = os.urandom(size)
    path = tmp_path / "direct"
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY | os.O_DIRECT), data


def _cached_file(tmp_path: Path, size: int) -> tuple[int, bytes]:
    """A file of `size` random bytes, opened buffered, every page of it in the page cache."""
    data = os.urandom(size)
    (tmp_path / "cached").write_bytes(data)
    fd = os.open(tmp_path / "cached", os.O_RDONLY)
    os.pread(fd, size, 0)
    return fd, data


@contextlib.contextmanager
def _direct_reads(tmp_path: Path) -> Iterator[tuple[int, bytes, list[mmap.mmap]]]:
    """A 64 KiB file opened O_DIRECT (_direct_file) and two page-aligned 4 KiB buffers."""
    fd, data = _direct_file(tmp_path, 64 << 10)
    bufs = [mmap.mmap(-1, 4096) for _ in range(2)]
    try:
        yield fd, data, bufs
    finally:
        os.close(fd)
        for b in bufs:
            b.close()


async def _left_with_the_device(eng: Any, fd: int, buf: mmap.mmap, off: int) -> bool:
    """One O_DIRECT read, through the flush (or, the engine already deep, sent inside its
    call); whether its submission left it with the device, which makes the engine deep until
    the next flush (a device that answers inside the submission leaves it shallow). Asked
    right after the submission: a read sent inside its call may be answered before this task
    runs again (the loop polls the eventfd first, the reap makes it done), and the engine is
    still deep. (Asked after a turn of the loop, such a read counted as answered inside its
    submission, under ASan on uvloop: a test then expected the next read to wait for the
    flush.) A read that waited for the flush is asked after it: the flush was scheduled
    before this task's next step, which runs in the same pass of the ready queue, no poll
    between them."""
    before = aionative.engine_stats()["batches"]
    read = eng.preadinto(fd, buf, off)
    if aionative.engine_stats()["batches"] == before:
        await asyncio.sleep(0)  # it waits for the flush, which submits it
    kept = not read.done()
    assert await read == 4096
    return kept


async def _learn(fd: int) -> None:
    """One read first: on Linux AIO the first read of a descriptor tries RWF_NOWAIT, which an
    O_DIRECT read refuses (EAGAIN), and is submitted again; the engine remembers it."""
    buf = mmap.mmap(-1, 4096)
    try:
        assert await aionative.preadinto(fd, buf, 0) == 4096
    finally:
        buf.close()
    await asyncio.sleep(0.005)


async def test_reads_a_device_holds_are_submitted_two_at_a_time(native_backend: str,
                                                               ring_only: None,
                                                               tmp_path: Path) -> None:
    """Reads prepared in a loop iteration go to the kernel together at its flush. Once a flush
    leaves reads with the kernel (O_DIRECT: the device has them), the engine is deep until the
    next flush: the first read of a round goes at once, alone (the device holds nothing else of
    ours), then every two, so the device starts on them while the loop prepares the rest
    (``EARLY_SUBMIT``, csrc/submit.c); the eighth waits for the flush: five batches. Cached
    reads (queued here: the inline path is off) complete inside their submission and leave it
    shallow. A device that answers a batch within its submission (a VM whose host holds the
    data, some of the time) leaves it shallow too, rightly: at the flush (one batch; the pair
    of rounds is tried again), or when the first read, sent alone, is answered inside its call
    (the other seven wait for the flush: two batches)."""
    size = 128 << 10
    fd, data = _direct_file(tmp_path, 8 * size)
    cfd, cached = _cached_file(tmp_path, 8 * size)
    bufs = [mmap.mmap(-1, size) for _ in range(8)]
    offs = [i * size for i in range(8)]

    async def one_round(fd: int, data: bytes) -> int:
        before = aionative.engine_stats()["batches"]
        got = await asyncio.gather(*(aionative.preadinto(fd, b, o) for b, o in zip(bufs, offs)))
        assert got == [size] * 8
        assert [bytes(b) for b in bufs] == [data[o:o + size] for o in offs]
        return aionative.engine_stats()["batches"] - before

    try:
        await _learn(fd)
        deep_seen = False
        for _ in range(5):
            await one_round(cfd, cached)  # its flush finds nothing left with the kernel
            assert await one_round(cfd, cached) == 1
            assert await one_round(fd, data) == 1  # shallow: one batch
            deep = await one_round(fd, data)  # deep, if the device kept the first batch
            assert deep in (1, 2, 5)
            if deep == 5:
                deep_seen = True
                break
        await one_round(cfd, cached)
        assert await one_round(cfd, cached) == 1
        if not deep_seen:
            pytest.skip("the device answered every batch within its submission")
    finally:
        os.close(fd)
        os.close(cfd)
        for b in bufs:
            b.close()


async def test_a_read_the_device_would_hold_alone_is_submitted_at_once(native_backend: str,
                                                                      tmp_path: Path) -> None:
    """A read prepared while the engine is deep (the last flush left a read with the device)
    and the device holds nothing else of ours goes to the kernel inside the call, not at the
    iteration's flush: kept back, it would wait out one more loop iteration with the device
    idle (W2 at depth 1: every read). Sent, it is settled there (a piece answered inside the
    submission sends its rest before the call returns), and a reap that finds nothing costs
    no system call: io_uring's completion queue and Linux AIO's ring are read in memory, and
    no flush follows it (test_a_read_sent_inside_its_call_schedules_no_flush): one system call
    in all. A device that answers within the submission leaves the engine shallow; then the
    pair is tried again."""
    eng: Any = aionative.get_engine()
    with _direct_reads(tmp_path) as (fd, data, bufs):
        await _learn(fd)
        for i in range(0, 16, 2):
            kept = await _left_with_the_device(eng, fd, bufs[0], i * 4096)
            before = aionative.engine_stats()
            second = eng.preadinto(fd, bufs[1], (i + 1) * 4096)
            sent = aionative.engine_stats()["batches"] - before["batches"]
            await asyncio.sleep(0)  # a flush, had one been scheduled, runs
            calls = aionative.engine_stats()["syscalls"] - before["syscalls"]
            answered = second.done()  # by the device, inside the submission or since
            assert await second == 4096
            assert [bytes(b) for b in bufs] == [data[o:o + 4096]
                                                for o in (i * 4096, (i + 1) * 4096)]
            if kept:
                assert sent == 1
                if not answered:  # the submission; neither its reap nor the flush asked
                    assert calls == 1
                return
            assert sent == 0  # shallow: it waited for the flush
    pytest.skip("the device answered every read within its submission")


async def test_a_read_sent_inside_its_call_schedules_no_flush(native_backend: str,
                                                              tmp_path: Path) -> None:
    """A direct read through ``aionative.preadinto`` while the engine is deep and the device
    holds nothing else of ours is sent inside its call; the flush it would have scheduled
    would find nothing to send or reap, and would still cost the loop an iteration (W2 at
    depth 1: three iterations a read instead of two). None is scheduled: not by the read, and
    not by its first question, whether the page cache may answer it inline, which used to open
    the inline budget's window (a window schedules a flush to reopen it) before it learned
    that the descriptor is O_DIRECT. A read answered inside the submission leaves the engine
    shallow, so the next one waits for a flush: the pair is tried again."""
    eng: Any = aionative.get_engine()
    with _direct_reads(tmp_path) as (fd, data, bufs):
        await _learn(fd)
        for i in range(0, 16, 2):
            if not await _left_with_the_device(eng, fd, bufs[0], i * 4096):
                continue
            before = aionative.engine_stats()
            assert await aionative.preadinto(fd, bufs[1], (i + 1) * 4096) == 4096
            after = aionative.engine_stats()
            assert bytes(bufs[1]) == data[(i + 1) * 4096:(i + 2) * 4096]
            assert after["batches"] - before["batches"] == 1
            assert after["flushes"] - before["flushes"] == 0
            return
    pytest.skip("the device answered every read within its submission")


async def test_the_spent_budget_does_not_refuse_a_direct_read(native_backend: str,
                                                             tmp_path: Path) -> None:
    """The inline part alone (``read_inline``, ``readinto_inline``) answers False when the
    spent budget refused the read (its caller yields a turn and retries) and None when the
    read must go to the kernel queue. A direct read never goes inline: None, whatever the
    budget says. Answered False, a large ``aionative.pread``/``preadinto`` of an O_DIRECT
    descriptor took a turn of the loop for nothing once the budget was spent."""
    eng: Any = aionative.get_engine()
    fd, _ = _direct_file(tmp_path, 1 << 20)
    cfd, _ = _cached_file(tmp_path, 1 << 20)
    big = mmap.mmap(-1, 64 << 10)
    try:
        await _learn(fd)
        while eng.read_inline(cfd, 4096, 0) is not False:
            pass  # cached reads until the iteration's budget is spent
        assert eng.read_inline(cfd, 4096, 4096) is False
        assert eng.readinto_inline(fd, big, 0) is None
        assert eng.read_inline(fd, 4096, 0) is None
        assert eng.readinto_inline(fd, big, 0, True) is None  # a retry too
    finally:
        os.close(fd)
        os.close(cfd)
        big.close()


async def test_cached_reads_through_the_queue_still_yield_while_deep(native_backend: str,
                                                                      tmp_path: Path) -> None:
    """A read sent early, alone, and answered inside its call (cached) leaves the engine
    shallow, as a flush would: the next read waits for the flush, so a task reading cached
    data through the kernel queue (what the spent budget sends there) lets the loop run. The
    engine stayed deep after such a read: every future was done on return, the task never
    yielded, and a callback waited for the whole file (16 reads of 16 here at 1e88c1d)."""
    eng: Any = aionative.get_engine()
    fd, _ = _direct_file(tmp_path, 64 << 10)
    cfd, cached = _cached_file(tmp_path, 1 << 20)
    buf = mmap.mmap(-1, 4096)
    try:
        await _learn(fd)
        for attempt in range(8):
            if not await _left_with_the_device(eng, fd, buf, attempt * 4096):
                continue
            ran: list[int] = []
            asyncio.get_running_loop().call_soon(ran.append, 1)
            got: list[bytes] = []
            for off in range(0, 1 << 20, 65536):
                got.append(await eng.pread(cfd, 65536, off))
                if ran:
                    break
            assert ran and len(got) <= 2, len(got)
            assert b"".join(got) == cached[:len(got) * 65536]
            return
        pytest.skip("the device answered every read within its submission")
    finally:
        os.close(fd)
        os.close(cfd)
        buf.close()


async def test_a_read_the_device_completes_wakes_the_loop_once(native_backend: str,
                                                              tmp_path: Path) -> None:
    """One O_DIRECT read, one wake-up. On io_uring with DEFER_TASKRUN, running a completion's
    work signals the eventfd a second time; the engine clears the eventfd after reaping, so
    that signal makes no second wake-up for nothing."""
    fd, data = _direct_file(tmp_path, 64 << 10)
    buf = mmap.mmap(-1, 4096)
    try:
        await _learn(fd)
        for i in range(5):
            before = aionative.engine_stats()["wakeups"]
            assert await aionative.preadinto(fd, buf, i * 4096) == 4096
            assert bytes(buf) == data[i * 4096:(i + 1) * 4096]
            await asyncio.sleep(0.005)  # a second wake-up would have come by now
            assert aionative.engine_stats()["wakeups"] - before == 1
    finally:
        os.close(fd)
        buf.close()


class _ClosesTheEngine(bytearray):
    """A buffer whose release closes the running loop's engine."""

    def __del__(self) -> None:
        aionative.get_engine().close()


class _ClosesTheEngineWhenCollected:
    """Cyclic garbage whose finalizer closes an engine: only the collector frees it."""

    def __init__(self, eng: Any) -> None:
        self.eng, self.me = eng, self

    def __del__(self) -> None:
        self.eng.close()


async def test_an_engine_closed_while_a_read_creates_its_future_refuses_it(
        native_backend: str, tmp_path: Path) -> None:
    """Creating a read's future runs Python code (here the collector, and a finalizer that
    closes the engine), and a closed engine's io_uring ring is unmapped. Whether the read goes
    to the kernel inside its call (the engine deep) is asked only once the engine is known to
    be open: the call raises RuntimeError and nothing reaches the kernel. 4df5027 asked first
    and read the unmapped submission queue: a segfault on io_uring."""
    if sys.version_info >= (3, 12) and "uvloop" in type(asyncio.get_running_loop()).__module__:
        # 3.12 runs the collector only between bytecodes (the eval breaker), no longer inside
        # an allocation, and a future of uvloop's loop is created without running any Python
        # code: nothing can close the engine while the read makes its future.
        pytest.skip("on 3.12+ creating a future for uvloop's loop runs no Python code")
    eng: Any = aionative.get_engine()
    fd, _ = _direct_file(tmp_path, 64 << 10)
    buf = mmap.mmap(-1, 4096)
    threshold = gc.get_threshold()
    try:
        await _learn(fd)
        for i in range(16):
            if await _left_with_the_device(eng, fd, buf, i * 4096):
                break
        else:
            pytest.skip("the device answered every read within its submission")
        read = eng.preadinto
        gc.collect()
        gc.disable()
        _ClosesTheEngineWhenCollected(eng)
        gc.set_threshold(1)  # the read's first tracked allocation, its future, collects
        gc.enable()
        refused = None
        try:
            read(fd, buf, 4096)
        except RuntimeError as exc:
            refused = exc
        finally:
            gc.set_threshold(*threshold)
        assert eng.closed
        assert refused is not None and "closed" in str(refused), refused
    finally:
        gc.set_threshold(*threshold)
        gc.enable()
        os.close(fd)
        buf.close()


@pytest.mark.usefixtures("linux_aio")
async def test_a_close_asked_for_during_an_early_submission_is_carried_out(
        tmp_path: Path) -> None:
    """While the kernel holds an operation (a long fsync), a second prepared read is sent at
    once (EARLY_SUBMIT). io_submit refuses the first of them (EBADF: a closed descriptor),
    which ends that read there, releasing its buffer, whose finalizer closes the engine. The
    close waits for the submission to finish, then happens: the fsync and the other read are
    answered (the close drains them) and the engine is closed. It was left asked for and never
    done: both futures pending forever, every wake-up refused, the loop spinning on the
    unread eventfd."""
    aionative.set_inline_budget(0)
    eng: Any = aionative.get_engine()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        chunk = b"x" * (1 << 20)

        def dirty() -> None:  # (128 MiB copied: in a thread, not on the loop's)
            for i in range(128):
                os.pwrite(fd, chunk, i << 20)  # dirty: the fsync stays with the kernel a while

        await asyncio.to_thread(dirty)
        sync = eng.fsync(fd)
        await asyncio.sleep(0)  # the flush submits it
        if sync.done():
            pytest.skip("the fsync completed within its submission: nothing was deep")
        bad = os.open("/dev/null", os.O_RDONLY)
        os.close(bad)
        refused = eng.readinto(bad, _ClosesTheEngine(4096), 0)
        other = eng.preadinto(fd, bytearray(4096), 0)  # the second prepared: sent at once
        got = await asyncio.wait_for(asyncio.gather(sync, other, refused,
                                                    return_exceptions=True), 30)
        assert eng.closed
        assert got[0] is None and got[1] == 4096, got
        assert isinstance(got[2], OSError) and got[2].errno == errno.EBADF, got
        assert aionative.get_engine() is not eng  # the next operation gets a new one
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)


async def _on_its_detour(fd: int, read: Callable[[], Awaitable[bytes]],
                         data: bytes) -> asyncio.Future[bytes]:
    """Start ``read`` of the file behind ``fd`` (its pages dropped first) and return it once
    its first O_DIRECT piece is with the kernel, not done. A device that answers within the
    submission (or from the readahead its first probe started) ends some cold reads before
    their detour: such a read must have returned ``data``, and another is started, three in
    all."""
    for _attempt in range(3):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        before = aionative.engine_stats()["direct_reissues"]
        task = asyncio.ensure_future(read())
        while aionative.engine_stats()["direct_reissues"] == before and not task.done():
            await asyncio.sleep(0)
        if not task.done():
            return task
        assert await task == data
    raise AssertionError("three cold reads ended before their detour began")


@pytest.mark.usefixtures("linux_aio")
async def test_closing_the_engine_lets_a_read_on_its_detour_finish(tmp_path: Path) -> None:
    """close_engine() while a cold read goes to the device in O_DIRECT pieces: the close's
    drain lets the read finish (a bounded read of a regular file), so it returns the whole
    file. Stopped after the piece in hand, it came back short: what a caller reads as the end
    of the file (read_bytes returned the first 4 MiB of 16); a piece interrupted then
    (EINTR, injected) is retried, not raised."""
    piece = _core.DETOUR_MAX
    fd, data = cold_file(tmp_path / "cold", 4 * piece)
    aionative.set_inline_budget(0)
    try:
        for what in ("pread", "read_bytes", "pread, a piece interrupted"):
            read = (functools.partial(aionative.read_bytes, tmp_path / "cold")
                    if what == "read_bytes" else functools.partial(aionative.pread, fd,
                                                                   len(data), 0))
            task = await _on_its_detour(fd, read, data)
            if what.endswith("interrupted"):  # the drain retries it, as the engine does
                _core.set_fault("completion", errno.EINTR, 1)
            try:
                aionative.close_engine()
                got = await asyncio.wait_for(task, 30)
            finally:
                _core.clear_faults()
            assert len(got) == len(data) and got == data, what
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)


def _my_posix_lock(path: Path) -> bool:
    """Whether this process holds a POSIX record lock on ``path`` (its line in /proc/locks)."""
    ino, me = os.stat(path).st_ino, os.getpid()
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if (len(fields) > 5 and fields[1] == "POSIX" and int(fields[4]) == me
                    and int(fields[5].rsplit(":", 1)[1]) == ino):
                return True
    return False


async def _cold_read(fd: int, data: bytes) -> dict[str, int]:
    """Read the whole (cold) file until a read meets the kernel's RWF_NOWAIT refusal (a device
    that answers within the submission serves some cold reads there, more so on a loaded
    machine or under the sanitizer: CI saw five 1 MiB reads in a row answered so; the files
    are 8 MiB and more, several readahead windows): how many of its pieces took the detour and
    how many were read plainly."""
    for _attempt in range(5):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        before = aionative.engine_stats()
        assert await aionative.pread(fd, len(data), 0) == data
        after = aionative.engine_stats()
        got = {k: after[k] - before[k] for k in ("direct_reissues", "direct_refused")}
        if any(got.values()):
            return got
    raise AssertionError("five cold reads were all answered within their submission")


def _ofd_lock(fd: int, kind: int, start: int, length: int) -> None:
    """An open file description's lock (``F_OFD_SETLK``): closing another descriptor of the
    file leaves it."""
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, os.SEEK_SET, start, length, 0))


@pytest.mark.usefixtures("linux_aio")
async def test_linux_aio_a_cold_read_leaves_the_posix_locks_on_its_file(tmp_path: Path) -> None:
    """Closing any descriptor of a file drops every POSIX record lock (fcntl, lockf) the
    process holds on it, so the detour's own O_DIRECT descriptor must not drop the caller's.
    A file locked before the read is read plainly (no detour); one locked while the read is on
    its detour keeps its descriptor open (parked) until the lock is gone. The detour's close
    released the lock: another process could take it in the middle of the caller's update."""
    path = tmp_path / "locked"
    fd, data = cold_file(path, 4 * _core.DETOUR_MAX)
    lk = os.open(path, os.O_RDWR)
    aionative.set_inline_budget(0)
    try:
        fcntl.lockf(lk, fcntl.LOCK_EX)
        assert (await _cold_read(fd, data))["direct_reissues"] == 0
        assert _my_posix_lock(path), "the read dropped the lock held before it"
        fcntl.lockf(lk, fcntl.LOCK_UN)

        task = await _on_its_detour(fd, lambda: aionative.pread(fd, len(data), 0), data)
        fcntl.lockf(lk, fcntl.LOCK_EX)  # taken while the detour's descriptor is open
        assert await task == data
        assert _my_posix_lock(path), "the end of the detour dropped the lock taken during it"
        assert _core.debug_counters()["direct_parked"] == 1
        fcntl.lockf(lk, fcntl.LOCK_UN)
        aionative.close_engine()  # looks at the parked descriptor again: no lock, closed
        assert _core.debug_counters()["direct_parked"] == 0
        assert open_fds_to(path) == 2  # the caller's two
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
        os.close(lk)


@pytest.mark.usefixtures("linux_aio")
@pytest.mark.parametrize("locks", ["another owner's", "ours behind another owner's",
                                   "ours under another owner's read lock"])
async def test_linux_aio_a_file_anyone_holds_a_lock_on_takes_no_detour(tmp_path: Path,
                                                                      locks: str) -> None:
    """The lock check counts any lock on the file: one of this process's POSIX locks may hide
    behind another owner's. The kernel names one conflicting lock (the first of its list, not
    the lowest range): a walk from the end of another owner's lock further on, or a look under
    another owner's read lock over ours, missed it, and the detour's close dropped it; reading
    /proc/locks instead missed it under a pid namespace, and while other processes took and
    dropped locks."""
    path = tmp_path / "locked"
    fd, data = cold_file(path, 8 << 20)
    owner = os.open(path, os.O_RDWR)  # another owner: an open file description's locks
    lk = os.open(path, os.O_RDWR)
    aionative.set_inline_budget(0)
    try:
        if locks == "ours under another owner's read lock":
            _ofd_lock(owner, fcntl.F_RDLCK, 0, 1 << 20)
            fcntl.lockf(lk, fcntl.LOCK_SH, 4096, 0)
        else:
            _ofd_lock(owner, fcntl.F_WRLCK, 512 << 10, 4096)
            if locks.startswith("ours"):
                fcntl.lockf(lk, fcntl.LOCK_EX, 4096, 0)
        assert (await _cold_read(fd, data))["direct_reissues"] == 0
        assert _my_posix_lock(path) == locks.startswith("ours"), "the read dropped the lock"
    finally:
        aionative.set_inline_budget(None)
        for n in (fd, owner, lk):
            os.close(n)


@pytest.mark.usefixtures("linux_aio")
async def test_linux_aio_the_callers_ofd_lock_parks_one_descriptor_at_most(
        tmp_path: Path) -> None:
    """An OFD lock (``F_OFD_SETLK``) of the caller's own description is invisible to the
    lock check through that description, so its cold reads take the detour; from the detour's
    own description it shows, and is not told from a POSIX lock: the descriptor is parked —
    and taken up again by the file's next detour, never a second one. Parked afresh each time,
    every read left a descriptor open: 149 after 300 reads."""
    path = tmp_path / "ofd"
    fd, data = cold_file(path, 8 << 20)
    _ofd_lock(fd, fcntl.F_RDLCK, 0, 0)
    aionative.set_inline_budget(0)
    try:
        detours = 0
        for _ in range(6):
            detours += (await _cold_read(fd, data))["direct_reissues"] > 0
            assert _core.debug_counters()["direct_parked"] <= 1
            assert open_fds_to(path) <= 2
        assert detours >= 2, "fewer than two reads took the detour"
        _ofd_lock(fd, fcntl.F_UNLCK, 0, 0)
        aionative.close_engine()  # looks at the parked descriptor again: no lock, closed
        assert _core.debug_counters()["direct_parked"] == 0
        assert open_fds_to(path) == 1
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)


@pytest.mark.usefixtures("linux_aio")
async def test_linux_aio_a_forked_child_closes_the_parked_descriptors(tmp_path: Path) -> None:
    """A forked child closes the parked descriptors it inherited at once (it holds no POSIX
    lock to lose). Kept, they named numbers the child may close and open another file under,
    which the file's next detour in the child then read: another file's bytes."""
    path = tmp_path / "ofd"
    fd, data = cold_file(path, 8 << 20)
    _ofd_lock(fd, fcntl.F_RDLCK, 0, 0)  # the caller's own OFD lock parks the detour's descriptor
    aionative.set_inline_budget(0)
    try:
        for _ in range(5):
            if (await _cold_read(fd, data))["direct_reissues"]:
                break
        assert _core.debug_counters()["direct_parked"] == 1
        assert open_fds_to(path) == 2
        pid = os.fork()
        if pid == 0:  # the child: no engine of its own yet, nothing parked, one descriptor
            os._exit(0 if (_core.debug_counters()["direct_parked"], open_fds_to(path)) == (0, 1)
                     else 1)
        _, status = os.waitpid(pid, 0)  # noqa: ASYNC222 (the child exits at once)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _core.debug_counters()["direct_parked"] == 1  # the parent's stays parked
        _ofd_lock(fd, fcntl.F_UNLCK, 0, 0)
        aionative.close_engine()
        assert _core.debug_counters()["direct_parked"] == 0
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)


@pytest.mark.usefixtures("linux_aio")
async def test_linux_aio_a_cold_reads_descriptor_ends_with_it(tmp_path: Path) -> None:
    """The detour's O_DIRECT descriptor is closed when the file's last read on the detour
    ends: none is left open on the file after the caller closed it. Kept in a cache for the
    engine's life, it held a deleted file (and its space) open until the loop closed."""
    path = tmp_path / "cold"
    fd, data = cold_file(path, 2 * _core.DETOUR_MAX)
    aionative.set_inline_budget(0)
    try:
        before = aionative.engine_stats()["direct_reissues"]
        assert await aionative.pread(fd, len(data), 0) == data
        assert aionative.engine_stats()["direct_reissues"] > before, "no detour taken"
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
    assert open_fds_to(path) == 0
    path.unlink()
    assert open_fds_to(Path(f"{path} (deleted)")) == 0


@pytest.mark.usefixtures("linux_aio")
async def test_linux_aio_a_files_detour_descriptor_ends_with_its_last_read(
        tmp_path: Path) -> None:
    """While another file's large read is on its detour, a cold read of a second file ends and
    its caller closes and deletes it: no descriptor of the deleted file stays open. Closed only
    when no read at all held an engine descriptor, it stayed open (and its space held) until
    the other read ended."""
    big_fd, big = cold_file(tmp_path / "big", 32 * _core.DETOUR_MAX)
    path = tmp_path / "small"
    aionative.set_inline_budget(0)
    try:
        for _attempt in range(3):  # the big read must still be going when the small one ends
            task = await _on_its_detour(big_fd, lambda: aionative.pread(big_fd, len(big), 0),
                                        big)
            fd, data = cold_file(path, 1 << 20)
            try:
                before = aionative.engine_stats()["direct_reissues"]
                assert await aionative.pread(fd, len(data), 0) == data
                detoured = aionative.engine_stats()["direct_reissues"] > before
            finally:
                os.close(fd)
            path.unlink()
            going = not task.done()
            left = open_fds_to(Path(f"{path} (deleted)"))
            assert await task == big
            if going and detoured:
                break
        assert going and detoured, "the big read ended first, or the small one took no detour"
        assert left == 0
    finally:
        aionative.set_inline_budget(None)
        os.close(big_fd)


async def test_closing_the_engine_lets_a_partly_cached_read_finish(backend: str,
                                                                   tmp_path: Path) -> None:
    """close_engine() while a read of a file whose first half is cached and the rest is not:
    the whole range comes back. On Linux AIO the RWF_NOWAIT piece returns the cached half,
    and the close's drain stopped the read there, before its detour: a short result, what a
    caller reads as the end of the file."""
    size = 1 << 20
    path = tmp_path / "half"
    fd, data = cold_file(path, size)
    aionative.set_inline_budget(0)
    try:
        for how in ("prepared", "awaited"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            warm = os.open(path, os.O_RDONLY)
            os.posix_fadvise(warm, 0, 0, os.POSIX_FADV_RANDOM)  # exactly the first half
            for off in range(0, size // 2, 4096):
                os.pread(warm, 4096, off)
            os.close(warm)
            if how == "prepared":
                read: Any = aionative.get_engine().pread(fd, size, 0)
            else:
                read = asyncio.ensure_future(aionative.pread(fd, size, 0))
                await asyncio.sleep(0)  # queued for the iteration's flush
            aionative.close_engine()
            got = await asyncio.wait_for(read, 30)
            assert len(got) == size and got == data, how
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
