"""The raw layer's ``readinto`` in C (``_core.WindowReadinto``): for every kind of buffer and
window state, exactly what the Python ``readinto`` does — the bytes, the position, what was
missed, and the error raised (FileIO's) when it takes the call back.
"""

from __future__ import annotations

import array
import os
from pathlib import Path
from typing import Any

import pytest

from aionative import _backend, _raw

pytestmark = [pytest.mark.asyncio,
              pytest.mark.skipif(_backend._core is None, reason="the extension is not built")]


def window_raw(fd: int, size: int, **kw: Any) -> _raw.WindowRaw:
    args: dict[str, Any] = {
        "kind": _raw.REGULAR, "readable": True, "writable": False, "appending": False,
        "created": False, "seekable": True, "closefd": False, "size": size, "pos": 0,
        "blksize": 4096, "isatty": False}
    args.update(kw)
    return _raw.WindowRaw(fd, **args)


def outcome(fn: Any, raw: _raw.WindowRaw, b: Any) -> tuple[Any, ...]:
    try:
        res = fn(raw, b)
    except Exception as exc:  # noqa: BLE001 - compared below
        return ("raise", type(exc), str(exc), raw.pos, raw.missed)
    return ("ok", res, bytes(memoryview(b).cast("B")) if res else b"", raw.pos, raw.missed)


def buffers() -> list[tuple[str, Any]]:
    return [
        ("bytearray", lambda: bytearray(100)),
        ("empty", lambda: bytearray()),
        ("memoryview slice", lambda: memoryview(bytearray(300))[50:150]),
        ("array I", lambda: array.array("I", [0] * 25)),
        ("non-contiguous", lambda: memoryview(bytearray(200))[::2]),
        ("read-only", lambda: b"\0" * 100),
        ("2-d", lambda: memoryview(bytearray(100)).cast("B", (10, 10))),
        ("huge", lambda: bytearray(5000)),
    ]


@pytest.mark.parametrize("state", ["hit", "short", "before", "after", "bytearray", "closed",
                                   "unreadable", "stream", "in op"])
@pytest.mark.parametrize("name,make_buffer", buffers())
async def test_c_readinto_is_the_python_readinto(tmp_path: Path, state: str, name: str,
                                                 make_buffer: Any) -> None:
    path = tmp_path / "f"
    content = bytes(range(256)) * 40
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        results = []
        for fn in (_raw.WindowRaw.readinto, _raw.WindowRaw._readinto_py):
            raw = window_raw(fd, len(content), kind=_raw.STREAM if state == "stream" else
                             _raw.REGULAR, readable=state != "unreadable")
            raw.buf = content[1000:4000]
            raw.wstart = 1000
            raw.pos = {"short": 3950, "before": 500, "after": 4100}.get(state, 1500)
            if state == "bytearray":
                raw.buf = bytearray(raw.buf)
            raw.in_op = state in ("in op", "short", "before", "after")
            if state == "closed":
                raw.close()
            results.append(outcome(fn, raw, make_buffer()))
        assert results[0] == results[1]
    finally:
        os.close(fd)


async def test_raw_files_read_through_the_c_readinto() -> None:
    assert type(_raw.WindowRaw.__dict__["readinto"]) is _backend._core.WindowReadinto


@pytest.mark.uses_internals("the raw layer's C base (_core.WindowBase), whose state C reads")
async def test_a_window_hit_is_copied_in_c(tmp_path: Path) -> None:
    """The C path itself serves a hit (the comparison above would pass if it never did)."""
    def refuse(raw: Any, b: Any) -> Any:
        raise AssertionError("the Python readinto was called")
    readinto = _backend._core.WindowReadinto(refuse)
    path = tmp_path / "f"
    content = bytes(range(256)) * 40
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        for window in (content[1000:4000], bytearray(content[1000:4000])):
            raw = window_raw(fd, len(content))
            raw.buf, raw.wstart, raw.pos = window, 1000, 1500
            out = bytearray(100)
            assert readinto(raw, out) == 100
            assert out == content[1500:1600] and raw.pos == 1600
            with pytest.raises(AssertionError, match="Python readinto"):
                readinto(raw, bytearray(3000))  # past the window's end: the Python path
    finally:
        os.close(fd)


@pytest.mark.uses_internals("the raw layer's C base (_core.WindowBase), whose members C reads")
async def test_a_deleted_window_member_takes_the_python_path(tmp_path: Path) -> None:
    """The window's members can be deleted from Python; the C copy then leaves the call to the
    Python readinto, which raises AttributeError, instead of reading a missing member."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        raw = window_raw(fd, 100)
        raw.buf = b"x" * 100
        del raw.buf
        with pytest.raises(AttributeError):
            raw.readinto(bytearray(10))
    finally:
        os.close(fd)
