"""Buffered writes done inline: a ``pwrite`` to a local regular file is copied into the page
cache inside the call, under the inline budget, instead of through the kernel queue (io_uring
hands each to an io-wq worker, Linux AIO copies it inside ``io_submit``).

What may wait goes to the queue as before: O_DIRECT / O_SYNC / O_DSYNC descriptors, anything
not a regular file, a descriptor that cannot write (the queue reports the error). A write that
stops partway is finished by the queue; a write that slept (a stall) sends writes to the queue
for a while. The threads backend has no inline write: its ``write`` is ``pwrite``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _core, _threads
from aionative import _kernelops as _k

pytestmark = pytest.mark.asyncio


def delta(before: dict[str, int], key: str) -> int:
    return aionative.engine_stats()[key] - before[key]


@pytest.fixture
def wide_budget() -> Any:
    """A budget no test can spend (1 s): inline counts stay exact on a preempted machine."""
    aionative.set_inline_budget(1e6)
    yield
    aionative.set_inline_budget(None)


@pytest.fixture
def tiny_budget() -> Any:
    """A 1 µs budget: the first call of an iteration spends it (see spend_the_budget)."""
    aionative.set_inline_budget(1)
    yield
    aionative.set_inline_budget(None)


def spend_the_budget(fd: int, data: bytes = b"z") -> None:
    """Open this iteration's inline window with a write of ``data`` at 0, then let its 1 µs
    run out."""
    assert aionative.get_engine().write(fd, data, 0) == len(data)
    time.sleep(0.001)


def rw_fd(fd_of: Callable[..., int], path: Path, extra: int = 0) -> int:
    return fd_of(path, os.O_RDWR | os.O_CREAT | extra)


async def test_a_write_to_a_local_file_completes_inside_the_call(
        native_backend: str, wide_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    fd = rw_fd(fd_of, tmp_path / "w")
    eng = aionative.get_engine()
    data = os.urandom(10_000)
    assert eng.write(fd, data, 0) == len(data)        # first of the iteration: the mount,
    before = eng.stats()                               # the thread's sleeps counted
    assert eng.write(fd, memoryview(data)[:100], 20_000) == 100
    # pwrite alone: fcntl and statx were asked once this iteration (3 calls without that; a
    # preemption after the write may add a getrusage, see inline_write)
    assert delta(before, "syscalls") < 3
    assert delta(before, "inline_writes") == 1 and delta(before, "submitted") == 0
    assert await aionative.pwrite(fd, b"xyz", 5) == 3
    assert delta(before, "submitted") == 0 and delta(before, "inline_writes") == 2
    await asyncio.sleep(0)                             # a new iteration: asked again
    costs = []
    for off in (20_100, 20_101):
        before = eng.stats()
        assert eng.write(fd, b"q", off) == 1
        costs.append(delta(before, "syscalls"))
    assert costs[0] >= 3 and costs[1] < 3, costs      # fcntl, statx, …, pwrite; pwrite
    expect = data[:5] + b"xyz" + data[8:] + bytes(10_000) + data[:100] + b"qq"
    assert os.pread(fd, 30_200, 0) == expect


async def test_a_write_over_64_kib_goes_to_the_queue(
        native_backend: str, wide_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """Its copy outweighs the hand-off; the kernel's worker keeps it off the loop's turn."""
    fd = rw_fd(fd_of, tmp_path / "w")
    eng = aionative.get_engine()
    assert eng.write(fd, bytes(64 << 10), 0) == 64 << 10
    data = os.urandom((64 << 10) + 1)
    fut = eng.write(fd, data, 1)
    assert isinstance(fut, asyncio.Future) and await fut == len(data)
    assert os.pread(fd, len(data) + 1, 0) == b"\0" + data


async def test_a_write_to_tmpfs_is_inline_too(native_backend: str, wide_budget: None,
                                              fd_of: Callable[..., int]) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    path = Path("/dev/shm") / f"aionative-test-{os.getpid()}"
    fd = rw_fd(fd_of, path)
    try:
        before = aionative.engine_stats()
        assert await aionative.pwrite(fd, b"hello", 3) == 5
        assert delta(before, "inline_writes") == 1 and delta(before, "submitted") == 0
        assert os.pread(fd, 10, 0) == b"\0\0\0hello"
    finally:
        path.unlink()


@pytest.mark.parametrize("flag", ["O_SYNC", "O_DSYNC", "O_DIRECT"])
async def test_writes_that_wait_for_the_device_go_to_the_queue(
        native_backend: str, wide_budget: None, tmp_path: Path, fd_of: Callable[..., int],
        flag: str) -> None:
    try:
        fd = rw_fd(fd_of, tmp_path / "w", getattr(os, flag))
    except OSError as exc:  # O_DIRECT on a filesystem without it
        pytest.skip(f"{flag}: {exc}")
    data = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
    data.write(os.urandom(4096))
    eng = aionative.get_engine()
    before = eng.stats()
    fut = eng.write(fd, data, 4096)
    assert isinstance(fut, asyncio.Future)
    assert await fut == 4096
    assert delta(before, "inline_writes") == 0 and delta(before, "submitted") >= 1
    assert os.pread(fd_of(tmp_path / "w"), 4096, 4096) == data[:]


async def test_a_descriptor_that_cannot_write_gets_the_queue_and_its_error(
        native_backend: str, wide_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """The queue reports what ``os.pwrite`` says (EBADF); nothing is written inline."""
    (tmp_path / "r").write_bytes(b"abc")
    rdonly = fd_of(tmp_path / "r", os.O_RDONLY)
    before = aionative.engine_stats()
    with pytest.raises(OSError) as want:
        os.pwrite(rdonly, b"x", 0)
    with pytest.raises(OSError) as got:
        await aionative.pwrite(rdonly, b"x", 0)
    assert type(got.value) is type(want.value)
    assert got.value.errno == want.value.errno == errno.EBADF
    assert delta(before, "inline_writes") == 0 and delta(before, "submitted") == 1
    assert delta(before, "inline_misses") == 0     # not even tried: its flags said so
    assert (tmp_path / "r").read_bytes() == b"abc"


async def test_a_fifo_is_not_written_inline(native_backend: str, wide_budget: None,
                                            tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """Not a regular file: its write could wait for a reader. The engine's write queues it."""
    os.mkfifo(tmp_path / "fifo")
    fifo = fd_of(tmp_path / "fifo", os.O_RDWR | os.O_NONBLOCK)
    eng = aionative.get_engine()
    before = eng.stats()
    fut = eng.write(fifo, b"x", 0)
    assert isinstance(fut, asyncio.Future)
    with contextlib.suppress(OSError):  # (the queue writes it: os.pwrite would say ESPIPE)
        await fut
    assert delta(before, "inline_writes") == 0
    assert delta(before, "inline_misses") == 0   # not even tried (pwrite would fail: ESPIPE)


