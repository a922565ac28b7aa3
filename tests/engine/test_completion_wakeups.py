"""A completion the engine reaps in one of its loop callbacks (the eventfd's wake-up, the
iteration's flush) wakes its awaiting task right there: the engine takes the future's done
callbacks off it before resolving it and calls them itself when the reap is over, instead of
the future scheduling each with ``loop.call_soon`` for the next iteration
(``future_resolve_collect`` in csrc/complete.c, ``engine_run_wakeups`` in csrc/loop.c). The
callbacks must see what the loop would have given them: the order they were added in, their
contexts, a done future; an exception goes to the loop's exception handler, and
``KeyboardInterrupt`` stops the loop without losing the callbacks after it."""

from __future__ import annotations

import asyncio
import contextvars
import mmap
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aionative
from tests.support import close_running_engine

pytestmark = pytest.mark.uses_internals("the engine calling its tasks' wake-ups itself")

SIZE = 8 << 20
CHUNK = 1 << 20  # an O_DIRECT read of this much keeps the device far longer than a call or a
# flush takes (a 4 KiB one is answered inside its call now and then)
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="none")


@pytest.fixture
def direct(tmp_path: Path) -> Iterator[tuple[int, bytes, mmap.mmap]]:
    """A file of SIZE random bytes opened O_DIRECT (every read goes to the device), its
    contents, and a page-aligned buffer of CHUNK bytes."""
    data = os.urandom(SIZE)
    (tmp_path / "d.bin").write_bytes(data)
    fd = os.open(tmp_path / "d.bin", os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, CHUNK)
    try:
        yield fd, data, buf
    finally:
        os.close(fd)
        buf.close()


def _device_read(eng: Any, fd: int, buf: mmap.mmap, off: int) -> asyncio.Future[int]:
    """An O_DIRECT read's future, not done yet: the device has the read. (Sent inside its
    call, a read the device answered at once is done on return, now and then: another.)"""
    for _ in range(100):
        fut: asyncio.Future[int] = eng.preadinto(fd, buf, off)
        if not fut.done():
            return fut
        assert fut.result() == CHUNK
    raise AssertionError("every read was done inside its call")


async def _learned(fd: int, buf: mmap.mmap) -> Any:
    """The running loop's engine, after a first read: on Linux AIO the first read of a
    descriptor tries RWF_NOWAIT, which an O_DIRECT read refuses (EAGAIN), and goes again; the
    engine remembers the descriptor."""
    eng = aionative.get_engine()
    assert await eng.preadinto(fd, buf, 0) == CHUNK
    await asyncio.sleep(0.005)
    return eng


@pytest.mark.asyncio
async def test_a_device_read_wakes_its_task_inside_the_wake_up(
        native_backend: str, direct: tuple[int, bytes, mmap.mmap]) -> None:
    """The task awaiting an O_DIRECT read runs on inside the engine's eventfd callback that
    reaped the read: the next read reaches the device in the same loop iteration. (Before, the
    future scheduled the task for the next iteration: it never resumed inside the callback.)"""
    fd, data, buf = direct
    eng = await _learned(fd, buf)
    loop = asyncio.get_running_loop()
    in_wake_up = False

    def on_ready() -> None:
        nonlocal in_wake_up
        in_wake_up = True
        try:
            eng._on_ready()
        finally:
            in_wake_up = False

    loop.remove_reader(eng.fileno())
    loop.add_reader(eng.fileno(), on_ready)
    inside = 0
    try:
        woken = aionative.engine_stats()["woken"]
        for i in range(8):
            assert await aionative.preadinto(fd, buf, i * CHUNK) == CHUNK
            inside += in_wake_up
            assert bytes(buf) == data[i * CHUNK:(i + 1) * CHUNK]
        woken = aionative.engine_stats()["woken"] - woken
    finally:
        loop.remove_reader(eng.fileno())
        loop.add_reader(eng.fileno(), eng._on_ready)
    # Timing decides, now and then, that a flush finds a read done and wakes its task (woken
    # counts it, `inside` does not), or that the device answers a read before its call
    # returns (Linux AIO's io_submit may take that long): its task goes on without waiting,
    # inside the wake-up it was already in (`inside` counts it, woken does not).
    assert inside > 0 and 0 < woken <= 8, (woken, inside)


