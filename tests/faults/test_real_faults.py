"""Real faults, not injected ones: a filesystem that fills up, a filesystem frozen under a
write, a file truncated or deleted by someone else while it is being read, a descriptor closed
under an operation in flight.

The tmpfs and ext4 tests need to mount (root); they are skipped where that is not permitted.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import aionative
from tests.support import cold_file

pytestmark = pytest.mark.asyncio


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                         capture_output=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def freezable_ext4(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB ext4 image mounted on a loop device: ``fsfreeze`` can freeze it (writes then
    sleep until it thaws) without touching any other filesystem."""
    img, mnt = tmp_path / "ext4.img", tmp_path / "ext4"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(16 << 20)
    for cmd in (["mkfs.ext4", "-q", "-F", str(img)], ["mount", "-o", "loop", str(img), str(mnt)]):
        try:
            res = subprocess.run(cmd, capture_output=True, check=False)
        except FileNotFoundError as exc:
            pytest.skip(f"{cmd[0]}: {exc}")
        if res.returncode != 0:
            pytest.skip(f"{' '.join(cmd[:2])}: {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["fsfreeze", "-u", str(mnt)], capture_output=True, check=False)
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def freeze_for(mnt: Path, seconds: float) -> subprocess.Popen[bytes]:
    """Freeze ``mnt`` now and thaw it ``seconds`` later from another process (the loop's
    thread may be asleep in a write by then)."""
    res = subprocess.run(["fsfreeze", "-f", str(mnt)], capture_output=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"fsfreeze: {res.stderr.decode().strip()}")
    return subprocess.Popen(["sh", "-c", f"sleep {seconds}; fsfreeze -u '{mnt}'"])


async def test_a_write_to_a_frozen_filesystem_stalls_the_loop_once(
        native_backend: str, freezable_ext4: Path) -> None:
    """An inline write that sleeps (here until the filesystem thaws) is a stall: the writes of
    the next second go to the kernel queue, where on io_uring a frozen filesystem holds a
    kernel worker and the loop runs on (Linux AIO copies a buffered write inside io_submit, on
    the loop's thread, as it always did)."""
    fd = os.open(freezable_ext4 / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert await aionative.pwrite(fd, b"a", 0) == 1
        before = aionative.engine_stats()
        counted, stop = [0], threading.Event()

        def other_thread() -> None:  # runs while the loop's thread sleeps in the write
            while not stop.wait(0.001):
                counted[0] += 1

        thaw = freeze_for(freezable_ext4, 0.3)
        thread = threading.Thread(target=other_thread)
        thread.start()
        t0 = time.perf_counter()
        try:
            assert await aionative.pwrite(fd, b"b", 1) == 1   # inline: asleep until the thaw
            slept, seen = time.perf_counter() - t0, counted[0]
        finally:
            stop.set()
            thread.join()
        thaw.wait()
        assert slept >= 0.2
        assert seen >= 50  # the write let go of the GIL, as os.pwrite does
        after = aionative.engine_stats()
        assert after["write_stalls"] - before["write_stalls"] == 1
        assert after["inline_writes"] - before["inline_writes"] == 1
        if native_backend == "io_uring":
            ticks = [0]

            async def ticker() -> None:
                while True:
                    await asyncio.sleep(0.01)
                    ticks[0] += 1

            thaw = freeze_for(freezable_ext4, 0.5)
            task = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            assert await aionative.pwrite(fd, b"c", 2) == 1   # queued: a worker waits
            task.cancel()
            thaw.wait()
            assert ticks[0] >= 10            # the loop turned while the write waited
        else:
            assert await aionative.pwrite(fd, b"c", 2) == 1
        assert aionative.engine_stats()["submitted"] > after["submitted"]
        assert os.pread(fd, 3, 0) == b"abc"
    finally:
        os.close(fd)


@pytest.mark.parametrize("mode,buffering", [("wb", 0), ("wb", -1), ("w", -1)])
async def test_enospc_reports_the_error_and_tell_agrees_with_the_file(
        backend: str, small_tmpfs: Path, mode: str, buffering: int) -> None:
    path = small_tmpfs / "full.bin"
    chunks: list[bytes] = []
    f = await aionative.open(path, mode, buffering=buffering,
                             **({} if "b" in mode else {"encoding": "ascii"}))
    with pytest.raises(OSError) as info:
        for i in range(200):
            chunk = bytes([65 + i % 26]) * 9999
            chunks.append(chunk)
            await f.write(chunk if "b" in mode else chunk.decode())
            if buffering != 0 and i % 3 == 0:
                await f.flush()
    assert info.value.errno == errno.ENOSPC
    on_disk = path.read_bytes()
    assert await f.tell() == len(on_disk)            # no position beyond what landed
    assert on_disk == b"".join(chunks)[:len(on_disk)]  # and what landed is what was written
    await f.close()                                   # what did not land is not retried
    assert path.read_bytes() == on_disk


async def test_file_truncated_while_being_read(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "shrinks.bin"
    fd, data = cold_file(path, 4 << 20)
    os.close(fd)
    async with aionative.open(path, "rb") as f:
        head = await f.read(1 << 20)
        os.truncate(path, 1536 * 1024)  # someone else shrinks it
        rest = b""
        for _ in range(100):
            chunk = await f.read(256 * 1024)
            if not chunk:
                break
            rest += chunk
        else:
            pytest.fail("reads did not reach the new end of file")
    got = head + rest
    assert got == data[:len(got)]      # never garbage: a prefix of what the file held
    assert len(got) <= 4 << 20


async def test_file_deleted_while_open(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "gone.txt"
    path.write_text("first\n")
    async with aionative.open(path, "r+", encoding="utf-8") as f:
        os.unlink(path)
        assert await f.readline() == "first\n"
        await f.write("second\n")
        await f.flush()
        await f.seek(0)
        assert await f.read() == "first\nsecond\n"
    assert not path.exists()


async def test_descriptor_closed_under_an_inflight_read(native_backend: str,
                                                       tmp_path: Path) -> None:
    """Once the kernel has the read, closing the descriptor (and reusing its number) cannot
    change what it reads: the kernel holds the file. (Before submission — within the loop
    iteration that made the call — the number is looked up when the batch is submitted, as a
    worker thread would look it up when it runs; closing a descriptor other code is using is a
    race either way.)

    Every other attempt starts with the file's first 64 KiB cached: Linux AIO's RWF_NOWAIT
    piece then returns them and the rest goes back to the kernel as a second piece, which
    must not name the (reused) number after the loop ran the caller's code."""
    path = tmp_path / "cold.bin"
    fd, data = cold_file(path, 8 << 20)
    os.close(fd)
    for attempt in range(6):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if attempt % 2:
            warm = os.open(path, os.O_RDONLY)
            os.posix_fadvise(warm, 0, 0, os.POSIX_FADV_RANDOM)  # those pages, no readahead
            os.pread(warm, 65536, 0)
            os.close(warm)
        batches = aionative.engine_stats()["batches"]
        read = asyncio.ensure_future(aionative.pread(fd, 8 << 20, 0))
        for _ in range(100):     # until the batch has been submitted
            await asyncio.sleep(0)
            if aionative.engine_stats()["batches"] > batches or read.done():
                break
        os.close(fd)             # closed under it; the number is reused at once
        other = os.open(os.devnull, os.O_RDONLY)
        try:
            got = await asyncio.wait_for(read, 30)
        except OSError as exc:   # the kernel may refuse a descriptor already closed
            assert exc.errno == errno.EBADF
        else:
            assert got == data   # the right bytes, not /dev/null's
        finally:
            os.close(other)


async def test_a_cancelled_queued_read_never_reads_a_reused_descriptor(
        native_backend: str, ring_only: None, tmp_path: Path) -> None:
    """An operation in the submission queue names its descriptor by number until it is
    submitted. Cancelling it submits it at once, so closing the descriptor right after the
    cancel — and the number coming back as a socket — cannot make it read the socket."""
    import socket

    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    for _ in range(20):
        fd = os.open(path, os.O_RDONLY)
        eng = aionative.get_engine()
        fut = eng.pread(fd, 4096, 0)   # queued; the iteration's flush has not run yet
        assert eng.cancel(fut)
        os.close(fd)
        a, b = socket.socketpair()
        try:
            if a.fileno() != fd:
                continue                # the number went elsewhere: nothing to show this time
            b.sendall(b"secret")
            await asyncio.sleep(0.01)   # the flush and any completion run
            a.setblocking(False)
            assert a.recv(100) == b"secret"
        finally:
            a.close()
            b.close()
        return
    pytest.skip("the closed descriptor's number was never reused by socketpair()")
