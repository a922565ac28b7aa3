"""``read(n)`` of a large ``n`` on a read-only file: one ``aionative.pread`` at the position,
past the window (``_BinaryBase._read_direct``), where the buffers hold nothing there. What it
returns and where it leaves the file must be what the builtin's would, whatever calls follow.
"""

from __future__ import annotations

import array
import asyncio
import io
import mmap
import os
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _files
from tests.support import cancel_after_a_turn, evict

pytestmark = pytest.mark.asyncio

BIG = _files._DIRECT_READ_MIN


def make(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "big"
    path.write_bytes(data)
    return path, data


async def replay(path: Path, steps: list[tuple[str, tuple[Any, ...]]], tell: bool = True
                 ) -> None:
    """Run the same calls on the builtin and on aionative.open; every result (and, with
    ``tell``, every position: asking it refreshes the buffered layer's) must agree."""
    with open(path, "rb") as ref:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, "rb") as f:
            for name, args in steps:
                want = getattr(ref, name)(*args)
                got = await getattr(f, name)(*args)
                assert got == want, (name, args)
                if tell:
                    assert await f.tell() == ref.tell(), (name, args)


async def test_large_reads_go_past_the_window(backend: str, tmp_path: Path) -> None:
    path, data = make(tmp_path, 3 * BIG + 1234)
    async with aionative.open(path, "rb") as f:
        for k in range(3):
            assert await f.read(BIG) == data[k * BIG:(k + 1) * BIG]
            raw = f._raw
            assert raw is not None and raw.buf == b""  # nothing went through the window
        assert await f.read(BIG) == data[3 * BIG:]  # short: the end of the file
        assert await f.read(BIG) == b""
        assert await f.tell() == len(data)


async def test_large_reads_agree_with_the_builtin(backend: str, tmp_path: Path) -> None:
    path, _ = make(tmp_path, 4 * BIG + 777)
    await replay(path, [
        ("read", (BIG,)), ("read", (BIG + 5,)),
        ("read", (10,)), ("read", (BIG,)),        # the window holds the position's data
        ("seek", (3 * BIG,)), ("read", (2 * BIG,)),  # short at the end, then nothing
        ("read", (BIG,)), ("seek", (0,)), ("read", (-1,)),
    ])


async def test_buffered_seeks_after_a_large_read(backend: str, tmp_path: Path) -> None:
    """The buffered layer caches the raw position; a seek within its buffer after a large
    read must not use a stale one (no tell() between the calls: it would refresh it)."""
    path, _ = make(tmp_path, 3 * BIG)
    await replay(path, [
        ("read", (BIG,)), ("read", (100,)), ("seek", (-50, io.SEEK_CUR)), ("read", (30,)),
        ("seek", (BIG + 20,)), ("read", (10,)), ("read", (BIG,)), ("seek", (-3, io.SEEK_CUR)),
        ("read", (7,)), ("read", (BIG,)), ("read", (100,)), ("seek", (30,)), ("read", (10,)),
    ], tell=False)


async def test_large_read_on_a_file_that_grew(backend: str, tmp_path: Path) -> None:
    path, data = make(tmp_path, 2 * BIG)
    async with aionative.open(path, "rb") as f:
        assert await f.read(BIG) == data[:BIG]
        more = os.urandom(BIG)
        with open(path, "ab") as w:  # noqa: ASYNC230 - another writer
            w.write(more)
        assert await f.read(2 * BIG) == data[BIG:] + more[:BIG]
        assert await f.read(BIG) == more[BIG:] + b"" and await f.read(BIG) == b""


async def test_cancelled_large_read_keeps_the_position(backend: str, ring_only: None,
                                                       tmp_path: Path) -> None:
    """The second read waits for the device (no readahead: the first one's would have brought
    it in) and is cancelled there; the position stays where the first read left it."""
    path, data = make(tmp_path, 4 * BIG)
    cancelled = 0
    for _ in range(20):
        evict(path)
        async with aionative.open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
            assert await f.read(BIG) == data[:BIG]
            got = await cancel_after_a_turn(f.read(2 * BIG))
            cancelled += got is None
            pos = BIG if got is None else BIG + len(got)
            assert await f.tell() == pos
            assert await f.read(BIG) == data[pos:pos + BIG]
    assert cancelled, "no read was cancelled while it waited"


