"""Reads without the lock: ``read(n)`` within the gate's room (``_BinaryBase._read_room``)
and ``readline()`` within its line budget (``AsyncBase._gated_line``). Each must return what
the builtin's call returns, leave the file where the builtin's leaves it, never read the
descriptor behind the window, and never outlive another call on the file.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative import _backend, _files, _raw

pytestmark = pytest.mark.asyncio

SIZES = [1, 7, 100, 1000, 4095, 4096, 4097, 5000, 16384, 30000, 65535]


# The files' contents, made once at collection: drawn inside a test, 3 MiB of them take
# 10-15 ms of the loop's thread, which the loop guard would count in one gap with the first
# reads (see tests/_loop_guard.py).
_RANDOM = os.urandom(3 << 20)
_rnd = random.Random(150)
_LINES = [b"x" * _rnd.randrange(0, 300) + b"\n" for _ in range((3 << 20) // 150)]


def make(tmp_path: Path, size: int, lines: bool = False) -> tuple[Path, bytes]:
    """A file of ``size`` random bytes, or (``lines``) of about ``size`` bytes of lines of
    0-299 characters with a last one unterminated."""
    if lines:
        data = b"".join(_LINES[:size // 150]) + b"no end of line"
    else:
        assert size <= len(_RANDOM)
        data = _RANDOM[:size]
    path = tmp_path / "f"
    path.write_bytes(data)
    return path, data


@pytest.fixture
def no_blocking_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """An async call never reads the descriptor behind the window: make doing so fail."""
    def refuse(self: Any, n: int, pos: int) -> bytes:
        raise AssertionError(f"a blocking read of {n} bytes at {pos}")
    monkeypatch.setattr(_raw.WindowRaw, "_sync_read", refuse)


class LockCount:
    """How many calls took the file's lock (the gated ones do not)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = _files.AsyncBase._try_lock

        def counted(f: Any) -> bool:
            self.n += 1
            return real(f)
        monkeypatch.setattr(_files.AsyncBase, "_try_lock", counted)


async def test_reads_within_the_room_skip_the_lock_and_agree(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        no_blocking_reads: None) -> None:
    path = make(tmp_path, 3 << 20)[0]
    rnd = random.Random(7)
    sizes = [rnd.choice(SIZES) for _ in range(200)]  # ~2.4 MB: short of the end
    locks = LockCount(monkeypatch)
    with open(path, "rb") as ref:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, "rb") as f:
            for n in sizes:
                assert await f.read(n) == ref.read(n), n
            assert await f.tell() == ref.tell()
            assert await f.read() == ref.read()
    # Most reads took the room: the lock only for the ones that fetched (and the rest).
    assert locks.n < len(sizes) // 4, locks.n


async def test_the_room_ends_with_any_other_call(backend: str, tmp_path: Path,
                                                 no_blocking_reads: None) -> None:
    path = make(tmp_path, 1 << 20)[0]
    steps: list[tuple[str, tuple[Any, ...]]] = [
        ("peek", (10,)), ("read1", (100,)), ("seek", (12345,)), ("tell", ()),
        ("readinto", (bytearray(333),)), ("readline", ()), ("seek", (-5000, io.SEEK_CUR)),
        ("readlines", (10,)), ("seek", (0, io.SEEK_END)),
    ]
    with open(path, "rb") as ref:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, "rb") as f:
            for name, args in steps:
                assert await f.read(1000) == ref.read(1000)
                want = getattr(ref, name)(*args)
                got = await getattr(f, name)(*args)
                assert got == want, name
                assert f._gate.room == 0, name
                assert await f.read(700) == ref.read(700), name
            assert await f.tell() == ref.tell()


