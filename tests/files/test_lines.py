"""``async for line in f``: the step the extension does without a coroutine.

While the window is known to hold the next lines' ends, a file's ``__anext__`` (a
``_core.LineStep``) calls the builtin's ``readline`` and hands back an awaitable that is
already done; any other call on the file ends that budget, and the full step (lock, fetch, end
of file) takes over. These tests hold it to the builtin's line-by-line reading on every
backend × loop, with and without the extension's step.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aionative
from aionative import _backend, _files
from aionative._files import reads as _files_reads

LINES = [f"line {i} {'é' * (i % 7)}{'x' * (i % 50)}\n" for i in range(20_000)]


@pytest.fixture(params=["extension", "python"])
def step(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The extension's LineStep, and the pure-Python step used where it is not built."""
    if request.param == "python":
        monkeypatch.setattr(_files.AsyncBase, "__anext__", _files.AsyncBase._anext_py)
        monkeypatch.setattr(_files_reads, "_LineGate", _files._PyLineGate)
        monkeypatch.setattr(_files.AsyncBase, "_gate", _files._PyLineGate(None))
    elif _backend._core is None:
        pytest.skip("the extension is not built")
    yield request.param


def test_files_step_through_the_extension() -> None:
    if _backend._core is None:
        pytest.skip("the extension is not built")
    for cls in (_files.AsyncTextIOWrapper, _files.AsyncBufferedReader, _files.AsyncFileIO):
        assert type(cls.__anext__) is _backend._core.LineStep


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["r", "rb"])
async def test_async_for_yields_the_builtins_lines(backend: str, step: str, tmp_path: Path,
                                                   mode: str) -> None:
    path = tmp_path / "f"
    path.write_text("".join(LINES) + "no newline at the end", encoding="utf-8")
    enc = None if "b" in mode else "utf-8"
    with open(path, mode, encoding=enc) as s:  # noqa: ASYNC230 - the reference
        want = list(s)
    async with aionative.open(path, mode, encoding=enc) as f:
        got = [line async for line in f]
        assert [line async for line in f] == []
        with pytest.raises(StopAsyncIteration):
            await f.__anext__()
    assert got == want


@pytest.mark.asyncio
async def test_other_calls_between_steps_see_the_builtins_file(backend: str, step: str,
                                                               tmp_path: Path) -> None:
    """tell(), readline(), read(n) and seek() between steps: each ends the budget, and every
    result is what the builtin gives for the same calls with readline() as the step."""
    path = tmp_path / "f"
    path.write_text("".join(LINES[:3000]), encoding="utf-8")
    calls: list[tuple[str, Any]] = [("tell", None), ("readline", None), ("read", 5),
                                    ("seek", 0), ("read", 70)]
    got: list[Any] = []
    want: list[Any] = []
    with open(path, encoding="utf-8") as s:  # noqa: ASYNC230 - the reference
        async with aionative.open(path, encoding="utf-8") as f:
            i = 0
            while True:
                line = s.readline()
                want.append(line)
                try:
                    got.append(await f.__anext__())
                except StopAsyncIteration:
                    got.append("")
                if not line:
                    break
                i += 1
                if i % 97 == 0:
                    name, arg = calls[(i // 97) % len(calls)]
                    if name == "seek":
                        pos = s.tell()
                        want.append(s.seek(pos))
                        got.append(await f.seek(pos))
                    else:
                        args = () if arg is None else (arg,)
                        want.append(getattr(s, name)(*args))
                        got.append(await getattr(f, name)(*args))
    assert got == want


@pytest.mark.asyncio
async def test_a_decode_error_stops_where_the_builtin_stops(backend: str, step: str,
                                                            tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = "".join(LINES[:2000]).encode()
    path.write_bytes(data[:50_000] + b"\xff" + data[50_000:])
    outcomes = []
    with open(path, encoding="utf-8") as s:  # noqa: ASYNC230 - the reference
        lines = []
        try:
            for line in iter(s.readline, ""):
                lines.append(line)  # noqa: PERF402 - the lines before the error are the point
        except UnicodeDecodeError as exc:
            outcomes.append((lines, exc.start))
    async with aionative.open(path, encoding="utf-8") as f:
        lines = []
        try:
            async for line in f:
                lines.append(line)
        except UnicodeDecodeError as exc:
            outcomes.append((lines, exc.start))
    assert len(outcomes) == 2 and outcomes[0] == outcomes[1]


@pytest.mark.asyncio
@pytest.mark.parametrize(("order", "odd"), [("le", "\u0d00\u0a05\u0100"),
                                            ("be", "\u0d00\u050aA")])
async def test_utf16_lines_end_where_the_files_byte_order_says(backend: str, step: str,
                                                              tmp_path: Path, order: str,
                                                              odd: str) -> None:
    """An "utf-16" file reads in the order of its BOM. Its characters may hold the other
    order's line ends: U+0D00 is a big-endian "\\r" in a little-endian file (and a
    little-endian one in a big-endian file), the pair after it a "\\n" of the other order at
    the other alignment. Those are no line ends: the line after them is 300 000 characters
    long, past the window (before: judged there, it raised "a text read went past its
    prefetched window")."""
    path = tmp_path / "f"
    text = "first\n" + "y" * 5000 + odd + "y" * 300_000 + "\nlast\n"
    path.write_bytes("\ufeff".encode(f"utf-16-{order}") + text.encode(f"utf-16-{order}"))
    with open(path, encoding="utf-16") as s:  # noqa: ASYNC230 - the reference
        want = list(s)
    async with aionative.open(path, encoding="utf-16") as f:
        assert [line async for line in f] == want
    async with aionative.open(path, encoding="utf-16") as f:
        got = []
        while line := await f.readline():
            got.append(line)
        assert got == want
        await f.seek(0)
        assert await f.readlines() == want


@pytest.mark.asyncio
async def test_steps_taken_before_they_are_awaited_keep_their_order(backend: str, step: str,
                                                                    tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("".join(LINES[:500]), encoding="utf-8")
    async with aionative.open(path, encoding="utf-8") as f:
        assert await f.__anext__() == LINES[0]   # the first step grants the budget
        pending = [f.__anext__() for _ in range(3)]
        assert [await p for p in pending] == LINES[1:4]
        assert [line async for line in f] == LINES[4:500]


@given(data=st.binary(max_size=20_000), byte=st.integers(0, 255),
       start=st.integers(-30_000, 30_000), stop=st.integers(-30_000, 30_000))
@settings(max_examples=300, deadline=None)
def test_count_byte_counts_as_bytes_count(data: bytes, byte: int, start: int,
                                          stop: int) -> None:
    if _backend._core is None:
        pytest.skip("the extension is not built")
    want = data.count(bytes([byte]), start, stop)
    for buf in (data, bytearray(data), memoryview(data)):
        assert _backend._core.count_byte(buf, byte, start, stop) == want


def test_count_byte_refuses_what_bytes_count_refuses() -> None:
    if _backend._core is None:
        pytest.skip("the extension is not built")
    with pytest.raises(ValueError):
        _backend._core.count_byte(b"abc", 256, 0, 3)
    with pytest.raises(TypeError):
        _backend._core.count_byte("abc", 97, 0, 3)
    with pytest.raises(TypeError):
        _backend._core.count_byte(b"abc", 97, 0)  # type: ignore[call-arg]