async def test_read_write_files_keep_the_window(backend: str, tmp_path: Path) -> None:
    """A file that writes keeps every read in the window: its staged writes must show."""
    path, data = make(tmp_path, 2 * BIG)
    async with aionative.open(path, "r+b") as f:
        await f.write(b"x" * 10)
        await f.seek(0)
        assert await f.read(BIG) == b"x" * 10 + data[10:BIG]


SYSFS_BIG = Path("/sys/kernel/btf/vmlinux")  # several MiB, read in pieces shorter than asked


@pytest.mark.skipif(not SYSFS_BIG.exists() or not os.access(SYSFS_BIG, os.R_OK),
                    reason="no readable /sys/kernel/btf/vmlinux")
async def test_a_short_read_before_the_size_is_not_the_end(backend: str) -> None:
    """sysfs (like FUSE or a network file system) may return less than asked in the middle
    of a file: the builtin reads on, and so must a large read."""
    if SYSFS_BIG.stat().st_size < 3 * BIG:
        pytest.skip("the sysfs file is too small here")
    await replay(SYSFS_BIG, [("read", (BIG,)), ("read", (2 * BIG + 3,)), ("read", (BIG,))])


async def test_the_buffered_layer_is_left_as_the_builtin_leaves_it(backend: str,
                                                                   tmp_path: Path) -> None:
    """``BufferedReader.read(n)`` reads whole buffers' worth directly and the rest through its
    buffer: what ``peek()`` and ``read1()`` return next, and where the descriptor's offset
    is (a file opened from a descriptor), depend on it."""
    path, _ = make(tmp_path, 4 * BIG)
    n = BIG + 1000  # not a multiple of the buffer size
    await replay(path, [("read", (n,)), ("peek", ()), ("read1", (10 ** 6,)), ("read", (n,)),
                        ("read", (3,)), ("read1", (10 ** 6,))], tell=False)
    fd_ref, fd_ours = os.open(path, os.O_RDONLY), os.open(path, os.O_RDONLY)
    try:
        with open(fd_ref, "rb", closefd=False) as ref:  # noqa: ASYNC230 - the reference
            async with aionative.open(fd_ours, "rb", closefd=False) as f:
                assert await f.read(n) == ref.read(n)
                assert os.lseek(fd_ours, 0, os.SEEK_CUR) == os.lseek(fd_ref, 0, os.SEEK_CUR)
    finally:
        os.close(fd_ref)
        os.close(fd_ours)


async def test_unbuffered_files_read_as_fileio_does(backend: str, tmp_path: Path) -> None:
    """``buffering=0`` is FileIO: one read(2) a call, and no lseek(2) that would make a later
    failed seek leave ``seekable()`` true."""
    path, _ = make(tmp_path, 2 * BIG)
    with open(path, "rb", buffering=0) as ref:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, "rb", buffering=0) as f:
            assert await f.read(BIG) == ref.read(BIG)
            with pytest.raises(OSError):
                ref.seek(-1)
            with pytest.raises(OSError):
                await f.seek(-1)
            assert await f.seekable() == ref.seekable()
            assert await f.read(BIG) == ref.read(BIG)


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "mmap", "array"])
async def test_large_readinto_agrees_with_the_builtin(backend: str, tmp_path: Path,
                                                      kind: str) -> None:
    """``readinto`` of more than a buffer's worth goes straight into the caller's buffer, as
    BufferedReader.readinto does; sizes that are not a multiple of the buffer, and the end
    of the file, leave both files alike."""
    path, _ = make(tmp_path, 3 * BIG + 777)

    def buffer(n: int) -> Any:
        if kind == "bytearray":
            return bytearray(n)
        if kind == "memoryview":
            return memoryview(bytearray(n))
        if kind == "mmap":
            return mmap.mmap(-1, n)
        return array.array("i", bytes(n))  # n a multiple of 4: a non-byte format

    for peek in (False, True):  # peek() fills the buffered layer: then the window serves
        with open(path, "rb") as ref:  # noqa: ASYNC230 - the reference
            async with aionative.open(path, "rb") as f:
                for k, n in enumerate((BIG, BIG + 1000, BIG + 4, 4, BIG, 2 * BIG)):
                    mine, theirs = buffer(n), buffer(n)
                    assert await f.readinto(mine) == ref.readinto(theirs)
                    if k == 0:
                        raw = f._raw
                        assert raw is not None and raw.buf == b""  # not through the window
                    assert bytes(mine) == bytes(theirs)
                    if peek:
                        assert await f.peek() == ref.peek()
                    assert await f.tell() == ref.tell()


