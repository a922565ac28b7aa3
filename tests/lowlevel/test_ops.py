"""Every low-level operation against os.pread / os.pwrite, on every backend and loop."""

from __future__ import annotations

import array
import asyncio
import errno
import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import aionative

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend")]


async def test_pread_matches_os_pread(data_file: tuple[Path, bytes], fd_of: Callable[..., int]) -> None:
    path, data = data_file
    fd = fd_of(path)
    size = len(data)
    rng = random.Random(1)
    cases = [(0, 0), (0, 1), (0, size), (size, 10), (size - 5, 10), (size + 4096, 100),
             (1 << 40, 10), (4095, 4097), (0, size + 1000)]
    cases += [(rng.randrange(size + 100), rng.randrange(70000)) for _ in range(200)]
    for offset, n in cases:
        assert await aionative.pread(fd, n, offset) == os.pread(fd, n, offset), (offset, n)


async def test_preadinto_matches(data_file: tuple[Path, bytes], fd_of: Callable[..., int]) -> None:
    path, data = data_file
    fd = fd_of(path)
    buf = bytearray(5000)
    assert await aionative.preadinto(fd, buf, 777) == 5000
    assert buf == data[777:5777]
    tail = bytearray(5000)
    n = await aionative.preadinto(fd, tail, len(data) - 100)
    assert n == 100 and tail[:100] == data[-100:] and tail[100:] == bytes(4900)
    view = memoryview(bytearray(10000))[100:300]
    assert await aionative.preadinto(fd, view, 0) == 200 and view.tobytes() == data[:200]
    arr = array.array("i", [0] * 64)
    assert await aionative.preadinto(fd, arr, 8) == 256 and arr.tobytes() == data[8:264]
    assert await aionative.preadinto(fd, bytearray(), 0) == 0


async def test_pwrite_matches_os_pwrite(tmp_path: Path, fd_of: Callable[..., int]) -> None:
    ours = fd_of(tmp_path / "a", os.O_RDWR | os.O_CREAT)
    theirs = fd_of(tmp_path / "b", os.O_RDWR | os.O_CREAT)
    rng = random.Random(2)
    for _ in range(100):
        chunk = os.urandom(rng.randrange(0, 20000))
        offset = rng.randrange(0, 300000)  # past EOF leaves a hole, as os.pwrite does
        assert await aionative.pwrite(ours, chunk, offset) == os.pwrite(theirs, chunk, offset)
    assert await aionative.pwrite(ours, memoryview(b"xyz")[1:], 5) == os.pwrite(theirs, b"yz", 5)
    assert await aionative.pwrite(ours, bytearray(b"q"), 9) == os.pwrite(theirs, b"q", 9)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


