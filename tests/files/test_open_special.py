"""``aionative.open`` on what is not a regular file on disk — FIFOs, pipes, character devices,
``/proc`` and ``/sys`` — and under cancellation; and the io_uring backend's promise of no
thread for opens, reads, writes, stats and closes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import aionative
import aionative.os
from tests.support import cancel_after_a_turn, evict

pytestmark = pytest.mark.asyncio


# A read that blocked the loop would stall the ticker for a whole writer pause; the bound
# leaves room for a shared, noisy machine's scheduling hiccups.
WRITER_PAUSE = 0.25
MAX_LAG = 0.1


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def user_thread_ids() -> set[str]:
    """Threads of this process that run user code: not the kernel's io_uring workers
    (``iou-wrk-*``, ``iou-sqp-*``), which are listed among the tasks but never return to
    user space."""
    ids = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except FileNotFoundError:
            continue
        if not comm.startswith("iou-"):
            ids.add(tid)
    return ids


class Ticker:
    """A 1 ms ticker on the running loop: how late does it wake up?"""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            self.lags.append(time.perf_counter() - t0 - 0.001)

    def __enter__(self) -> Ticker:  # noqa: PYI034
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    @property
    def worst(self) -> float:
        return max(self.lags, default=0.0)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def slow_writer(path: Path, chunks: list[bytes], delay: float,
                opened: threading.Event | None = None) -> threading.Thread:
    """Open the FIFO for writing and write `chunks`, `delay` seconds apart, from a thread."""
    def run() -> None:
        with open(path, "wb", buffering=0) as w:
            if opened is not None:
                opened.set()
            for chunk in chunks:
                time.sleep(delay)
                w.write(chunk)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


async def test_fifo_slow_writer_never_blocks_the_loop(backend: str, fifo: Path) -> None:
    lines = [f"line {i} é\n".encode() for i in range(4)]
    writer = slow_writer(fifo, lines, WRITER_PAUSE)
    with Ticker() as ticker:
        async with aionative.open(fifo, encoding="utf-8") as f:
            got = [line async for line in f]
    writer.join(5)
    assert got == [line.decode() for line in lines]
    assert len(ticker.lags) > 50  # the ticker kept running while we waited for the writer
    assert ticker.worst < MAX_LAG, f"loop blocked for {ticker.worst * 1000:.1f} ms"


async def test_fifo_binary_reads_return_what_the_builtin_returns(backend: str,
                                                                 fifo: Path) -> None:
    chunks = [b"abc", b"defgh\n", b"ij\nkl", b""]
    writer = slow_writer(fifo, chunks, WRITER_PAUSE)
    with Ticker() as ticker:
        f = await aionative.open(fifo, "rb")
        try:
            assert not await f.seekable()
            assert await f.read(5) == b"abcde"          # waits for 5 bytes, like the builtin
            assert await f.readline() == b"fgh\n"
            assert await f.read1(100) in (b"ij\nkl", b"ij\n")  # one read: what's there
            rest = await f.read()
            with pytest.raises(OSError) as exc:
                await f.tell()
            assert exc.value.errno == 29  # ESPIPE, as the builtin
        finally:
            await f.close()
    writer.join(5)
    assert rest in (b"", b"kl")
    assert ticker.worst < MAX_LAG


async def test_fifo_open_waits_for_a_writer_without_blocking(backend: str, fifo: Path) -> None:
    """open(2) of a FIFO for reading blocks until a writer appears: not the loop."""
    with Ticker() as ticker:
        opening = asyncio.ensure_future(aionative.open(fifo, "rb"))
        await asyncio.sleep(0.1)
        assert not opening.done()
        writer = slow_writer(fifo, [b"x"], 0.0)
        f = await asyncio.wait_for(opening, 5)
        assert await f.read() == b"x"
        await f.close()
    writer.join(5)
    assert ticker.worst < MAX_LAG


async def test_cancelled_open_of_a_fifo_leaks_no_descriptor(backend: str, fifo: Path) -> None:
    aionative.get_engine()  # its ring and eventfd are not leaks
    before = open_fds()
    for how in ("await", "async with"):
        async def opener(how: str = how) -> None:
            if how == "await":
                f = await aionative.open(fifo, "rb")
                await f.close()
            else:
                async with aionative.open(fifo, "rb"):
                    pass
        task = asyncio.ensure_future(opener())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    # Unblock an open(2) still waiting in the kernel or in a worker, then let it finish.
    fd = os.open(fifo, os.O_RDWR)
    try:
        for _ in range(100):
            if open_fds() - before <= {str(fd)}:
                break
            await asyncio.sleep(0.02)
    finally:
        os.close(fd)
    assert open_fds() == before


async def test_pipe_by_descriptor(backend: str) -> None:
    r, w = os.pipe()
    fw = await aionative.open(w, "w", encoding="utf-8")
    fr = await aionative.open(r, "r", encoding="utf-8")
    try:
        assert fw.name == w and fr.name == r
        await fw.write("one\ntwo ü\n")
        await fw.flush()
        assert await fr.readline() == "one\n"
        assert await fr.readline() == "two ü\n"
        await fw.close()
        assert await fr.read() == ""
    finally:
        await fw.close()
        await fr.close()


@pytest.mark.parametrize("path", ["/proc/self/cmdline", "/proc/version", "/proc/cpuinfo",
                                  "/sys/kernel/mm/transparent_hugepage/enabled"])
async def test_pseudo_files_have_content_despite_size_zero(backend: str, path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} not here")
    with open(path, "rb") as f:  # noqa: ASYNC230 - the reference read
        expected = f.read()
    assert expected  # and st_size is 0 (or a page) for these
    async with aionative.open(path, "rb") as f:
        assert await f.read() == expected
    async with aionative.open(path, "rb") as f:
        assert await f.readline() == expected.split(b"\n")[0] + (
            b"\n" if b"\n" in expected else b"")
    assert await aionative.read_bytes(path) == expected


async def test_character_devices(backend: str) -> None:
    async with aionative.open("/dev/zero", "rb") as f:
        assert await f.read(10000) == bytes(10000)
        assert await f.readinto(bytearray(10)) == 10
    async with aionative.open("/dev/urandom", "rb", buffering=0) as f:
        assert len(await f.read(64)) == 64
    async with aionative.open("/dev/null", "w") as f:
        assert await f.write("x" * 100000) == 100000
    async with aionative.open("/dev/null", "rb") as f:
        assert await f.read() == b""


async def test_cancelled_read_leaves_the_file_consistent(backend: str, tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    path = tmp_path / "cold"
    path.write_bytes(data)
    for _ in range(20):
        evict(path)
        async with aionative.open(path, "rb") as f:
            assert await f.read(10) == data[:10]
            got = await cancel_after_a_turn(f.read(2 << 20))
            pos = 10 if got is None else 10 + len(got)
            assert await f.tell() == pos
            assert await f.read() == data[pos:]


async def test_cancelled_text_readline_leaves_the_file_consistent(backend: str,
                                                                  tmp_path: Path) -> None:
    lines = [f"{i:06d} {'x' * (i % 90)}\n" for i in range(40000)]
    path = tmp_path / "lines.txt"
    path.write_text("".join(lines))
    evict(path)
    got: list[str] = []
    attempts = 0
    async with aionative.open(path, encoding="ascii") as f:
        while True:
            attempts += 1
            task = asyncio.ensure_future(f.readline())
            if attempts % 7 == 3:
                await asyncio.sleep(0)
                task.cancel()
            try:
                line = await task
            except asyncio.CancelledError:
                continue
            if not line:
                break
            got.append(line)
    assert got == lines


async def test_cancelled_write_is_reported_and_not_lost(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    chunk = os.urandom(1 << 20)
    async with aionative.open(path, "wb", buffering=0) as f:
        written = 0
        for i in range(8):
            task = asyncio.ensure_future(f.write(chunk))
            if i % 2:
                await asyncio.sleep(0)
                task.cancel()
            try:
                written += await task
            except asyncio.CancelledError:
                # Cancelled while the kernel had the data: the next call waits for it.
                written += len(chunk)
        assert await f.tell() == written
    assert path.read_bytes() == chunk * 8


def thread_budget() -> Callable[[], int]:
    """How many user threads started since this call (a thread of an earlier test that ends
    meanwhile is not a negative count)."""
    base = user_thread_ids()
    return lambda: len(user_thread_ids() - base)


@pytest.fixture
def io_uring_only() -> Iterator[str]:
    from aionative import _backend
    if not _backend.probe("io_uring").available:
        pytest.skip("io_uring unavailable")
    aionative.set_default_backend("io_uring")
    try:
        yield "io_uring"
    finally:
        aionative.set_default_backend(None)


async def test_io_uring_open_read_write_stat_close_use_no_thread(io_uring_only: str,
                                                                 tmp_path: Path) -> None:
    eng = aionative.get_engine()
    needed = ("openat", "close", "statx")
    if not all(eng.supports(op) for op in needed):
        pytest.skip("this kernel lacks an io_uring opcode the file layer uses")
    extra = thread_budget()
    python_threads = {t.ident for t in threading.enumerate()}
    for i in range(50):
        path = tmp_path / f"f{i}.txt"
        async with aionative.open(path, "w", encoding="utf-8") as f:
            await f.write("héllo\n" * 1000)
            await f.flush()
        async with aionative.open(path, encoding="utf-8") as f:
            assert [line async for line in f] == ["héllo\n"] * 1000
        async with aionative.open(path, "rb+") as f:
            await f.seek(0, os.SEEK_END)
            assert await f.read() == b""
            await f.write(b"tail")
        assert (await aionative.os.stat(path)).st_size == 7 * 1000 + 4
        assert await aionative.read_bytes(path) == ("héllo\n" * 1000).encode() + b"tail"
        await aionative.write_bytes(path, b"x")
    assert extra() == 0, f"a thread was started: {threading.enumerate()}"
    assert {t.ident for t in threading.enumerate()} <= python_threads


async def test_direct_opens_o_direct_and_handles_alignment(backend: str, tmp_path: Path) -> None:
    import fcntl
    path = tmp_path / "direct.bin"
    data = os.urandom(3 * 4096 + 123)
    async with aionative.open(path, "wb", direct=True) as f:
        assert fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_DIRECT
        for i in range(0, len(data), 1000):  # unaligned pieces at unaligned offsets
            await f.write(data[i:i + 1000])
    assert path.read_bytes() == data  # padded blocks trimmed back to the true size
    async with aionative.open(path, "r+b", direct=True) as f:
        assert await f.read(5) == data[:5]
        await f.seek(4094)
        await f.write(b"XYZ")        # straddles a block boundary: read-modify-write
        await f.flush()              # pread reads the descriptor, not the buffer
        assert await f.pread(9, 4091) == data[4091:4094] + b"XYZ" + data[4097:4100]
        await f.seek(0)
        expected = data[:4094] + b"XYZ" + data[4097:]
        assert await f.read() == expected
    with pytest.raises(ValueError):  # append mode cannot be direct: test_direct_writers.py
        await aionative.open(path, "a", direct=True)
    assert path.read_bytes() == expected


def _kallsyms() -> bytes:
    """A procfs file that reports size 0, returns a page a read and holds megabytes, and
    whose content does not change while it is read."""
    try:
        with open("/proc/kallsyms", "rb") as f:
            data = f.read()
    except OSError as exc:
        pytest.skip(f"/proc/kallsyms cannot be read here: {exc}")
    if os.stat("/proc/kallsyms").st_size != 0 or len(data) < 65536:
        pytest.skip("/proc/kallsyms is not a large file of size 0 here")
    return data


@pytest.mark.usefixtures("backend")
async def test_a_procfs_file_of_size_zero_is_read_to_its_end() -> None:
    """procfs files report size 0 and return at most a page per read: a short read is not
    their end, only an empty read is, as for the builtin's loops."""
    want = _kallsyms()
    async with aionative.open("/proc/kallsyms", "rb") as f:
        assert await f.read() == want
    async with aionative.open("/proc/kallsyms", "rb") as f:
        assert await f.read(len(want) + 1) == want
    async with aionative.open("/proc/kallsyms", "rb", buffering=0) as f:
        assert await f.read() == want
    async with aionative.open("/proc/kallsyms", encoding="ascii") as f:
        assert "".join(await f.readlines()) == want.decode("ascii")
    assert await aionative.read_bytes("/proc/kallsyms") == want
    assert await aionative.read_text("/proc/kallsyms", encoding="ascii") == want.decode("ascii")


@pytest.mark.usefixtures("backend")
async def test_a_fifo_is_read_and_written_whole_by_the_one_call_helpers(tmp_path: Path) -> None:
    """read_bytes of a FIFO whose writer writes in several chunks returns everything up to
    the writer's close (pathlib's read_bytes does); write_bytes writes all of its data to a
    FIFO (no position to write at: not pwrite's ESPIPE)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    chunks = [bytes([65 + i]) * 70_000 for i in range(5)]

    def writer() -> None:
        with open(fifo, "wb", buffering=0) as w:
            for chunk in chunks:
                w.write(chunk)
                time.sleep(0.02)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert await asyncio.wait_for(aionative.read_bytes(fifo), 30) == b"".join(chunks)
    finally:
        t.join()
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as r:
            got.append(r.read())

    t = threading.Thread(target=reader)
    t.start()
    try:
        data = b"xyz" * 100_000
        assert await asyncio.wait_for(aionative.write_bytes(fifo, data), 30) == len(data)
    finally:
        t.join()
    assert got == [data]
