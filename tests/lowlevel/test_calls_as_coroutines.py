"""``aionative.pread``, ``preadinto`` and ``pwrite`` return ``_core.Call`` objects, not
coroutines (csrc/call.c): they must behave as the ``async def`` functions they replace —
nothing runs before the first await, errors come out of the await, ``create_task`` takes them,
a cancelled wait abandons the engine's operation, and nothing they hold leaks."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import inspect
import os
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _backend
from tests.support import held_in_the_ring

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.usefixtures("backend"),
    pytest.mark.skipif(_backend._core is None, reason="the calls are C objects of _core"),
]


def _three_argument_throw() -> contextlib.AbstractContextManager[object]:
    """``throw(type, value, tb)`` warns from 3.12 on, as a coroutine's does."""
    if sys.version_info >= (3, 12):
        return pytest.warns(DeprecationWarning, match=r"\(type, exc, tb\) signature of throw")
    return contextlib.nullcontext()


async def _until(done: Callable[[], bool]) -> None:
    """Let the loop turn until ``done()``, for up to about a second."""
    for _ in range(1000):
        if done():
            return
        await asyncio.sleep(0.001)


def _file(fd_of: Callable[..., int], tmp_path: Path, data: bytes = b"abcdef") -> int:
    path = tmp_path / "f"
    path.write_bytes(data)
    return fd_of(path, os.O_RDWR)


