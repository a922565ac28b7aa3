"""Lazy ``rb`` files: ``aionative.open(path, "rb")`` with the other arguments at their
defaults opens a regular file and ``fstat``s it in one inline call, and the file starts
without its stack (``WindowRaw`` + ``BufferedReader``). ``read()`` to the end is one inline
engine read and ``close()`` one inline close; anything else builds the stack where the lazy
calls left the file. These tests check that a lazy file is indistinguishable from the builtin
and from a file with its stack built: after every lazy call, under a spent budget, with a
concurrent call, a cancellation, a failing inline read, a file that grew, and across loops.

Every test runs on each backend × {asyncio, uvloop}; the threads backend never opens lazily
(its opens run in a worker), and the tests say so.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gc
import inspect
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aionative
from aionative import _backend
from tests.files.test_open_differential import EXAMPLES, binary_ops, contents, run_scenario
from tests.support import LOOP_FACTORIES, open_fds_to


def lazy(f: Any) -> bool:
    """Whether the file has not built its stack yet (reading _lazy does not build it)."""
    return f._lazy is not None


def expect_lazy(backend: str) -> bool:
    return backend != "threads"


def cached(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    assert path.read_bytes() == data  # in the page cache now


@pytest.fixture
def tiny_budget() -> Any:
    """A budget of 1 ns: the first inline call of a loop iteration runs, every later one in
    the same iteration finds the budget spent."""
    aionative.set_inline_budget(0.001)
    yield
    aionative.set_inline_budget(None)


@pytest.mark.parametrize("as_path", [False, True])
@pytest.mark.asyncio
async def test_read_to_the_end_stays_lazy_and_later_calls_agree(
        backend: str, tmp_path: Path, as_path: bool) -> None:
    p = tmp_path / "f"
    data = os.urandom(100_000)
    cached(p, data)
    eng = aionative.get_engine()
    before = eng.stats()
    f = await aionative.open(p if as_path else str(p), "rb")
    assert lazy(f) is expect_lazy(backend)
    assert await f.read() == data
    assert await f.read() == b""
    assert await f.read(None) == b""
    assert lazy(f) is expect_lazy(backend)
    if expect_lazy(backend):  # open, read and read again at the end: no kernel round trip
        assert eng.stats()["submitted"] == before["submitted"]
    # Everything else builds the stack where the lazy reads left the file.
    assert await f.tell() == len(data)
    assert not lazy(f)
    assert await f.seek(10) == 10
    assert await f.read(5) == data[10:15]
    assert (await f.peek(1)).startswith(data[15:16])
    assert await f.read1(3) == data[15:18]
    assert f.name == str(p) and f.mode == "rb" and not f.closed
    await f.close()
    assert f.closed


@pytest.mark.asyncio
async def test_a_lazy_close_leaves_a_closed_file(backend: str, tmp_path: Path) -> None:
    p = tmp_path / "f"
    cached(p, b"abc")
    fds = open_fds_to(p)
    f = await aionative.open(str(p), "rb")
    assert open_fds_to(p) == fds + 1
    await f.close()
    assert open_fds_to(p) == fds
    assert lazy(f) is expect_lazy(backend)  # closing did not build the stack
    await f.close()  # a second close does nothing, as the builtin's
    assert f.closed and f.name == str(p) and f.mode == "rb"
    g = open(p, "rb")  # noqa: ASYNC230, SIM115 - the builtin's errors, for comparison
    g.close()
    for name in ("read", "tell", "peek", "readline"):
        with pytest.raises(ValueError) as sync_exc:
            getattr(g, name)()
        with pytest.raises(ValueError) as our_exc:
            await getattr(f, name)()
        assert str(our_exc.value) == str(sync_exc.value)
    with pytest.raises(ValueError) as sync_exc:
        g.fileno()
    with pytest.raises(ValueError) as our_exc:
        f.fileno()
    assert str(our_exc.value) == str(sync_exc.value)
    assert repr(f) == f"<AsyncBufferedReader <_io.BufferedReader name={str(p)!r}>>"


@pytest.mark.asyncio
async def test_a_lazy_file_left_open_warns_and_closes_its_descriptor(
        backend: str, tmp_path: Path) -> None:
    p = tmp_path / "f"
    cached(p, b"abc")
    fds = open_fds_to(p)
    f = await aionative.open(str(p), "rb")
    assert await f.read() == b"abc"
    text = repr(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del f
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) and text in str(w.message)
               for w in caught)
    del caught  # the warning's source: the file itself
    gc.collect()
    assert open_fds_to(p) == fds


@pytest.mark.parametrize("first", ["fileno", "read", "tell"])
@pytest.mark.asyncio
async def test_the_descriptor_has_the_builtins_flags(backend: str, tmp_path: Path,
                                                     first: str) -> None:
    """The inline open opens with O_NONBLOCK; the lazy file clears it when its stack is built,
    before the descriptor reaches anyone (``fileno()``) or the kernel queue reads it."""
    p = tmp_path / "f"
    cached(p, b"abc")
    with open(p, "rb") as g:  # noqa: ASYNC230 - the builtin, for comparison
        want = fcntl.fcntl(g.fileno(), fcntl.F_GETFL)
    async with aionative.open(str(p), "rb") as f:
        if first == "read":
            assert await f.read() == b"abc"  # lazy: the stack is built by fileno() below
        elif first == "tell":
            assert await f.tell() == 0
        fd = f.fileno()
        assert not lazy(f)
        assert fcntl.fcntl(fd, fcntl.F_GETFL) == want
        assert os.get_blocking(fd)
        assert await f.read() == (b"" if first == "read" else b"abc")


@pytest.mark.parametrize("closing", ["close", "async with"])
@pytest.mark.asyncio
async def test_a_lazy_file_unlinked_before_its_close_is_closed(backend: str, tmp_path: Path,
                                                               closing: str) -> None:
    """The last close of an unlinked file frees its blocks: never inline (the kernel queue
    or a worker closes it), and closed all the same."""
    p = tmp_path / "f"
    cached(p, b"abc" * 1000)
    deleted = Path(f"{p} (deleted)")
    cm = aionative.open(str(p), "rb")
    f = await cm.__aenter__()
    assert lazy(f) is expect_lazy(backend)
    p.unlink()
    assert open_fds_to(deleted) == 1
    assert await f.read() == b"abc" * 1000
    if closing == "close":
        await f.close()
    else:
        await cm.__aexit__(None, None, None)
    assert open_fds_to(deleted) == 0
    assert lazy(f) is expect_lazy(backend)  # (closed asks the stack: it builds it)
    assert f.closed


def lazy_and_spender(tmp_path: Path) -> tuple[Path, bytes, int]:
    """A cached file to open lazily, its contents, and a descriptor (the caller closes it) of
    another cached file, whose inline read spends an iteration's budget (spend_then_read)."""
    p, q = tmp_path / "f", tmp_path / "other"
    data = os.urandom(50_000)
    cached(p, data)
    cached(q, b"x")
    return p, data, os.open(q, os.O_RDONLY)