async def test_a_read_grants_room_and_a_line_ends_it(backend: str, tmp_path: Path) -> None:
    path, data = make(tmp_path, 1 << 20, lines=True)
    async with aionative.open(path, "rb") as f:
        await f.read(10)
        gate = f._gate
        if _backend._core is not None:
            assert type(gate) is _backend._core.LineGate
        assert gate.room > 0
        line = await f.readline()  # counts the window's line ends: a line budget
        assert gate.room == 0 and gate.budget > 0
        assert line == data[10:data.index(b"\n", 10) + 1]
        await f.read(10)
        assert gate.budget == 0 and gate.room > 0


async def test_the_room_is_zero_while_another_call_holds_the_file(
        backend: str, tmp_path: Path) -> None:
    path, data = make(tmp_path, 1 << 20)
    aionative.set_inline_budget(0)  # every fetch waits for the kernel queue (or a worker)
    try:
        async with aionative.open(path, "rb") as f:
            assert await f.read(100) == data[:100]
            assert f._gate.room > 0
            # A read the window does not hold: it takes the lock and waits for its fetch.
            first = asyncio.ensure_future(f.read(300_000 - 100))
            await asyncio.sleep(0)
            assert not first.done() and f._gate.room == 0
            second = asyncio.ensure_future(f.read(100))
            assert await first == data[100:300_000]
            assert await second == data[300_000:300_100]
    finally:
        aionative.set_inline_budget(None)


async def test_reads_see_a_file_that_grew_at_its_end(backend: str, tmp_path: Path) -> None:
    path = make(tmp_path, 200_000)[0]
    more = os.urandom(50_000)
    with open(path, "rb") as ref:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, "rb") as f:
            while chunk := ref.read(1000):
                assert await f.read(1000) == chunk
            assert await f.read(1000) == b""
            with open(path, "ab") as w:  # noqa: ASYNC230 - another writer
                w.write(more)
            for _ in range(60):
                assert await f.read(1000) == ref.read(1000)


@pytest.mark.parametrize("mode", ["rb", "r"])
async def test_readline_calls_take_the_line_budget(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str,
        no_blocking_reads: None) -> None:
    path = make(tmp_path, 400_000, lines=True)[0]
    locks = LockCount(monkeypatch)
    enc = None if "b" in mode else "utf-8"
    with open(path, mode, encoding=enc) as ref:  # noqa: ASYNC230 - the reference
        want = ref.readlines()
    got = []
    async with aionative.open(path, mode, encoding=enc) as f:
        while line := await f.readline():
            got.append(line)
        assert await f.readline() == ("" if enc else b"")
    assert got == want
    assert locks.n < len(want) // 10, (locks.n, len(want))


async def test_readline_and_reads_interleaved(backend: str, tmp_path: Path,
                                              no_blocking_reads: None) -> None:
    path = make(tmp_path, 600_000, lines=True)[0]
    rnd = random.Random(3)
    with open(path, "rb") as ref:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, "rb") as f:
            for _ in range(3000):
                if rnd.random() < 0.5:
                    assert await f.readline() == ref.readline()
                else:
                    n = rnd.choice(SIZES[:6])
                    assert await f.read(n) == ref.read(n)
            assert await f.tell() == ref.tell()


async def test_a_long_line_past_the_window(backend: str, tmp_path: Path) -> None:
    data = b"a\n" + os.urandom(300_000).replace(b"\n", b"-") + b"\nb\n"
    path = tmp_path / "f"
    path.write_bytes(data)
    async with aionative.open(path, "rb") as f:
        want = [line + b"\n" for line in data.split(b"\n")[:-1]]
        assert [await f.readline() for _ in range(5)] == want + [b"", b""]
@pytest.mark.blocks_the_loop("reads a MiB-sized file with the builtin beside aionative's, in its body")
async def test_readline_reads_no_further_ahead_for_its_budget(backend: str,
                                                              tmp_path: Path) -> None:
    """A long second line: readline() fetches what the line needs, as before — counting the
    window's line ends must not make it fetch until it sees two of them."""
    data = b"a\n" + b"x" * (8 << 20) + b"\nb\n"
    path = tmp_path / "f"
    path.write_bytes(data)
    async with aionative.open(path, "rb") as f:
        assert await f.readline() == b"a\n"
        raw = f._raw
        assert raw is not None and len(raw.buf) < (1 << 20)


