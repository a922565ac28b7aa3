"""The inline fast path and its cooperative budget.

A read the page cache can serve is done inside the call (``preadv2`` with ``RWF_NOWAIT``): no
future, no kernel queue, no loop iteration. Anything else — not cached, partly cached, an
O_DIRECT descriptor, a pipe, an error — goes through the kernel queue exactly as before. Reads
done inline never return to the loop, so they may take only the budget's wall time per loop
iteration; after that reads go to the queue and the loop gets its turn.

Every test runs on each backend (the threads backend has the same path, in Python) × {asyncio,
uvloop}.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import gc
import mmap
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _backend
from aionative import _kernelops as _k
from aionative._kernelops import AT_FDCWD
from aionative._threads import TURN_MIN, ThreadsEngine
from tests.support import close_running_engine, cold_file

HOT = 1 << 20


@pytest.fixture
def wide_budget() -> Any:
    """A budget no test can spend (1 s), for tests that count inline completions exactly: a
    busy machine preempting the process mid-test must not close the window on them."""
    aionative.set_inline_budget(1e6)
    yield
    aionative.set_inline_budget(None)


def hot_file(path: Path, size: int = HOT) -> tuple[int, bytes]:
    data = os.urandom(size)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    assert os.pread(fd, size + 1, 0) == data  # in the page cache now
    return fd, data


def hot_files(tmp_path: Path, count: int, step: int) -> list[tuple[Path, bytes]]:
    """``count`` cached files f0, f1, … of 0, step, 2·step, … bytes, and their contents."""
    files = []
    for i in range(count):
        fd, data = hot_file(tmp_path / f"f{i}", step * i)
        os.close(fd)
        files.append((tmp_path / f"f{i}", data))
    return files


def delta(before: dict[str, int], key: str) -> int:
    return aionative.engine_stats()[key] - before[key]


@pytest.mark.asyncio
async def test_a_hot_read_completes_inside_the_call(backend: str, wide_budget: None,
                                                    tmp_path: Path) -> None:
    fd, data = hot_file(tmp_path / "f")
    try:
        eng = aionative.get_engine()
        before = eng.stats()
        got = eng.read(fd, 4096, 8192)
        assert isinstance(got, bytes) and got == data[8192:12288]
        buf = bytearray(1000)
        n = eng.readinto(fd, buf, 5)
        assert n == 1000 and buf == data[5:1005]
        assert await aionative.pread(fd, 100, 70) == data[70:170]
        assert delta(before, "inline_hits") == 3
        assert delta(before, "submitted") == 0          # nothing went to the kernel queue
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_end_of_file_is_answered_inline(backend: str, wide_budget: None,
                                              tmp_path: Path) -> None:
    fd, data = hot_file(tmp_path / "f", 10_000)
    try:
        eng = aionative.get_engine()
        before = eng.stats()
        assert eng.read(fd, 4096, 8192) == data[8192:]   # short: the end of the file
        assert eng.read(fd, 4096, 10_000) == b""
        assert eng.read(fd, 4096, 1 << 40) == b""
        assert eng.read(fd, 0, 0) == b""
        assert delta(before, "inline_hits") == 4 and delta(before, "submitted") == 0
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_a_cold_read_goes_to_the_kernel_queue(backend: str, wide_budget: None,
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A read the page cache does not hold goes to the kernel queue. Since Linux 6.x a
    ``RWF_NOWAIT`` read that misses starts the readahead it would have waited for, and a
    device that answers within the call (a VM whose host holds the data) can fill the pages
    before the kernel looks again: that read is served inline, rightly. So each attempt
    reads a new cold file, every result must be right, and a miss must go through the
    queue; if the device answered all of them, the miss is injected (``EAGAIN`` from the
    inline read, as the kernel's: the native engine's fault point, the threads engine's
    ``os.preadv``)."""
    size = 64 << 10
    eng = aionative.get_engine()
    real = os.preadv
    for attempt in range(4):
        fd, data = cold_file(tmp_path / f"cold{attempt}", 4 * size)
        try:
            inject = attempt == 3
            if inject and backend == "threads":
                def nowait_misses(fd: int, bufs: Any, off: int, flags: int = 0) -> int:
                    if flags & os.RWF_NOWAIT:
                        raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
                    return real(fd, bufs, off, flags)
                monkeypatch.setattr(os, "preadv", nowait_misses)
            elif inject:
                assert _backend._core is not None
                _backend._core.set_fault("inline", errno.EAGAIN, 1)
            before = eng.stats()
            res = eng.read(fd, size, size)
            if not isinstance(res, asyncio.Future):
                assert not inject
                assert res == data[size:2 * size]
                assert delta(before, "inline_hits") == 1
                continue
            assert await res == data[size:2 * size]
            assert delta(before, "inline_misses") == 1 and delta(before, "inline_hits") == 0
            return
        finally:
            os.close(fd)