async def test_nothing_runs_before_the_first_await(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = _file(fd_of, tmp_path)
    eng = aionative.get_engine()
    before = eng.stats()
    write = aionative.pwrite(fd, b"XY", 0)
    bad = aionative.pread(-5, 10, 0)  # no error yet: it comes out of the await
    assert eng.stats() == before
    assert os.pread(fd, 6, 0) == b"abcdef"
    write.close()  # never awaited: never written
    bad.close()
    assert os.pread(fd, 6, 0) == b"abcdef"
    with pytest.raises(OSError) as err:
        await aionative.pread(-5, 10, 0)
    assert err.value.errno == errno.EBADF
    assert await aionative.pwrite(fd, b"XY", 0) == 2
    assert os.pread(fd, 6, 0) == b"XYcdef"


async def test_create_task_and_gather_take_calls(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = _file(fd_of, tmp_path)
    call = aionative.pread(fd, 3, 0)
    assert asyncio.iscoroutine(call) and inspect.isawaitable(call)
    assert await asyncio.create_task(call) == b"abc"
    buf = bytearray(2)
    got = await asyncio.gather(aionative.pread(fd, 2, 4), aionative.preadinto(fd, buf, 1),
                               aionative.pwrite(fd, b"!", 5))
    assert got == [b"ef", 2, 1] and buf == b"bc"
    assert os.pread(fd, 6, 0) == b"abcde!"


async def test_a_call_is_awaited_once(tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = _file(fd_of, tmp_path)
    call = aionative.pread(fd, 3, 0)
    assert await call == b"abc"
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        await call


async def test_the_coroutine_protocol_before_the_start(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = _file(fd_of, tmp_path)
    call = aionative.pwrite(fd, b"Z", 0)
    with pytest.raises(TypeError, match="non-None value"):
        call.send(1)
    with pytest.raises(ValueError, match="thrown"):
        call.throw(ValueError("thrown"))
    with pytest.raises(RuntimeError, match="cannot reuse"):
        call.send(None)  # a throw before the start finishes it, as it does a coroutine
    with pytest.raises(KeyError), _three_argument_throw():
        aionative.pread(fd, 1, 0).throw(KeyError, None, None)
    with pytest.raises(TypeError, match="traceback"), _three_argument_throw():
        aionative.pread(fd, 1, 0).throw(KeyError, None, 3)
    assert os.pread(fd, 6, 0) == b"abcdef"


async def test_calls_check_their_arguments_when_called() -> None:
    with pytest.raises(TypeError, match="^pread expected 3 arguments, got 2$"):  # os.pread's
        aionative.pread(0, 1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="keyword"):
        aionative.pwrite(0, b"", offset=0)  # type: ignore[call-arg]
    assert str(inspect.signature(aionative.preadinto)) == "(fd, buffer, offset, /)"


async def test_a_call_done_inline_or_queued_gives_the_same_result(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """With the fast path off every call is queued: its await delegates to the future."""
    fd = _file(fd_of, tmp_path)
    eng = aionative.get_engine()
    aionative.set_inline_budget(0)
    try:
        before = eng.stats()
        assert await aionative.pread(fd, 4, 1) == b"bcde"
        buf = bytearray(3)
        assert await aionative.preadinto(fd, buf, 3) == 3 and buf == b"def"
        assert await aionative.pwrite(fd, b"--", 2) == 2
        after = eng.stats()
    finally:
        aionative.set_inline_budget(None)
    assert os.pread(fd, 6, 0) == b"ab--ef"
    assert after["completed"] - before["completed"] == 3  # all three through the queue
    assert after["inline_hits"] == before["inline_hits"]


async def test_cancelling_a_queued_read_abandons_it(
        backend: str, tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """The task waits on the engine's future through the Call; its cancellation reaches the
    engine (Engine.cancel), where a future cancelled behind the engine's back would leave the
    read in flight until the kernel answered it."""
    if backend != "io_uring":
        pytest.skip("the fault point that holds a read in the queue is io_uring's")
    fd = _file(fd_of, tmp_path)
    eng = aionative.get_engine()
    with held_in_the_ring():
        task = asyncio.ensure_future(aionative.pread(fd, 10, 0))
        await asyncio.sleep(0.01)
        assert eng.in_flight == 1 and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _until(lambda: eng.in_flight == 0)
        assert eng.in_flight == 0


async def test_calls_leave_no_reference_behind(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = _file(fd_of, tmp_path)
    data, buf, size = b"0123456789" * 3, bytearray(5), 7_000_001
    counts = sys.getrefcount(data), sys.getrefcount(buf), sys.getrefcount(size)
    for _ in range(200):
        assert await aionative.pwrite(fd, data, 0) == len(data)
        assert await aionative.preadinto(fd, buf, 1) == 5
        assert await aionative.pread(fd, size, 0) == data
        aionative.pwrite(fd, data, 0).close()
        with pytest.raises(ZeroDivisionError):
            aionative.preadinto(fd, buf, 0).throw(ZeroDivisionError())
        with pytest.raises(OSError):
            await aionative.pread(fd, size, -1)
    for _ in range(100):  # a pool thread may still be dropping the last call's arguments
        if (sys.getrefcount(data), sys.getrefcount(buf), sys.getrefcount(size)) == counts:
            break
        await asyncio.sleep(0.01)
    assert (sys.getrefcount(data), sys.getrefcount(buf), sys.getrefcount(size)) == counts


async def test_a_call_never_awaited_warns_and_writes_nothing(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = _file(fd_of, tmp_path)
    with pytest.warns(RuntimeWarning, match="coroutine 'pwrite' was never awaited"):
        aionative.pwrite(fd, b"XY", 0)  # (freed at once: its last reference goes)
    assert os.pread(fd, 6, 0) == b"abcdef"


async def test_calls_made_in_the_memory_of_freed_ones_warn_as_new(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """A Call's memory is kept for the next one (a free list): one made in the memory of an
    awaited call, of a closed one, of one never awaited or of one collected in a cycle
    (finalized: the mark stays with the memory) still warns when it is never awaited."""
    fd = _file(fd_of, tmp_path)
    for _ in range(200):  # the free list full of awaited calls
        await aionative.pread(fd, 1, 0)
    aionative.pread(fd, 1, 0).close()
    for _ in range(3):
        with pytest.warns(RuntimeWarning, match="coroutine 'pwrite' was never awaited"):
            aionative.pwrite(fd, b"XY", 0)
    for _ in range(3):
        call = aionative.pread(fd, 1, 0)
        cycle: list[Any] = [call]
        cycle.append(cycle)
        del call, cycle
        with pytest.warns(RuntimeWarning, match="coroutine 'pread' was never awaited"):
            gc.collect()
    for _ in range(100):  # past the free list (64): new memory too
        with pytest.warns(RuntimeWarning, match="coroutine 'pwrite' was never awaited"):
            aionative.pwrite(fd, b"XY", 0)
    assert os.pread(fd, 6, 0) == b"abcdef"


async def test_a_call_touched_by_a_finalizer_of_what_it_lets_go_is_done(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """Letting its arguments go runs their ``__del__``, which may touch the call: it finds it
    done (as a finished coroutine), not half cleared (it crashed, reading cleared arguments)."""
    fd = _file(fd_of, tmp_path)
    seen: list[str] = []
    holder: dict[str, Any] = {}

    class Offset:
        def __index__(self) -> int:
            return 0

        def __del__(self) -> None:
            try:
                holder["call"].send(None)
            except BaseException as e:  # noqa: BLE001 - what the call says is the point
                seen.append(f"{type(e).__name__}: {e}")

    holder["call"] = aionative.pread(fd, 3, Offset())
    holder["call"].close()  # lets the Offset go
    assert seen == ["RuntimeError: cannot reuse already awaited coroutine"]
    holder["call"] = call = aionative.pread(fd, 3, Offset())
    assert await call == b"abc"  # let go inside its step: it is running, as a coroutine is
    assert seen[1:] == ["ValueError: coroutine already executing"]


async def test_a_call_cannot_be_entered_while_it_runs(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """Argument conversion runs Python code (``__index__``) inside the call's step: touching
    the same call from there raises as it would for a coroutine, and nothing leaks."""
    fd = _file(fd_of, tmp_path)
    eng = aionative.get_engine()
    await asyncio.sleep(0)  # (an inline call schedules the engine's flush: a reference)
    refs = sys.getrefcount(eng)
    seen: list[str] = []

    class Offset:
        def __index__(self) -> int:
            for touch in (lambda: call.close(), lambda: call.send(None),
                          lambda: call.throw(KeyError())):
                with pytest.raises(ValueError, match="already executing") as err:
                    touch()
                seen.append(str(err.value))
            assert call.cr_running
            return 1

    call = aionative.pread(fd, 3, Offset())  # type: ignore[arg-type]
    assert await call == b"bcd"
    assert len(seen) == 3 and not call.cr_running
    gc.collect()  # (the caught errors' tracebacks hold frames in cycles)
    await asyncio.sleep(0)
    assert sys.getrefcount(eng) == refs


async def test_a_bad_throw_does_not_abandon_the_operation(
        backend: str, tmp_path: Path, fd_of: Callable[..., int]) -> None:
    """Only a CancelledError that comes out of the wait abandons the engine's operation, as
    ``except CancelledError`` around the await did: a throw whose arguments are wrong does
    not."""
    if backend != "io_uring":
        pytest.skip("the fault point that holds a read in the queue is io_uring's")
    fd = _file(fd_of, tmp_path)
    eng = aionative.get_engine()
    with held_in_the_ring():
        call = aionative.pread(fd, 10, 0)
        fut = call.send(None)
        assert isinstance(fut, asyncio.Future) and call.cr_suspended and call.cr_await
        with pytest.raises(TypeError, match="traceback"), _three_argument_throw():
            call.throw(asyncio.CancelledError, None, 3)
        assert eng.in_flight == 1 and not fut.done()   # still queued for the kernel
    await _until(fut.done)
    assert fut.result() == b"abcdef"


async def test_calls_look_like_coroutines_to_asyncio(
        tmp_path: Path, fd_of: Callable[..., int]) -> None:
    fd = _file(fd_of, tmp_path)
    call = aionative.pread(fd, 2, 0)
    assert call.__name__ == call.__qualname__ == "pread"
    assert weakref.ref(call)() is call
    task = asyncio.ensure_future(call)
    assert "coro=<pread()" in repr(task)
    assert await task == b"ab"
    assert not call.cr_suspended and call.cr_await is None


@pytest.mark.asyncio
@pytest.mark.parametrize("what", ["pread", "pread-small", "preadinto", "pwrite", "read_bytes"])
async def test_a_call_waiting_a_turn_survives_close_engine(
        backend: str, tmp_path: Path, what: str) -> None:
    """A large read, a pwrite or read_bytes that the spent budget sent round a turn, and
    another task calls close_engine() during that turn ("the next operation makes a new
    one"): the call runs on the loop's new engine. It retried on the closed one: "engine is
    closed". On the threads engine the large pread waits its turn in its caller, and the
    small one and preadinto wait in the engine's queue of refused reads: both move too (they
    raised "engine is closed" there)."""
    path = tmp_path / "f"
    data = os.urandom(1 << 18)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    os.pread(fd, len(data), 0)  # cached
    aionative.set_inline_budget(1)
    try:
        eng = aionative.get_engine()
        buf = bytearray(1 << 17)

        async def call() -> object:
            while eng.read_inline(fd, 4096, 0) is not False:  # spend the budget
                pass
            if what == "pread":
                return await aionative.pread(fd, 1 << 17, 0)
            if what == "pread-small":
                return await aionative.pread(fd, 4096, 0)
            if what == "preadinto":
                return await aionative.preadinto(fd, buf, 0)
            if what == "pwrite":
                return await aionative.pwrite(fd, b"w" * 100, 0)
            return await aionative.read_bytes(path)

        task = asyncio.ensure_future(call())
        await asyncio.sleep(0)  # the task runs up to its turn
        assert not task.done()
        aionative.close_engine()
        got = await asyncio.wait_for(task, 10)
        assert eng.closed and aionative.get_engine() is not eng
        expected = {"pread": data[:1 << 17], "pread-small": data[:4096], "preadinto": 1 << 17,
                    "pwrite": 100, "read_bytes": data}[what]
        assert got == expected
        if what == "preadinto":
            assert buf == data[:1 << 17]
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)


@pytest.mark.asyncio
@pytest.mark.parametrize("what", ["pwrite", "open"])
async def test_a_call_waiting_in_the_refused_queue_survives_close_engine(
        native_backend: str, tmp_path: Path, what: str) -> None:
    """A pwrite or an inline open refused again after its turn waits in the queue of refused
    calls; close_engine() meanwhile: the queue treats the closed engine as gone and the call
    runs on the loop's new engine ("engine is closed" before)."""
    from aionative import _kernelops as _k

    path = tmp_path / "f"
    path.write_bytes(b"a" * 65536)
    fd = os.open(path, os.O_RDWR)
    os.pread(fd, 65536, 0)
    aionative.set_inline_budget(1)
    stop = False
    eng = aionative.get_engine()

    async def spender() -> None:  # spends every turn's budget and its retry grace first
        while not stop:
            while eng.read_inline(fd, 4096, 0, True) is not False:
                pass
            await _k.one_turn()

    async def call() -> int:
        while eng.read_inline(fd, 4096, 0) is not False:
            pass
        if what == "pwrite":
            return await aionative.pwrite(fd, b"w" * 100, 0)
        return await _k.open_fd(path, os.O_RDONLY)

    spending = asyncio.ensure_future(spender())
    try:
        await asyncio.sleep(0)
        task = asyncio.ensure_future(call())
        queued = False
        for _ in range(50):
            await asyncio.sleep(0)
            q = _k._deferred.get(eng)
            if q is not None and q.queue:
                queued = True
                break
        assert queued, "the call never reached the queue of refused calls"
        aionative.close_engine()
        stop = True
        got = await asyncio.wait_for(task, 10)
        if what == "pwrite":
            assert got == 100 and os.pread(fd, 100, 0) == b"w" * 100
        else:
            assert os.pread(got, 1, 65535) == b"a"
            os.close(got)
        assert eng.closed
    finally:
        stop = True
        await spending
        aionative.set_inline_budget(None)
        os.close(fd)