async def test_cancelled_large_readinto_keeps_the_position_and_frees_the_buffer(
        backend: str, ring_only: None, tmp_path: Path) -> None:
    """Cancelled while the kernel reads into the caller's buffer: the position stays, the
    call raises CancelledError (not a BufferError from releasing a buffer the kernel still
    holds), and the buffer is the caller's again once the read completes."""
    path, data = make(tmp_path, 4 * BIG)
    cancelled = 0
    for _ in range(20):
        evict(path)
        buf = bytearray(2 * BIG)
        async with aionative.open(path, "rb") as f:
            # Two turns: the engine's flush hands the read to the kernel on the second.
            got = await cancel_after_a_turn(f.readinto(buf), turns=2)
            cancelled += got is None
            pos = 0 if got is None else got
            assert await f.tell() == pos
            assert await f.read(BIG) == data[pos:pos + BIG]
        for _ in range(100):  # the kernel's hold on the buffer ends with its completion
            try:
                buf.append(0)
                break
            except BufferError:
                await asyncio.sleep(0.01)
        assert len(buf) == 2 * BIG + 1
    assert cancelled, "no readinto was cancelled while it waited"


async def test_a_kept_cancellation_does_not_keep_the_buffer(backend: str, ring_only: None,
                                                            tmp_path: Path) -> None:
    """A cancelled large readinto's exception, kept (stored, logged later), keeps the frames
    of its traceback: none of them may hold the caller's buffer once the kernel is done. A
    read the device answers within the two turns is not cancelled: tried again, up to 20
    times (five were all answered once, in CI's uvloop run), until one is."""
    path, _ = make(tmp_path, 4 * BIG)
    kept: list[BaseException] = []
    for _ in range(20):
        if kept:
            break
        evict(path)
        buf = bytearray(2 * BIG)
        async with aionative.open(path, "rb") as f:
            task = asyncio.ensure_future(f.readinto(buf))
            for _ in range(2):  # the flush hands the read to the kernel on the second turn
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError as exc:
                kept.append(exc)
        for _ in range(100):
            try:
                buf.append(0)
                break
            except BufferError:
                await asyncio.sleep(0.01)
        assert len(buf) == 2 * BIG + 1, "the buffer is still exported"
    assert kept, "no readinto was cancelled while it waited"


@pytest.mark.parametrize("kind", ["bytes", "memoryview"])
async def test_large_readinto_of_a_read_only_buffer(backend: str, tmp_path: Path,
                                                    kind: str) -> None:
    path, _ = make(tmp_path, 2 * BIG)
    buf: Any = bytes(BIG) if kind == "bytes" else memoryview(bytes(BIG))
    with open(path, "rb") as ref, pytest.raises(TypeError) as want:  # noqa: ASYNC230
        ref.readinto(buf)
    async with aionative.open(path, "rb") as f:
        with pytest.raises(TypeError) as got:
            await f.readinto(buf)
        assert str(got.value) == str(want.value)
        assert await f.tell() == 0