@pytest.mark.asyncio
async def test_a_partly_cached_read_finishes_through_the_queue(backend: str,
                                                               tmp_path: Path) -> None:
    """The cached head is kept; the rest is read by the kernel queue, and the result is the
    whole range (a short inline read is not mistaken for the end of the file)."""
    fd, data = cold_file(tmp_path / "part", 4 << 20)
    warm = os.open(tmp_path / "part", os.O_RDONLY)
    try:
        os.posix_fadvise(warm, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead past what we read
        os.pread(warm, 64 << 10, 0)
        got = await aionative.pread(fd, 1 << 20, 0)
        assert got == data[:1 << 20]
        buf = bytearray(1 << 20)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.pread(warm, 64 << 10, 0)
        assert await aionative.preadinto(fd, buf, 0) == 1 << 20 and buf == data[:1 << 20]
    finally:
        os.close(warm)
        os.close(fd)


def _o_direct(path: Path) -> int:
    """``path`` opened with O_DIRECT, its data written back first: a direct read with
    RWF_NOWAIT says EAGAIN while a dirty page is in its range, and would then go to the queue
    even if tried inline (these tests must see it not tried)."""
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as exc:
        pytest.skip(f"O_DIRECT refused here: {exc}")


async def assert_read_queued(eng: Any, fd: int, data: bytes) -> None:
    """A read of ``fd`` (O_DIRECT by now) is not tried inline: the kernel queue reads what the
    file holds, into a page-aligned buffer as O_DIRECT needs."""
    buf = mmap.mmap(-1, 8192)
    try:
        before = eng.stats()
        res = eng.readinto(fd, buf, 4096)
        assert not isinstance(res, int)
        assert await res == 8192 and buf[:] == data[4096:12288]
        assert delta(before, "inline_hits") == 0
    finally:
        buf.close()


@pytest.mark.asyncio
async def test_an_o_direct_descriptor_never_reads_inline(backend: str, tmp_path: Path) -> None:
    """RWF_NOWAIT keeps a buffered read off the disk, but a direct read still waits for it."""
    fd, data = hot_file(tmp_path / "f")
    os.close(fd)
    fd = _o_direct(tmp_path / "f")
    try:
        await assert_read_queued(aionative.get_engine(), fd, data)
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_a_descriptor_is_asked_for_its_flags_once_an_iteration(
        native_backend: str, wide_budget: None, tmp_path: Path) -> None:
    """Whether a read may go inline (not O_DIRECT: fcntl F_GETFL) is learned once a loop
    iteration: the second read of one iteration is its preadv2 alone."""
    fd, data = hot_file(tmp_path / "f")
    eng = _core_engine()
    try:
        counts = []
        for i in range(3):
            if i == 2:
                await asyncio.sleep(0)  # a new iteration: asked again
            before = eng.stats()["syscalls"]
            assert eng.read(fd, 4096, 4096 * i) == data[4096 * i:4096 * (i + 1)]
            counts.append(eng.stats()["syscalls"] - before)
        assert counts == [2, 1, 2]  # fcntl and preadv2; preadv2; fcntl and preadv2
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_threads_backend_asks_for_flags_once_an_iteration(
        wide_budget: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The threads engine keeps what fcntl said of a descriptor for the iteration too."""
    import aionative._threads as threads_mod

    asked: list[int] = []

    class Counting:
        F_GETFL = fcntl.F_GETFL

        @staticmethod
        def fcntl(fd: int, cmd: int) -> int:
            asked.append(fd)
            return fcntl.fcntl(fd, cmd)

    monkeypatch.setattr(threads_mod, "fcntl", Counting)
    aionative.set_default_backend("threads")
    fd, data = hot_file(tmp_path / "f")
    try:
        eng = aionative.get_engine()
        assert isinstance(eng, ThreadsEngine) and eng.inline_budget_us == 1e6
        counts = []
        for i in range(3):
            if i == 2:
                await asyncio.sleep(0)  # a new iteration: asked again
            before = len(asked)
            assert eng.read(fd, 4096, 4096 * i) == data[4096 * i:4096 * (i + 1)]
            counts.append(len(asked) - before)
        assert counts == [1, 0, 1]
    finally:
        os.close(fd)
        aionative.set_default_backend(None)


@pytest.mark.asyncio
@pytest.mark.parametrize("side", ["engine_closes", "engine_opens"])
async def test_a_number_the_engine_closes_or_opens_is_asked_again(
        native_backend: str, wide_budget: None, tmp_path: Path, side: str) -> None:
    """A buffered descriptor closed and its number opened again with O_DIRECT, all in one
    iteration, the engine doing one of the two (inline: close_cached, open_cached): the new
    file's read is not tried inline (a direct read would wait for the device on the loop's
    thread)."""
    fd, data = hot_file(tmp_path / "f")
    os.close(_o_direct(tmp_path / "f"))
    eng = _core_engine()
    try:
        assert eng.read(fd, 4096, 0) == data[:4096]    # learned: buffered
        if side == "engine_closes":
            assert eng.close_cached(fd) is True
            again = os.open(tmp_path / "f", os.O_RDONLY | os.O_DIRECT)
        else:
            os.close(fd)
            again = eng.open_cached(AT_FDCWD, os.fsencode(tmp_path / "f"),
                                    os.O_RDONLY | os.O_DIRECT)
        assert again == fd   # the lowest free number: the one just closed
        await assert_read_queued(eng, fd, data)
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_a_descriptor_open_direct_switches_is_asked_again(
        backend: str, wide_budget: None, tmp_path: Path) -> None:
    """``aionative.open(fd, direct=True)`` sets O_DIRECT on the caller's descriptor: a read of
    it later in the same iteration is not tried inline."""
    fd, data = hot_file(tmp_path / "f")
    os.close(_o_direct(tmp_path / "f"))
    eng = aionative.get_engine()
    try:
        assert eng.read(fd, 4096, 0) == data[:4096]    # learned: buffered
        f = await aionative.open(fd, "rb", direct=True, closefd=False)
        await assert_read_queued(eng, fd, data)
        await f.close()
    finally:
        os.close(fd)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["reopened", "fcntl"])
async def test_a_descriptor_made_direct_outside_the_engine_is_seen_next_iteration(
        backend: str, wide_budget: None, tmp_path: Path, how: str) -> None:
    """What the engine does not see — its number closed and opened again with O_DIRECT by
    os.open, or O_DIRECT set by fcntl — it learns on the loop's next iteration."""
    fd, data = hot_file(tmp_path / "f")
    eng = aionative.get_engine()
    try:
        assert eng.read(fd, 4096, 0) == data[:4096]    # learned: buffered
        if how == "reopened":
            os.close(fd)
            again = _o_direct(tmp_path / "f")
            assert again == fd
        else:
            os.close(_o_direct(tmp_path / "f"))  # written back; O_DIRECT works here
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
        await asyncio.sleep(0)
        await assert_read_queued(eng, fd, data)
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_large_reads_always_use_the_queue(backend: str, wide_budget: None,
                                                tmp_path: Path) -> None:
    """One inline copy must stay well within a budget: reads over 1 MiB are queued."""
    fd, data = hot_file(tmp_path / "f", (1 << 20) + 4096)
    try:
        eng = aionative.get_engine()
        before = eng.stats()
        res = eng.read(fd, (1 << 20) + 1, 0)
        assert isinstance(res, asyncio.Future) and await res == data[:(1 << 20) + 1]
        assert isinstance(eng.read(fd, 1 << 20, 0), bytes)
        assert delta(before, "inline_hits") == 1
    finally:
        os.close(fd)


@pytest.mark.asyncio
@pytest.mark.parametrize("case", ["bad_fd", "negative_offset", "directory", "negative_size",
                                  "write_only", "huge_offset"])
async def test_errors_are_unchanged(backend: str, tmp_path: Path, case: str) -> None:
    """Whatever fails inline is retried through the queue, which raises what os.pread does."""
    fd, _ = hot_file(tmp_path / "f", 100)
    wfd = os.open(tmp_path / "w", os.O_WRONLY | os.O_CREAT)
    dfd = os.open(tmp_path, os.O_RDONLY)
    args: dict[str, tuple[int, int, int]] = {
        "bad_fd": (12345, 10, 0), "negative_offset": (fd, 10, -1), "directory": (dfd, 10, 0),
        "negative_size": (fd, -1, 0), "write_only": (wfd, 10, 0),
        "huge_offset": (fd, 10, 1 << 62)}
    try:
        a = args[case]
        try:
            expected: Any = os.pread(*a)
        except OSError as exc:
            expected = (type(exc), exc.errno)
        try:
            got: Any = await aionative.pread(*a)
        except OSError as exc:
            got = (type(exc), exc.errno)
        assert got == expected
    finally:
        for f in (fd, wfd, dfd):
            os.close(f)


@pytest.mark.asyncio
async def test_an_injected_inline_failure_falls_back_to_the_queue(native_backend: str,
                                                                   wide_budget: None,
                                                                   tmp_path: Path) -> None:
    assert _backend._core is not None
    fd, data = hot_file(tmp_path / "f")
    try:
        eng = aionative.get_engine()
        before = eng.stats()
        _backend._core.set_fault("inline", errno.EAGAIN, 5)
        got = await asyncio.gather(*[aionative.pread(fd, 4096, i * 4096) for i in range(8)])
        assert got == [data[i * 4096:(i + 1) * 4096] for i in range(8)]
        assert delta(before, "inline_misses") == 5
        assert delta(before, "inline_hits") == 3
        assert delta(before, "completed") == 5     # the five went through the kernel queue
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_budget_zero_turns_the_fast_path_off(backend: str, tmp_path: Path) -> None:
    fd, data = hot_file(tmp_path / "f")
    try:
        aionative.set_inline_budget(0)
        eng = aionative.get_engine()
        assert eng.inline_budget_us == 0
        before = eng.stats()
        res = eng.read(fd, 4096, 0)
        assert isinstance(res, asyncio.Future) and await res == data[:4096]
        assert delta(before, "inline_hits") == 0 and delta(before, "inline_misses") == 0
        aionative.set_inline_budget(40)            # applies to the running engine too
        assert eng.inline_budget_us == 40
        assert isinstance(eng.read(fd, 4096, 0), bytes)
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)


def test_budget_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in (-1, float("nan"), 2e9):
        with pytest.raises(ValueError):
            aionative.set_inline_budget(bad)
    assert aionative.inline_budget() == 150.0
    monkeypatch.setenv("AIONATIVE_INLINE_BUDGET_US", "75")
    assert aionative.inline_budget() == 75.0
    monkeypatch.setenv("AIONATIVE_INLINE_BUDGET_US", "soon")
    with pytest.raises(ValueError, match="AIONATIVE_INLINE_BUDGET_US"):
        aionative.inline_budget()
    aionative.set_inline_budget(10)
    assert aionative.inline_budget() == 10.0       # the call wins over the environment
    monkeypatch.delenv("AIONATIVE_INLINE_BUDGET_US")
    aionative.set_inline_budget(None)
    assert aionative.inline_budget() == 150.0
    assert aionative.inline_budget("io_uring") == aionative.inline_budget("linux_aio") == 150.0
    assert aionative.inline_budget("threads") == 100.0
    aionative.set_default_backend("threads")
    try:
        assert aionative.inline_budget() == 100.0  # None: the backend new engines get
    finally:
        aionative.set_default_backend(None)