async def test_a_spent_budget_makes_a_write_wait_a_turn(
        native_backend: str, tiny_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """False (nothing written) once the iteration's budget is spent; ``pwrite`` then yields a
    turn and writes inline as a retry, not through the queue."""
    fd = rw_fd(fd_of, tmp_path / "w")
    eng = aionative.get_engine()
    await asyncio.sleep(0)
    spend_the_budget(fd, b"a")
    assert eng.write(fd, b"b", 1) is False
    assert os.pread(fd, 10, 0) == b"a"
    before = eng.stats()
    assert await aionative.pwrite(fd, b"cd", 1) == 2
    assert delta(before, "submitted") == 0 and delta(before, "inline_writes") == 1
    assert delta(before, "inline_retries") == 1
    assert os.pread(fd, 10, 0) == b"acd"


async def test_a_write_waiting_for_its_turn_can_be_cancelled(
        native_backend: str, tiny_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    fd = rw_fd(fd_of, tmp_path / "w")
    await asyncio.sleep(0)
    spend_the_budget(fd, b"a")
    coro = aionative.pwrite(fd, b"b", 1)
    assert coro.send(None) is None   # refused: it waits a turn (a bare yield)
    with pytest.raises(asyncio.CancelledError):
        coro.throw(asyncio.CancelledError())
    await asyncio.sleep(0.01)
    assert os.pread(fd, 10, 0) == b"a"   # never written


async def test_a_write_refused_again_after_its_turn_waits_in_the_refused_queue(
        native_backend: str, tiny_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """A ``pwrite`` whose retry after the turn finds the iteration past the grace too waits in
    the queue of refused calls, which writes it on a later turn (not the kernel queue)."""
    fd = rw_fd(fd_of, tmp_path / "w")
    eng = aionative.get_engine()
    await asyncio.sleep(0)
    spend_the_budget(fd, b"a")
    call = aionative.pwrite(fd, b"b", 1)
    assert call.send(None) is None   # refused: it waits a turn (a bare yield)
    before = eng.stats()

    async def retried_late() -> int:
        spend_the_budget(fd, b"a")   # this turn's window: spent, and past the 4 µs grace
        return await call            # the retry is refused again

    assert await asyncio.ensure_future(retried_late()) == 1
    assert delta(before, "inline_retries") == 1 and delta(before, "retries_refused") == 1
    assert delta(before, "submitted") == 0 and delta(before, "inline_writes") == 2
    assert os.pread(fd, 10, 0) == b"ab"


async def test_a_write_from_the_refused_queue_is_a_count_not_a_descriptor(
        native_backend: str, tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """A caller cancelled after the queue of refused calls ran its write: the count it got is
    not closed as if it were a descriptor (open_cached's and read_file's ints are)."""
    fd = rw_fd(fd_of, tmp_path / "w")
    sentinel = fd_of(tmp_path / "s", os.O_RDWR | os.O_CREAT)
    eng = aionative.get_engine()
    task = asyncio.ensure_future(_k.refused_queue(eng, "write", fd, bytes(sentinel), 0))
    await asyncio.sleep(0)                                 # queued; the drain is scheduled
    asyncio.get_running_loop().call_soon(task.cancel)     # runs after the drain wrote it
    with pytest.raises(asyncio.CancelledError):
        await task
    assert os.fstat(sentinel)                              # still open
    assert os.pread(fd, sentinel + 1, 0) == bytes(sentinel)


async def test_a_caller_cancelled_after_the_refused_queue_queued_its_write_waits_for_it(
        tmp_path: Path, fd_of: Callable[..., int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue of refused calls ran a write that the engine queued, from the caller's
    buffer; the caller, cancelled before it resumed, goes on only once the engine is done with
    that buffer (as for any write it awaits). Before, the write was abandoned and the caller
    went on at once, its buffer still being copied. (The threads backend's worker, held here,
    stands in for a kernel still copying it: a native engine's is held there only by a slow
    device.)"""
    aionative.set_default_backend("threads")
    release = threading.Event()
    try:
        fd = rw_fd(fd_of, tmp_path / "w")
        eng = aionative.get_engine()
        real = _threads._pwrite

        def held(fd: int, data: memoryview, offset: int) -> int:
            release.wait(10)
            return real(fd, data, offset)

        monkeypatch.setattr(_threads, "_pwrite", held)
        buf = bytearray(b"x" * 100)
        task = asyncio.ensure_future(_k.refused_queue(eng, "write", fd, buf, 0))
        await asyncio.sleep(0)                              # queued; the drain is scheduled
        asyncio.get_running_loop().call_soon(task.cancel)  # runs after the drain queued it
        await asyncio.sleep(0.05)
        assert not task.done(), "the caller went on while the worker had its buffer"
        with pytest.raises(BufferError):
            buf.extend(b"no")  # (the worker's)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        buf.extend(b"ok")  # the caller's again
        assert os.pread(fd, 200, 0) == b"x" * 100
    finally:
        release.set()
        aionative.set_default_backend(None)


async def test_an_inline_write_that_stops_partway_is_finished_by_the_queue(
        native_backend: str, wide_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    fd = rw_fd(fd_of, tmp_path / "w")
    data = os.urandom(64_000)
    aionative.get_engine()
    before = aionative.engine_stats()
    _core.set_fault("inline_write", 0, 1)          # half of it inline, then it stops
    assert await aionative.pwrite(fd, data, 0) == len(data)
    _core.set_fault("inline_write", errno.EIO, 1)  # stops before writing anything
    assert await aionative.pwrite(fd, data[::-1], 64_000) == len(data)
    assert delta(before, "submitted") == 2 and delta(before, "inline_writes") == 0
    assert os.pread(fd, 128_001, 0) == data + data[::-1]


async def test_an_error_after_an_inline_part_says_how_much_was_written(
        native_backend: str, wide_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """Half written inline, the queue's rest fails: the OSError carries the inline half as
    ``characters_written``, and exactly that much is in the file."""
    fd = rw_fd(fd_of, tmp_path / "w")
    data = os.urandom(64_000)
    aionative.get_engine()
    _core.set_fault("inline_write", 0, 1)
    _core.set_fault("completion", errno.ENOSPC, 1)
    with pytest.raises(OSError) as info:
        await aionative.pwrite(fd, data, 0)
    assert info.value.errno == errno.ENOSPC
    assert info.value.characters_written == 32_000
    assert os.pread(fd, 32_000, 0) == data[:32_000]


async def test_a_stalled_write_sends_writes_to_the_queue_for_a_second(
        native_backend: str, wide_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    fd = rw_fd(fd_of, tmp_path / "w")
    eng = aionative.get_engine()
    before = eng.stats()
    _core.set_fault("write_stall", 0, 1)   # the next inline write counts as one that slept
    assert eng.write(fd, b"a", 0) == 1     # it is written, and it was a stall
    assert delta(before, "write_stalls") == 1
    fut = eng.write(fd, b"b", 1)           # the next go to the queue
    assert isinstance(fut, asyncio.Future) and await fut == 1
    assert await aionative.pwrite(fd, b"c", 2) == 1
    assert delta(before, "inline_writes") == 1 and delta(before, "submitted") == 2
    await asyncio.sleep(1.05)              # WRITE_CALM_NS later: inline again
    assert eng.write(fd, b"d", 3) == 1
    assert delta(before, "inline_writes") == 2
    assert os.pread(fd, 10, 0) == b"abcd"


async def test_a_fast_path_turned_off_writes_through_the_queue(
        native_backend: str, tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = rw_fd(fd_of, tmp_path / "w")
    aionative.set_inline_budget(0)
    try:
        before = aionative.engine_stats()
        assert await aionative.pwrite(fd, b"abc", 0) == 3
        assert delta(before, "submitted") == 1 and delta(before, "inline_writes") == 0
    finally:
        aionative.set_inline_budget(None)


async def test_file_objects_and_write_bytes_write_inline(
        native_backend: str, wide_budget: None, tmp_path: Path) -> None:
    data = os.urandom(60_000)
    before = aionative.engine_stats()
    async with aionative.open(tmp_path / "f", "wb") as f:
        await f.write(data)
        await f.flush()
        await f.write(b"tail")
    assert await aionative.write_bytes(tmp_path / "g", data) == len(data)
    assert delta(before, "inline_writes") >= 3
    assert (tmp_path / "f").read_bytes() == data + b"tail"
    assert (tmp_path / "g").read_bytes() == data


async def test_every_backend_writes_what_os_pwrite_writes(
        backend: str, tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """Inline or not, the file ends up as ``os.pwrite`` would leave it, with the same counts."""
    ours = rw_fd(fd_of, tmp_path / "ours")
    theirs = rw_fd(fd_of, tmp_path / "theirs")
    writes = [(os.urandom(n), off) for n, off in
              ((1, 0), (4096, 4096), (5000, 100), (64 << 10, 9), (1 << 20, 3),
               (7, (1 << 20) + 10))]
    for data, off in writes:
        assert await aionative.pwrite(ours, data, off) == os.pwrite(theirs, data, off)
    size = os.fstat(theirs).st_size
    assert os.fstat(ours).st_size == size
    assert os.pread(ours, size, 0) == os.pread(theirs, size, 0)
    await asyncio.gather(*[aionative.pwrite(ours, bytes([i]) * 4096, i * 4096)
                           for i in range(64)])
    assert os.pread(ours, 64 * 4096, 0) == b"".join(bytes([i]) * 4096 for i in range(64))


async def test_a_file_push_the_budget_refused_waits_a_turn(
        native_backend: str, tiny_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """A flush that finds the budget spent waits a turn and writes inline as a retry, not
    through the queue (its writes keep their order: the file is locked meanwhile)."""
    other = rw_fd(fd_of, tmp_path / "other")
    async with aionative.open(tmp_path / "f", "wb") as f:
        await f.write(b"abc")
        await asyncio.sleep(0)
        spend_the_budget(other)
        before = aionative.engine_stats()
        await f.flush()
        assert delta(before, "submitted") == 0 and delta(before, "inline_writes") == 1
        assert delta(before, "inline_retries") == 1
        assert (tmp_path / "f").read_bytes() == b"abc"


def refused_then_cancelled(other: int, call: Any) -> asyncio.Task[Any]:
    """``call`` in a task whose first step finds the budget spent (by a callback that runs
    after the flush renews it) and waits its turn, cancelled right after that step."""
    loop = asyncio.get_running_loop()
    spend_the_budget(other)                       # schedules the flush that renews it
    loop.call_soon(spend_the_budget, other)       # spends the renewed one
    task = asyncio.ensure_future(call)
    loop.call_soon(task.cancel)                   # after the task's first step
    return task


async def test_a_push_cancelled_during_its_turn_is_written_by_the_next_call(
        native_backend: str, tiny_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """Cancelled while it waited its turn: the kernel takes the write then (as one cancelled
    while queued), and the file's next call waits for it before going on."""
    other = rw_fd(fd_of, tmp_path / "other")
    f = await aionative.open(tmp_path / "f", "wb")
    await f.write(b"abc")
    before = aionative.engine_stats()
    with pytest.raises(asyncio.CancelledError):
        await refused_then_cancelled(other, f.flush())
    assert delta(before, "inline_retries") == 0 and delta(before, "submitted") >= 1
    await f.write(b"def")
    await f.close()
    assert (tmp_path / "f").read_bytes() == b"abcdef"


async def test_a_close_cancelled_during_its_push_turn_still_lands_the_data(
        native_backend: str, tiny_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """The tail a close pushes, cancelled while it waited its turn: the kernel has it before
    the close's descriptor is closed; closing again writes nothing anywhere."""
    other = rw_fd(fd_of, tmp_path / "other")
    f = await aionative.open(tmp_path / "f", "wb")
    await f.write(b"tail")
    with pytest.raises(asyncio.CancelledError):
        await refused_then_cancelled(other, f.close())
    await asyncio.sleep(0.05)
    assert (tmp_path / "f").read_bytes() == b"tail"
    await f.close()
    assert (tmp_path / "f").read_bytes() == b"tail"
    assert os.pread(other, 10, 0) == b"z"


async def test_a_spent_budget_does_not_hold_back_a_write_that_cannot_be_inline(
        native_backend: str, tiny_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """O_SYNC (like O_DIRECT, a pipe, a network filesystem) goes to the kernel queue at once:
    waiting a turn would not make it inline."""
    other = rw_fd(fd_of, tmp_path / "other")
    synced = rw_fd(fd_of, tmp_path / "w", os.O_SYNC)
    eng = aionative.get_engine()
    await asyncio.sleep(0)
    spend_the_budget(other)
    assert eng.write(other, b"y", 1) is False
    fut = eng.write(synced, b"x", 0)
    assert isinstance(fut, asyncio.Future) and await fut == 1


async def test_waiting_for_the_gil_after_a_write_is_not_a_stall(
        native_backend: str, wide_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """An inline write lets go of the GIL; a thread running Python code takes it when its
    switch interval is up and keeps it for one (5 ms). That wait is not the kernel's: the
    writes stay inline (the loop would meet the same switch in any Python code).

    A write may still sleep for real here (dirty-page throttling while other processes
    write to the same disk): that attempt is done again after the calm period. Counting the
    GIL's wait as a stall would fail every attempt, as each waits for the GIL."""
    fd = rw_fd(fd_of, tmp_path / "w")
    eng = aionative.get_engine()

    def attempt() -> tuple[float, dict[str, int], int, Any]:
        stop = threading.Event()

        def spin() -> None:
            while not stop.is_set():
                pass

        before = eng.stats()
        thread = threading.Thread(target=spin)
        thread.start()
        waited, end, i, queued = 0.0, time.perf_counter() + 0.1, 0, None
        try:
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                res = eng.write(fd, b"x", i % 4096)
                waited = max(waited, time.perf_counter() - t0)
                if res != 1:  # queued after a stall: this attempt is over
                    assert isinstance(res, asyncio.Future)
                    queued = res
                    break
                i += 1
        finally:
            stop.set()
            thread.join()
        return waited, before, i, queued

    stalls = []
    for _ in range(3):
        waited, before, i, queued = attempt()
        if queued is not None:
            assert await queued == 1
        stalls.append(delta(before, "write_stalls"))
        if stalls[-1] == 0:
            break
        await asyncio.sleep(1.05)              # WRITE_CALM_NS later: inline again
    assert stalls[-1] == 0, stalls              # a stall in every attempt: the GIL's wait
    assert waited > 0.001                       # it did wait for the GIL at least once
    assert delta(before, "inline_writes") == i


async def test_a_reused_descriptor_number_costs_a_turn_at_most(
        native_backend: str, tiny_budget: None, tmp_path: Path,
        fd_of: Callable[..., int]) -> None:
    """The engine remembers for the rest of the loop iteration which descriptors are fit
    for inline writes, to answer a spent budget without system calls. A number reused for a
    FIFO outside the engine: False once (a turn for nothing), then the retry, on the next
    iteration, looks again and finds a descriptor without a position: ESPIPE, as os.pwrite
    says; nothing is written, inline or queued."""
    other = rw_fd(fd_of, tmp_path / "other")
    os.mkfifo(tmp_path / "fifo")
    fifo = fd_of(tmp_path / "fifo", os.O_RDWR | os.O_NONBLOCK)
    eng = aionative.get_engine()
    await asyncio.sleep(0)
    spend_the_budget(other)                 # `other` is the remembered one now
    os.dup2(fifo, other)                    # its number is a FIFO from here on
    before = eng.stats()
    assert eng.write(other, b"x", 0) is False
    with pytest.raises(OSError) as refused:
        await aionative.pwrite(other, b"x", 0)
    assert refused.value.errno == errno.ESPIPE
    assert delta(before, "inline_writes") == 0 and delta(before, "submitted") == 0
