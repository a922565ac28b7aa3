"""A tight loop over a file the read-ahead window serves (no I/O to wait for) still lets the
event loop run: ``async for``, ``readline()`` and ``read(1)`` yield a turn once the loop
iteration's budget is spent, as inline reads do, and ``readlines()`` builds its list in slices
between such turns; large writes leave the loop's thread, and so
does the release of a large file written over when it is closed. A ticker task beside them
measures the longest the loop's thread worked without running it."""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import aionative

# (These tests measure the loop themselves, to a stricter bound than the suite's guard and over
# up to three attempts: the guard, which would judge the first attempt alone, steps aside.)
pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend"),
              pytest.mark.measures_the_loop]

# A loop that never yields holds the loop for as long as the window lasts: 20 ms (async for)
# to over 100 ms (read(1)) on a 16 MiB file here. Yielding at each spent budget, the longest
# gap is about a millisecond; the bound leaves room for a shared, noisy machine.
MAX_GAP = 0.010


@pytest.fixture(scope="module")
def lines_file_written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("responsive") / "lines"
    path.write_bytes(b"".join(b"line %026d\n" % i for i in range((16 << 20) // 32)))
    return path


@pytest.fixture
def lines_file(lines_file_written: Path) -> Path:
    """The file, read once before the test (outside its loop): every page cached."""
    lines_file_written.read_bytes()
    return lines_file_written


async def _one_longest_gap(work: Callable[[], Awaitable[None]]) -> float:
    longest = 0.0  # (not a list of every gap: the ticker runs hundreds of thousands of times)
    stop = False

    # The gaps are the loop thread's CPU time between two runs of the ticker: the work done
    # without yielding, which a shared machine's scheduler (the thread waiting for a CPU)
    # cannot inflate as it inflates wall time.
    async def ticker() -> None:
        nonlocal longest
        last = time.thread_time()
        while not stop:
            await asyncio.sleep(0)
            now = time.thread_time()
            longest = max(longest, now - last)
            last = now

    task = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    # The collector off while measuring: a full collection of a large test process's heap
    # stops the loop for 15 ms and more on 3.12, whatever code runs; the gaps measured are
    # then the file's.
    gc.disable()
    try:
        await work()
    finally:
        gc.enable()
        stop = True
        await task
    return longest


ATTEMPTS = 3


async def _longest_gap(work: Callable[[], Awaitable[None]]) -> float:
    """The loop's longest gap while ``work()`` runs: the least of up to ``ATTEMPTS`` runs, the
    first under the bound ending them. CPU time is not free of noise either: a kernel built
    without IRQ time accounting (CONFIG_IRQ_TIME_ACCOUNTING off, as here) charges interrupt and
    softirq work, heavy while hundreds of MiB are written back, to whichever thread it
    interrupts, and a ticker step of a few instructions was seen to cost 24 ms. A call that
    holds the loop does so on every attempt; such noise seldom strikes three in a row."""
    best = float("inf")
    for _ in range(ATTEMPTS):
        best = min(best, await _one_longest_gap(work))
        if best < MAX_GAP:
            break
    return best


@pytest.mark.parametrize("mode", ["rb", "r"])
async def test_async_for_over_a_cached_file_yields(lines_file: Path, mode: str) -> None:
    async def work() -> None:
        async with aionative.open(lines_file, mode) as f:
            async for _ in f:
                pass

    assert await _longest_gap(work) < MAX_GAP


@pytest.mark.parametrize("mode", ["rb", "r"])
async def test_a_readline_loop_over_a_cached_file_yields(lines_file: Path, mode: str) -> None:
    async def work() -> None:
        async with aionative.open(lines_file, mode) as f:
            while await f.readline():
                pass

    assert await _longest_gap(work) < MAX_GAP


async def test_a_read_1_loop_over_a_cached_file_yields(lines_file: Path) -> None:
    async def work() -> None:
        async with aionative.open(lines_file, "rb") as f:
            for _ in range(400_000):
                await f.read(1)

    assert await _longest_gap(work) < MAX_GAP


@functools.cache
def _builtin_readlines(path: Path, mode: str) -> list[bytes | str]:
    with open(path, mode) as f:
        return list(f.readlines())


@pytest.mark.parametrize("mode", ["rb", "r"])
async def test_readlines_of_a_cached_file_of_many_lines_yields(lines_file: Path,
                                                               mode: str) -> None:
    """Half a million lines split at once hold the loop for tens of milliseconds: the list
    is built in slices, with a turn whenever the budget is spent — and it is the builtin's."""
    expected = _builtin_readlines(lines_file, mode)
    got: list[list[bytes | str]] = []

    async def work() -> None:
        async with aionative.open(lines_file, mode) as f:
            got.append(await f.readlines())
            assert await f.read() == expected[0][:0]

    assert await _longest_gap(work) < MAX_GAP
    assert all(lines == expected for lines in got)


@pytest.fixture(scope="module")
def payload() -> bytes:
    return os.urandom(64 << 20)


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "text"])
async def test_ten_concurrent_large_writes_leave_the_loop_free(tmp_path: Path, payload: bytes,
                                                              kind: str) -> None:
    """Ten 64 MiB writes at once: none is copied on the loop's thread (a copy into the raw
    layer's staging and the read window held it 20 ms and more a write; Linux AIO copied each
    into the page cache inside io_submit)."""
    data: bytes | bytearray | str = (
        payload if kind == "bytes" else await asyncio.to_thread(bytearray, payload)
        if kind == "bytearray" else await asyncio.to_thread(payload[:1 << 20].hex))
    # (Text is encoded on the loop's thread, by the builtin's text layer, as anywhere: 2 MiB
    # of it here, a millisecond or two; ten at once take a turn each, not all in one.)

    attempt = 0

    async def one(i: int) -> None:
        # (new files at each attempt: writing over a file measures its truncation and, on
        # ext4, the write-back its close starts, not these writes)
        path = tmp_path / f"f{attempt}-{i}"
        async with aionative.open(path, "w" if kind == "text" else "wb") as f:
            await f.write(data)

    async def work() -> None:
        nonlocal attempt
        attempt += 1
        await asyncio.gather(*(one(i) for i in range(10)))

    assert await _longest_gap(work) < MAX_GAP


async def _written_over(paths: list[Path], data: bytes) -> list[aionative.AsyncBufferedIOBase]:
    """The files at ``paths``, which hold data, opened ``"wb"`` (truncated) and written ``data``
    each; left open."""
    await asyncio.to_thread(lambda: [p.write_bytes(data[:4096]) for p in paths])
    files = [await aionative.open(p, "wb") for p in paths]
    try:
        await asyncio.gather(*(f.write(data) for f in files))
    except BaseException:
        await asyncio.gather(*(f.close() for f in files), return_exceptions=True)
        raise
    return files


async def _close_all(files: list[aionative.AsyncBufferedIOBase]) -> None:
    await asyncio.gather(*(f.close() for f in files))


def _unlink_all(paths: list[Path]) -> None:
    for p in paths:
        p.unlink()


async def test_closing_large_files_written_over_leaves_the_loop_free(tmp_path: Path,
                                                                    payload: bytes) -> None:
    """Ten files that hold data, opened ``"wb"``, written 64 MiB each, then closed at once: no
    file's release runs on the loop's thread. On ext4 (``auto_da_alloc``, the default) the
    last close of a file truncated and then written starts the writeback of all its data,
    milliseconds for 64 MiB; io_uring closes inside the ``io_uring_enter`` that submits the
    close, release included, and ten closes submitted together held the loop 20 ms and more.
    The closes alone are measured (the writes are the test above's), up to three times over
    new files: a shared machine's interrupts, charged to whichever thread runs, can make any
    one measurement long."""
    gaps = []  # (its own attempts: the closes cannot be run again on the same files)
    for attempt in range(ATTEMPTS):
        paths = [tmp_path / f"a{attempt}-{i}" for i in range(10)]
        files = await _written_over(paths, payload)
        gaps.append(await _one_longest_gap(functools.partial(_close_all, files)))
        await asyncio.to_thread(_unlink_all, paths)
        if gaps[-1] < MAX_GAP:
            break
    assert min(gaps) < MAX_GAP, gaps
