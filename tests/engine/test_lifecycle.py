"""Engine life cycle: many loops, forked children, threads with their own loops, loops closed
while the kernel still holds operations."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _core
from tests.support import LOOP_FACTORIES, child_env, cold_file

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


@pytest.fixture(params=sorted(LOOP_FACTORIES))
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    return LOOP_FACTORIES[request.param]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _aio_rings() -> int:
    """This process's Linux AIO contexts: each maps its ring (``/[aio]``). The system-wide
    ``/proc/sys/fs/aio-nr`` counts every process's (a CI run failed on another test process's
    context), and is the sum of these rings' sizes over all processes."""
    with open("/proc/self/maps") as f:
        return sum("/[aio]" in line for line in f)


def _run(loop_factory: LoopFactory, coro: object) -> object:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)  # type: ignore[arg-type]


@pytest.mark.usefixtures("backend")
def test_1000_asyncio_runs_leave_fds_and_aio_contexts_flat(
        data_file: tuple[Path, bytes], loop_factory: LoopFactory) -> None:
    path, data = data_file
    fd = os.open(path, os.O_RDONLY)

    async def io() -> bytes:
        return await aionative.pread(fd, 4096, 8192)

    try:
        for _ in range(5):  # warm-up: imports, the AIO context pool
            assert _run(loop_factory, io()) == data[8192:12288]
        gc.collect()
        fds, rings, threads = _open_fds(), _aio_rings(), threading.active_count()
        contexts = _core.debug_counters()["aio_contexts"]
        for _ in range(1000):
            assert _run(loop_factory, io()) == data[8192:12288]
        gc.collect()
        assert _open_fds() == fds
        assert threading.active_count() == threads
        assert _core.debug_counters()["engines"] == 0
        assert _core.debug_counters()["aio_contexts"] == contexts  # the engine's count
        assert _aio_rings() == rings  # the kernel's
    finally:
        os.close(fd)


@pytest.mark.usefixtures("backend")
def test_forked_child_does_io_and_parent_keeps_working(
        data_file: tuple[Path, bytes], loop_factory: LoopFactory) -> None:
    path, data = data_file
    fd = os.open(path, os.O_RDONLY)
    loop = loop_factory()
    try:
        async def parent_io(n: int) -> None:
            results = await asyncio.gather(
                *[aionative.pread(fd, 4096, i * 4096) for i in range(n)])
            assert results == [data[i * 4096:(i + 1) * 4096] for i in range(n)]

        async def fork_with_reads_in_flight() -> int:
            tasks = [asyncio.ensure_future(aionative.pread(fd, 65536, i * 65536))
                     for i in range(16)]
            await asyncio.sleep(0)  # submitted: some may still be with the kernel
            pid = os.fork()
            if pid == 0:  # child: a new loop in a new thread, never the parent's ring
                ok = []
                th = threading.Thread(target=lambda: ok.append(
                    _run(loop_factory, child_io()) == data[:100000]))
                th.start()
                th.join()
                os._exit(0 if ok == [True] else 1)
            got = await asyncio.gather(*tasks)
            assert got == [data[i * 65536:(i + 1) * 65536] for i in range(16)]
            return pid

        async def child_io() -> bytes:
            return await aionative.pread(fd, 100000, 0)

        loop.run_until_complete(parent_io(64))
        pid = loop.run_until_complete(fork_with_reads_in_flight())
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        loop.run_until_complete(parent_io(256))  # the parent's engine is untouched
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        os.close(fd)


@pytest.mark.usefixtures("backend")
def test_four_threads_with_their_own_loops(data_file: tuple[Path, bytes],
                                           loop_factory: LoopFactory) -> None:
    path, data = data_file
    fd = os.open(path, os.O_RDONLY)
    engines: list[object] = []
    errors: list[BaseException] = []

    async def work(seed: int) -> None:
        engines.append(aionative.get_engine())
        for round_ in range(20):
            offs = [((seed * 7919 + round_ * 104729 + i * 4099) % (len(data) - 5000))
                    for i in range(100)]
            got = await asyncio.gather(*[aionative.pread(fd, 5000, o) for o in offs])
            assert got == [data[o:o + 5000] for o in offs]

    def thread_main(seed: int) -> None:
        try:
            _run(loop_factory, work(seed))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.close(fd)
    assert not errors, errors
    assert len({id(e) for e in engines}) == 4


@pytest.mark.usefixtures("native_backend")
def test_loop_closed_with_operations_in_flight_drains_them(
        tmp_path: Path, loop_factory: LoopFactory) -> None:
    """Closing a loop whose engine still has reads and writes with the kernel: the engine is
    drained before anything is freed; the writes that were submitted reach the file."""
    path = tmp_path / "inflight"
    data = os.urandom(8 << 20)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # cold: reads take a while
    loop = loop_factory()
    # The tasks are abandoned on purpose; asyncio logs "Task was destroyed but it is pending".
    loop.set_exception_handler(lambda loop, context: None)
    buf = bytearray(1 << 20)
    payload = os.urandom(1 << 20)
    try:
        reads = [loop.create_task(aionative.pread(fd, 1 << 20, i << 20)) for i in range(6)]
        into = loop.create_task(aionative.preadinto(fd, buf, 0))
        write = loop.create_task(aionative.pwrite(fd, payload, 7 << 20))
        loop.run_until_complete(asyncio.sleep(0))  # one iteration: everything submitted
        del reads, into, write
    finally:
        loop.close()  # no shutdown_asyncgens: the hard way
    gc.collect()
    counters = _core.debug_counters()
    assert counters["live_ops"] == 0 and counters["pinned_buffers"] == 0, counters
    assert counters["engines"] == 0, counters
    buf.extend(b"x")  # no longer exported
    os.lseek(fd, 0, os.SEEK_SET)
    assert os.pread(fd, 1 << 20, 7 << 20) == payload
    os.close(fd)


