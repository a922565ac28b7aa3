"""``direct=True`` files with more than one writer.

O_DIRECT moves whole aligned blocks, so a write of part of a block reads the block, changes its
part and writes the whole block back. Two writers doing that to one block at once write back
each other's old bytes, and a writer that trims its padding to the size it last knew cuts off
what another wrote past it. Every direct write therefore holds an open file description lock
(``F_OFD_SETLK``) on the blocks it writes — on everything from its first block on when it may
end the file — which aionative writers of this process and of others wait for without blocking
the loop. Appending cannot be emulated safely at all (the end another writer leaves is not the
end this one knew): append mode is refused at open, as ``open()`` refuses a mode it cannot
honour.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import struct
import sys
import textwrap
from pathlib import Path

import pytest

import aionative
from aionative import _direct
from tests.support import child_env

pytestmark = pytest.mark.asyncio

RANGE = 1000   # disjoint ranges that share blocks (4096 is no multiple of 1000)
RANGES = 64
RECORD = 7


def _lock(fd: int, kind: int, start: int, length: int) -> None:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi", kind, os.SEEK_SET, start, length, 0))


def _fill(i: int, round_: int) -> bytes:
    return bytes([65 + (i + round_) % 26]) * RANGE


@pytest.mark.parametrize("mode", ["a", "ab", "a+", "ab+", "at", "a+b"])
@pytest.mark.usefixtures("backend")
async def test_direct_append_mode_is_refused_at_open(tmp_path: Path, mode: str) -> None:
    """Two ``"ab"`` appenders of one file each read the last block, added their record and
    wrote the block back at the end they knew: half the records were lost and the file grew
    to tens of KiB of zeros. Now refused before anything is opened or created, as a mode
    ``open()`` cannot honour is refused."""
    path = tmp_path / "log"
    with pytest.raises(ValueError, match=r"^can't have append mode and direct I/O at once$"):
        await aionative.open(path, mode, direct=True)
    assert not path.exists()
    with pytest.raises(ValueError) as expected:  # the builtin's mode errors still come first
        open(path, mode + "w")  # noqa: SIM115, ASYNC230
    with pytest.raises(ValueError) as raised:
        await aionative.open(path, mode + "w", direct=True)
    assert str(raised.value) == str(expected.value)


@pytest.mark.usefixtures("backend")
async def test_direct_on_an_appending_descriptor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    try:
        with pytest.raises(ValueError,
                           match=r"^can't have an O_APPEND descriptor and direct I/O at once$"):
            await aionative.open(fd, "r+b", direct=True)
        # Left as it was: open, and without O_DIRECT.
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT
        assert os.pread(fd, 3, 0) == b"abc"
    finally:
        os.close(fd)


async def _write_ranges(f: aionative.AsyncBufferedIOBase, mine: range, rounds: int) -> None:
    for round_ in range(rounds):
        for i in mine:
            await f.seek(i * RANGE)
            await f.write(_fill(i, round_))
            await f.flush()


@pytest.mark.usefixtures("backend")
async def test_direct_writers_of_disjoint_ranges_keep_each_others_data(tmp_path: Path) -> None:
    """Four ``"r+b"`` file objects writing disjoint 1000-byte ranges (which share blocks):
    before, 20-30 of the 64 ranges were reverted to their old bytes by another writer's
    read-modify-write of the same block."""
    path = tmp_path / "f"
    path.write_bytes(bytes(RANGES * RANGE))
    files = [await aionative.open(path, "r+b", direct=True) for _ in range(4)]
    try:
        await asyncio.gather(*(_write_ranges(f, range(k, RANGES, 4), 2)
                               for k, f in enumerate(files)))
    finally:
        for f in files:
            await f.close()
    assert path.read_bytes() == b"".join(_fill(i, 1) for i in range(RANGES))


@pytest.mark.usefixtures("backend")
async def test_direct_writers_extending_a_file_keep_each_others_records(tmp_path: Path) -> None:
    """Two file objects writing 300 records of 7 bytes each, interleaved, each record past the
    end of the file: each write trims its padding, at the size the file has under its lock
    (before: the size this object last knew, which cut off the other's records, and edges
    read as "past the end" came back as zeros)."""
    path = tmp_path / "records"
    path.write_bytes(b"")

    async def writer(k: int) -> None:
        async with aionative.open(path, "r+b", direct=True) as f:
            for i in range(300):
                await f.seek((2 * i + k) * RECORD)
                await f.write(b"%c%06d" % (65 + k, i))
                await f.flush()

    await asyncio.gather(writer(0), writer(1))
    assert path.read_bytes() == b"".join(b"%c%06d" % (65 + k, i)
                                         for i in range(300) for k in (0, 1))


_CHILD = textwrap.dedent("""
    import asyncio, sys
    import aionative

    RANGE, RANGES = {RANGE}, {RANGES}

    async def main():
        aionative.set_default_backend({backend!r})
        async with aionative.open({path!r}, "r+b", direct=True) as f:
            print("ready", flush=True)
            sys.stdin.readline()
            for round_ in range(3):
                for i in range(1, RANGES, 2):
                    await f.seek(i * RANGE)
                    await f.write(bytes([65 + (i + round_) % 26]) * RANGE)
                    await f.flush()

    asyncio.run(main())