@pytest.mark.parametrize("mode", ["rb", "r"])
async def test_readline_follows_a_growing_file(backend: str, tmp_path: Path,
                                               mode: str) -> None:
    """A last line without its end at the end of the file is not in the budget: read after
    the file grew, it is the whole line, as the builtin's (a log follower's loop)."""
    path = tmp_path / "log"
    path.write_bytes(b"a\nb\npartial")
    enc = None if "b" in mode else "utf-8"
    with open(path, mode, encoding=enc) as ref:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, mode, encoding=enc) as f:
            want, got = [ref.readline()], [await f.readline()]
            with open(path, "ab") as w:  # noqa: ASYNC230 - another writer
                w.write(b"-rest\nlast\n")
            for _ in range(4):
                want.append(ref.readline())
                got.append(await f.readline())
    assert got == want


@pytest.mark.parametrize("mode", ["rb", "r"])
async def test_readline_queued_behind_close_raises_the_builtins_error(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    real = _files.AsyncBase._read_at

    async def slow_read_at(self: Any, size: int, offset: int) -> bytes:
        await asyncio.sleep(0.001)  # a read the page cache does not hold
        return await real(self, size, offset)
    monkeypatch.setattr(_files.AsyncBase, "_read_at", slow_read_at)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1_000_000)  # no line end in the first 64 KiB
    f = await aionative.open(path, mode)
    first = asyncio.ensure_future(f.read(5))
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(f.close())
    line = asyncio.ensure_future(f.readline())
    await first
    await closing
    with pytest.raises(ValueError):
        await line


async def test_a_decoding_error_ends_the_line_budget(backend: str, tmp_path: Path,
                                                     no_blocking_reads: None) -> None:
    lines = [b"line %d\n" % i for i in range(20000)]
    lines[1500] = b"bad \xff\xfe byte\n"
    path = tmp_path / "f"
    path.write_bytes(b"".join(lines))

    def outcome(read: Any) -> Any:
        try:
            return read()
        except UnicodeDecodeError:
            return "error"
    with open(path, encoding="utf-8") as ref:  # noqa: ASYNC230 - the reference
        want = [outcome(ref.readline) for _ in range(len(lines) + 2)]
    got = []
    async with aionative.open(path, encoding="utf-8") as f:
        for _ in range(len(lines) + 2):
            try:
                got.append(await f.readline())
            except UnicodeDecodeError:
                got.append("error")
                assert f._gate.budget == 0
    assert got == want and "error" in got


@pytest.mark.blocks_the_loop("reads a 3 MiB file with the builtin beside aionative's, in its body")
@pytest.mark.parametrize("buffering", [300_000, 1 << 19, 1 << 20])
async def test_a_buffer_larger_than_the_window_fills_as_the_builtins(
        backend: str, tmp_path: Path, buffering: int, no_blocking_reads: None) -> None:
    """readline() fetches until the window holds a line end with a buffer's worth after it.
    A window shorter than that buffer must not pass for one (a negative end in find()
    counts from the window's end): the buffered layer's raw read would come back short, and
    peek(), read1() and tell() would show it."""
    path = make(tmp_path, 3 << 20, lines=True)[0]
    steps: list[tuple[str, tuple[Any, ...]]] = [
        ("readline", ()), ("peek", (1 << 21,)), ("read1", (1 << 21,)), ("readline", ()),
        ("tell", ()), ("readline", (100,)), ("read1", (-1,)), ("readline", ()),
        ("peek", (0,)), ("readlines", (5,)), ("read1", (100,)), ("tell", ())]
    with open(path, "rb", buffering=buffering) as ref:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, "rb", buffering=buffering) as f:
            for name, args in steps:
                want = getattr(ref, name)(*args)
                got = await getattr(f, name)(*args)
                assert got == want, name
            assert [line async for line in f] == list(ref)