@pytest.mark.asyncio
async def test_each_backend_has_its_default_budget_until_one_is_set(
        backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The threads engine's default is 100 µs, the native engines' 150 µs (its refused reads
    cost more of the iteration outside the budget: _threads.DEFAULT_BUDGET_US); a budget set
    by call or environment is every engine's, and None restores each one's own default."""
    monkeypatch.delenv("AIONATIVE_INLINE_BUDGET_US", raising=False)
    default = 100.0 if backend == "threads" else 150.0
    eng = aionative.get_engine()
    try:
        assert eng.inline_budget_us == default
        aionative.set_inline_budget(120)
        assert eng.inline_budget_us == 120
        aionative.set_inline_budget(None)
        assert eng.inline_budget_us == default
        monkeypatch.setenv("AIONATIVE_INLINE_BUDGET_US", "80")
        aionative.close_engine()
        eng = aionative.get_engine()
        assert eng.inline_budget_us == 80
        monkeypatch.delenv("AIONATIVE_INLINE_BUDGET_US")
        aionative.set_inline_budget(None)
        assert eng.inline_budget_us == default
    finally:
        aionative.set_inline_budget(None)


async def _longest_run(reader: Callable[[], Any], seconds: float) -> tuple[int, int]:
    """Run ``reader`` (one read) in a tight loop next to a task that only yields; return the
    most reads done between two turns of that task, and the reads done in all. Counted in
    reads, not seconds, so a busy machine preempting the whole process cannot fake a stall."""
    stop = False
    count = 0
    longest = 0

    async def other() -> None:
        nonlocal longest
        last = count
        while not stop:
            await asyncio.sleep(0)
            longest = max(longest, count - last)
            last = count

    async def tight() -> None:
        nonlocal count
        while not stop:
            await reader()
            count += 1

    tasks = [asyncio.create_task(other()), asyncio.create_task(tight())]
    await asyncio.sleep(seconds)
    stop = True
    await asyncio.gather(*tasks)
    return longest, count


@pytest.mark.asyncio
async def test_a_tight_hot_read_loop_lets_other_tasks_run(backend: str, tmp_path: Path) -> None:
    """Every read of this loop could complete inline, so without the budget the reader would
    never give the loop back: the other task would get no turn for the whole second (hundreds
    of thousands of reads). With it, the reader yields after one budget (150 µs: a few hundred
    4 KiB reads on this machine); the bound asserted is loose."""
    fd, _ = hot_file(tmp_path / "f")
    try:
        eng = aionative.get_engine()
        before = eng.stats()
        longest, reads = await _longest_run(lambda: aionative.pread(fd, 4096, 8192), 1.0)
        hits = delta(before, "inline_hits")
        assert hits > reads // 2, (hits, reads)            # the fast path did the work
        assert delta(before, "budget_exhausted") > 0
        assert longest < 5000, f"{longest} reads of {reads} ran before another task's turn"
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_the_file_layer_reads_inline(backend: str, tmp_path: Path) -> None:
    fd, data = hot_file(tmp_path / "f")
    os.close(fd)
    before = aionative.engine_stats()
    async with aionative.open(tmp_path / "f", "rb") as f:
        assert await f.read(10) == data[:10]
        assert await f.pread(100, 500) == data[500:600]
        assert await f.read() == data[10:]
    assert await aionative.read_bytes(tmp_path / "f") == data
    assert delta(before, "inline_hits") >= 4


# ------------------------------------------------------------------ whole small files


def _fds() -> int:
    aionative.get_engine()  # its ring and eventfd are not the test's descriptors
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.asyncio
async def test_read_bytes_of_a_hot_small_file_is_one_inline_call(native_backend: str,
                                                                 tmp_path: Path) -> None:
    """Open (openat2 RESOLVE_CACHED), fstat, read and close inside the call: no kernel queue."""
    files = hot_files(tmp_path, 50, 1000)
    fds = _fds()
    before = aionative.engine_stats()

    async def reader(chunk: list[tuple[Path, bytes]]) -> None:
        for path, data in chunk:
            assert await aionative.read_bytes(path) == data

    # 10 readers: the budget runs out on the way, and the readers wait a turn, not the queue
    await asyncio.gather(*[reader(files[i::10]) for i in range(10)])
    assert delta(before, "submitted") == 0
    assert delta(before, "inline_hits") == 50
    assert _fds() == fds


@pytest.mark.asyncio
@pytest.mark.parametrize("case", ["cold", "large", "proc", "devnull", "missing", "directory",
                                  "nul", "relative"])
async def test_read_bytes_without_the_fast_path_is_unchanged(native_backend: str,
                                                             tmp_path: Path, case: str,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Whatever cannot be read inline — not cached, over 1 MiB, not a regular file on a local
    filesystem, an error — gets exactly what pathlib's read_bytes gets, with no descriptor
    left open."""
    path: Path | str
    if case == "cold":
        fd, _ = cold_file(tmp_path / "c", 200_000)
        os.close(fd)
        path = tmp_path / "c"
    elif case == "large":
        fd, _ = hot_file(tmp_path / "l", (1 << 20) + 10)
        os.close(fd)
        path = tmp_path / "l"
    elif case == "proc":
        path = "/proc/self/cmdline"   # regular, size 0, no RWF_NOWAIT: opened inline, handed on
    elif case == "devnull":
        path = "/dev/null"
    elif case == "missing":
        path = tmp_path / "nope"
    elif case == "directory":
        path = tmp_path
    elif case == "nul":
        path = str(tmp_path / "a\0b")
    else:
        hot_file(tmp_path / "r", 10)
        monkeypatch.chdir(tmp_path)
        path = "r"
    try:
        expected: Any = Path(path).read_bytes()
    except (OSError, ValueError) as exc:
        expected = (type(exc), getattr(exc, "errno", None), getattr(exc, "filename", None))
    fds = _fds()
    try:
        got: Any = await aionative.read_bytes(path)
    except (OSError, ValueError) as exc:
        got = (type(exc), getattr(exc, "errno", None), getattr(exc, "filename", None))
    assert got == expected
    assert _fds() == fds


@pytest.mark.asyncio
async def test_threads_backend_waits_a_turn_rather_than_a_worker(tmp_path: Path) -> None:
    """On the thread-pool backend, a hot read refused by a spent budget retries on the next
    loop iteration instead of paying a thread hop: no read reaches a worker."""
    aionative.set_default_backend("threads")
    try:
        fd, data = hot_file(tmp_path / "f")
        before = aionative.engine_stats()

        async def reader(k: int) -> None:
            for i in range(500):
                off = ((k * 500 + i) % 256) * 4096
                assert await aionative.pread(fd, 4096, off) == data[off:off + 4096]

        await asyncio.gather(*[reader(k) for k in range(8)])
        assert delta(before, "budget_exhausted") > 0   # the budget did run out, repeatedly
        assert delta(before, "inline_hits") == 4000
        assert delta(before, "submitted") == 0
        os.close(fd)
    finally:
        aionative.set_default_backend(None)



@pytest.mark.asyncio
async def test_threads_backend_retries_each_refused_read_about_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads a spent budget refused wait in one queue: 1000 reads issued at once are tried a
    few times each in all, not once per waiting read per loop turn (which is quadratic: tens of
    thousands of tries here, and 10 000 gathered reads took 106 s). (A thousand, not more: the
    gathered tasks all take their first step in one iteration of the loop, which the loop
    guard counts as one hold.)"""
    aionative.set_default_backend("threads")
    try:
        fd, data = hot_file(tmp_path / "f")
        attempts = 0
        allowed = ThreadsEngine._inline_allowed

        def counting(self: ThreadsEngine, fd: int, retry: bool = False) -> bool:
            nonlocal attempts
            attempts += 1
            return allowed(self, fd, retry)

        monkeypatch.setattr(ThreadsEngine, "_inline_allowed", counting)
        aionative.set_inline_budget(20)  # spent after a handful of reads: many turns
        before = aionative.engine_stats()
        n = 1000
        got = await asyncio.gather(*[aionative.pread(fd, 4096, (i % 256) * 4096)
                                     for i in range(n)])
        assert all(g == data[(i % 256) * 4096:(i % 256 + 1) * 4096] for i, g in enumerate(got))
        assert delta(before, "budget_exhausted") > 10
        assert delta(before, "submitted") == 0
        assert attempts <= 3 * n, attempts
        os.close(fd)
    finally:
        aionative.set_inline_budget(None)
        aionative.set_default_backend(None)


@pytest.mark.asyncio
@pytest.mark.parametrize("size,large", [(TURN_MIN, 1), (1 << 20, 1), (4096, 0)])
async def test_threads_backend_a_large_read_refused_is_retried_by_its_caller(
        tmp_path: Path, size: int, large: int) -> None:
    """On the thread-pool backend, ``aionative.pread`` of ``TURN_MIN`` bytes or more that
    finds the budget spent waits one turn in its caller and is read inline there, its bytes
    returned, not passed through a future (a 1 MiB result still held by the future while the
    woken task allocated the next one had glibc trim and regrow the heap: hundreds of page
    faults a read); a smaller one waits in the queue of refused reads, as before. Neither
    reaches a worker. The retry is read even if the new iteration's budget is spent again,
    while it is under RETRY_GRACE budgets old; past that it waits in the queue too."""
    aionative.set_default_backend("threads")
    fd, data = hot_file(tmp_path / "f", 2 << 20)
    spender, small = hot_file(tmp_path / "g", 10)
    aionative.set_inline_budget(0.001)  # 1 ns: spent by the first inline call of an iteration
    try:
        eng = aionative.get_engine()
        assert isinstance(eng, ThreadsEngine)
        queued: list[tuple[Any, ...]] = []
        next_turn = eng._next_turn

        def queue(*args: Any) -> Any:
            queued.append(args[1:])
            return next_turn(*args)

        eng._next_turn = queue  # type: ignore[method-assign]
        for off in (0, 12345):
            await asyncio.sleep(0.001)  # a new iteration's budget
            assert eng.read(spender, 1, 0) == small[:1]  # inline: the budget is spent now
            before = aionative.engine_stats()
            assert await aionative.pread(fd, size, off) == data[off:off + size]
            assert delta(before, "submitted") == 0
            assert delta(before, "inline_retries") == large
            assert queued == ([] if large else [(fd, size, off, True)])
            queued.clear()
        # The iteration of the retry is already 2 budgets old (admitted: the grace is 4), or
        # 1000 (past it: queued, retried from there).
        aionative.set_inline_budget(1000)
        for age, admitted in ((2, True), (1000, False)):
            await asyncio.sleep(0.001)

            def aged(age: int = age) -> None:  # instead of the renewal the spender scheduled
                del eng._reopen  # type: ignore[attr-defined]
                eng._window_start = time.monotonic_ns() - age * eng._budget_ns
                eng._spent = True
                asyncio.get_running_loop().call_soon(eng._reopen)  # the one after: renewed

            eng._reopen = aged  # type: ignore[method-assign]
            assert eng.read(spender, 1, 0) == small[:1]  # opens the window (schedules aged)
            eng._spent = True  # as if that read had spent it
            before = aionative.engine_stats()
            assert await aionative.pread(fd, size, 7) == data[7:7 + size]
            assert delta(before, "submitted") == 0
            assert delta(before, "inline_retries") == large
            assert delta(before, "retries_refused") == (large and not admitted)
            assert queued == ([] if large and admitted else [(fd, size, 7, True)])
            queued.clear()
    finally:
        aionative.set_inline_budget(None)
        aionative.set_default_backend(None)
        os.close(fd)
        os.close(spender)


@pytest.mark.asyncio
async def test_threads_backend_reads_moved_to_a_new_engine_and_then_abandoned(
        tmp_path: Path) -> None:
    """Reads waiting in the threads engine's queue when close_engine() closes it move to the
    loop's new engine; that one's budget is spent by the first, so a large read becomes a
    task (a retry after its turn) and a small one waits in the new queue. Their callers give
    up: the task is cancelled (it read on for nobody before), and the small read, which then
    fails (its descriptor closed), has its exception retrieved: asyncio logged "Future
    exception was never retrieved" (a review's find)."""
    aionative.set_default_backend("threads")
    fd, data = hot_file(tmp_path / "f", 1 << 20)
    fd2 = os.dup(fd)
    loop = asyncio.get_running_loop()
    logged: list[str] = []
    loop.set_exception_handler(lambda _, ctx: logged.append(str(ctx.get("message"))))
    aionative.set_inline_budget(1)
    try:
        eng = aionative.get_engine()
        while eng.read_inline(fd, 4096, 0) is not False:  # spend the budget
            pass
        first = eng.read(fd, 4096, 0)
        large = eng.read(fd, 1 << 17, 0)
        small = eng.read(fd2, 4096, 0)
        assert all(isinstance(f, asyncio.Future) for f in (first, large, small))
        before = asyncio.all_tasks()
        aionative.close_engine()
        await asyncio.sleep(0)  # the old queue's drain moved them
        new = aionative.get_engine()
        assert new is not eng and isinstance(new, ThreadsEngine)
        assert first.result() == data[:4096]
        moved = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()]
        assert len(moved) == 1 and new._deferred  # the large read's task; the small one queued
        large.cancel()
        small.cancel()
        os.close(fd2)
        for _ in range(5):
            await asyncio.sleep(0)
        assert moved[0].cancelled()
        assert not new._deferred
        del first, large, small, moved
        gc.collect()
        await asyncio.sleep(0)
        assert logged == []
    finally:
        loop.set_exception_handler(None)
        aionative.set_inline_budget(None)
        aionative.set_default_backend(None)
        os.close(fd)


