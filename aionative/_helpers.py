"""One-call helpers: ``read_bytes``, ``read_text``, ``write_bytes``, ``write_text`` (pathlib's
semantics, async). ``read_bytes`` and ``write_bytes`` are a handful of kernel operations —
open, read or write, close — with no file object in between."""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

from . import _kernelops as _k
from ._awaiting import await_op
from ._engine import get_engine
from ._lowlevel import pwrite
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
    """The file's bytes to its end. A regular file that reports a size ends at a short read
    that reaches it; anything else ends at an empty read only: procfs files report size 0
    and return a page per read, and a FIFO or a character device returns what its writer
    wrote so far (those are read through a file object, which reads a stream's chunks)."""
    eng = get_engine()
    try:
        st = await _k.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            return await _read_with_a_file_object(fd)
        size = st.st_size
        parts: list[bytes] = []
        off = 0
        while True:
            # A small file whole, with one byte past its size: a short read proves the end
            # of a file with a size. A larger one: a first piece, then the rest and more (a
            # file that grew returns a full read, and the loop goes on).
            if off:
                want = max(size - off, 0) + 65536
            else:
                want = size + 1 if size < _FIRST else _FIRST
            eng = get_engine()  # close_engine() between two reads: the next one makes another
            chunk = await _read(eng, fd, want, off)
            if not chunk:
                break
            parts.append(chunk)
            off += len(chunk)
            if len(chunk) < want and size and off >= size:
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)
    except IsADirectoryError as exc:
        raise IsADirectoryError(exc.errno, exc.strerror, os.fspath(path)) from None
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise IsADirectoryError(exc.errno, exc.strerror, os.fspath(path)) from None
        if exc.errno == errno.EINVAL and eng.backend == "linux_aio":  # a pseudo-file
            return await _read_with_a_file_object(fd)
        raise


async def _read_with_a_file_object(fd: int) -> bytes:
    f = await open_file(fd, "rb", closefd=False)
    try:
        return bytes(await f.read())
    finally:
        await f.close()


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
        try:
            return await pwrite(fd, view, 0)
        except OSError as exc:
            if exc.errno != errno.ESPIPE:
                raise
        # A FIFO, a socket or a terminal: no position to write at; a file object writes the
        # stream as the builtin's does.
        f = await open_file(fd, "wb", closefd=False)
        try:
            n = await f.write(view)
        finally:
            await f.close()
        return int(n)
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



