"""Seek corner cases, each against the builtin ``open()`` on a twin file: every result, every
exception (type, errno, message) and the file's final bytes must be equal.

* SEEK_DATA and SEEK_HOLE are answered by lseek(2) from the file on disk. The builtin's
  buffered seek flushes its write buffer, then asks the raw file, and keeps its read buffer
  when that fails (ENXIO: no data past the offset), so later reads go on from the buffer.
* write(2) refuses to move the file position past the largest ``off_t`` (EINVAL), also in
  append mode, where the data would go to the end of the file: after ``seek(2**63 - 1)``
  (which tmpfs allows) the builtin's write or flush fails and its buffer keeps the data.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aionative

pytestmark = pytest.mark.asyncio

CONTENT = bytes(range(256)) * 40  # 10240 bytes
TOP = 2**63 - 1

Step = Callable[[Any], Any]


def _outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the point is to compare them
        return ("raise", type(exc).__name__, getattr(exc, "errno", None), str(exc))


async def _aoutcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", await fn())
    except Exception as exc:  # noqa: BLE001
        return ("raise", type(exc).__name__, getattr(exc, "errno", None), str(exc))


async def _both(directory: Path, mode: str, steps: list[Step], **kw: Any
                ) -> tuple[list[Any], list[Any]]:
    """The outcomes of ``steps`` on the builtin file and on aionative's, then of close(),
    and each file's contents."""
    pa, pb = directory / "builtin", directory / "ours"
    for p in (pa, pb):
        p.write_bytes(CONTENT)
    sync = open(pa, mode, **kw)  # noqa: SIM115, ASYNC230 - the reference
    want = [_outcome(lambda s=s: s(sync)) for s in steps] + [_outcome(sync.close)]
    ours = await aionative.open(pb, mode, **kw)
    got = [await _aoutcome(lambda s=s: s(ours)) for s in steps] + [await _aoutcome(ours.close)]
    return want + [_contents(pa)], got + [_contents(pb)]


def _contents(path: Path) -> tuple[int, bytes, bytes]:
    """A file's size, first bytes and last bytes (a file may end near 2**63: sparse)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return size, os.pread(fd, 2 * len(CONTENT), 0), os.pread(fd, 16, max(size - 16, 0))
    finally:
        os.close(fd)


def _seek(*args: int) -> Step:
    return lambda f: f.seek(*args)


def _call(name: str, *args: Any) -> Step:
    return lambda f: getattr(f, name)(*args)


PAST_END = len(CONTENT) + 5000


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("whence", [os.SEEK_DATA, os.SEEK_HOLE])
@pytest.mark.parametrize("mode", ["rb", "rb+"])
async def test_a_seek_data_failing_with_enxio_keeps_the_read_buffer(
        tmp_path: Path, mode: str, whence: int) -> None:
    """Before, ours flushed its buffered layer first (a BufferedRandom's or BufferedReader's
    flush drops its read buffer), so read1() after the failed seek read the file again and
    returned a buffer's worth where the builtin returned the rest of its buffer."""
    steps = [_call("read", 3), _seek(PAST_END, whence), _call("read1", 100000),
             _call("tell"), _call("peek", 1), _call("read", 5000), _call("tell")]
    want, got = await _both(tmp_path, mode, steps)
    assert want[1][0] == "raise" and want[1][2] == 6  # ENXIO
    assert got == want


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("offset", [2, PAST_END])
async def test_seek_data_after_a_buffered_write_sees_the_write_and_keeps_the_read_buffer(
        tmp_path: Path, offset: int) -> None:
    """A write buffered before SEEK_DATA lands before lseek(2) answers (as the builtin's flush
    in its seek wrote it), without the read buffer being dropped for it."""
    steps = [_call("read", 3), _call("write", b"zz"), _seek(offset, os.SEEK_DATA),
             _call("read1", 100000), _call("tell"), _call("write", b"y"),
             _seek(0, os.SEEK_HOLE), _call("read", 10), _call("tell")]
    want, got = await _both(tmp_path, "rb+", steps)
    assert got == want


@pytest.mark.usefixtures("backend")
async def test_seek_hole_past_a_buffered_write_extending_the_file(tmp_path: Path) -> None:
    steps = [_call("write", b"z" * 30000), _seek(20000, os.SEEK_HOLE), _call("write", b"x"),
             _call("tell"), _seek(40000, os.SEEK_DATA), _call("tell")]
    for mode in ("wb", "wb+"):
        want, got = await _both(tmp_path, mode, steps)
        assert got == want, mode


@pytest.fixture
def top_offset_dir() -> Iterator[Path]:
    """A directory whose filesystem lets lseek(2) go to 2**63 - 1 (tmpfs: its largest file
    size is the largest off_t; ext4 stops at 16 TiB - 4 KiB)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as d:
        fd = os.open(os.path.join(d, "probe"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.lseek(fd, TOP, os.SEEK_SET)
        except OSError:
            pytest.skip("no filesystem here seeks to 2**63 - 1")
        finally:
            os.close(fd)
        yield Path(d)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("buffering", [-1, 0])
@pytest.mark.parametrize("mode", ["ab", "ab+", "rb+", "wb"])
async def test_a_write_past_the_largest_offset_fails_as_the_builtins(
        top_offset_dir: Path, mode: str, buffering: int) -> None:
    """``"a+b"`` on tmpfs, ``seek(2**63 - 1)``, ``write(b"q")``, ``flush()``: the builtin's flush
    fails with EINVAL (write(2) checks the position even when it appends), and its buffer keeps
    the byte (``tell()`` wraps, ``close()`` fails again); ours appended it. In ``"r+b"`` ours
    dropped the byte when the kernel refused it, and ``tell()`` and ``close()`` said nothing."""
    steps = [_seek(TOP), _call("write", b"q"), _call("flush"), _call("tell"),
             _seek(TOP - 2), _call("write", b"qq"), _call("flush"), _call("tell")]
    want, got = await _both(top_offset_dir, mode, steps, buffering=buffering)
    assert got == want