@pytest.mark.asyncio
async def test_threads_backend_a_cancelled_preadinto_moved_to_a_new_engine_never_lands_later(
        tmp_path: Path) -> None:
    """A preadinto waiting in the threads engine's queue when close_engine() closes it moves to
    the loop's new engine, where it waits in the queue again, behind reads that move with it
    (that engine's budget lets one or two through a turn). Its caller, cancelled, goes on only
    once nothing of it can write into the buffer: the moved read is given up. Before, the
    caller went on at once (the closed engine knew of no worker to wait for) and the moved
    read ran on a later turn, over what the caller had put in its buffer since."""
    aionative.set_default_backend("threads")
    fd, _ = hot_file(tmp_path / "f", 1 << 20)
    aionative.set_inline_budget(1)
    buf = bytearray(4096)
    ahead: list[Any] = []
    try:
        eng = aionative.get_engine()

        async def reader() -> int:
            while eng.read_inline(fd, 4096, 0) is not False:  # spend the budget
                pass
            ahead.extend(eng.read(fd, 4096, 0) for _ in range(20))
            assert all(isinstance(f, asyncio.Future) for f in ahead)
            return await aionative.preadinto(fd, buf, 4096)  # queued behind them

        task = asyncio.ensure_future(reader())
        await asyncio.sleep(0)  # its first step: queued
        assert len(eng._deferred) == len(ahead) + 1
        aionative.close_engine()
        await asyncio.sleep(0)  # the old queue's drain moved them
        new = aionative.get_engine()
        assert new is not eng and isinstance(new, ThreadsEngine)
        assert len(new._deferred) > 1 and not task.done()  # still queued on the new engine
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        buf[:] = b"Z" * len(buf)  # the caller's own bytes, in the buffer it got back
        for _ in range(200):
            if not new._deferred:
                break
            await asyncio.sleep(0)  # the new engine's turns
        assert not new._deferred
        assert buf == b"Z" * len(buf), "a cancelled preadinto wrote into the buffer later"
    finally:
        aionative.set_inline_budget(None)
        aionative.set_default_backend(None)
        os.close(fd)