async def test_fsync_fdatasync(tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = fd_of(tmp_path / "s", os.O_RDWR | os.O_CREAT)
    assert await aionative.pwrite(fd, b"durable", 0) == 7
    assert await aionative.fsync(fd) is None
    assert await aionative.fdatasync(fd) is None
    assert os.pread(fd, 7, 0) == b"durable"


@pytest.mark.blocks_the_loop("makes and compares 64 MiB synchronously in its body")
async def test_64mib_operations(tmp_path: Path, fd_of: Callable[..., int]) -> None:
    data = os.urandom(64 << 20)
    fd = fd_of(tmp_path / "big", os.O_RDWR | os.O_CREAT)
    assert await aionative.pwrite(fd, data, 0) == len(data)
    assert os.pread(fd, len(data), 0) == data
    assert await aionative.pread(fd, len(data), 0) == data
    buf = bytearray(len(data))
    assert await aionative.preadinto(fd, buf, 0) == len(data) and buf == data


@pytest.mark.blocks_the_loop("gathers 10 000 coroutines: asyncio makes their tasks in one step")
async def test_10k_concurrent_operations_over_several_files(tmp_path: Path,
                                                            fd_of: Callable[..., int]) -> None:
    files = []
    for i in range(6):
        data = os.urandom(256 * 1024)
        (tmp_path / f"f{i}").write_bytes(data)
        files.append((fd_of(tmp_path / f"f{i}", os.O_RDWR), data))
    out = fd_of(tmp_path / "out", os.O_RDWR | os.O_CREAT)
    rng = random.Random(3)
    reads = [(rng.randrange(6), rng.randrange(256 * 1024), rng.randrange(1, 9000))
             for _ in range(8000)]
    writes = [(i * 512, os.urandom(512)) for i in range(2000)]
    ops: list[Awaitable[Any]] = [aionative.pread(files[f][0], n, off) for f, off, n in reads]
    ops += [aionative.pwrite(out, chunk, off) for off, chunk in writes]
    results = await asyncio.gather(*ops)
    for (f, off, n), got in zip(reads, results[:8000]):
        assert got == files[f][1][off:off + n]
    assert results[8000:] == [512] * 2000
    assert os.pread(out, 2000 * 512, 0) == b"".join(c for _, c in writes)


def _os_error(fn: Callable[[], Any]) -> tuple[type[BaseException], int | None]:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - comparing whatever the builtin raises
        return type(exc), getattr(exc, "errno", None)
    raise AssertionError("expected an exception")


async def _our_error(coro: Awaitable[Any]) -> tuple[type[BaseException], int | None]:
    try:
        await coro
    except BaseException as exc:  # noqa: BLE001
        return type(exc), getattr(exc, "errno", None)
    raise AssertionError("expected an exception")


async def test_errors_match_os(tmp_path: Path, data_file: tuple[Path, bytes],
                               fd_of: Callable[..., int]) -> None:
    path, _ = data_file
    rd = fd_of(path)
    wr = fd_of(tmp_path / "w", os.O_WRONLY | os.O_CREAT)
    dirfd = fd_of(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    aionative.get_engine()  # its eventfd must not take the number of `closed` below
    closed = os.open(path, os.O_RDONLY)
    os.close(closed)
    cases: list[tuple[Callable[[], Any], Callable[[], Awaitable[Any]]]] = [
        (lambda: os.pread(closed, 10, 0), lambda: aionative.pread(closed, 10, 0)),
        (lambda: os.pread(-1, 10, 0), lambda: aionative.pread(-1, 10, 0)),
        (lambda: os.pread(rd, 10, -1), lambda: aionative.pread(rd, 10, -1)),
        (lambda: os.pread(rd, -1, 0), lambda: aionative.pread(rd, -1, 0)),
        (lambda: os.pread(wr, 10, 0), lambda: aionative.pread(wr, 10, 0)),
        (lambda: os.pread(dirfd, 10, 0), lambda: aionative.pread(dirfd, 10, 0)),
        (lambda: os.pread(rd, "10", 0), lambda: aionative.pread(rd, "10", 0)),  # type: ignore[arg-type]
        (lambda: os.pread(rd, 10, 2 ** 64), lambda: aionative.pread(rd, 10, 2 ** 64)),
        (lambda: os.pwrite(rd, b"x", 0), lambda: aionative.pwrite(rd, b"x", 0)),
        (lambda: os.pwrite(wr, b"x", -1), lambda: aionative.pwrite(wr, b"x", -1)),
        (lambda: os.pwrite(wr, "x", 0), lambda: aionative.pwrite(wr, "x", 0)),  # type: ignore[arg-type]
        (lambda: os.pwrite(closed, b"x", 0), lambda: aionative.pwrite(closed, b"x", 0)),
        (lambda: os.preadv(rd, [b"abc"], 0), lambda: aionative.preadinto(rd, b"abc", 0)),
        (lambda: os.fsync(closed), lambda: aionative.fsync(closed)),
        (lambda: os.fdatasync(closed), lambda: aionative.fdatasync(closed)),
    ]
    for sync, ours in cases:
        assert await _our_error(ours()) == _os_error(sync)


async def test_argument_errors_are_the_os_ones_word_for_word(
        data_file: tuple[Path, bytes], fd_of: Callable[..., int]) -> None:
    """A bad argument raises what os.pread / os.pwrite / os.preadv / os.fsync raise for it,
    type and message. A descriptor out of a C int's range said "fd is out of range" on every
    backend; on the threads backend a size past 64 bits said "C long" (os: "C ssize_t") and
    what is no buffer had memoryview's name in front of os's message."""
    path, _ = data_file
    rd = fd_of(path)
    big = 2 ** 70
    cases: list[tuple[Callable[[], Any], Callable[[], Awaitable[Any]]]] = [
        (lambda: os.pread(2 ** 31, 1, 0), lambda: aionative.pread(2 ** 31, 1, 0)),
        (lambda: os.pread(-2 ** 31 - 1, 1, 0), lambda: aionative.pread(-2 ** 31 - 1, 1, 0)),
        (lambda: os.pread(big, 1, 0), lambda: aionative.pread(big, 1, 0)),
        (lambda: os.pread(rd, big, 0), lambda: aionative.pread(rd, big, 0)),
        (lambda: os.pread(rd, -big, 0), lambda: aionative.pread(rd, -big, 0)),
        (lambda: os.pread(rd, 1, big), lambda: aionative.pread(rd, 1, big)),
        (lambda: os.pread(1.0, 1, 0), lambda: aionative.pread(1.0, 1, 0)),  # type: ignore[arg-type]
        (lambda: os.pread(rd, 1.0, 0), lambda: aionative.pread(rd, 1.0, 0)),  # type: ignore[arg-type]
        (lambda: os.pread(rd, 1, None), lambda: aionative.pread(rd, 1, None)),  # type: ignore[arg-type]
        (lambda: os.pwrite(big, b"x", 0), lambda: aionative.pwrite(big, b"x", 0)),
        (lambda: os.pwrite(rd, "x", 0), lambda: aionative.pwrite(rd, "x", 0)),  # type: ignore[arg-type]
        (lambda: os.pwrite(rd, 5, 0), lambda: aionative.pwrite(rd, 5, 0)),  # type: ignore[arg-type]
        (lambda: os.pwrite(rd, b"x", big), lambda: aionative.pwrite(rd, b"x", big)),
        (lambda: os.preadv(rd, ["ab"], 0), lambda: aionative.preadinto(rd, "ab", 0)),
        (lambda: os.preadv(big, [bytearray(2)], 0),
         lambda: aionative.preadinto(big, bytearray(2), 0)),
        (lambda: os.fsync(big), lambda: aionative.fsync(big)),
        (lambda: os.fsync("x"), lambda: aionative.fsync("x")),  # type: ignore[arg-type]
    ]
    for i, (sync, ours) in enumerate(cases):
        want: tuple[type, str] | None = None
        got: tuple[type, str] | None = None
        try:
            sync()
        except Exception as exc:  # noqa: BLE001
            want = (type(exc), str(exc))
        try:
            await ours()
        except Exception as exc:  # noqa: BLE001
            got = (type(exc), str(exc))
        assert want is not None and got == want, (i, got, want)


async def test_error_message_is_the_os_one(fd_of: Callable[..., int]) -> None:
    with pytest.raises(OSError) as info:
        await aionative.pread(-1, 1, 0)
    assert info.value.errno == errno.EBADF
    assert info.value.strerror == os.strerror(errno.EBADF)
    assert str(info.value) == str(OSError(errno.EBADF, os.strerror(errno.EBADF)))


async def test_pipe_positional_read(backend: str) -> None:
    """pread on a pipe: ESPIPE on every backend, as os.pread says (io_uring would read the
    stream, ignoring the offset; tests/lowlevel/test_lowlevel_streams.py covers the other
    streams)."""
    r, w = os.pipe()
    try:
        with pytest.raises(OSError) as info:
            await asyncio.wait_for(aionative.pread(r, 5, 0), 5)
        assert info.value.errno == errno.ESPIPE
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.blocks_the_loop("gathers 3 000 writes: asyncio makes their tasks in one step")
async def test_more_writes_than_the_ring_holds(tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """Buffered writes complete through kernel workers (io_uring) in bursts larger than the
    engine's capacity: every completion must wake the loop (regression: a stale 'completion
    work already ran' flag once skipped the GETEVENTS a wake-up needs, and the loop slept)."""
    fd = fd_of(tmp_path / "burst", os.O_RDWR | os.O_CREAT)
    chunks = [os.urandom(512) for _ in range(3000)]
    done = await asyncio.wait_for(
        asyncio.gather(*[aionative.pwrite(fd, c, i * 512) for i, c in enumerate(chunks)]), 60)
    assert done == [512] * 3000
    assert os.pread(fd, 3000 * 512, 0) == b"".join(chunks)


@pytest.mark.blocks_the_loop("fills and checks a 2 GiB buffer synchronously in its body")
async def test_operations_larger_than_the_kernel_limit_are_split(
        tmp_path: Path, fd_of: Callable[..., int], backend: str) -> None:
    """read/write of more than MAX_RW_COUNT (0x7ffff000) bytes in one call: os.pread would stop
    at the limit; aionative continues across it."""
    if asyncio.get_running_loop().__class__.__module__.startswith("uvloop"):
        pytest.skip("memory-heavy: run once, on the asyncio loop")
    from aionative._compat import KERNEL_RW_MAX
    size = KERNEL_RW_MAX + (3 << 20) + 5
    path = tmp_path / "huge"
    fd = fd_of(path, os.O_RDWR | os.O_CREAT)
    marks = {0: b"start", KERNEL_RW_MAX - 3: b"across", size - 4: b"end!"}
    buf = bytearray(size)
    for off, m in marks.items():
        buf[off:off + len(m)] = m
    try:
        assert await aionative.pwrite(fd, buf, 0) == size
        assert os.fstat(fd).st_size == size
        for off, m in marks.items():
            assert os.pread(fd, len(m), off) == m
        del buf
        got = await aionative.pread(fd, size + 100, 0)
        assert len(got) == size
        for off, m in marks.items():
            assert got[off:off + len(m)] == m
        del got
        if backend != "threads":
            assert aionative.engine_stats()["splits"] >= 2
    finally:
        os.ftruncate(fd, 0)
