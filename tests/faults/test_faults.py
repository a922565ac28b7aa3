"""Injected kernel faults at the engine's boundaries (aionative._core.set_fault): each ends in a
transparent retry or continuation, or a clear OSError for the awaiting caller — never a hang,
a lost completion, or a write reported complete that was not."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

import aionative
from aionative import _core, _kernelops

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("native_backend", "ring_only")]


def _within(coro: object) -> object:
    return asyncio.wait_for(coro, 20)  # type: ignore[arg-type]


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
async def test_completion_error_reaches_the_caller(data_file: tuple[Path, bytes],
                                                   fd_of: Callable[..., int], err: int) -> None:
    path, data = data_file
    fd = fd_of(path)
    aionative.get_engine()
    _core.set_fault("completion", err, 1)
    with pytest.raises(OSError) as info:
        await _within(aionative.pread(fd, 100, 0))
    assert info.value.errno == err
    assert await _within(aionative.pread(fd, 100, 0)) == data[:100]  # and it carries on


@pytest.mark.parametrize("err", [errno.EINTR, errno.EAGAIN, errno.ECANCELED])
async def test_interrupted_completions_are_retried(data_file: tuple[Path, bytes],
                                                   fd_of: Callable[..., int], err: int) -> None:
    path, data = data_file
    fd = fd_of(path)
    before = aionative.engine_stats()["retries"]
    _core.set_fault("completion", err, 3)
    assert await _within(aionative.pread(fd, 5000, 10)) == data[10:5010]
    assert aionative.engine_stats()["retries"] - before >= 3


@pytest.mark.parametrize("err", [errno.EINTR, errno.ECANCELED])
async def test_endless_interruptions_reach_the_caller(data_file: tuple[Path, bytes],
                                                      fd_of: Callable[..., int],
                                                      err: int) -> None:
    """Retries are bounded: a completion that keeps failing so is reported, never a hang."""
    path, data = data_file
    fd = fd_of(path)
    aionative.get_engine()
    _core.set_fault("completion", err, -1)
    try:
        with pytest.raises(OSError) as info:
            await _within(aionative.pread(fd, 100, 0))
    finally:
        _core.clear_faults()
    assert info.value.errno == err
    assert await _within(aionative.pread(fd, 100, 0)) == data[:100]


async def test_short_writes_continue(tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = fd_of(tmp_path / "w", os.O_RDWR | os.O_CREAT)
    payload = os.urandom(100_000)
    before = aionative.engine_stats()["retries"]
    _core.set_fault("short", 0, 5)  # the next 5 transfers move half of what they did
    assert await _within(aionative.pwrite(fd, payload, 0)) == len(payload)
    assert os.pread(fd, len(payload) + 10, 0) == payload
    assert aionative.engine_stats()["retries"] - before == 5  # five continuations happened


async def test_write_error_after_partial_progress_says_how_much(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = fd_of(tmp_path / "w", os.O_RDWR | os.O_CREAT)
    payload = os.urandom(64_000)
    aionative.get_engine()
    _core.set_fault("short", 0, 1)                         # first piece: half written
    _core.set_fault("completion", errno.ENOSPC, 1, 1)      # the continuation: ENOSPC
    with pytest.raises(OSError) as info:
        await _within(aionative.pwrite(fd, payload, 0))
    assert info.value.errno == errno.ENOSPC
    written = info.value.characters_written
    assert 0 < written < len(payload)
    assert os.pread(fd, written, 0) == payload[:written]


@pytest.mark.parametrize("err", [errno.EAGAIN, errno.EBUSY, errno.EINTR])
async def test_submission_refused_then_accepted(native_backend: str, data_file: tuple[Path, bytes],
                                                fd_of: Callable[..., int], err: int) -> None:
    path, data = data_file
    fd = fd_of(path)
    aionative.get_engine()
    point = "io_uring_enter" if native_backend == "io_uring" else "io_submit"
    if point == "io_submit" and err == errno.EBUSY:
        pytest.skip("io_submit(2) never fails with EBUSY (it would be the first iocb's error)")
    _core.set_fault(point, err, 3)  # refused (short of resources, interrupted), three times
    got = await _within(asyncio.gather(*[aionative.pread(fd, 4096, i * 4096) for i in range(64)]))
    assert got == [data[i * 4096:(i + 1) * 4096] for i in range(64)]


async def test_short_reads_are_not_end_of_file(tmp_path: Path,
                                              fd_of: Callable[..., int]) -> None:
    """A read completion that moves fewer bytes than asked (as a signal, FUSE or a network
    filesystem may make it) before the end of the file: ``pread`` returns that prefix, as
    ``os.pread`` would; the file API reads on from where it stopped, as the builtin's loops
    do — it is not the end of the file."""
    path = tmp_path / "f"
    data = os.urandom(200_000)
    path.write_bytes(data)
    fd = fd_of(path)
    _core.set_fault("short", 0, 1)
    got = await _within(aionative.pread(fd, 8192, 0))
    assert 0 < len(got) <= 8192 and got == data[:len(got)]
    for size in (-1, 100_000, 150_001):
        _core.set_fault("short", 0, 3)
        async with aionative.open(path, "rb") as f:
            assert await _within(f.read(size)) == data[:size if size >= 0 else None]
    text = "".join(f"line {i}\n" for i in range(20_000))
    path.write_text(text)
    _core.set_fault("short", 0, 3)
    async with aionative.open(path, encoding="ascii") as f:
        assert [line async for line in f] == text.splitlines(keepends=True)
    _core.set_fault("short", 0, 3)
    async with aionative.open(path, "rb", buffering=0) as f:
        assert await _within(f.read()) == text.encode()


async def test_partial_acceptance_submits_the_rest(native_backend: str,
                                                  data_file: tuple[Path, bytes],
                                                  fd_of: Callable[..., int]) -> None:
    """io_uring_enter / io_submit accepting only the first entry of a batch, five calls in a
    row: the rest stay queued and go on the next calls (io_submit's loop, or the flush the
    engine schedules for a ring that kept entries) — every read completes with its data."""
    path, data = data_file
    fd = fd_of(path)
    eng = aionative.get_engine()
    point = "io_uring_enter" if native_backend == "io_uring" else "io_submit"
    before = eng.stats()
    _core.set_fault(point, 0, 5)  # errno 0: accept the first entry only
    got = await _within(asyncio.gather(*[aionative.pread(fd, 4096, i * 4096) for i in range(64)]))
    assert got == [data[i * 4096:(i + 1) * 4096] for i in range(64)]
    st = eng.stats()
    assert st["batches"] - before["batches"] >= 6  # five single-entry calls, then the rest
    assert st["in_flight"] == 0


async def test_fatal_submission_error_fails_the_batch_not_the_engine(
        native_backend: str, data_file: tuple[Path, bytes], fd_of: Callable[..., int]) -> None:
    path, data = data_file
    fd = fd_of(path)
    aionative.get_engine()
    # (Not EINVAL on Linux AIO: a read io_submit refuses with EINVAL is read by os.pread in a
    # worker instead, as procfs's seq files need; the batch would not fail.)
    point, err = (("io_uring_enter", errno.EBADF) if native_backend == "io_uring"
                  else ("io_submit", errno.EBADF))
    _core.set_fault(point, err, 1)
    results = await _within(asyncio.gather(
        *[aionative.pread(fd, 4096, i * 4096) for i in range(8)], return_exceptions=True))
    failed = [r for r in results if isinstance(r, OSError)]
    assert failed and all(r.errno == err for r in failed)
    assert all(r == data[i * 4096:(i + 1) * 4096] for i, r in enumerate(results)
               if not isinstance(r, BaseException))
    assert await _within(aionative.pread(fd, 10, 0)) == data[:10]


@pytest.mark.parametrize("kind", ["read", "write"])
async def test_a_call_cancelled_while_its_submission_is_refused_never_reaches_the_kernel(
        native_backend: str, tmp_path: Path, kind: str) -> None:
    """A ``pread``/``pwrite`` cancelled while the kernel refuses its submission for the moment
    (``EAGAIN``) is taken back: the kernel never sees it. Its descriptor is closed and the
    number goes to another file while the kernel still refuses; the next accepted submission
    must not read or write that one. (Before, the piece stayed prepared and ran on whatever held the number: a
    socket's bytes were read, another file was written.)"""
    point = "io_uring_enter" if native_backend == "io_uring" else "io_submit"
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    aionative.set_inline_budget(0)  # to the kernel queue
    try:
        for _ in range(20):
            fd = os.open(path, os.O_RDONLY if kind == "read" else os.O_WRONLY)
            call = (aionative.pread(fd, 4096, 0) if kind == "read"
                    else aionative.pwrite(fd, b"payload", 0))
            task = asyncio.ensure_future(call)
            await asyncio.sleep(0)  # prepared; the iteration's submission has not run
            before = aionative.engine_stats()
            _core.set_fault(point, errno.EAGAIN, -1)  # refused until cleared
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            os.close(fd)
            if kind == "read":
                a, b = socket.socketpair()
                other = a.fileno()
            else:
                other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            try:
                if other != fd:
                    continue
                if kind == "read":
                    b.sendall(b"secret")
                await asyncio.sleep(0.01)  # refused submissions
                _core.clear_faults()
                for _ in range(5):  # and accepted ones
                    await asyncio.sleep(0.01)
                if kind == "read":
                    a.setblocking(False)
                    assert a.recv(100) == b"secret"
                else:
                    assert os.pread(other, 100, 0) == b""
                    assert path.read_bytes() == b"x" * 8192
                stats = aionative.engine_stats()
                assert stats["withdrawn"] == before["withdrawn"] + 1, stats
                assert stats["in_flight"] == 0, stats
                return
            finally:
                _core.clear_faults()
                if kind == "read":
                    a.close()
                    b.close()
                else:
                    os.close(other)
        pytest.fail("the descriptor's number never went to the next file")
    finally:
        aionative.set_inline_budget(None)


@pytest.mark.parametrize("entries", [1, 4])
async def test_tiny_queues_lose_nothing(native_backend: str, data_file: tuple[Path, bytes],
                                        fd_of: Callable[..., int], entries: int) -> None:
    """A ring (or AIO context) of 1 or 4 entries under 2000 concurrent reads and writes: the
    completion queue never overflows into loss — what does not fit waits in user space — and
    every operation completes with the right result."""
    path, data = data_file
    fd = fd_of(path)
    loop = asyncio.get_running_loop()
    eng = _core.Engine(native_backend, loop, entries)  # type: ignore[arg-type]
    loop.add_reader(eng.fileno(), eng._on_ready)
    try:
        n = 2000
        offsets = [(i * 512) % (len(data) - 512) for i in range(n)]
        reads = [eng.pread(fd, 512, off) for off in offsets]
        got = await _within(asyncio.gather(*reads))
        assert got == [data[off:off + 512] for off in offsets]
        st = eng.stats()
        assert st["queued"] > 0            # most had to wait for room
        assert st["completed"] >= n and st["in_flight"] == 0
    finally:
        loop.remove_reader(eng.fileno())
        eng.close()


async def _close_unrun(fd: int, count: int) -> dict[str, int]:
    """Close ``fd`` through the engine while its next ``count`` closes come back -ECANCELED
    without closing anything (as io-wq answers a close it gave up on before a worker ran it);
    the engine's counters moved meanwhile."""
    before = aionative.engine_stats()
    _core.set_fault("close_unrun", errno.ECANCELED, count)
    try:
        await _within(_kernelops.close_fd(fd))
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        os.close(fd)
        pytest.skip("this kernel's NOP cannot answer an injected result (Linux 6.11)")
    finally:
        _core.clear_faults()
    after = aionative.engine_stats()
    return {k: after[k] - before[k] for k in ("retries", "async_closes")}


def _is_closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        return exc.errno == errno.EBADF
    return False


@pytest.fixture
def large_fd(native_backend: str, tmp_path: Path) -> int:
    """A descriptor of a 1 MiB file (its close goes to an io-wq worker), io_uring only."""
    if native_backend != "io_uring":
        pytest.skip("Linux AIO has no close: the executor closes")
    path = tmp_path / "large"
    path.write_bytes(b"x" * (1 << 20))
    return os.open(path, os.O_RDONLY)


async def test_a_close_io_wq_gave_up_on_is_sent_again(large_fd: int) -> None:
    """The descriptor is still open after such an answer: the close goes again, inside the
    submitting call (a worker that could not be had may not be had again), until it runs."""
    moved = await _close_unrun(large_fd, 3)
    assert _is_closed(large_fd)
    assert moved == {"retries": 3, "async_closes": 1}


async def test_a_close_io_wq_keeps_giving_up_on_is_closed_all_the_same(large_fd: int) -> None:
    """Past the engine's retries, the descriptor is closed by close(2) itself: a close is never
    reported done (or abandoned by its caller) with the descriptor left open."""
    moved = await _close_unrun(large_fd, -1)
    assert _is_closed(large_fd)
    assert moved["retries"] == 16


async def test_a_cancelled_close_ends_with_the_descriptor_closed(large_fd: int) -> None:
    """A close is never taken back: its cancelled caller goes on once the descriptor is
    closed, whatever io-wq answered meanwhile."""
    _core.set_fault("close_unrun", errno.ECANCELED, -1)
    try:
        task = asyncio.ensure_future(_kernelops.close_fd(large_fd))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await _within(task)
    finally:
        _core.clear_faults()
    assert _is_closed(large_fd)
