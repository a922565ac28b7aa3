"""Writes larger than the buffer: the kernel writes them from the caller's own object (no copy
of the data, whatever its type), they start as soon as they are made and never run on the
loop's thread, and the caller's buffer is the caller's again only once the kernel is done with
it, cancelled or not."""

from __future__ import annotations

import array
import asyncio
import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import aionative
from aionative import _core, _kernelops
from tests.support import child_env

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend")]

MiB = 1 << 20


@pytest.fixture
def fast_dir(tmp_path: Path) -> Path:
    """A directory on a tmpfs where there is one (large writes are quick there), else tmp."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        d = shm / f"aionative-{os.getpid()}-{tmp_path.name}"
        d.mkdir()
        yield d
        for p in d.iterdir():
            p.unlink()
        d.rmdir()
    else:
        yield tmp_path


def _loop_name() -> str:
    return "uvloop" if "uvloop" in type(asyncio.get_running_loop()).__module__ else "asyncio"


# --- no copy ---------------------------------------------------------------------------

_RSS_CHILD = textwrap.dedent("""
    import asyncio, json, os, sys
    import aionative

    def status_mib(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024

    kind, where, files, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if sys.argv[5] == "uvloop":
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    if kind == "text":
        payload = "abcdefg\\n" * (size // 8)
    elif kind == "bytearray":
        payload = bytearray(os.urandom(size))
    else:
        payload = os.urandom(size)

    async def one(i):
        mode = "w" if kind == "text" else "wb"
        async with aionative.open(os.path.join(where, f"f{i}"), mode) as f:
            await f.write(payload)

    async def main():
        await one(0)  # the engine, the modules: everything but the writes' own memory
        before = status_mib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak (VmHWM) starts again from here (Linux 4.0)
        await asyncio.gather(*(one(i) for i in range(files)))
        return before, status_mib("VmHWM")

    before, peak = asyncio.run(main())
    print(json.dumps({"before": before, "peak": peak}))
""")


@pytest.mark.parametrize("kind", ["bytes", "bytearray"])
async def test_ten_concurrent_large_writes_add_no_copy_of_the_data(fast_dir: Path, kind: str,
                                                                 backend: str) -> None:
    """Ten files written at once from one 64 MiB object: peak memory grows by far less than
    one copy of it (ten copies, 640 MiB, when each write's data was copied and held)."""
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-P", "-c", _RSS_CHILD, kind, str(fast_dir), "10", str(64 * MiB),
         _loop_name()],
        env=child_env(AIONATIVE_BACKEND=backend),
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["peak"] - got["before"] <= 48, got
    for i in range(10):
        assert (fast_dir / f"f{i}").stat().st_size == 64 * MiB


async def test_a_large_text_write_makes_one_copy_the_encoded_bytes(fast_dir: Path,
                                                                   backend: str) -> None:
    """As the builtin: the text is encoded once, and those bytes are what the kernel writes
    (before, the raw layer copied them and the read window a third time)."""
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-P", "-c", _RSS_CHILD, "text", str(fast_dir), "1", str(64 * MiB),
         _loop_name()],
        env=child_env(AIONATIVE_BACKEND=backend),
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["peak"] - got["before"] <= 64 + 40, got
    assert await asyncio.to_thread(lambda: (fast_dir / "f0").read_bytes() ==
                                   b"abcdefg\n" * (8 * MiB))


# --- the caller's buffer ---------------------------------------------------------------
# (The data is made, and the files compared, off the loop's thread: the suite's guard fails a
# test whose own body holds the loop.)

@pytest.fixture(scope="module")
def data32() -> bytes:
    return os.urandom(32 * MiB)


async def _same(path: Path, data: bytes | bytearray) -> bool:
    return await asyncio.to_thread(lambda: path.read_bytes() == data)


@pytest.mark.parametrize("make", [bytearray, lambda b: array.array("q", b),
                                  lambda b: memoryview(bytearray(b))],
                         ids=["bytearray", "array", "memoryview"])
async def test_a_large_write_exports_the_callers_buffer_until_it_is_done(
        fast_dir: Path, make: object, data32: bytes) -> None:
    data = data32
    buf = await asyncio.to_thread(make, data)  # type: ignore[arg-type]
    async with aionative.open(fast_dir / "f", "wb") as f:
        task = asyncio.ensure_future(f.write(buf))
        await asyncio.sleep(0)
        if isinstance(buf, bytearray) and not task.done():
            with pytest.raises(BufferError):
                buf.append(0)  # exported, not copied: it cannot be resized meanwhile
        assert await task == 32 * MiB
        if isinstance(buf, bytearray):
            buf.append(0)  # the write's await is over: the caller's again
            del buf[-1]
    assert await _same(fast_dir / "f", data)


@pytest.mark.blocks_the_loop("zeroes the caller's 32 MiB buffer the moment its write's await "
                              "ends, on the loop's thread, which is what it tests")
async def test_a_cancelled_large_write_ends_when_the_kernel_has_read_the_buffer(
        fast_dir: Path, data32: bytes) -> None:
    """The await ends (CancelledError) only once the kernel is done reading the caller's
    buffer: zeroing it at once does not reach the file, and the write is reported done."""
    data = data32
    buf = bytearray(data)
    async with aionative.open(fast_dir / "f", "wb") as f:
        task = asyncio.ensure_future(f.write(buf))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        buf[:] = bytes(len(buf))
        buf.append(0)  # no longer exported
    assert await _same(fast_dir / "f", data)


async def test_a_large_pwrite_is_the_callers_buffer_until_it_is_done(fast_dir: Path,
                                                                    data32: bytes) -> None:
    buf = await asyncio.to_thread(bytearray, data32)
    async with aionative.open(fast_dir / "f", "w+b") as f:
        assert await f.pwrite(buf, 4096) == len(buf)
        buf.append(0)
        assert await f.read(4096) == bytes(4096)
    assert await asyncio.to_thread(lambda: (fast_dir / "f").read_bytes()[4096:] == data32)


# --- off the loop's thread, at once -----------------------------------------------------

async def test_large_writes_are_sent_off_the_loops_thread(fast_dir: Path,
                                                          data32: bytes) -> None:
    data = data32[:4 * MiB]
    before = aionative.engine_stats().get("async_writes", 0)
    async with aionative.open(fast_dir / "f", "wb") as f:
        await f.write(data)
        await f.write(memoryview(data))
    fd = os.open(fast_dir / "g", os.O_WRONLY | os.O_CREAT)
    try:
        await aionative.pwrite(fd, data, 0)
    finally:
        os.close(fd)
    info = aionative.backend_info()
    assert aionative.engine_stats()["async_writes"] - before == 3
    assert info["large_writes_from"] == 256 << 10
    if info["backend"] != "io_uring":  # (io_uring's are the kernel's io-wq workers)
        assert 1 <= info["writer_threads"] <= 4


async def test_the_close_of_a_large_file_is_sent_off_the_loops_thread(backend: str,
                                                                      tmp_path: Path) -> None:
    """io_uring closes a descriptor inside the call that submits the close, and the file's
    release with it (on ext4, the writeback of all of a truncated file's new data): a regular
    file of 256 KiB or more, or anything else, is closed by an io-wq worker; a smaller file
    inline, as before. (Linux AIO and the threads backend close in the executor's threads.)"""
    if backend != "io_uring":
        pytest.skip("the other backends close every writable descriptor in a thread")

    def sent() -> int:
        return int(aionative.engine_stats()["async_closes"])

    before = sent()
    async with aionative.open(tmp_path / "small", "wb") as f:
        await f.write(bytes(128 << 10))
    assert sent() == before
    async with aionative.open(tmp_path / "large", "wb") as f:
        await f.write(bytes(256 << 10))
    assert sent() == before + 1
    r, w = os.pipe()
    try:
        async with aionative.open(w, "wb") as f:
            await f.write(b"x")
        assert sent() == before + 2
        assert os.read(r, 2) == b"x"
    finally:
        os.close(r)


def _writer_nice(name: str = "aionative-write") -> list[int]:
    """The nice values of this process's writer threads (Linux AIO's C threads are named
    ``aionative-write``; the threads backend's are Python threads of that name), or of its
    threads of another ``name`` (Linux AIO's openers: ``aionative-open``)."""
    tids = {t.native_id for t in threading.enumerate() if t.name.startswith(name)}
    for task in Path("/proc/self/task").iterdir():
        if (task / "comm").read_text().strip() == name:
            tids.add(int(task.name))
    nice = []
    for tid in tids:
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        nice.append(int(stat.rsplit(")", 1)[1].split()[16]))
    return nice


async def test_writer_threads_run_at_a_lower_priority_than_the_loop(fast_dir: Path,
                                                                    backend: str) -> None:
    """Ten large writes keep every CPU copying: the threads that copy (Linux AIO's and the
    threads backend's; io_uring's are the kernel's) yield to the loop's thread when it wakes."""
    if backend == "io_uring":
        pytest.skip("io_uring's large writes are its kernel workers'")
    async with aionative.open(fast_dir / "f", "wb") as f:
        await f.write(bytes(MiB))
    loop_nice = os.getpriority(os.PRIO_PROCESS, 0)
    nice = _writer_nice()
    assert nice and all(n == min(loop_nice + 10, 19) for n in nice), (loop_nice, nice)


@pytest.mark.blocks_the_loop("a task that computes without yielding is what it tests")
async def test_a_large_write_is_under_way_while_other_tasks_compute(fast_dir: Path,
                                                                    data32: bytes) -> None:
    """A task's write starts when it is made, not at the end of the loop's iteration: a task
    that computes without yielding, right after, sees the file filled meanwhile."""
    path = fast_dir / "f"
    data = data32[:16 * MiB]
    seen: list[int] = []

    async def compute() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.stat(path).st_size < len(data):
            pass
        seen.append(os.stat(path).st_size)

    async with aionative.open(path, "wb") as f:
        computing = asyncio.ensure_future(compute())  # runs when the write's call waits
        await f.write(data)
        await computing
    assert seen == [len(data)]


@pytest.mark.blocks_the_loop("a task that computes without yielding is what it tests")
@pytest.mark.uses_internals("the engine calling its tasks' wake-ups itself")
async def test_files_opened_for_writing_beside_a_computing_task_are_written_meanwhile(
        backend: str, fast_dir: Path, data32: bytes) -> None:
    """Ten tasks open files for writing and write them, gathered with a task that, after one
    turn of the loop, computes without yielding. The opens (a kernel worker's on io_uring:
    O_CREAT and O_TRUNC cannot be tried without blocking; a writer thread's on Linux AIO) are
    sent inside their calls and the next iteration's flush, which runs before the computing
    task, waits for them (up to OPEN_WAIT_NS): the writes are under way, and done, while it
    computes."""
    if backend == "threads":
        pytest.skip("the threads backend's opens are the executor's, answered through the loop")
    data = data32[:8 * MiB]
    paths = [fast_dir / f"f{i}" for i in range(10)]

    async def one(path: Path) -> None:
        async with aionative.open(path, "wb") as f:
            await f.write(data)

    async def compute(seen: list[int]) -> None:
        await asyncio.sleep(0)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not all(
                p.exists() and p.stat().st_size == len(data) for p in paths):
            pass
        seen.extend(p.stat().st_size if p.exists() else 0 for p in paths)

    # A worker that is slow to start (a loaded machine) can miss the bound: a few attempts.
    for _ in range(3):
        for p in paths:
            p.unlink(missing_ok=True)
        seen: list[int] = []
        await asyncio.gather(*(one(p) for p in paths), compute(seen))
        if seen == [len(data)] * len(paths):
            break
    assert seen == [len(data)] * len(paths)


@pytest.fixture
def data96() -> bytes:
    return b"w" * (96 * MiB)


async def test_linux_aio_opens_do_not_wait_for_the_writes_its_threads_hold(
        backend: str, fast_dir: Path, data96: bytes) -> None:
    """Linux AIO's four writer threads write the large writes; an open does not wait behind
    them for one to be free: six 96 MiB writes to six files, then an open that creates a
    file, sent once four threads are busy with them (two wait). The open is done by an
    opener thread (two at most), at the loop's weight, while those writes are still being
    copied: no file is whole yet when its caller has the descriptor (waiting for a writer
    thread, it would come after one at least). An opener takes no write."""
    if backend != "linux_aio":
        pytest.skip("Linux AIO's writer threads")
    data = data96
    fds = [os.open(fast_dir / f"big{i}", os.O_WRONLY | os.O_CREAT) for i in range(6)]
    sizes: list[int] = []

    async def create() -> None:
        deadline = time.monotonic() + 20
        while sum(os.fstat(fd).st_size > 0 for fd in fds) < 4:  # four threads are writing
            assert time.monotonic() < deadline, "the writer threads did not start"
            await asyncio.sleep(0)
        os.close(await _kernelops.open_fd(fast_dir / "new", os.O_WRONLY | os.O_CREAT, 0o644))
        sizes.extend(os.fstat(fd).st_size for fd in fds)

    try:
        await asyncio.gather(*(aionative.pwrite(fd, data, 0) for fd in fds), create())
        # Every thread idle now, the opener first: a write queued next is a writer's (a
        # wake-up the opener took would leave it in the queue).
        assert await asyncio.wait_for(aionative.pwrite(fds[0], data[:MiB], 0), 20) == MiB
    finally:
        for fd in fds:
            os.close(fd)
    assert max(sizes) < len(data), sizes
    info = aionative.backend_info()
    assert (info["writer_threads"], info["open_threads"]) == (4, 1)
    assert _writer_nice("aionative-open") == [os.getpriority(os.PRIO_PROCESS, 0)]  # the loop's


async def test_linux_aio_opens_and_writes_without_a_writer_thread(
        backend: str, fast_dir: Path, data32: bytes) -> None:
    """Where no writer thread can be started (pthread_create failing: a process at its thread
    limit), an open Linux AIO was given is made inside the call and finished by the next
    reap, and a large write goes to io_submit: the file is opened, written and closed as
    anywhere, on no thread."""
    if backend != "linux_aio":
        pytest.skip("Linux AIO's writer threads")
    _core.set_fault("writer_start", errno.EAGAIN, -1)
    before = aionative.engine_stats().get("async_writes", 0)
    async with aionative.open(fast_dir / "f", "wb") as f:
        await f.write(data32[:4 * MiB])
    info = aionative.backend_info()
    assert (info["writer_threads"], info["open_threads"]) == (0, 0)
    assert aionative.engine_stats().get("async_writes", 0) == before
    assert await _same(fast_dir / "f", data32[:4 * MiB])
    async with aionative.open(fast_dir / "f", "r+b") as f:  # an open that neither creates
        assert await f.read(3) == data32[:3]                # nor truncates: the executor's
