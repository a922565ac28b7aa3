"""The low-level reads of pseudo-files: ``aionative.pread`` and ``preadinto`` return what
``os.pread`` returns, on every backend and loop, without reading on the loop's thread.

Linux AIO's ``io_submit`` refuses a file whose driver has no ``read_iter`` with EINVAL (procfs's
seq files: ``/proc/kallsyms``, ``/proc/self/cmdline``, ``/proc/self/maps``), where pread(2)
reads it. Such a read is asked of ``os.pread`` in a worker thread (it may wait: a maps file for
the process's memory map lock)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import aionative

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend")]

# Files whose bytes do not change while a test reads them.
STABLE = ["/proc/kallsyms", "/proc/self/cmdline", "/proc/self/environ"]


def _opened(path: str) -> Iterator[int]:
    try:
        fd = os.open(path, os.O_RDONLY)
        os.pread(fd, 1, 0)
    except OSError as exc:
        pytest.skip(f"{path} cannot be read here: {exc}")
    try:
        yield fd
    finally:
        os.close(fd)


@pytest.fixture(params=STABLE)
def procfs_fd(request: pytest.FixtureRequest) -> Iterator[int]:
    yield from _opened(request.param)


@pytest.fixture
def reads_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``os.pread``/``os.preadv`` record the thread each call that may wait runs in (not a
    ``RWF_NOWAIT`` attempt): none may be the loop's (the test's) thread."""
    threads: list[int] = []
    for name in ("pread", "preadv"):
        real = getattr(os, name)

        def record(*args: Any, _real: Any = real) -> Any:
            if not (len(args) > 3 and args[3] & getattr(os, "RWF_NOWAIT", 0)):
                threads.append(threading.get_ident())
            return _real(*args)

        monkeypatch.setattr(os, name, record)
    return threads


async def test_pread_of_a_procfs_file_returns_what_os_pread_returns(
        procfs_fd: int, reads_off_the_loop: list[int]) -> None:
    """Before, on Linux AIO: OSError(EINVAL) where os.pread returned the bytes."""
    loop_thread = threading.get_ident()
    for size, offset in ((100, 0), (1, 0), (4096, 0), (65536, 0), (300, 4000), (10, 1 << 30)):
        want = os.pread(procfs_fd, size, offset)
        assert await aionative.pread(procfs_fd, size, offset) == want, (size, offset)
        buf = bytearray(size)
        n = await aionative.preadinto(procfs_fd, buf, offset)
        assert bytes(buf[:n]) == want, (size, offset)
    got = await asyncio.gather(*(aionative.pread(procfs_fd, 200, i * 100) for i in range(20)))
    assert got == [os.pread(procfs_fd, 200, i * 100) for i in range(20)]
    del reads_off_the_loop[:]  # (the test's own os.pread calls, above)
    await aionative.pread(procfs_fd, 100, 0)
    assert loop_thread not in reads_off_the_loop


async def test_pread_of_a_maps_file_reads_its_first_mapping() -> None:
    """``/proc/self/maps`` changes as the process maps memory: its first line does not."""
    for fd in _opened("/proc/self/maps"):
        first = os.pread(fd, 4096, 0).split(b"\n", 1)[0]
        got = await aionative.pread(fd, 4096, 0)
        assert got.split(b"\n", 1)[0] == first


async def test_a_cancelled_preadinto_of_a_procfs_file_lets_go_of_the_buffer(
        procfs_fd: int, backend: str) -> None:
    """The call ends, cancelled, once nothing reads into the caller's buffer any more: the
    bytearray can be resized right after."""
    for turns in range(4):
        buf = bytearray(4096)
        task = asyncio.ensure_future(aionative.preadinto(procfs_fd, buf, 0))
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        buf.extend(b"x")  # BufferError while the buffer is still exported
        assert len(buf) == 4097


async def test_the_errors_of_a_procfs_read_are_os_preads(procfs_fd: int) -> None:
    for args in ((procfs_fd, -1, 0), (procfs_fd, 1, -1)):
        with pytest.raises(OSError) as expected:
            os.pread(*args)
        with pytest.raises(OSError) as raised:
            await aionative.pread(*args)
        assert (type(raised.value), raised.value.errno, str(raised.value)) == (
            type(expected.value), expected.value.errno, str(expected.value))
