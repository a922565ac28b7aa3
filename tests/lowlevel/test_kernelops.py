"""Path and descriptor operations against the os functions they stand for: results, errors
(type, errno, filenames), and no descriptor leaked by a cancelled open."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _kernelops as k

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend")]


def _err(fn: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        fn()
    except OSError as e:
        return type(e), e.errno, e.strerror, e.filename, e.filename2
    raise AssertionError("expected OSError")


async def _aerr(coro: Awaitable[Any]) -> tuple[Any, ...]:
    try:
        await coro
    except OSError as e:
        return type(e), e.errno, e.strerror, e.filename, e.filename2
    raise AssertionError("expected OSError")


async def test_uses_the_kernel_on_io_uring(backend: str) -> None:
    """io_uring runs the path operations in the kernel; Linux AIO makes the opens that create
    or truncate in its writer threads and has no other; the threads backend has none of the
    engine's."""
    eng = aionative.get_engine()
    supports = getattr(eng, "supports", lambda name, flags=0: False)
    others = ("close", "statx", "unlinkat", "renameat", "mkdirat", "symlinkat", "linkat",
              "fallocate")
    writing = (os.O_WRONLY | os.O_CREAT, os.O_RDWR | os.O_TRUNC)
    if backend == "io_uring":
        assert all(supports(n) for n in ("openat", *others))
        assert all(supports("openat", f) for f in (os.O_RDONLY, *writing))
    else:
        assert all(supports("openat", f) is (backend == "linux_aio") for f in writing)
        assert not supports("openat") and not supports("openat", os.O_RDWR | os.O_APPEND)
        assert not any(supports(n) for n in others)