@pytest.mark.asyncio
async def test_callbacks_are_called_in_order_in_their_contexts_once_the_future_is_done(
        native_backend: str, direct: tuple[int, bytes, mmap.mmap]) -> None:
    fd, data, buf = direct
    eng = await _learned(fd, buf)
    seen: list[tuple[str, str, bool, int]] = []

    def callback(name: str) -> Any:
        def cb(f: asyncio.Future[int]) -> None:
            seen.append((name, VAR.get(), f.done(), f.result()))
        return cb

    fut = _device_read(eng, fd, buf, CHUNK)
    for name in ("a", "b", "c"):
        ctx = contextvars.copy_context()
        ctx.run(VAR.set, f"ctx-{name}")
        fut.add_done_callback(callback(name), context=ctx)
    VAR.set("the task's")
    fut.add_done_callback(callback("d"))  # a copy of the current context
    VAR.set("changed after")
    woken = aionative.engine_stats()["woken"]
    assert await fut == CHUNK
    assert seen == [("a", "ctx-a", True, CHUNK), ("b", "ctx-b", True, CHUNK),
                    ("c", "ctx-c", True, CHUNK), ("d", "the task's", True, CHUNK)]
    assert VAR.get() == "changed after"
    assert bytes(buf) == data[CHUNK:2 * CHUNK]
    assert aionative.engine_stats()["woken"] - woken == 1


@pytest.mark.asyncio
async def test_gather_shield_and_wait_for_over_woken_futures(
        native_backend: str, direct: tuple[int, bytes, mmap.mmap]) -> None:
    fd, data, buf = direct
    eng = await _learned(fd, buf)
    bufs = [mmap.mmap(-1, CHUNK) for _ in range(4)]
    try:
        woken = aionative.engine_stats()["woken"]
        futs = [eng.preadinto(fd, b, i * CHUNK) for i, b in enumerate(bufs)]
        got = await asyncio.gather(futs[0], asyncio.shield(futs[1]),
                                   asyncio.wait_for(futs[2], 5), futs[3])
        assert got == [CHUNK] * 4
        assert [bytes(b) for b in bufs] == [data[i * CHUNK:(i + 1) * CHUNK] for i in range(4)]
        assert aionative.engine_stats()["woken"] - woken > 0
    finally:
        for b in bufs:
            b.close()


@pytest.mark.asyncio
async def test_a_callback_that_raises_goes_to_the_exception_handler(
        native_backend: str, direct: tuple[int, bytes, mmap.mmap]) -> None:
    """As from a callback the loop calls: the loop's exception handler gets it, with asyncio's
    message, and the callbacks after it still run."""
    fd, _, buf = direct
    eng = await _learned(fd, buf)
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    after: list[int] = []

    def boom(f: asyncio.Future[int]) -> None:
        raise ValueError("from a done callback")

    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda lp, context: reported.append(context))
    try:
        fut = _device_read(eng, fd, buf, 0)
        fut.add_done_callback(boom)
        fut.add_done_callback(lambda f: after.append(f.result()))
        woken = aionative.engine_stats()["woken"]
        assert await fut == CHUNK
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(old)
    assert aionative.engine_stats()["woken"] - woken == 1
    assert after == [CHUNK]
    assert len(reported) == 1
    assert isinstance(reported[0]["exception"], ValueError)
    assert reported[0]["message"].startswith("Exception in callback ")


async def _woken() -> int:
    return aionative.engine_stats()["woken"]


def test_keyboard_interrupt_from_a_callback_loses_none_after_it(
        native_backend: str, loop: asyncio.AbstractEventLoop,
        direct: tuple[int, bytes, mmap.mmap]) -> None:
    """KeyboardInterrupt (and SystemExit) from a callback stops the loop, as from any callback
    the loop calls; the callbacks not called yet are scheduled, and run when the loop runs
    again: no task is left waiting for a wake-up that never comes."""
    fd, data, buf = direct
    seen: list[str] = []
    started: dict[str, Any] = {}

    def interrupt(f: asyncio.Future[int]) -> None:
        seen.append("interrupt")
        raise KeyboardInterrupt

    async def waiter(fut: asyncio.Future[int]) -> int:
        return await fut

    async def main() -> None:
        eng = await _learned(fd, buf)
        started["woken"] = aionative.engine_stats()["woken"]
        fut = _device_read(eng, fd, buf, 2 * CHUNK)
        fut.add_done_callback(interrupt)
        fut.add_done_callback(lambda f: seen.append("after"))
        started["waiter"] = asyncio.ensure_future(waiter(fut))
        await asyncio.sleep(30)  # the read's wake-up interrupts this

    main_task = loop.create_task(main())
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(main_task)
    assert seen[0] == "interrupt"  # (uvloop runs the rest of its turn's callbacks first)
    assert loop.run_until_complete(_woken()) - started["woken"] == 1  # the engine called it
    assert loop.run_until_complete(started["waiter"]) == CHUNK
    assert seen == ["interrupt", "after"]
    assert bytes(buf) == data[2 * CHUNK:3 * CHUNK]
    main_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(main_task)
    loop.run_until_complete(close_running_engine())


