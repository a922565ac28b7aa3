"""FastAPI helpers served by the engine: file dependencies, uploads, streams, the lifespan.

* :func:`opened_file` — a dependency yielding an ``aionative.open`` file for a path (fixed, or
  computed from the request by a function whose parameters FastAPI resolves), closed after the
  response has been sent.
* :func:`save_upload` — stream an ``UploadFile`` to disk: a spooled upload still in memory is
  one write; one rolled to disk is copied descriptor to descriptor with ``pread``/``pwrite``,
  a read in flight while the previous chunk is written, and no worker thread per chunk.
* :func:`stream_file` — open a file and return an async iterator of its chunks (read one
  ahead) for ``StreamingResponse``.
* :data:`lifespan` / :func:`engine_lifespan` — create the engine at startup, drain and close it
  at shutdown (around your own lifespan, if you have one).
* ``FileResponse`` and ``StaticFiles`` from :mod:`aionative.starlette`, re-exported.

Needs ``fastapi`` (``pip install aionative[fastapi]``); ``import aionative`` does not.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import inspect
import io
import os
import secrets
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeAlias

from fastapi import HTTPException, UploadFile

from . import _kernelops as _k
from ._awaiting import finished_anyway, settle
from ._engine import EngineLike, close_engine, get_engine
from ._files import AsyncBase
from ._lowlevel import pwrite
from ._open import open_file
from .starlette import FileResponse, StaticFiles

__all__ = [
    "FileResponse",
    "StaticFiles",
    "engine_lifespan",
    "lifespan",
    "opened_file",
    "save_upload",
    "stream_file",
]

StrPath: TypeAlias = "str | os.PathLike[str]"
Lifespan: TypeAlias = Callable[[Any], AbstractAsyncContextManager[Any]]


# ---------------------------------------------------------------- the opened-file dependency


def opened_file(path: StrPath | Callable[..., Any], mode: str = "rb", *, buffering: int = -1,
                encoding: str | None = None, errors: str | None = None,
                newline: str | None = None, missing_status: int | None = 404
                ) -> Callable[..., AsyncIterator[AsyncBase[Any]]]:
    """A FastAPI dependency that yields ``await aionative.open(path, mode, ...)`` and closes the
    file once the response has been sent (FastAPI runs the rest of a ``yield`` dependency
    then), so a ``StreamingResponse`` may still read from it.

    ``path`` is a path, or a function (sync or async) returning one: its parameters are the
    dependency's, so FastAPI fills them from the request — path and query parameters, headers,
    other dependencies::

        def log_path(name: str) -> Path:           # `name` is the path parameter
            return LOGS / f"{name}.log"

        @app.get("/logs/{name}")
        async def head(f: Annotated[AsyncBufferedReader, Depends(opened_file(log_path))]):
            return Response(await f.read(4096))

    A file that does not exist (or is a directory) becomes ``HTTPException(missing_status)``
    — 404 by default; ``missing_status=None`` lets the ``OSError`` through.
    """
    resolver = path if callable(path) else None
    fixed = None if callable(path) else path

    async def dependency(*args: Any, **kwargs: Any) -> AsyncIterator[AsyncBase[Any]]:
        if resolver is None:
            target: Any = fixed
        else:
            target = resolver(*args, **kwargs)
            if inspect.isawaitable(target):
                target = await target
        try:
            f = await open_file(target, mode, buffering, encoding, errors, newline)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            if missing_status is None:
                raise
            raise HTTPException(status_code=missing_status) from exc
        try:
            yield f
        finally:
            await f.close()

    if resolver is not None:
        # FastAPI reads the parameters (and resolves string annotations in the function's own
        # module) through __wrapped__, and sees an async generator in `dependency` itself.
        dependency.__wrapped__ = resolver  # type: ignore[attr-defined]
        dependency.__name__ = getattr(resolver, "__name__", "opened_file")
    else:
        dependency.__signature__ = inspect.Signature()  # type: ignore[attr-defined]
    return dependency


# ---------------------------------------------------------------- uploads


async def save_upload(upload: UploadFile, destination: StrPath, *, chunk_size: int = 1 << 20,
                      fsync: bool = False) -> int:
    """Write what is left of ``upload`` (from its current position) to ``destination``
    through the engine; returns the number of bytes written and leaves the upload positioned
    at its end.

    The bytes go to a new temporary file beside ``destination`` (``.<name>.<random>.part``),
    renamed over it only once they are all written: a reader sees the old file or the new one,
    never a part; on an error, or a cancellation before the rename, the temporary file is
    removed (when an open the cancellation cut short ends, if it had not yet) and
    ``destination`` is as it was. The rename is the commit point and is not cut short: a
    cancellation that arrives while it runs (or while ``fsync=True`` syncs the directory after
    it) is raised once it is done, ``destination`` then being the new file. The rename replaces
    the name: a symlink at ``destination`` is
    replaced, not written through, and the new file has the default mode (``0o666`` less the
    umask), not the old one's.

    Starlette spools uploads in memory up to 1 MiB, then on disk: an in-memory upload is one
    write; one on disk is copied descriptor to descriptor, ``chunk_size`` at a time, the next
    read in flight while a chunk is written — no worker-thread hop per chunk, where
    ``await upload.read(n)`` makes one per call. Any other file object is read with
    ``upload.read``. ``fsync=True`` makes the data, and the rename, durable before returning.
    """
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    eng = get_engine()
    target = os.fspath(destination)
    directory, name = os.path.split(target)
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.part")
    # O_EXCL: a fresh file, never one (or a symlink) that someone put at that name. Cancelled,
    # the open (a worker's or the kernel's) goes on: what it creates is closed and removed when
    # it ends (removed now, the file could appear after).
    out = await finished_anyway(
        _k.open_fd(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666),
        functools.partial(_discard_open, temporary))
    try:
        try:
            written = await _copy_upload(eng, upload, out, chunk_size)
            if fsync:
                await _fsync(eng, out)
        except BaseException:
            os.close(out)  # inline: every operation on it is over; nothing here may be cancelled
            raise
        await _k.close_fd(out)
        renaming = asyncio.ensure_future(_k.replace(temporary, target))
        try:
            await asyncio.shield(renaming)
        finally:
            await settle(renaming)  # its outcome, before a cancellation of the caller's
    except BaseException:
        await settle(_remove(temporary))  # waited for, even by a cancelled caller
        raise
    if fsync:
        await _fsync_directory(eng, directory or ".")
    return written


def _discard_open(path: str, fut: asyncio.Future[int]) -> None:
    """The open of an upload's temporary file ended after its caller was cancelled: close
    and remove what it created (nothing, if it failed: O_EXCL, the name was not ours)."""
    if fut.cancelled() or fut.exception() is None:
        _k._close_result(fut)
        _remove(path)


_REMOVING: set[asyncio.Task[None]] = set()


def _remove(path: str) -> asyncio.Task[None]:
    """Remove a temporary file through the engine (``unlinkat`` in the kernel, or a worker),
    in a task of its own: a second cancellation of the caller cannot skip it, and the loop's
    thread never waits for the disk."""
    task = asyncio.get_running_loop().create_task(_unlink_quietly(path))
    _REMOVING.add(task)  # a strong reference until it is done
    task.add_done_callback(_REMOVING.discard)
    return task


async def _unlink_quietly(path: str) -> None:
    try:
        await _k.unlink(path)
    except OSError:
        pass


async def _fsync_directory(eng: EngineLike, directory: str) -> None:
    fd = await _k.open_fd(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        await _fsync(eng, fd)
    finally:
        os.close(fd)  # inline: a read-only descriptor, nothing to flush


async def _fsync(eng: EngineLike, fd: int) -> None:
    fut = eng.fsync(fd)
    try:
        await asyncio.shield(fut)
    finally:
        await settle(fut)


def _source_fd(file: Any) -> int | None:
    """The descriptor of an upload spooled to disk (a regular file), else None."""
    if getattr(file, "_rolled", True) is False or isinstance(file, io.BytesIO):
        return None  # in memory: SpooledTemporaryFile.fileno() would roll it over to disk
    try:
        fd = file.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    if not isinstance(fd, int) or not stat.S_ISREG(os.fstat(fd).st_mode):
        return None
    return fd


async def _copy_upload(eng: EngineLike, upload: UploadFile, out: int, chunk_size: int) -> int:
    file = upload.file
    in_memory = getattr(file, "_rolled", True) is False or isinstance(file, io.BytesIO)
    if in_memory:
        data = file.read()  # a memory copy, no system call
        return await pwrite(out, data, 0) if data else 0
    src = _source_fd(file)
    if src is None:
        done = 0
        while chunk := await upload.read(chunk_size):
            done += await pwrite(out, chunk, done)
        return done
    file.flush()  # writes still in the file object's buffer (none after Starlette's seek(0))
    start = file.tell()
    done = await _copy_fd(eng, src, start, out, chunk_size)
    file.seek(start + done)
    return done


async def _copy_fd(eng: EngineLike, src: int, offset: int, dst: int, chunk: int) -> int:
    """Copy ``src`` from ``offset`` to its end into ``dst`` from 0: one read and one write in
    flight. Every operation is over before this returns or raises (``dst`` may be closed)."""
    done = 0
    reading: asyncio.Future[bytes] | None = eng.pread(src, chunk, offset)
    writing: asyncio.Future[int] | None = None
    try:
        while reading is not None:
            data = await asyncio.shield(reading)
            reading = None
            if writing is not None:
                await asyncio.shield(writing)
                writing = None
            if not data:
                break
            writing = eng.pwrite(dst, data, done)
            done += len(data)
            if len(data) == chunk:
                reading = eng.pread(src, chunk, offset + done)
        if writing is not None:
            await asyncio.shield(writing)
            writing = None
    finally:
        for fut in (reading, writing):
            if fut is not None:
                await settle(fut)
    return done


# ---------------------------------------------------------------- streaming


async def stream_file(path: StrPath, *, chunk_size: int = 64 * 1024, start: int = 0,
                      end: int | None = None) -> AsyncIterator[bytes]:
    """Open ``path`` and return an async iterator of its bytes from ``start`` to ``end``
    (exclusive; default: its end of file when reached), in chunks of ``chunk_size``, each read
    issued while the previous chunk is being consumed::

        return StreamingResponse(await stream_file(path), media_type="text/plain")

    The file is opened here, so a missing file or a directory raises (``FileNotFoundError``,
    ``IsADirectoryError``, ...) before a response has started — a handler can turn it into a
    404. It is closed when the iteration ends, fails or is closed early (``aclose()``, after
    the read in flight), or when an iterator never iterated is collected."""
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    if start < 0 or (end is not None and end < start):
        raise ValueError("need 0 <= start <= end")
    eng = get_engine()
    owner = _Descriptor(await _k.open_fd(path, os.O_RDONLY))
    if stat.S_ISDIR(os.fstat(owner.fd).st_mode):  # inline: the inode is pinned, no I/O
        owner.close()
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    return _chunks(eng, owner, chunk_size, start, end)


class _Descriptor:
    """Owns a read-only descriptor: closed by ``close()``, or when collected (an iterator
    returned by :func:`stream_file` and dropped before it ran)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)  # inline: a read-only descriptor, nothing to flush

    def __del__(self) -> None:
        self.close()