@pytest.fixture(params=["retry", "queue"])
def refused(native_backend: str, tiny_budget: None, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[tuple[Path, bytes, int]]:
    """A cached file to open lazily, its contents, and a descriptor of another cached file
    whose inline read spends an iteration's budget (lazy_and_spender). The refused read
    is retried after one turn (``retry``), or finds the budget spent past the retry's grace
    too and waits in the queue of refused calls (``queue``)."""
    if request.param == "queue":
        request.getfixturevalue("retries_refused")
    p, data, fd = lazy_and_spender(tmp_path)
    try:
        yield p, data, fd
    finally:
        os.close(fd)


async def spend_then_read(eng: Any, fd: int, f: Any) -> bytes:
    """A lazy ``read()`` in a loop iteration whose budget an inline read has spent."""
    assert eng.read(fd, 1, 0) == b"x"  # an inline call: the (1 ns) budget is spent after it
    return bytes(await f.read())


@pytest.mark.asyncio
async def test_a_read_the_budget_refused_waits_a_turn_with_the_file_locked(
        refused: tuple[Path, bytes, int], request: pytest.FixtureRequest) -> None:
    p, data, fd = refused
    eng = aionative.get_engine()
    f = await aionative.open(str(p), "rb")
    assert lazy(f)
    before = eng.stats()
    reader = asyncio.ensure_future(spend_then_read(eng, fd, f))
    teller = asyncio.ensure_future(f.tell())  # waits for the read, as any second call
    closer = asyncio.ensure_future(f.close())
    assert await reader == data
    assert await teller == len(data)
    await closer
    assert f.closed
    after = eng.stats()
    assert after["budget_exhausted"] > before["budget_exhausted"]
    assert after["submitted"] == before["submitted"]  # a later turn, not the kernel queue
    assert after["inline_retries"] == before["inline_retries"] + 1
    queued = after["retries_refused"] - before["retries_refused"]
    assert queued == (1 if request.node.callspec.params["refused"] == "queue" else 0)


@pytest.mark.asyncio
async def test_a_lazy_read_retried_after_a_turn_is_one_system_call(
        native_backend: str, tiny_budget: None, tmp_path: Path) -> None:
    """The retry of a refused lazy read is ``read_rest(True)``: it knows the descriptor (no
    ``fcntl``) and the size (a short read inside a page is the end), as the first attempt."""
    p, data, fd = lazy_and_spender(tmp_path)
    try:
        eng = aionative.get_engine()
        async with aionative.open(str(p), "rb") as f:
            assert eng.read(fd, 1, 0) == b"x"  # an inline call: the budget is spent after it
            before = eng.stats()
            assert await f.read() == data
            after = eng.stats()
            assert lazy(f)
    finally:
        os.close(fd)
    assert after["inline_retries"] - before["inline_retries"] == 1
    assert after["submitted"] == before["submitted"]
    assert after["syscalls"] - before["syscalls"] == 1


@pytest.mark.asyncio
async def test_a_read_cancelled_while_it_waits_a_turn_moves_nothing(
        refused: tuple[Path, bytes, int]) -> None:
    p, data, fd = refused
    eng = aionative.get_engine()
    async with aionative.open(str(p), "rb") as f:
        task = asyncio.ensure_future(spend_then_read(eng, fd, f))
        await asyncio.sleep(0)  # the read is now waiting for a later turn
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await f.read() == data  # from the start: the cancelled read moved nothing
        assert await f.tell() == len(data)


@pytest.mark.asyncio
async def test_an_inline_read_that_fails_builds_the_stack_and_reads(
        native_backend: str, tmp_path: Path) -> None:
    assert _backend._core is not None
    p = tmp_path / "f"
    data = os.urandom(70_000)
    cached(p, data)
    async with aionative.open(str(p), "rb") as f:
        assert lazy(f)
        _backend._core.set_fault("inline", errno.EAGAIN, 1)
        assert await f.read() == data
        assert not lazy(f)
        assert await f.tell() == len(data)


@pytest.fixture(params=[0, 1, 4096, 3 << 20])  # 3 MiB: past the inline limit
def sized_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, bytes]:
    """A cached file of each size, made before the test's loop runs (drawing, writing and
    reading back 3 MiB on the loop's thread holds it for longer than the loop guard allows)."""
    p = tmp_path / "f"
    data = os.urandom(request.param)
    cached(p, data)
    return p, data