""")


async def test_direct_writers_in_two_processes_keep_each_others_data(backend: str,
                                                                     tmp_path: Path) -> None:
    """This process writes the even ranges, another the odd ones, through ``direct=True``
    files: the lock is the open file's, so it holds across processes."""
    path = tmp_path / "f"
    path.write_bytes(bytes(RANGES * RANGE))
    code = _CHILD.format(RANGE=RANGE, RANGES=RANGES, backend=backend, path=str(path))
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-c", code, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, env=child_env())
    assert child.stdin is not None and child.stdout is not None
    try:
        async with aionative.open(path, "r+b", direct=True) as f:
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
            child.stdin.write(b"go\n")
            await child.stdin.drain()
            await _write_ranges(f, range(0, RANGES, 2), 3)
        assert await asyncio.wait_for(child.wait(), 60) == 0
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert path.read_bytes() == b"".join(_fill(i, 2) for i in range(RANGES))


@pytest.mark.usefixtures("backend")
async def test_a_direct_write_waits_for_another_writers_lock_without_blocking_the_loop(
        tmp_path: Path) -> None:
    """Another open file holds the lock of the block a partial write changes: the write
    waits (the loop runs meanwhile), then lands, with the other writer's bytes kept."""
    path = tmp_path / "f"
    path.write_bytes(b"." * 6000)
    other = os.open(path, os.O_RDWR)
    try:
        _lock(other, fcntl.F_WRLCK, 0, 4096)
        async with aionative.open(path, "r+b", buffering=0, direct=True) as f:
            write = asyncio.ensure_future(f.pwrite(b"mine", 10))
            ticks = 0
            for _ in range(20):
                await asyncio.sleep(0.005)
                ticks += 1
            assert not write.done() and ticks == 20
            os.pwrite(other, b"theirs", 100)  # what the holder of the lock writes
            _lock(other, fcntl.F_UNLCK, 0, 4096)
            assert await asyncio.wait_for(write, 10) == 4
    finally:
        os.close(other)
    data = path.read_bytes()
    assert (data[10:14], data[100:106], len(data)) == (b"mine", b"theirs", 6000)


async def test_a_synchronous_direct_write_gives_up_on_a_lock_held_too_long(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The synchronous write (a file object used synchronously, or collected with data
    staged) waits for another writer's lock at most SYNC_LOCK_WAIT seconds, then raises the
    lock's EAGAIN with nothing written: it may run on the loop's thread, whose own writer
    may hold the lock."""
    path = tmp_path / "f"
    path.write_bytes(b"." * 6000)
    monkeypatch.setattr(_direct, "SYNC_LOCK_WAIT", 0.05)
    other = os.open(path, os.O_RDWR)
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    try:
        _lock(other, fcntl.F_WRLCK, 4096, 0)
        assert _direct.direct_pwrite_sync(fd, 10, b"mine", 6000) == 6000  # a block not held
        with pytest.raises(OSError) as raised:
            _direct.direct_pwrite_sync(fd, 4100, b"late", 6000)
        assert (raised.value.errno, raised.value.strerror) == (
            errno.EAGAIN, os.strerror(errno.EAGAIN))
        _lock(other, fcntl.F_UNLCK, 0, 0)
        assert _direct.direct_pwrite_sync(fd, 4100, b"late", 6000) == 6000
    finally:
        os.close(fd)
        os.close(other)
    data = path.read_bytes()
    assert (data[10:14], data[4100:4104], len(data)) == (b"mine", b"late", 6000)