@pytest.mark.uses_internals("3.11's running-loop holder")
def test_running_loop_answers_as_asyncio_does(loop_factory: LoopFactory) -> None:
    """``_core.running_loop()`` (get_engine's way to find the loop without asyncio's getpid
    on 3.11): the running loop, in the loop and in its threads' own loops; None outside a
    loop and in a forked child, where asyncio says there is no running loop either."""
    assert _core.running_loop() is None

    async def inside() -> bool:
        loop = asyncio.get_running_loop()
        if sys.version_info >= (3, 12):
            return _core.running_loop() is None   # 3.12's asyncio is as fast: no shortcut
        assert _core.running_loop() is loop  # remembered: the forked child must not take it
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                os._exit(0 if _core.running_loop() is None else 1)
            os._exit(2)
        _, status = os.waitpid(pid, 0)  # noqa: ASYNC222 - the child exits at once
        seen = []
        th = threading.Thread(target=lambda: seen.append(_run(loop_factory, in_thread())))
        th.start()
        th.join()
        return (_core.running_loop() is loop and os.waitstatus_to_exitcode(status) == 0
                and seen == [True])

    async def in_thread() -> bool:
        return _core.running_loop() is asyncio.get_running_loop()

    assert _run(loop_factory, inside()) is True
    assert _core.running_loop() is None


_CLOSED_ENGINE_SCRIPT = r"""
import asyncio, os, sys
import aionative
from aionative._engine import get_engine

backend, how, loop_name, path = sys.argv[1:5]


class ClosesTheEngine(bytearray):
    def __del__(self):
        get_engine().close()  # from inside the engine's reap: carried out when it returns


async def main():
    aionative.set_inline_budget(0)
    eng = get_engine(backend)
    fd = os.open(path, os.O_RDWR)
    if how == "direct":
        eng.close()
    else:
        await eng.preadinto(fd, ClosesTheEngine(100), 0)  # freed in op_finish
        await asyncio.sleep(0)
    assert eng.closed
    for i in range(16):
        os.pwrite(fd, b"d" * (1 << 20), i << 20)  # dirty: the fsync needs a wake-up
    await asyncio.wait_for(aionative.fsync(fd), 20)
    assert get_engine() is not eng and not get_engine().closed
    os.close(fd)
    print("OK")


if loop_name == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""


@pytest.mark.parametrize("how", ["direct", "from_its_reap"])
@pytest.mark.parametrize("loop_name", sorted(LOOP_FACTORIES))
def test_an_engine_closed_outside_the_library_leaves_no_reader(
        native_backend: str, tmp_path: Path, how: str, loop_name: str) -> None:
    """An engine closed by its own ``close()`` — directly, or asked for from code its reap
    ran and carried out when the reap returned — takes its eventfd off the loop before closing
    it. The reader once stayed on the closed number: the next engine's eventfd took that
    number, asyncio only swapped the reader's callback (the new descriptor never polled: the
    next operation that needed a wake-up waited forever) and libuv aborted the process. In a
    fresh interpreter, so that an abort fails this test and not the run."""
    path = tmp_path / "f"
    path.write_bytes(b"q" * 8192)
    proc = subprocess.run([sys.executable, "-P", "-c", _CLOSED_ENGINE_SCRIPT, native_backend,
                           how, loop_name, str(path)], capture_output=True, text=True,
                          timeout=120, check=False, env=child_env())
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", (proc.returncode,
                                                                  proc.stderr[-2000:])


@pytest.mark.usefixtures("linux_aio")
def test_closing_an_engine_after_its_loop_reads_no_more_of_a_detour(tmp_path: Path) -> None:
    """The loop closed while a read is on its detour: nobody can receive the result, so the
    engine's close lets the piece with the kernel finish and reads no further one. It read the
    rest of the file, piece after piece, inside close() (127 pieces of 4 MiB, a second, for
    a 512 MiB read)."""
    size = 16 * _core.DETOUR_MAX
    fd, _ = cold_file(tmp_path / "cold", size)

    async def start() -> tuple[Any, Any]:
        eng = aionative.get_engine()
        before = eng.stats()["direct_reissues"]
        fut = eng.pread(fd, size, 0)
        while eng.stats()["direct_reissues"] == before and not fut.done():
            await asyncio.sleep(0)
        return eng, fut

    aionative.set_inline_budget(0)
    try:
        for _attempt in range(3):  # the device may answer the first probe from readahead
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            loop = asyncio.new_event_loop()
            try:
                eng, fut = loop.run_until_complete(start())
            finally:
                loop.close()
            on_detour = eng.stats()["direct_reissues"]
            eng.close()
            if not fut.done() or on_detour > 1:
                break
        assert on_detour > 0, "three reads ended before their detour began"
        assert eng.stats()["direct_reissues"] == on_detour
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