async def _chunks(eng: EngineLike, owner: _Descriptor, chunk_size: int, start: int,
                  end: int | None) -> AsyncIterator[bytes]:
    fd = owner.fd
    pending: asyncio.Future[bytes] | None = None
    try:
        offset = start

        def want(at: int) -> int:
            return chunk_size if end is None else min(chunk_size, end - at)

        size = want(offset)
        if size <= 0:
            return
        pending = eng.pread(fd, size, offset)
        while True:
            data = await asyncio.shield(pending)
            pending = None
            offset += len(data)
            nxt = want(offset)
            if len(data) == size and nxt > 0:
                eng = get_engine()  # close_engine() between chunks: the loop's new engine
                pending = eng.pread(fd, nxt, offset)
            if data:
                yield data
            if pending is None:
                return
            size = nxt
    finally:
        try:
            if pending is not None:
                await settle(pending)
        finally:
            owner.close()


# ---------------------------------------------------------------- lifespan


def engine_lifespan(inner: Lifespan | None = None, *, backend: str | None = None) -> Lifespan:
    """A lifespan that creates the running loop's engine at startup (so a backend problem shows
    at boot, not on the first request) and drains and closes it at shutdown, around ``inner``
    (your own lifespan, whose state it passes on)::

        app = FastAPI(lifespan=engine_lifespan(my_lifespan))

    ``backend`` asks for one (``io_uring``, ``linux_aio``, ``threads``); by default the best
    available, as ``aionative.get_engine()`` chooses.
    """

    @asynccontextmanager
    async def run(app: Any) -> AsyncIterator[Any]:
        """The lifespan: creates the running loop's engine at startup, drains and closes it at
        shutdown."""
        get_engine(backend)
        try:
            if inner is None:
                yield None
            else:
                async with inner(app) as state:
                    yield state
        finally:
            close_engine()

    return run


#: ``FastAPI(lifespan=lifespan)``: :func:`engine_lifespan` with no lifespan of yours.
lifespan: Lifespan = engine_lifespan()
"""``FastAPI(lifespan=lifespan)``: creates the engine at startup, drains and closes it at
shutdown (:func:`engine_lifespan` around no lifespan of yours)."""