@pytest.mark.asyncio
async def test_sizes(backend: str, sized_file: tuple[Path, bytes]) -> None:
    p, data = sized_file
    size = len(data)
    async with aionative.open(str(p), "rb") as f:
        assert await f.read() == data
        assert await f.read() == b""
        assert await f.tell() == size


@pytest.mark.parametrize("size,reads", [(1000, 1), (5000, 1), (4096, 2), (8192, 2), (0, 1)])
@pytest.mark.asyncio
async def test_a_read_to_an_end_inside_a_page_needs_no_second_read(
        native_backend: str, tmp_path: Path, size: int, reads: int) -> None:
    """Asking for the size plus one byte, a short read ends at the end of the file, or where
    the page cache stops holding it, which is a page boundary: a short read that ends at the
    size the open saw, inside a page, is the end; at a page boundary a second read (of 0
    bytes) proves it."""
    p = tmp_path / "f"
    data = os.urandom(size)
    cached(p, data)
    async with aionative.open(str(p), "rb") as f:
        before = aionative.engine_stats()["syscalls"]
        assert await f.read() == data
        assert aionative.engine_stats()["syscalls"] - before == reads
        assert lazy(f)


@pytest.mark.asyncio
async def test_a_file_that_grew_after_the_open_is_read_to_its_new_end(
        backend: str, tmp_path: Path) -> None:
    p = tmp_path / "f"
    cached(p, b"a" * 1000)
    with open(p, "rb") as g:  # noqa: ASYNC230 - the builtin, for comparison
        async with aionative.open(str(p), "rb") as f:
            with open(p, "ab") as w:  # noqa: ASYNC230
                w.write(b"b" * 5000)
            expected = g.read()
            assert len(expected) == 6000
            assert await f.read() == expected
            assert await f.tell() == 6000