@pytest.mark.asyncio
@pytest.mark.parametrize("send", ["cancel", "send_now"])
async def test_what_a_task_sends_at_once_schedules_the_wake_ups_it_reaps(
        native_backend: str, send: str, direct: tuple[int, bytes, mmap.mmap],
        tmp_path: Path) -> None:
    """``Engine.cancel`` sends its request at once, and ``Engine._send_now`` what is prepared
    (the file layer's write of a cancelled call), from inside the task that calls them; both
    reap what completed meanwhile. No other task may run there: the futures they resolve
    schedule their callbacks, as any resolved outside the loop's own callbacks. (Woken there,
    the waiting task's step raised "Cannot enter into task … while another task … is being
    executed", and that task waited forever.)"""
    if send == "cancel" and native_backend == "linux_aio":
        pytest.skip("Linux AIO's cancel submits nothing, so it reaps nothing either")
    fd, data, buf = direct
    eng = await _learned(fd, buf)
    other = mmap.mmap(-1, CHUNK)
    wfd = os.open(tmp_path / "w.bin", os.O_RDWR | os.O_CREAT)
    try:
        done = _device_read(eng, fd, other, CHUNK)

        async def waiter() -> int:
            return await done

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0)  # the task awaits the read
        gone = _device_read(eng, fd, buf, 2 * CHUNK)
        # The device answers; the loop polls nothing meanwhile. (200 ms: the device takes a
        # few for each of these reads.)
        time.sleep(0.2)  # noqa: ASYNC251
        woken = aionative.engine_stats()["woken"]
        if send == "cancel":
            gone.cancel()
            assert eng.cancel(gone)
        else:
            written = eng.pwrite(wfd, b"x", 0)  # a write: for the flush, not sent early
            eng._send_now()
        assert done.done()  # reaped inside the call, in this task
        assert aionative.engine_stats()["woken"] == woken
        assert await asyncio.wait_for(task, 5) == CHUNK
        assert bytes(other) == data[CHUNK:2 * CHUNK]
        if send == "send_now":
            assert await written == 1
            assert await gone == CHUNK
    finally:
        other.close()
        os.close(wfd)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_exception_handler_that_raises_keyboard_interrupt_stops_the_loop(
        native_backend: str, exc: type[BaseException], loop: asyncio.AbstractEventLoop,
        direct: tuple[int, bytes, mmap.mmap]) -> None:
    """The loop's exception handler, called for a callback that raised, raising SystemExit or
    KeyboardInterrupt in turn: it propagates, as from asyncio's own Handle._run (it was
    reported as unraisable and the loop went on), and the callbacks after it still run."""
    fd, _, buf = direct
    seen: list[str] = []

    def boom(f: asyncio.Future[int]) -> None:
        raise ValueError("from a done callback")

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        seen.append("handler")
        raise exc

    async def main() -> None:
        eng = await _learned(fd, buf)
        fut = _device_read(eng, fd, buf, CHUNK)
        fut.add_done_callback(boom)
        fut.add_done_callback(lambda f: seen.append("after"))
        await asyncio.sleep(30)  # the read's wake-up stops the loop

    loop.set_exception_handler(handler)
    main_task = loop.create_task(main())
    with pytest.raises(exc):
        loop.run_until_complete(main_task)
    loop.set_exception_handler(None)
    loop.run_until_complete(asyncio.sleep(0))
    assert seen == ["handler", "after"]
    main_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(main_task)
    loop.run_until_complete(close_running_engine())


class _RaisesOnCompare:
    """A done callback that cannot be compared: ``remove_done_callback`` of any other
    callback of its future compares them, and raises (after it took that one off)."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def __call__(self, f: asyncio.Future[int]) -> None:
        self.seen.append("uncomparable")

    def __eq__(self, other: object) -> bool:
        raise ValueError("no comparing")

    __hash__ = object.__hash__


@pytest.mark.asyncio
async def test_callbacks_the_engine_could_not_take_off_are_called_by_the_future(
        native_backend: str, direct: tuple[int, bytes, mmap.mmap],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Taking a callback off a future compares it with the others (``==``), which may raise
    (reported as unraisable): then every callback is the future's again, each called once."""
    fd, _, buf = direct
    eng = await _learned(fd, buf)
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    seen: list[str] = []
    fut = _device_read(eng, fd, buf, 0)
    fut.add_done_callback(lambda f: seen.append("first"))
    fut.add_done_callback(_RaisesOnCompare(seen))
    fut.add_done_callback(lambda f: seen.append("last"))
    woken = aionative.engine_stats()["woken"]
    assert await fut == CHUNK
    await asyncio.sleep(0)
    assert sorted(seen) == ["first", "last", "uncomparable"]
    assert aionative.engine_stats()["woken"] == woken
    assert [type(u.exc_value) for u in unraisable] == [ValueError]