@pytest.mark.asyncio
async def test_threads_backend_a_cancelled_preadinto_queued_again_never_lands_later(
        tmp_path: Path) -> None:
    """A queued preadinto that the drain's turn finds refused again (the budget ran out
    between the drain's check and the read's) waits in the queue once more, on a future of
    its own. Its caller, cancelled meanwhile, goes on only once that read is given up: before,
    it went on at once (no worker to wait for) and the read ran on a later turn, over what
    the caller had put in its buffer since."""
    aionative.set_default_backend("threads")
    fd, _ = hot_file(tmp_path / "f", 1 << 20)
    aionative.set_inline_budget(1)
    buf = bytearray(4096)
    try:
        eng = aionative.get_engine()
        assert isinstance(eng, ThreadsEngine)
        refusing = True
        real = eng._inline_allowed

        def refused_again(fd: int, retry: bool = False) -> bool:
            allowed = real(fd, retry)  # (opens the iteration's window)
            if refusing:
                eng._spent = True  # ran out just now
                return False
            return allowed

        queued = asyncio.Event()

        async def reader() -> int:
            while eng.read_inline(fd, 4096, 0) is not False:  # spend the budget
                pass
            eng._inline_allowed = refused_again  # type: ignore[method-assign]
            queued.set()
            return await aionative.preadinto(fd, buf, 4096)

        task = asyncio.ensure_future(reader())
        await queued.wait()
        for _ in range(4):
            await asyncio.sleep(0)  # drained and queued again, turn after turn
        assert eng._deferred and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        refusing = False
        buf[:] = b"Z" * len(buf)  # the caller's own bytes, in the buffer it got back
        for _ in range(5):
            await asyncio.sleep(0)
        assert not eng._deferred
        assert buf == b"Z" * len(buf), "a cancelled preadinto wrote into the buffer later"
    finally:
        aionative.set_inline_budget(None)
        aionative.set_default_backend(None)
        os.close(fd)