@pytest.mark.asyncio
async def test_not_regular_files_and_errors_are_the_builtins(backend: str,
                                                            tmp_path: Path) -> None:
    for target in (tmp_path, tmp_path / "missing", str(tmp_path / "bad\0name")):
        with pytest.raises((OSError, ValueError)) as sync_exc:
            open(target, "rb")  # noqa: ASYNC230, SIM115
        with pytest.raises((OSError, ValueError)) as our_exc:
            await aionative.open(str(target), "rb")
        assert type(our_exc.value) is type(sync_exc.value)
        assert getattr(our_exc.value, "errno", None) == getattr(sync_exc.value, "errno", None)
    with open("/proc/version", "rb") as g:  # noqa: ASYNC230 - size 0, content nonetheless
        expected = g.read()
    async with aionative.open("/proc/version", "rb") as f:
        assert await f.read() == expected


@pytest.mark.parametrize("mode", ["rb", "r"])  # "r": the coroutine-backed manager
@pytest.mark.asyncio
async def test_what_open_returns_is_awaited_once_and_reused(backend: str, tmp_path: Path,
                                                            mode: str) -> None:
    """An ``rb`` open returns a manager that calls the engine itself (no coroutine of its
    own); it behaves as every other mode's: awaiting it again or entering it returns the same
    file, a failed open cannot be awaited again, and one never awaited opens nothing."""
    p = tmp_path / "f"
    cached(p, b"abc")
    fds = open_fds_to(p)
    cm = aionative.open(str(p), mode)
    assert isinstance(cm, aionative.AiofilesContextManager)
    f1 = await cm
    assert await cm is f1
    async with cm as f2:
        assert f2 is f1
        assert await f1.read() in (b"abc", "abc")
    assert f1.closed and open_fds_to(p) == fds
    missing = aionative.open(str(tmp_path / "missing"), mode)
    with pytest.raises(FileNotFoundError):
        await missing
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        await missing
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        async with missing:
            pass
    never = aionative.open(str(p), mode)
    del never  # no "never awaited" warning (warnings are errors here), nothing opened
    gc.collect()
    assert open_fds_to(p) == fds


@pytest.mark.asyncio
async def test_an_rb_open_served_inline_runs_no_coroutine(backend: str, tmp_path: Path) -> None:
    """What makes the common case cheap (``_core.RbOpen``): when the engine opens and closes
    the file inline, ``__aenter__``, ``__await__`` and ``__aexit__`` return awaitables that
    finish at once, not coroutines. On the threads backend (no inline open) they are the
    coroutines of ``open_file`` and ``close()``; the file is the same either way."""
    p = tmp_path / "f"
    cached(p, b"abc")
    fds = open_fds_to(p)
    inline = expect_lazy(backend)
    cm = aionative.open(str(p), "rb")
    enter = cm.__aenter__()
    assert inspect.iscoroutine(enter) is not inline
    f = await enter
    assert lazy(f) is inline
    assert cm._obj is f
    again = cm.__await__()  # the same file, at once, on every backend
    with pytest.raises(StopIteration) as stop:
        next(again)
    assert stop.value.value is f
    leave = cm.__aexit__(None, None, None)
    assert inspect.iscoroutine(leave) is not inline
    assert await leave is None
    assert f.closed and cm._obj is None and open_fds_to(p) == fds
    if inline:
        first = aionative.open(str(p), "rb").__await__()
        with pytest.raises(StopIteration) as stop:
            next(first)  # opened without suspending
        g = stop.value.value
        assert lazy(g) and await g.read() == b"abc"
        await g.close()
    assert open_fds_to(p) == fds