async def test_open_close_stat_match_os(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    fd = await k.open_fd(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o640)
    try:
        assert not os.get_inheritable(fd)  # as os.open makes it
        assert await aionative.pwrite(fd, b"hello world", 0) == 11
        for p in (path, str(path), bytes(path)):
            assert await k.stat(p) == os.stat(p)
        assert await k.fstat(fd) == os.fstat(fd)
        st = await k.stat(path)
        assert st.st_mode & 0o777 == 0o640 and st.st_size == 11
        await k.ftruncate(fd, 3)
        assert os.fstat(fd).st_size == 3
        await k.posix_fallocate(fd, 0, 65536)
        assert os.fstat(fd).st_size == 65536
    finally:
        await k.close_fd(fd)
    assert _err(lambda: os.fstat(fd))[:2] == (OSError, 9)


async def test_lstat_and_symlinks(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x")
    link = tmp_path / "link"
    await k.symlink(target, link)
    assert os.readlink(link) == str(target)
    assert await k.stat(link, follow_symlinks=False) == os.lstat(link)
    assert await k.stat(link) == os.stat(link)
    hard = tmp_path / "hard"
    await k.link(target, hard)
    assert os.stat(hard).st_ino == os.stat(target).st_ino
    await k.unlink(link)
    assert not link.exists()


async def test_directories_and_rename(tmp_path: Path) -> None:
    d = tmp_path / "d"
    await k.mkdir(d, 0o750)
    assert d.is_dir() and (os.stat(d).st_mode & 0o777) == (0o750 & ~_umask())
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        await k.rename("d", "e", src_dir_fd=dirfd, dst_dir_fd=dirfd)
        assert (tmp_path / "e").is_dir()
        (tmp_path / "e" / "f").write_bytes(b"1")
        await k.replace(tmp_path / "e" / "f", tmp_path / "g")
        assert (tmp_path / "g").read_bytes() == b"1"
        await k.rmdir("e", dir_fd=dirfd)
        assert not (tmp_path / "e").exists()
    finally:
        os.close(dirfd)


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


async def test_errors_match_os(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    (tmp_path / "exists").write_bytes(b"")
    (tmp_path / "adir").mkdir()
    cases: list[tuple[Callable[[], Any], Callable[[], Awaitable[Any]]]] = [
        (lambda: os.open(missing, os.O_RDONLY), lambda: k.open_fd(missing, os.O_RDONLY)),
        (lambda: os.open(str(tmp_path / "exists"), os.O_CREAT | os.O_EXCL),
         lambda: k.open_fd(str(tmp_path / "exists"), os.O_CREAT | os.O_EXCL)),
        (lambda: os.stat(missing), lambda: k.stat(missing)),
        (lambda: os.stat(bytes(missing)), lambda: k.stat(bytes(missing))),
        (lambda: os.unlink(missing), lambda: k.unlink(missing)),
        (lambda: os.unlink(tmp_path / "adir"), lambda: k.unlink(tmp_path / "adir")),
        (lambda: os.rmdir(tmp_path / "exists"), lambda: k.rmdir(tmp_path / "exists")),
        (lambda: os.mkdir(tmp_path / "adir"), lambda: k.mkdir(tmp_path / "adir")),
        (lambda: os.rename(missing, tmp_path / "x"), lambda: k.rename(missing, tmp_path / "x")),
        (lambda: os.link(missing, tmp_path / "y"), lambda: k.link(missing, tmp_path / "y")),
        (lambda: os.symlink("t", tmp_path / "exists"),
         lambda: k.symlink("t", tmp_path / "exists")),
        (lambda: os.fstat(-1), lambda: k.fstat(-1)),
        (lambda: os.close(-1), lambda: k.close_fd(-1)),
        (lambda: os.ftruncate(-1, 0), lambda: k.ftruncate(-1, 0)),
    ]
    for sync, ours in cases:
        assert await _aerr(ours()) == _err(sync)



@pytest.mark.parametrize("bad", ["a\0b", b"a\0b"], ids=["str", "bytes"])
async def test_a_null_in_a_path_raises_the_builtins_own_words(tmp_path: Path,
                                                              bad: str | bytes) -> None:
    ok = os.fsencode(tmp_path / "ok") if isinstance(bad, bytes) else str(tmp_path / "ok")
    cases = [
        (lambda: os.stat(bad), lambda: k.stat(bad)),
        (lambda: os.stat(bad, follow_symlinks=False), lambda: k.stat(bad, follow_symlinks=False)),
        (lambda: os.open(bad, os.O_RDONLY), lambda: k.open_fd(bad, os.O_RDONLY)),
        (lambda: os.unlink(bad), lambda: k.unlink(bad)),
        (lambda: os.rmdir(bad), lambda: k.rmdir(bad)),
        (lambda: os.mkdir(bad), lambda: k.mkdir(bad)),
        (lambda: os.rename(bad, ok), lambda: k.rename(bad, ok)),
        (lambda: os.rename(ok, bad), lambda: k.rename(ok, bad)),
        (lambda: os.link(ok, bad), lambda: k.link(ok, bad)),
        (lambda: os.symlink(ok, bad), lambda: k.symlink(ok, bad)),
    ]
    for sync, ours in cases:
        with pytest.raises(ValueError) as theirs:
            sync()
        with pytest.raises(ValueError) as mine:
            await ours()
        assert str(mine.value) == str(theirs.value)


async def _no_descriptor_left(before: int) -> None:
    """Once the engine has nothing in flight (abandoned operations finish in the kernel, and
    what they opened is closed) and the executor's calls have returned, no more descriptors
    are open than ``before``."""
    for _ in range(200):
        if aionative.engine_stats()["in_flight"] == 0:
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)  # executor-side opens and closes (non-io_uring) may still return
    assert len(os.listdir("/proc/self/fd")) <= before


async def test_cancelled_opens_leak_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "c"
    path.write_bytes(b"x")
    aionative.get_engine()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        tasks = [asyncio.ensure_future(k.open_fd(path, os.O_RDONLY)) for _ in range(50)]
        await asyncio.sleep(0)
        for t in tasks[::2]:
            t.cancel()
        for r in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(r, int):
                os.close(r)
    await _no_descriptor_left(before)


@pytest.mark.parametrize("turns", [0, 1, 2])
async def test_cancelled_opens_for_writing_leak_no_descriptor(tmp_path: Path, turns: int) -> None:
    """Opens that create and truncate go to the engine (a kernel worker on io_uring, a writer
    thread on Linux AIO) and are awaited without a shield: cancelled before, during or after the kernel opened the file — including
    a descriptor delivered to a task cancelled before it resumed — none is left open."""
    aionative.get_engine()
    before = len(os.listdir("/proc/self/fd"))
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for round_ in range(10):
        tasks = [asyncio.ensure_future(k.open_fd(tmp_path / f"w{round_}-{i}", flags))
                 for i in range(40)]
        for _ in range(turns):
            await asyncio.sleep(0)
        for t in tasks[round_ % 2::2]:
            t.cancel()
        for r in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(r, int):
                os.close(r)
    await _no_descriptor_left(before)


async def test_cancelled_closes_still_close(tmp_path: Path) -> None:
    """A close whose caller is cancelled runs all the same, as ``os.close`` leaves no
    descriptor open whatever happens (and a file object counts its descriptor closed): on
    io_uring a large file's close waits for an io-wq worker, and is not cancelled there; in
    the executor, a close no worker has taken yet runs anyway."""
    big, small = tmp_path / "big", tmp_path / "small"
    big.write_bytes(bytes(1 << 20))
    small.write_bytes(b"x")
    aionative.get_engine()
    before = len(os.listdir("/proc/self/fd"))
    for turns in range(30):
        fds = [os.open(big if i % 2 else small, os.O_WRONLY) for i in range(50)]
        tasks = [asyncio.ensure_future(k.close_fd(fd)) for fd in fds]
        for _ in range(1 + turns % 3):  # cancelled one to three turns after they were asked
            await asyncio.sleep(0)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await _no_descriptor_left(before)


async def test_a_cancelled_open_relative_to_a_directory_ends_once_the_kernel_is_done(
        tmp_path: Path) -> None:
    """(The engine's open as the package's own code calls it, ``_kernelops.open_fd``.) The
    kernel resolves ``dir_fd`` by its number when the open runs: a caller whose open
    was cancelled may close that directory at once, and the number be reused. So a cancelled
    open ends only once the kernel is done with it (created files are opened in io_uring's
    workers, where the cancellation may find them running)."""
    eng = aionative.get_engine()
    if not getattr(eng, "supports", lambda name, flags=0: False)("openat", os.O_CREAT):
        pytest.skip("opens run in the executor on this backend")
    d = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(200):
            task = asyncio.ensure_future(
                k.open_fd(f"n{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, dir_fd=d))
            await asyncio.sleep(0)  # submitted
            task.cancel()
            try:
                os.close(await task)
            except asyncio.CancelledError:
                assert aionative.engine_stats()["in_flight"] == 0
    finally:
        os.close(d)