@pytest.mark.asyncio
async def test_threads_backend_large_readers_do_not_starve_the_queue(tmp_path: Path) -> None:
    """Large reads retried after their turn go first while nothing waits in the queue of
    refused reads, and join it once something does, and the queue is drained first come,
    first served: two tasks streaming 1 MiB reads let a task of 4 KiB reads do about as many
    reads as they do (``python -m bench.inproc large-small --backend threads``). Two ways to
    starve it: every large read's retry going ahead (admitted within the grace) never lets the
    queue move; a drain that takes a read from the queue's head after one that spent the
    budget refuses it and queues it again at the end, behind the large ones, each time (here
    with a budget whose grace a 1 MiB copy always outlasts)."""
    aionative.set_default_backend("threads")
    aionative.set_inline_budget(20)  # a 1 MiB copy outlasts the grace (4 budgets) every time
    fd, data = hot_file(tmp_path / "f", 2 << 20)
    stop = False
    small_reads = large_reads = 0

    async def large(k: int) -> None:
        nonlocal large_reads
        while not stop:
            off = (k % 2) << 20
            assert await aionative.pread(fd, 1 << 20, off) == data[off:off + (1 << 20)]
            k, large_reads = k + 1, large_reads + 1

    async def small_reader() -> None:
        nonlocal small_reads
        while not stop:
            off = (small_reads % 64) * 4096
            assert await aionative.pread(fd, 4096, off) == data[off:off + 4096]
            small_reads += 1

    try:
        tasks = [asyncio.create_task(large(0)), asyncio.create_task(large(1)),
                 asyncio.create_task(small_reader())]
        await asyncio.sleep(0.5)
        stop = True
        await asyncio.gather(*tasks)
        assert small_reads >= max(large_reads // 4, 20), (small_reads, large_reads)
        assert aionative.engine_stats()["submitted"] == 0
    finally:
        aionative.set_inline_budget(None)
        aionative.set_default_backend(None)
        os.close(fd)


@pytest.mark.asyncio
async def test_threads_backend_workers_release_the_callers_buffer(tmp_path: Path) -> None:
    """A worker's read or write lets go of the caller's buffer before the await returns: the
    buffer can be resized or closed right after (the executor keeps a work item's arguments a
    little longer than the future takes to resolve)."""
    aionative.set_default_backend("threads")
    try:
        eng = aionative.get_engine()
        fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
        for i in range(300):
            buf = bytearray(b"x" * 64)
            assert await eng.pwrite(fd, buf, 0) == 64
            buf.clear()  # BufferError while anything still holds an export
            buf = bytearray(64)
            assert await eng.preadinto(fd, buf, 0) == 64
            buf.clear()
            m = mmap.mmap(-1, 4096)
            assert await eng.preadinto(fd, m, 0) == 64
            m.close()
        os.close(fd)
    finally:
        aionative.set_default_backend(None)

# --- opens and closes inside the call --------------------------------------------------------

@pytest.mark.asyncio
async def test_aionative_open_of_a_hot_file_never_reaches_the_queue(native_backend: str,
                                                                    wide_budget: None,
                                                                    tmp_path: Path) -> None:
    """``async with aionative.open(path, "rb")`` + ``read()`` of cached files: the open
    (openat2 RESOLVE_CACHED), the read and the close are done inside the calls — no kernel
    queue and no worker thread, on Linux AIO too, whose kernel interface opens nothing."""
    files = hot_files(tmp_path, 50, 997)
    fds = _fds()
    threads = threading.active_count()
    before = aionative.engine_stats()
    for path, data in files:
        async with aionative.open(path, "rb") as f:
            assert await f.read() == data
    assert delta(before, "submitted") == 0
    assert delta(before, "inline_hits") == 3 * len(files)   # open, read, close
    assert threading.active_count() == threads
    assert _fds() == fds


def _core_engine() -> Any:
    eng = aionative.get_engine()
    assert not isinstance(eng, ThreadsEngine)
    return eng


@pytest.mark.asyncio
async def test_open_cached_opens_what_the_kernel_queue_would(native_backend: str,
                                                             wide_budget: None,
                                                             tmp_path: Path) -> None:
    """The descriptor is non-inheritable, has O_NONBLOCK only when asked for it, and the
    flags that may write (O_CREAT, O_TRUNC, O_TMPFILE) are left to the kernel queue, as are
    paths that are missing, hold a NUL, or are not cached."""
    eng = _core_engine()
    path = tmp_path / "f"
    hot_file(path, 10)
    bpath = os.fsencode(path)
    for flags, nonblock in ((os.O_RDONLY, False), (os.O_RDWR, False),
                            (os.O_RDONLY | os.O_NONBLOCK, True)):
        fd = eng.open_cached(AT_FDCWD, bpath, flags)
        assert isinstance(fd, int) and fd >= 0
        try:
            assert not os.get_inheritable(fd)
            assert os.get_blocking(fd) is not nonblock
            assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == flags & os.O_ACCMODE
        finally:
            os.close(fd)
    dfd = eng.open_cached(AT_FDCWD, os.fsencode(tmp_path), os.O_RDONLY | os.O_DIRECTORY)
    assert isinstance(dfd, int)   # O_DIRECTORY is not O_TMPFILE (which contains its bit)
    os.close(dfd)
    for flags in (os.O_WRONLY | os.O_CREAT, os.O_WRONLY | os.O_TRUNC,
                  os.O_WRONLY | getattr(os, "O_TMPFILE", 0o20200000)):
        assert eng.open_cached(AT_FDCWD, bpath, flags) is None
    assert eng.open_cached(AT_FDCWD, bpath + b".missing", os.O_RDONLY) is None
    assert eng.open_cached(AT_FDCWD, b"a\0b", os.O_RDONLY) is None
    aionative.set_inline_budget(0)
    assert aionative.get_engine().open_cached(AT_FDCWD, bpath, os.O_RDONLY) is None


@pytest.mark.asyncio
async def test_open_cached_waits_a_turn_when_the_budget_is_spent(native_backend: str,
                                                                 tmp_path: Path) -> None:
    """False (not None) once the iteration's budget is spent; open_fd then yields a turn and
    opens inline on the next iteration rather than through the queue."""
    aionative.set_inline_budget(1)   # 1 µs: spent by the first call of an iteration
    try:
        eng = _core_engine()
        path = tmp_path / "f"
        hot_file(path, 10)
        await asyncio.sleep(0)
        fd = eng.open_cached(AT_FDCWD, os.fsencode(path), os.O_RDONLY)
        assert isinstance(fd, int)
        os.close(fd)
        time.sleep(0.001)  # noqa: ASYNC251 - spends the iteration's 1 µs budget
        assert eng.open_cached(AT_FDCWD, os.fsencode(path), os.O_RDONLY) is False
        before = eng.stats()
        fd = await _k.open_fd(path, os.O_RDONLY)
        os.close(fd)
        assert delta(before, "submitted") == 0 and delta(before, "inline_hits") == 1
    finally:
        aionative.set_inline_budget(None)


class _CountingEngine:
    """The running engine, counting the ``open_cached`` calls made through it."""

    def __init__(self, eng: Any) -> None:
        self._eng = eng
        self.attempts = 0

    def open_cached(self, *args: Any) -> Any:
        self.attempts += 1
        return self._eng.open_cached(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._eng, name)


@pytest.mark.asyncio
async def test_opens_a_spent_budget_refused_are_tried_about_once_each(
        native_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused open is retried once after a turn; refused again (past the grace), it waits
    in one queue, oldest first, run by one callback a turn: 200 opens issued at once are
    attempted a few times each in all — not once per waiting open per turn (each caller
    retrying every turn made ten attempts an open at 24 concurrent opens)."""
    counting = _CountingEngine(_core_engine())
    monkeypatch.setattr(_k, "get_engine", lambda: counting)
    path = tmp_path / "f"
    hot_file(path, 10)
    aionative.set_inline_budget(2)   # a couple of opens a turn
    try:
        before = counting.stats()
        n = 200
        fds = await asyncio.gather(*[_k.open_fd(path, os.O_RDONLY) for _ in range(n)])
        for fd in fds:
            os.close(fd)
        assert len(set(fds)) == n
        assert delta(before, "budget_exhausted") > 10   # many turns were needed
        assert delta(before, "submitted") == 0          # none went to the kernel queue
        assert delta(before, "inline_retries") <= n     # one retry an open at most
        assert delta(before, "retries_refused") > 0     # a 2 µs budget: 8 µs of grace
        # the first call, the retry, the queue's call, and one refused call a turn
        assert counting.attempts <= 4 * n, counting.attempts
    finally:
        aionative.set_inline_budget(None)


@pytest.mark.asyncio
async def test_a_caller_cancelled_after_its_refused_open_ran_leaks_nothing(
        native_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        retries_refused: None) -> None:
    """The queue's callback opens the file for a waiting caller; if that caller is cancelled
    before it resumes, the descriptor is closed, not leaked."""
    path = tmp_path / "f"
    hot_file(path, 10)
    drain = _k._Deferred.drain
    victims: list[asyncio.Task[int]] = []
    ran: list[bool] = []

    def drain_then_cancel(self: _k._Deferred) -> None:
        waiting = [fut for fut, _, _ in self.queue]
        drain(self)
        ran.append(any(f.done() and not f.cancelled() for f in waiting))
        for t in victims:
            t.cancel()  # its open has run; it has not resumed yet

    monkeypatch.setattr(_k._Deferred, "drain", drain_then_cancel)
    aionative.set_inline_budget(1)
    try:
        eng = _core_engine()
        fds = _fds()

        async def victim() -> int:
            fd = eng.open_cached(AT_FDCWD, os.fsencode(path), os.O_RDONLY)
            assert isinstance(fd, int)
            os.close(fd)
            time.sleep(0.001)  # noqa: ASYNC251 - spends the iteration's 1 µs budget
            return await _k.open_fd(path, os.O_RDONLY)  # refused now: queued

        victims.append(asyncio.ensure_future(victim()))
        with pytest.raises(asyncio.CancelledError):
            await victims[0]
        assert ran == [True]
        assert _fds() == fds
    finally:
        aionative.set_inline_budget(None)


@pytest.mark.asyncio
async def test_a_retry_runs_past_the_spent_budget_until_the_grace(native_backend: str,
                                                                  tmp_path: Path) -> None:
    """``retry=True`` (a caller refused on an earlier iteration that has let the loop turn) is
    admitted past the spent budget while the iteration's inline work is under RETRY_GRACE (4)
    budgets, then refused as well. The one call right after an admitted retry (the same
    task's next step: the read after its open) follows it in; any other call without
    ``retry`` stays refused. A 20 ms budget, so that the sleeps land well inside each span on
    a busy machine."""
    fd, data = hot_file(tmp_path / "f", 4096)
    aionative.set_inline_budget(20_000)
    try:
        eng = _core_engine()
        bpath = os.fsencode(tmp_path / "f")
        await asyncio.sleep(0)
        before = eng.stats()
        assert eng.read_inline(fd, 100, 0) == data[:100]  # opens the window
        time.sleep(0.03)  # noqa: ASYNC251 - 1.5 budgets: spent, within the grace
        assert eng.read_inline(fd, 100, 0) is False
        assert eng.read_inline(fd, 100, 0, True) == data[:100]
        assert eng.read_inline(fd, 100, 0) == data[:100]  # follows the retry in
        assert eng.read_inline(fd, 100, 0) is False  # still spent for everyone else
        got = eng.open_cached(AT_FDCWD, bpath, os.O_RDONLY, True)
        assert isinstance(got, int)
        os.close(got)
        got = eng.open_cached(AT_FDCWD, bpath, os.O_RDONLY, False)  # follows it in
        assert isinstance(got, int)
        os.close(got)
        assert eng.open_cached(AT_FDCWD, bpath, os.O_RDONLY, False) is False
        got = eng.read_file(AT_FDCWD, bpath, True)
        assert got == data
        assert delta(before, "inline_retries") == 3
        assert delta(before, "retries_refused") == 0
        time.sleep(0.06)  # noqa: ASYNC251 - 4.5 budgets: past the grace
        assert eng.read_inline(fd, 100, 0, True) is False
        assert eng.read_inline(fd, 100, 0) is False  # a refused retry lets nothing follow
        assert eng.open_cached(AT_FDCWD, bpath, os.O_RDONLY, True) is False
        assert eng.read_file(AT_FDCWD, bpath, True) is False
        assert delta(before, "inline_retries") == 6
        assert delta(before, "retries_refused") == 3
        assert delta(before, "submitted") == 0
        await asyncio.sleep(0)  # a new iteration: the budget is back for everyone
        assert eng.read_inline(fd, 100, 0) == data[:100]
        with pytest.raises(TypeError, match=r"read_inline\(\) takes 3 or 4 arguments"):
            eng.read_inline(fd, 100, 0, True, 1)
        with pytest.raises(TypeError):
            eng.read_inline(fd, 100)
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)


@pytest.mark.asyncio
async def test_retries_stop_at_the_grace(native_backend: str, tmp_path: Path) -> None:
    """The grace bounds what retries add to an iteration: with a 1 ns budget (4 ns of grace),
    of 200 callers refused together only the first retry of the next iteration runs inline;
    the others wait in the queue, which runs one a turn. Everyone gets the right bytes and
    nothing reaches the kernel queue."""
    fd, data = hot_file(tmp_path / "f", 4096)
    aionative.set_inline_budget(0.001)
    try:
        eng = _core_engine()

        async def refused(i: int) -> Any:
            return await _k.after_a_turn(eng, "read_inline", fd, 100, i)

        await asyncio.sleep(0)
        before = eng.stats()
        n = 200
        got = await asyncio.gather(*[refused(i) for i in range(n)])
        assert got == [data[i:i + 100] for i in range(n)]
        assert delta(before, "inline_retries") == n
        assert delta(before, "retries_refused") >= n - 10
        assert delta(before, "submitted") == 0
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)


@pytest.mark.asyncio
async def test_a_caller_cancelled_while_it_waits_its_turn_opens_nothing(
        native_backend: str, tmp_path: Path) -> None:
    """Cancelled during the turn it lets the loop take (before its retry): nothing ran for
    it, so nothing is open."""
    path = tmp_path / "f"
    hot_file(path, 10)
    eng = _core_engine()
    fds = _fds()
    await asyncio.sleep(0)
    before = eng.stats()
    task = asyncio.ensure_future(_k.after_a_turn(eng, "open_cached", AT_FDCWD,
                                                 os.fsencode(path), os.O_RDONLY))
    await asyncio.sleep(0)  # the task has started and yielded its turn
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert delta(before, "inline_retries") == 0
    assert _fds() == fds


@pytest.mark.asyncio
@pytest.mark.parametrize("case", ["read-only", "write-only", "read-write", "unlinked", "pipe",
                                  "fault"])
async def test_close_cached_closes_only_what_cannot_wait(native_backend: str,
                                                         wide_budget: None, tmp_path: Path,
                                                         case: str) -> None:
    """close(2) inside the call only for a linked regular file opened read-only on a local
    filesystem (no ->flush to wait for); anything else goes to close_fd, descriptor intact."""
    eng = _core_engine()
    path = tmp_path / "f"
    path.write_bytes(b"x")
    extra = -1
    if case == "pipe":
        fd, extra = os.pipe()
    else:
        flags = {"write-only": os.O_WRONLY, "read-write": os.O_RDWR}.get(case, os.O_RDONLY)
        fd = os.open(path, flags)
    if case == "unlinked":
        path.unlink()   # its last close would free the inode's blocks: may take long
    if case == "fault":
        assert _backend._core is not None
        _backend._core.set_fault("inline", errno.EAGAIN, 1)
    closed = eng.close_cached(fd)
    assert closed is (case == "read-only")
    if not closed:
        os.fstat(fd)    # still open
        await _k.close_fd(fd)
    with pytest.raises(OSError) as exc:
        os.fstat(fd)
    assert exc.value.errno == errno.EBADF
    if extra >= 0:
        os.close(extra)


def _kernel_at_least(major: int, minor: int) -> bool:
    release = os.uname().release.split("-")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


@pytest.mark.asyncio
async def test_close_cached_asks_the_filesystem_once_a_mount(native_backend: str,
                                                             wide_budget: None,
                                                             tmp_path: Path) -> None:
    """Whether a filesystem's close may wait (``fstatfs``) is asked once per mount: the
    mount's unique id (statx ``STATX_MNT_ID_UNIQUE``, Linux 6.8) is remembered. A file on
    another mount whose close may wait (procfs, not a known local filesystem) is still asked,
    and not closed inline."""
    eng = _core_engine()
    path = tmp_path / "f"
    path.write_bytes(b"x")
    counts = []
    for _ in range(3):
        fd = os.open(path, os.O_RDONLY)
        before = eng.stats()["syscalls"]
        assert eng.close_cached(fd) is True
        counts.append(eng.stats()["syscalls"] - before)
    # fcntl, statx, fstatfs, close; then without the fstatfs
    assert counts == ([4, 3, 3] if _kernel_at_least(6, 8) else [4, 4, 4])
    fd = os.open("/proc/version", os.O_RDONLY)  # a regular file, on procfs
    before = eng.stats()["syscalls"]
    assert eng.close_cached(fd) is False
    assert eng.stats()["syscalls"] - before == 3  # fcntl, statx, fstatfs
    os.close(fd)


@pytest.mark.asyncio
async def test_closing_a_closed_descriptor_says_ebadf(backend: str, tmp_path: Path) -> None:
    aionative.get_engine()  # its descriptors first: none may take the closed one's number
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT)
    os.close(fd)
    with pytest.raises(OSError) as exc:
        await _k.close_fd(fd)
    assert exc.value.errno == errno.EBADF


@pytest.mark.asyncio
async def test_close_cached_does_not_wait_for_a_spent_budget(native_backend: str,
                                                            tmp_path: Path) -> None:
    """A close that cannot wait costs less than queueing it (on Linux AIO, a worker thread):
    it is done inline even after the iteration's budget is spent; only budget 0 turns it off."""
    aionative.set_inline_budget(1)
    try:
        eng = _core_engine()
        path = tmp_path / "f"
        hot_file(path, 10)
        fd = eng.open_cached(AT_FDCWD, os.fsencode(path), os.O_RDONLY)
        assert isinstance(fd, int)
        time.sleep(0.001)  # noqa: ASYNC251 - spends the iteration's 1 µs budget
        assert eng.open_cached(AT_FDCWD, os.fsencode(path), os.O_RDONLY) is False
        assert eng.close_cached(fd) is True
        aionative.set_inline_budget(0)
        fd = os.open(path, os.O_RDONLY)
        assert aionative.get_engine().close_cached(fd) is False
        os.close(fd)
    finally:
        aionative.set_inline_budget(None)


@pytest.mark.asyncio
@pytest.mark.parametrize("into", [None, "bytearray", "mmap", "memoryview"])
@pytest.mark.parametrize("size,large", [(TURN_MIN, 1), (4096, 0)])
async def test_a_read_the_spent_budget_refused_waits_a_turn(
        native_backend: str, tmp_path: Path, size: int, large: int, into: str | None) -> None:
    """``aionative.pread`` of ``TURN_MIN`` bytes or more that finds the budget spent waits one
    turn and is retried inline (its copy outweighs the turn; queued, the kernel would make
    the same copy inside the flush); a smaller one is read inline at once and its caller
    parks for a turn (the copy is as cheap as queueing it; the wait is one turn, not a kernel
    round trip). Neither goes to the kernel. ``preadinto`` (``into``: what holds its buffer)
    likewise."""
    fd, data = hot_file(tmp_path / "f", 1 << 20)
    spender, small = hot_file(tmp_path / "g", 10)
    mm = mmap.mmap(-1, size)
    buf: Any = {"bytearray": bytearray(size), "mmap": mm, "memoryview": memoryview(mm),
                None: None}[into]
    aionative.set_inline_budget(0.001)  # 1 ns: spent by the first inline call of an iteration
    try:
        eng = _core_engine()
        for off in (0, 12345):
            await asyncio.sleep(0.001)  # a new iteration's budget (the flush reopens it)
            assert eng.read(spender, 1, 0) == small[:1]  # inline: this iteration's budget is spent
            before = aionative.engine_stats()
            if buf is None:
                assert await aionative.pread(fd, size, off) == data[off:off + size]
            else:
                assert await aionative.preadinto(fd, buf, off) == size
                assert bytes(buf) == data[off:off + size]
            assert delta(before, "submitted") == 0
            assert delta(before, "inline_retries") == large
            assert delta(before, "parked") == 1 - large
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
        os.close(spender)
        if isinstance(buf, memoryview):
            buf.release()
        mm.close()


async def _park(fd: int, *sizes: int) -> list[asyncio.Task[bytes]]:
    """Tasks that each read ``size`` bytes at offset 1 with the (1 ns) budget spent: the first
    spends it with a read before, the others find it spent. Each reads inline all the same
    and parks. Returned in the same turn, all of them parked."""
    async def reader(size: int, first: bool) -> bytes:
        if first:
            await aionative.pread(fd, size, 0)  # the iteration's first inline call: admitted
        return await aionative.pread(fd, size, 1)  # refused: read now, the caller parks

    before = aionative.engine_stats()
    tasks = [asyncio.create_task(reader(size, i == 0)) for i, size in enumerate(sizes)]
    await asyncio.sleep(0)  # they run, and park; the flush that releases them comes after
    assert delta(before, "parked") == len(sizes)
    assert aionative.engine_stats()["parked_now"] == len(sizes)
    return tasks


@pytest.fixture
def parking(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    """A hot 64 KiB file's descriptor and contents, with a 1 ns budget (``_park``)."""
    fd, data = hot_file(tmp_path / "f", 1 << 16)
    aionative.set_inline_budget(0.001)
    yield fd, data
    aionative.set_inline_budget(None)
    os.close(fd)


@pytest.mark.asyncio
async def test_a_parked_caller_gets_its_read_after_one_turn(
        native_backend: str, parking: tuple[int, bytes]) -> None:
    """A parked caller waits no kernel round trip: the next flush hands it the bytes it read,
    and nothing went to the kernel for it."""
    fd, data = parking
    before = aionative.engine_stats()
    [task] = await _park(fd, 4096)
    assert await asyncio.wait_for(task, 5) == data[1:4097]
    assert aionative.engine_stats()["parked_now"] == 0
    assert delta(before, "submitted") == 0


@pytest.mark.asyncio
@pytest.mark.uses_internals("the engine calling its tasks' wake-ups itself")
async def test_the_flush_that_releases_a_parked_caller_runs_its_task(
        native_backend: str, parking: tuple[int, bytes]) -> None:
    """The flush hands a parked caller its read and calls its task's wake-up itself (as it
    does for the completions it reaps): the task runs inside the flush, in the iteration
    after it parked, not one iteration later through ``loop.call_soon``."""
    fd, data = parking
    [task] = await _park(fd, 4096)
    woken = aionative.engine_stats()["woken"]
    await asyncio.sleep(0)  # the next iteration: the flush, then this task
    assert task.done()
    assert task.result() == data[1:4097]
    assert aionative.engine_stats()["woken"] - woken == 1


@contextlib.contextmanager
def _refusing_next_flush(loop: asyncio.AbstractEventLoop) -> Iterator[list[Any]]:
    """``loop.call_soon`` refuses (RuntimeError) the first engine ``_flush`` scheduled inside
    the block; the list yielded holds it once refused. Skips a loop that takes no instance
    attributes (it cannot be patched)."""
    if not hasattr(loop, "__dict__"):
        pytest.skip("this loop takes no instance attributes: call_soon cannot be patched")
    call_soon, failed = loop.call_soon, []

    def refusing(cb: Any, *args: Any, **kw: Any) -> Any:
        if getattr(cb, "__name__", "") == "_flush" and not failed:
            failed.append(cb)
            raise RuntimeError("no room for the flush")
        return call_soon(cb, *args, **kw)

    loop.call_soon = refusing  # type: ignore[method-assign]
    try:
        yield failed
    finally:
        del loop.call_soon


@pytest.mark.asyncio
@pytest.mark.uses_internals("the engine calling its tasks' wake-ups itself")
async def test_parked_callers_left_without_a_flush_get_their_reads_at_once(
        native_backend: str, parking: tuple[int, bytes]) -> None:
    """A flush releases some parked callers and schedules the next for the rest; if that
    ``call_soon`` fails, the rest are handed their reads at once (none waits for a flush that
    will not come), every released task is still woken, and the error goes to the loop's
    exception handler as the flush's."""
    fd, data = parking
    loop = asyncio.get_running_loop()
    seen: list[BaseException] = []
    try:
        tasks = await _park(fd, *[100] * 20)
        loop.set_exception_handler(lambda _, ctx: seen.append(ctx["exception"]))
        with _refusing_next_flush(loop) as failed:
            await asyncio.sleep(0)  # the flush: it releases some, fails to schedule the next
        assert failed, "the flush released every caller at once: nothing was refused"
        assert all(t.done() for t in tasks)
        assert [t.result() for t in tasks] == [data[1:101]] * 20
        assert aionative.engine_stats()["parked_now"] == 0
        assert len(seen) == 1 and isinstance(seen[0], RuntimeError)
    finally:
        loop.set_exception_handler(None)


@pytest.mark.asyncio
async def test_a_flush_that_cannot_schedule_the_next_still_sends_what_waits(
        native_backend: str, parking: tuple[int, bytes], tmp_path: Path) -> None:
    """A kernel read prepared in the same iteration as the parks goes out with the flush that
    failed to schedule the next one: no later flush would send it."""
    fd, data = parking
    loop = asyncio.get_running_loop()
    dfd = os.open(tmp_path / "f", os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 8192)
    eng = aionative.get_engine()
    try:
        tasks = await _park(fd, *[100] * 20)
        kernel = asyncio.ensure_future(eng.readinto(dfd, buf, 4096))
        with _refusing_next_flush(loop) as failed:
            loop.set_exception_handler(lambda _, ctx: None)
            try:
                await asyncio.sleep(0)
            finally:
                loop.set_exception_handler(None)
        assert failed
        assert await asyncio.wait_for(kernel, 5) == 8192
        assert bytes(buf) == data[4096:4096 + 8192]
        assert [t.result() for t in tasks] == [data[1:101]] * 20
    finally:
        buf.close()
        os.close(dfd)


@pytest.mark.uses_internals("the engine calling its tasks' wake-ups itself")
def test_system_exit_from_a_task_woken_by_a_failing_flush_stops_the_loop(
        native_backend: str, parking: tuple[int, bytes], loop: asyncio.AbstractEventLoop) -> None:
    """SystemExit raised by a parked task that a failing flush wakes (its call_soon for the
    next flush refused) stops the loop, as from any callback: the flush's own error is
    reported, not raised in its place."""
    fd, data = parking
    reported: list[str] = []
    started: list[asyncio.Task[bytes]] = []

    async def main() -> None:
        async def reader(first: bool, last: bool) -> bytes:
            if first:
                await aionative.pread(fd, 100, 0)
            got = await aionative.pread(fd, 100, 1)
            if last:
                raise SystemExit(3)
            return got

        started.extend(asyncio.create_task(reader(i == 0, i == 19)) for i in range(20))
        await asyncio.sleep(0)
        assert aionative.engine_stats()["parked_now"] == 20
        with _refusing_next_flush(loop):
            for _ in range(5):
                await asyncio.sleep(0)

    def unraisable(u: Any) -> None:
        reported.append(type(u.exc_value).__name__)

    old_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        with pytest.raises(SystemExit):
            loop.run_until_complete(main())
    finally:
        sys.unraisablehook = old_hook
    assert reported == ["RuntimeError"]
    assert [t.result() for t in started[:19]] == [data[1:101]] * 19  # woken, none lost
    assert isinstance(started[19].exception(), SystemExit)
    loop.run_until_complete(close_running_engine())


@pytest.mark.asyncio
async def test_a_parked_caller_cancelled_is_passed_over(
        native_backend: str, parking: tuple[int, bytes]) -> None:
    """Cancelled while parked, a caller raises CancelledError (nothing of its read is with the
    kernel to abandon); the callers parked behind it get theirs."""
    fd, data = parking
    first, second = await _park(fd, 100, 200)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 5) == data[1:201]
    assert aionative.engine_stats()["parked_now"] == 0
    assert aionative.engine_stats()["cancels"] == 0  # nothing reached the engine's cancel


@pytest.mark.asyncio
async def test_closing_the_engine_hands_parked_callers_their_reads(
        native_backend: str, parking: tuple[int, bytes]) -> None:
    """``close_engine()`` with callers parked: their reads are done, so they get them (a close
    that dropped them would leave them waiting forever)."""
    fd, data = parking
    [task] = await _park(fd, 300)
    aionative.close_engine()
    assert await asyncio.wait_for(task, 5) == data[1:301]


@pytest.mark.asyncio
async def test_many_hot_readers_take_turns_in_slices(native_backend: str,
                                                     tmp_path: Path) -> None:
    """64 tasks reading a hot file in tight loops (W1): past the budget each caller parks, and
    while callers are parked each run ends after a slice of reads, so parked callers take
    turns instead of one task spending every budget. Every read is right, none goes to the
    kernel, and every task keeps reading."""
    fd, data = hot_file(tmp_path / "f", 1 << 20)
    stop = False
    counts = [0] * 64

    async def reader(k: int) -> None:
        off = (k * 4096 * 3) % (1 << 20)
        while not stop:
            assert await aionative.pread(fd, 4096, off) == data[off:off + 4096]
            counts[k] += 1
            off = (off + 4096 * 7) % (1 << 20)

    try:
        before = aionative.engine_stats()
        tasks = [asyncio.create_task(reader(k)) for k in range(64)]
        await asyncio.sleep(0.3)
        stop = True
        await asyncio.gather(*tasks)
        assert delta(before, "submitted") == 0
        assert delta(before, "parked") > 0
        assert delta(before, "slices_ended") > 0
        assert min(counts) > 0, counts
    finally:
        os.close(fd)


@pytest.mark.asyncio
async def test_readinto_inline_answers_as_read_inline(native_backend: str, tmp_path: Path) -> None:
    """``Engine.readinto_inline``: the count when done inline, False when the budget is spent
    (then, after a turn, the retry), None when the read must go to the kernel queue."""
    fd, data = hot_file(tmp_path / "f", 1 << 16)
    buf = bytearray(4096)
    aionative.set_inline_budget(0.001)
    try:
        eng = _core_engine()
        await asyncio.sleep(0.001)
        assert eng.readinto_inline(fd, buf, 100) == 4096 and buf == data[100:4196]
        assert eng.readinto_inline(fd, buf, 0) is False        # spent by the first
        await asyncio.sleep(0.001)                              # the turn
        assert eng.readinto_inline(fd, buf, 0, True) == 4096 and buf == data[:4096]
        aionative.set_inline_budget(0)
        assert eng.readinto_inline(fd, buf, 0) is None          # no inline path at all
        with pytest.raises(BufferError):
            eng.readinto_inline(fd, b"read-only", 0)
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