def test_an_rb_open_uses_the_running_loops_engine(native_backend: str,
                                                  loop: asyncio.AbstractEventLoop,
                                                  tmp_path: Path) -> None:
    """``RbOpen`` reuses the engine ``get_engine()`` last returned only while it serves the
    running loop on this thread: another loop (the first one's engine still open), a closed
    engine, or another thread's loop each get their own engine."""
    p = tmp_path / "f"
    cached(p, b"abc")
    fds = open_fds_to(p)

    async def open_read() -> tuple[Any, Any]:
        async with aionative.open(str(p), "rb") as f:
            assert lazy(f) and await f.read() == b"abc"
            return f._lazy.engine(), aionative.get_engine()

    async def after_close_engine() -> tuple[Any, Any]:
        aionative.close_engine()
        return await open_read()

    other = type(loop)()
    try:
        first, running = loop.run_until_complete(open_read())
        assert first is running
        second, running = other.run_until_complete(open_read())
        assert second is running and second is not first and not first.closed
        assert loop.run_until_complete(open_read())[0] is first
        third, running = loop.run_until_complete(after_close_engine())
        assert third is running and third is not first and first.closed
        seen: list[tuple[Any, Any]] = []
        th = threading.Thread(target=lambda: seen.append(asyncio.run(open_read())))
        th.start()
        th.join()
        assert len(seen) == 1 and seen[0][0] is seen[0][1] and seen[0][0] is not third
        assert loop.run_until_complete(open_read())[0] is third
    finally:
        other.run_until_complete(other.shutdown_asyncgens())
        other.close()
    assert open_fds_to(p) == fds


@pytest.mark.asyncio
async def test_a_lazy_file_outlives_its_engine(backend: str, tmp_path: Path) -> None:
    p = tmp_path / "f"
    data = os.urandom(20_000)
    cached(p, data)
    fds = open_fds_to(p)
    f = await aionative.open(str(p), "rb")
    aionative.close_engine()  # the next call makes a new one
    assert await f.read() == data
    aionative.close_engine()
    await f.close()
    assert f.closed and open_fds_to(p) == fds


def test_a_lazy_file_opened_in_one_loop_reads_and_closes_in_another(
        backend: str, tmp_path: Path) -> None:
    p = tmp_path / "f"
    data = os.urandom(20_000)
    cached(p, data)
    fds = open_fds_to(p)
    first, second = (factory() for factory in list(LOOP_FACTORIES.values())[:1] * 2)
    try:
        f = first.run_until_complete(aionative.open(str(p), "rb"))
        first.run_until_complete(first.shutdown_asyncgens())
        first.close()  # its engine is closed with it
        assert second.run_until_complete(f.read()) == data
        second.run_until_complete(f.close())
        assert f.closed and open_fds_to(p) == fds
    finally:
        if not first.is_closed():
            first.close()
        second.run_until_complete(second.shutdown_asyncgens())
        second.close()


@st.composite
def lazy_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """``rb`` with every default (a lazy file), sequences that often start with, or repeat,
    ``read()`` to the end, followed by any binary operation."""
    to_end = st.sampled_from([("read", -1), ("read", None), ("read", -7)])
    ops = draw(st.lists(st.one_of(to_end, to_end, binary_ops()), max_size=12))
    return {"mode": "rb", "kw": {}, "ops": ops, "content": draw(contents()),
            "exists": True, "direct": False}


@settings(max_examples=max(EXAMPLES // 5, 20), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(sc=lazy_scenarios())
def test_lazy_files_are_the_same_as_builtin_open(backend: str, loop: asyncio.AbstractEventLoop,
                                                 tmp_path: Path, sc: dict[str, Any]) -> None:
    loop.run_until_complete(run_scenario(tmp_path, sc))


@pytest.mark.asyncio
async def test_every_engines_read_inline(backend: str, tmp_path: Path) -> None:
    """``read_inline``: the bytes when cached, False once the budget is spent (nothing
    queued), None when the read cannot run inline (the fast path off)."""
    p = tmp_path / "f"
    data = os.urandom(5000)
    cached(p, data)
    fd = os.open(p, os.O_RDONLY)
    try:
        eng = aionative.get_engine()
        aionative.set_inline_budget(1e6)  # a preempted test must not find the default spent
        before = eng.stats()
        assert eng.read_inline(fd, len(data) + 1, 0) == data
        assert eng.read_inline(fd, 100, 4950) == data[4950:]
        aionative.set_inline_budget(0.001)
        await asyncio.sleep(0)  # a new iteration, a new window
        assert eng.read_inline(fd, 10, 0) == data[:10]  # the window's first call runs
        assert eng.read_inline(fd, 10, 0) is False
        aionative.set_inline_budget(0)
        assert eng.read_inline(fd, 10, 0) is None
        assert eng.stats()["submitted"] == before["submitted"]
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
