"""One-call helpers: ``read_bytes``, ``read_text``, ``write_bytes``, ``write_text`` (pathlib's
semantics, async). ``read_bytes`` and ``write_bytes`` are a handful of kernel operations —
open, read or write, close — with no file object in between."""

from __future__ import annotations

import errno
import os
from typing import Any

from . import _kernelops as _k
from ._engine import get_engine
from ._lowlevel import await_op, pwrite
from ._open import open_file
from ._threads import ThreadsEngine

StrPath = str | bytes | os.PathLike[str] | os.PathLike[bytes]
_FIRST = 256 * 1024


async def _read(eng: Any, fd: int, size: int, offset: int) -> bytes:
    res = eng.read(fd, size, offset)
    if isinstance(res, bytes):  # completed inline (page cache hit)
        return res
    data: bytes = await await_op(eng, res)
    return data


async def _read_fd(fd: int, path: StrPath) -> bytes:
    eng = get_engine()
    try:
        data = await _read(eng, fd, _FIRST, 0)
        if len(data) < _FIRST:
            return data
        parts = [data]
        size = (await _k.fstat(fd)).st_size
        off = len(data)
        while True:
            want = max(size - off, 0) + 65536
            eng = get_engine()  # close_engine() between two reads: the next one makes another
            chunk = await _read(eng, fd, want, off)
            parts.append(chunk)
            off += len(chunk)
            if len(chunk) < want:
                return b"".join(parts)
    except IsADirectoryError as exc:
        raise IsADirectoryError(exc.errno, exc.strerror, os.fspath(path)) from None
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise IsADirectoryError(exc.errno, exc.strerror, os.fspath(path)) from None
        if exc.errno == errno.EINVAL and eng.backend == "linux_aio":  # a pseudo-file
            f = await open_file(fd, "rb", closefd=False)
            try:
                return bytes(await f.read())
            finally:
                await f.close()
        raise


async def read_bytes(path: StrPath) -> bytes:
    """The whole file's bytes (``pathlib.Path.read_bytes``).

    A small regular file whose path and pages are cached is read inside the call (open, read
    and close without a kernel round trip, within the loop's cooperative budget)."""
    eng = get_engine()
    fd = None
    if not isinstance(eng, ThreadsEngine):
        bpath = os.fsencode(path)
        res = eng.read_file(_k.AT_FDCWD, bpath)
        if res is False:  # the budget is spent (the first inline call of a turn always runs)
            res = await _k.after_a_turn(eng, "read_file", _k.AT_FDCWD, bpath)
        if isinstance(res, bytes):
            return res
        if res is not None and res is not False:
            fd = res  # opened inline; not all of it could be read there
    if fd is None:
        fd = await _k.open_fd(path, os.O_RDONLY)
    try:
        return await _read_fd(fd, path)
    finally:
        await _k.close_fd(fd)


async def read_text(path: StrPath, encoding: str | None = None, errors: str | None = None,
                    newline: str | None = None) -> str:
    """The whole file decoded (``pathlib.Path.read_text``: ``open(mode="r")``'s decoding and
    newline translation)."""
    f = await open_file(path, "r", encoding=encoding, errors=errors, newline=newline)
    try:
        return str(await f.read())
    finally:
        await f.close()


async def write_bytes(path: StrPath, data: Any) -> int:
    """Replace the file's contents with ``data`` (``pathlib.Path.write_bytes``)."""
    view = memoryview(data)
    fd = await _k.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        return await pwrite(fd, view, 0)
    finally:
        await _k.close_fd(fd)


async def write_text(path: StrPath, data: str, encoding: str | None = None,
                     errors: str | None = None, newline: str | None = None) -> int:
    """Replace the file's contents with ``data`` encoded (``pathlib.Path.write_text``);
    returns the number of characters written."""
    if not isinstance(data, str):
        raise TypeError(f"data must be str, not {type(data).__name__}")
    f = await open_file(path, "w", encoding=encoding, errors=errors, newline=newline)
    try:
        return int(await f.write(data))
    finally:
        await f.close()



