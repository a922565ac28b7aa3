"""Starlette's ``FileResponse`` and ``StaticFiles``, served by the engine.

``FileResponse`` takes Starlette's constructor and sends what Starlette's sends (status, headers,
bytes, the ``multipart/byteranges`` layout), with the file opened, stat-ed and read by the loop's
engine instead of a worker thread per call: on io_uring ``openat`` and ``statx`` are kernel
operations, the body is read with ``pread`` one chunk ahead of the chunk being sent. Beyond
Starlette it answers ``If-None-Match``/``If-Modified-Since`` with 304 itself, sends exactly the
``Content-Length`` it announced when the file grows meanwhile, and rejects a ``Range`` header of
more than ``max_ranges`` ranges with 416 (RFC 9110 §15.5.17) where Starlette sends the whole
file. ``StaticFiles`` is Starlette's, with the lookup done by the engine: the directory is
opened, then each name below it relative to the one before without following a symlink, so no
symlink swapped in between a check and the open can lead outside it (a symlink met on the way
is checked as Starlette checks it, in a worker thread). Nothing blocks the loop's thread.

Needs ``starlette`` (``pip install aionative[starlette]``); ``import aionative`` does not.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import mimetypes
import os
import stat
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.background import BackgroundTask
from starlette.datastructures import URL, Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse as _StarletteFileResponse
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.staticfiles import NotModifiedResponse
from starlette.staticfiles import StaticFiles as _StarletteStaticFiles
from starlette.types import Message, Receive, Scope, Send

from . import _kernelops as _k
from ._engine import EngineLike, get_engine
from ._http_ranges import (
    BodyPlan,
    MalformedRange,
    UnsatisfiableRange,
    if_range_matches,
    multipart_byteranges,
    not_modified,
    parse_range,
    range_and_conditions,
    reads,
)
from ._settle import settle
from ._threads import ThreadsEngine

__all__ = ["FileResponse", "StaticFiles"]

PathLike = str | os.PathLike[str]

_FD_DIR = "/proc/self/fd/"

# The media types a response guesses from its path come from the system's tables, read (files
# opened and stat'ed) the first time one is asked for: here, at import, not on the loop's
# thread in the first request (Starlette's FileResponse guesses in its constructor).
mimetypes.init()


# ---------------------------------------------------------------- opening and stat-ing


def _native(eng: EngineLike, *ops: str) -> bool:
    return not isinstance(eng, ThreadsEngine) and all(eng.supports(op) for op in ops)


# O_NONBLOCK on every open: a FIFO without a writer would otherwise hold the open (a worker
# thread, or the io-wq worker in which io_uring retries an openat whose name is not in the
# dentry cache — without the O_NONBLOCK of its first, inline attempt unless it was asked for).
# It is cleared on a regular file (a read of an O_NONBLOCK file on a filesystem without
# non-blocking reads would fail with EAGAIN); anything else is rejected before it is read.
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK

# What open(2) fails with on something that is not a regular file — a socket, a device without
# a driver (ENXIO, ENODEV) — or on a file it may not read (EACCES): Starlette only stat-s, so
# these are looked at again with an O_PATH descriptor (no permission needed, nothing opened).
_NOT_OPENABLE = (errno.ENXIO, errno.ENODEV, errno.EACCES)


def _fstat_regular(fd: int) -> os.stat_result:
    """fstat a descriptor opened with ``_OPEN_FLAGS``; a regular file is made blocking again."""
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        fcntl.fcntl(fd, fcntl.F_SETFL, 0)  # a read-only descriptor: O_NONBLOCK was the only flag
    return st


def _open_stat_blocking(path: str) -> tuple[int, os.stat_result]:
    """Open and fstat in one worker call (backends without a kernel ``openat``)."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        return fd, _fstat_regular(fd)
    except BaseException:
        os.close(fd)
        raise


def _path_stat_blocking(path: str) -> tuple[int, os.stat_result]:
    """An ``O_PATH`` descriptor and its stat (for a file that cannot be opened for reading)."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def _close_result(fut: asyncio.Future[tuple[int, os.stat_result]]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        os.close(fut.result()[0])


async def _in_worker(fn: Callable[..., tuple[int, os.stat_result]], *args: Any
                     ) -> tuple[int, os.stat_result]:
    """Run a blocking open in the loop's executor; a descriptor that arrives for a cancelled
    caller is closed, not leaked."""
    fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(_close_result)
        raise


async def _openat(eng: EngineLike, path: str, flags: int, encoded: bytes | None = None) -> int:
    """io_uring's ``openat`` of ``path`` (straight to the engine: ``_kernelops.open_fd`` retries
    an ENXIO in a worker, which is for FIFOs opened for writing)."""
    fut = eng.openat(_k.AT_FDCWD,  # type: ignore[union-attr]
                     os.fsencode(path) if encoded is None else encoded, flags, 0, path)
    return await _k._run_open(eng, fut)  # type: ignore[arg-type]


async def _open_stat(eng: EngineLike, path: str, encoded: bytes | None = None
                     ) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only and stat the descriptor: the headers describe the file read."""
    if not _native(eng, "openat"):
        return await _in_worker(_open_stat_blocking, path)
    fd = await _openat(eng, path, _OPEN_FLAGS, encoded)
    try:
        # Inline, not io_uring's statx: that always runs in an io-wq worker (REQ_F_FORCE_ASYNC),
        # which cost a quarter of the 4 KiB throughput and 2-3 kernel threads, while fstat of a
        # descriptor just opened does no I/O (its inode is pinned; NFS revalidated it at open).
        return fd, _fstat_regular(fd)
    except BaseException:
        os.close(fd)
        raise


# ---------------------------------------------------------------- the response


class _Transfer:
    """One response's descriptor and the read the engine may still be doing on it."""

    __slots__ = ("eng", "fd", "pending")

    def __init__(self, eng: EngineLike, fd: int) -> None:
        self.eng = eng
        self.fd = fd
        self.pending: asyncio.Future[bytes] | None = None

    async def close(self) -> None:
        fd, self.fd = self.fd, -1
        try:
            if self.pending is not None:
                await settle(self.pending)
        finally:
            self.pending = None
            if fd >= 0:
                # Inline: the last reference to a file opened read-only; nothing is flushed.
                os.close(fd)


def _on_asyncio() -> bool:
    """Whether an asyncio loop (the default loop or uvloop) runs this task. aionative's engine
    serves asyncio only; under another async library (anyio's trio backend) the Starlette
    classes' own code serves the request instead, through anyio, as if aionative's classes
    were Starlette's."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class FileResponse(_StarletteFileResponse):
    """``starlette.responses.FileResponse``, served by the engine.

    The same constructor (``method=`` is accepted, as Starlette < 1.0 did: ``"HEAD"`` sends the
    headers only). Differences from Starlette, all deliberate, are listed in ``docs/web.md``.
    """

    chunk_size = 64 * 1024
    max_ranges = 100

    def __init__(
        self,
        path: PathLike,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
        filename: str | None = None,
        stat_result: os.stat_result | None = None,
        content_disposition_type: str = "attachment",
        *,
        method: str | None = None,
    ) -> None:
        self._fd = -1  # a descriptor StaticFiles opened for this response
        super().__init__(path, status_code=status_code, headers=headers, media_type=media_type,
                         background=background, filename=filename, stat_result=stat_result,
                         content_disposition_type=content_disposition_type)
        self.send_header_only = method is not None and method.upper() == "HEAD"

    def _adopt(self, fd: int) -> None:
        """Serve from ``fd`` (already open on the file ``stat_result`` describes)."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:  # a response built and never sent
            os.close(self._fd)
            self._fd = -1

    def _should_use_range(self, http_if_range: str) -> bool:
        # Starlette's own __call__ (under another async library than asyncio) calls it too.
        return if_range_matches(http_if_range, self.headers.get("last-modified"),
                                self.headers.get("etag"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _on_asyncio():
            self._adopt(-1)  # (Starlette's code opens the file itself)
            return await super().__call__(scope, receive, send)
        scope_type = scope["type"]
        is_http = scope_type == "http"
        method = scope["method"].upper() if is_http else "GET"
        header_only = self.send_header_only or (is_http and method == "HEAD")
        pathsend = is_http and "http.response.pathsend" in (scope.get("extensions") or {})
        if scope_type == "websocket":
            send = self._websocket_send(send)
        rng, if_range, inm, ims = range_and_conditions(scope)
        eng = get_engine()
        transfer = _Transfer(eng, self._fd)
        self._fd = -1
        try:
            await self._respond(scope, receive, send, transfer, is_http, method, header_only,
                                pathsend, rng, if_range, inm, ims)
        finally:
            await transfer.close()
        if self.background is not None:
            await self.background()

    def _websocket_send(self, send: Send) -> Send:
        wrap: Callable[[Send], Send] | None = getattr(self, "_wrap_websocket_denial_send", None)
        return send if wrap is None else wrap(send)

    async def _respond(self, scope: Scope, receive: Receive, send: Send, transfer: _Transfer,
                       is_http: bool, method: str, header_only: bool, pathsend: bool,
                       rng: str | None, if_range: str | None, inm: str | None, ims: str | None
                       ) -> None:
        if transfer.fd >= 0:
            # A descriptor StaticFiles opened and checked: the bytes come from it. Handing the
            # server the path instead would let it open whatever the name means by then.
            pathsend = False
        st = self.stat_result
        if st is None:
            # A GET opens first and stats the descriptor — conditional or not, so the validators
            # and the body are of the same file; a HEAD, or a path handed to the server, only
            # needs the path's stat.
            if not header_only and not (pathsend and rng is None):
                transfer.fd, st = await self._open_checked(transfer.eng)
            else:
                try:
                    st = await _k.stat(self.path)
                except FileNotFoundError:
                    raise RuntimeError(f"File at path {self.path} does not exist.") from None
                if not stat.S_ISREG(st.st_mode):
                    raise RuntimeError(f"File at path {self.path} is not a file.")
            self.set_stat_headers(st)
        size = st.st_size

        if (is_http and self.status_code == 200 and method in ("GET", "HEAD") and (inm or ims)
                and not_modified(inm, ims, self.headers.get("etag"),
                                 self.headers.get("last-modified"))):
            return await NotModifiedResponse(self.headers)(scope, receive, send)

        if (self.status_code != 200 or rng is None or method not in ("GET", "HEAD")
                or (if_range is not None and not self._should_use_range(if_range))):
            ranges = None
        else:
            try:
                ranges = parse_range(rng, size, self.max_ranges)
            except MalformedRange as exc:
                return await PlainTextResponse(exc.content, status_code=400)(scope, receive, send)
            except UnsatisfiableRange:
                response = PlainTextResponse(status_code=416,
                                             headers={"Content-Range": f"bytes */{size}"})
                return await response(scope, receive, send)

        headers = self.raw_headers
        plan: BodyPlan
        if ranges is None:
            plan = list(reads(0, size, self.chunk_size))
            if size % self.chunk_size == 0:
                plan.append(b"")  # Starlette ends on a short read: here an empty message
        elif len(ranges) == 1:
            start, end = ranges[0]
            mutable = MutableHeaders(raw=list(self.raw_headers))
            mutable["content-range"] = f"bytes {start}-{end - 1}/{size}"
            mutable["content-length"] = str(end - start)
            headers = mutable.raw
            plan = list(reads(start, end, self.chunk_size))
            pathsend = False
        else:
            boundary, length, plan = multipart_byteranges(
                ranges, size, self.headers["content-type"], self.chunk_size)
            mutable = MutableHeaders(raw=list(self.raw_headers))
            mutable["content-type"] = f"multipart/byteranges; boundary={boundary}"
            mutable["content-length"] = str(length)
            headers = mutable.raw
            pathsend = False
        start_message: Message = {"type": "http.response.start",
                                  "status": 206 if ranges else self.status_code,
                                  "headers": headers}
        if header_only or size == 0 or (pathsend and ranges is None):
            await send(start_message)
            if pathsend and not header_only:
                await send({"type": "http.response.pathsend", "path": str(self.path)})
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if transfer.fd < 0:  # stat_result= given: open now (Starlette's errors, but no FIFO)
            transfer.fd, opened = await _open_stat(transfer.eng, os.fspath(self.path))
            if not stat.S_ISREG(opened.st_mode):
                raise RuntimeError(f"File at path {self.path} is not a file.")
        body = self._send_body(send, transfer, start_message, plan)
        spec = scope.get("asgi", {}).get("spec_version", "2.0")
        if not is_http or _spec_at_least_2_4(spec) or sum(1 for item in plan if item) == 1:
            # A one-read body has nothing to stop early; from ASGI 2.4 send() raises on a
            # closed connection. Otherwise the server's disconnect message stops the transfer.
            await body
        else:
            await _until_disconnect(body, receive)

    async def _open_checked(self, eng: EngineLike) -> tuple[int, os.stat_result]:
        """Open and stat ``self.path`` with Starlette's errors: a ``RuntimeError`` if it does
        not exist or is not a regular file (a socket, for one, cannot even be opened)."""
        path = os.fspath(self.path)
        try:
            fd, st = await _open_stat(eng, path)
        except FileNotFoundError:
            raise RuntimeError(f"File at path {self.path} does not exist.") from None
        except OSError as exc:
            if exc.errno not in _NOT_OPENABLE:
                raise
            try:
                st = await _k.stat(path)  # what Starlette looks at
            except OSError:
                raise exc from None
            if stat.S_ISREG(st.st_mode):
                raise
            raise RuntimeError(f"File at path {self.path} is not a file.") from None
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise RuntimeError(f"File at path {self.path} is not a file.")
        return fd, st

    async def _send_body(self, send: Send, transfer: _Transfer, start_message: Message,
                         plan: BodyPlan) -> None:
        """Send the start message and the body, a message for each item of ``plan`` (bytes as
        they are, or the bytes of an ``(offset, size)`` read). The first read is done before
        the start message (an error is still a 500); from then on each read is in flight
        while the message before it is being sent. Exactly the announced bytes, or an error."""
        fd = transfer.fd
        reads = (item for item in plan if isinstance(item, tuple))

        def submit() -> tuple[asyncio.Future[bytes], int] | None:
            following = next(reads, None)
            if following is None:
                return None
            offset, size = following
            # close_engine() between chunks: the next read goes to the loop's new engine
            eng = transfer.eng = get_engine()
            transfer.pending = eng.pread(fd, size, offset)
            return transfer.pending, size

        async def read(ahead: tuple[asyncio.Future[bytes], int] | None) -> bytes:
            assert ahead is not None
            pending, size = ahead
            # Shielded: a cancelled task leaves the read to finish, and close() waits for it.
            data = await asyncio.shield(pending)
            transfer.pending = None
            if len(data) != size:
                raise RuntimeError(f"File at path {self.path} is shorter than expected.")
            return data

        ready: bytes | None = await read(submit())
        ahead = submit()
        await send(start_message)
        last = len(plan) - 1
        for i, item in enumerate(plan):
            if isinstance(item, bytes):
                data = item
            elif ready is not None:
                data, ready = ready, None
            else:
                data = await read(ahead)
                ahead = submit()
            await send({"type": "http.response.body", "body": data, "more_body": i < last})


def _spec_at_least_2_4(spec: str) -> bool:
    try:
        return tuple(int(p) for p in spec.split(".")[:2]) >= (2, 4)
    except ValueError:
        return False


async def _until_disconnect(body: Awaitable[None], receive: Receive) -> None:
    """Run ``body`` in this task while another waits for ``http.disconnect`` (ASGI < 2.4:
    ``send`` on a closed connection returns silently, so nothing else would stop it)."""
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # noqa: BLE001 - a server's receive failing is not our response's
            return
        gone = True
        task.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        await body
    except asyncio.CancelledError:
        # Our own cancellation (the client left) ends the response; anyone else's goes on.
        if not gone or task.uncancel() > 0:
            raise
    finally:
        watcher.cancel()


# ---------------------------------------------------------------- static files


def _fd_path(fd: int) -> str | None:
    """The path the kernel resolved for an open descriptor (no I/O: the dentry is pinned)."""
    try:
        return os.readlink(f"{_FD_DIR}{fd}")
    except OSError:
        return None


def _beneath(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def _lookup_blocking(directory: str, path: str, follow_symlink: bool
                     ) -> tuple[str, int, os.stat_result] | None:
    """Starlette's ``lookup_path`` for one directory, with the file opened and, without
    ``follow_symlink``, the opened descriptor's own path checked too (in a worker)."""
    joined = os.path.join(directory, path)
    if follow_symlink:
        full, base = os.path.abspath(joined), os.path.abspath(directory)
    else:
        full, base = os.path.realpath(joined), os.path.realpath(directory)
    if not _beneath(full, base):
        return None
    refused: OSError | None = None
    try:
        fd, st = _open_stat_blocking(full)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno not in _NOT_OPENABLE:
            raise
        refused = exc
        try:
            fd, st = _path_stat_blocking(full)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            raise refused from None
    if not follow_symlink:
        real = _fd_path(fd)
        if real is not None and not _beneath(real, base):  # swapped for a symlink meanwhile
            os.close(fd)
            return None
    if refused is not None and stat.S_ISREG(st.st_mode):  # a file we may not read: 401
        os.close(fd)
        raise refused
    return full, fd, st


class _Found:
    __slots__ = ("fd", "path", "st")

    def __init__(self, path: str, fd: int, st: os.stat_result) -> None:
        self.path = path
        self.fd = fd
        self.st = st

    def release(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def _serves(response: FileResponse, found: _Found) -> bool:
    """Whether ``response`` serves the file ``found`` opened: its path, with its stat."""
    st = response.stat_result
    return (os.fspath(response.path) == found.path and st is not None
            and (st.st_dev, st.st_ino) == (found.st.st_dev, found.st.st_ino))


class StaticFiles(_StarletteStaticFiles):
    """``starlette.staticfiles.StaticFiles`` (same arguments: ``directory``, ``packages``,
    ``html``, ``check_dir``, ``follow_symlink``), looking files up through the engine and
    serving them with :class:`FileResponse`.

    The directory is opened, then each name of the path below it relative to the descriptor
    of the one before, with ``O_NOFOLLOW`` (unless ``follow_symlink``); a symlink on the way is
    checked in a worker thread as Starlette checks it (``realpath``), and the descriptor then
    opened checked again: neither ``..``, encoded separators, absolute paths nor a symlink —
    even one swapped in during the request — can serve a file outside it.
    """

    def __init__(self, *, directory: PathLike | None = None,
                 packages: list[str | tuple[str, str]] | None = None, html: bool = False,
                 check_dir: bool = True, follow_symlink: bool = False) -> None:
        super().__init__(directory=directory, packages=packages, html=html,
                         check_dir=check_dir, follow_symlink=follow_symlink)
        # Each directory's absolute path, resolved here, off the loop (as Starlette checks the
        # directory here): a lookup then joins names to it without asking for the working
        # directory. Symlinks in it are not resolved: a request follows them as they are then.
        self._absolute = {os.fspath(d): os.path.abspath(d) for d in self.all_directories}

    async def check_config(self) -> None:
        """Check at startup that ``directory`` exists and is a directory (raising ``RuntimeError``
        as Starlette's does), with the engine's ``stat``."""
        if not _on_asyncio():
            return await super().check_config()
        if self.directory is None:
            return
        try:
            st = await _k.stat(self.directory)
        except FileNotFoundError:
            raise RuntimeError(
                f"StaticFiles directory '{self.directory}' does not exist.") from None
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise RuntimeError(f"StaticFiles path '{self.directory}' is not a directory.")

    async def get_response(self, path: str, scope: Scope) -> Response:
        """The response for ``path`` (relative to the mount): the file found through the engine, a
        redirect or ``index.html``/``404.html`` in ``html`` mode, else ``HTTPException`` 404 (405
        for a method other than GET and HEAD, 401 for a file that may not be read), as Starlette's.
        """
        if not _on_asyncio():
            return await super().get_response(path, scope)
        if scope["method"] not in ("GET", "HEAD"):
            raise HTTPException(status_code=405, headers={"Allow": "GET, HEAD"})
        try:
            found = await self._find(path)
        except PermissionError:
            raise HTTPException(status_code=401) from None
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                raise HTTPException(status_code=404) from None
            raise
        except ValueError:  # a NUL byte in the path
            raise HTTPException(status_code=404) from None

        if found is not None and stat.S_ISREG(found.st.st_mode):
            return self._serve(found, scope)
        if found is not None:
            found.release()
            if stat.S_ISDIR(found.st.st_mode) and self.html:
                found = await self._find(os.path.join(path, "index.html"))
                if found is not None and stat.S_ISREG(found.st.st_mode):
                    if not scope["path"].endswith("/"):
                        found.release()
                        url = URL(scope=scope)
                        return RedirectResponse(url=url.replace(path=url.path + "/"))
                    return self._serve(found, scope)
                if found is not None:
                    found.release()
        if self.html:
            found = await self._find("404.html")
            if found is not None and stat.S_ISREG(found.st.st_mode):
                response = FileResponse(found.path, stat_result=found.st, status_code=404)
                response._adopt(found.fd)
                return response
            if found is not None:
                found.release()
        raise HTTPException(status_code=404)

    def _serve(self, found: _Found, scope: Scope) -> Response:
        try:
            response = self.file_response(found.path, found.st, scope)
        except BaseException:
            found.release()
            raise
        if isinstance(response, FileResponse) and _serves(response, found):
            response._adopt(found.fd)
            found.fd = -1
        else:
            # Another response, or one for another file (a subclass serving a precompressed
            # copy) or without the stat it was given: it opens what it serves itself.
            found.release()
        return response

    def file_response(self, full_path: PathLike, stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        """The :class:`FileResponse` for a file found (or Starlette's ``NotModifiedResponse`` when
        the request's ``If-None-Match``/``If-Modified-Since`` match); override it as in Starlette.
        """
        response = FileResponse(full_path, status_code=status_code, stat_result=stat_result)
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response

    async def _find(self, path: str) -> _Found | None:
        if type(self).lookup_path is not _StarletteStaticFiles.lookup_path:
            return await self._find_by_lookup_path(path)
        if path.startswith(("/", "\\")):
            return None
        if "\x00" in path:
            raise ValueError("embedded null byte")
        # Lexically, as Starlette's lookup (after get_path, only a leading `..` can remain).
        relative = os.path.normpath(path)
        if relative == os.pardir or relative.startswith(("../", "/")):
            return None
        eng = get_engine()
        for directory in self.all_directories:
            found = await self._find_in(eng, os.fspath(directory), relative)
            if found is not None:
                return found
        return None

    async def _find_by_lookup_path(self, path: str) -> _Found | None:
        """A subclass's own ``lookup_path``, run in a worker thread as Starlette runs it (it is
        synchronous, and may touch the disk); the regular file it names is then opened through
        the engine, and served from that descriptor with the descriptor's own stat."""
        full_path, st = await asyncio.get_running_loop().run_in_executor(
            None, self.lookup_path, path)
        if st is None:
            return None
        if not stat.S_ISREG(st.st_mode):
            return _Found(full_path, -1, st)
        fd = await _k.open_fd(full_path, os.O_RDONLY)
        try:
            st = await _k.fstat(fd)
        except BaseException:
            await _k.close_fd(fd)
            raise
        return _Found(full_path, fd, st)

    async def _find_in(self, eng: EngineLike, directory: str, relative: str) -> _Found | None:
        """``relative`` (normalised, neither absolute nor leading out) in ``directory``."""
        base = self._absolute.get(directory)
        if base is None or not _native(eng, "openat"):
            # A directory added after construction, or no kernel openat: the lookup runs as
            # Starlette's lookup_path does, in one worker call.
            result = await _in_worker_found(directory, relative, self.follow_symlink)
            return None if result is None else _Found(*result)
        joined = base if relative == os.curdir else os.path.join(base, relative)
        # Every name is encoded before anything is opened: one that cannot be (a lone
        # surrogate) raises ValueError (a 404) with nothing submitted, so nothing to close.
        if self.follow_symlink:
            return await _open_found(eng, joined, os.fsencode(joined))
        names = [] if relative == os.curdir else [os.fsencode(n) for n in relative.split("/")]
        found = await _walk(eng, os.fsencode(base), base, names, joined)
        if found is _SYMLINK:
            # A symlink on the way: Starlette's realpath check, in a worker, and the same check
            # on the descriptor it opens.
            result = await _in_worker_found(directory, relative, False)
            return None if result is None else _Found(*result)
        assert not isinstance(found, _Symlink)
        return found


class _Symlink:
    """What ``_walk`` returns when it meets a symlink below the directory."""


_SYMLINK = _Symlink()


async def _open_at(eng: EngineLike, dir_fd: int, name: bytes, flags: int, filename: str) -> int:
    """The kernel's ``openat`` of ``name`` relative to ``dir_fd``. Cancelled, it waits until
    the kernel is done with the operation (which names ``dir_fd`` by number, and a number
    closed and reused meanwhile would be resolved instead); what it opens late is closed."""
    fut = eng.openat(dir_fd, name, flags | os.O_CLOEXEC, 0, filename)  # type: ignore[union-attr]
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(_k._close_result)
        settled = eng.cancel_wait(fut)
        if settled is not None:
            await settle(settled)
        raise


async def _open_found(eng: EngineLike, path: str, name: bytes, dir_fd: int = _k.AT_FDCWD,
                      nofollow: int = 0) -> _Found | None:
    """Open ``name`` (relative to ``dir_fd``) read-only, or, if it cannot be opened for reading
    (a socket, a device, a directory or file we may not read), with ``O_PATH``, as Starlette
    stat-s it (no permission needed): its descriptor and stat, None if it does not exist, a
    ``PermissionError`` for a regular file we may not read (a 401)."""
    try:
        fd = await _open_at(eng, dir_fd, name, _OPEN_FLAGS | nofollow, path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno not in _NOT_OPENABLE:
            raise
        refused = exc
    else:
        try:
            return _Found(path, fd, _fstat_regular(fd))  # fstat inline: see _open_stat
        except BaseException:
            os.close(fd)
            raise
    try:
        fd = await _open_at(eng, dir_fd, name, os.O_PATH | nofollow, path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        raise refused from None
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
        os.close(fd)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        raise refused  # a file we may not read: 401
    return _Found(path, fd, st)


async def _walk(eng: EngineLike, base_name: bytes, base: str, names: list[bytes], path: str
                ) -> _Found | _Symlink | None:
    """Open the directory, then each name below it in turn, relative to the descriptor of the
    one before, following no symlink (``O_NOFOLLOW``): with no ``..`` among the names, what is
    opened lies in the directory (as the kernel resolved it now — a ``current -> release-N``
    symlink switched by a deploy is followed at once). A symlink on the way gives
    ``_SYMLINK``: whether it stays in the directory is for Starlette's check."""
    try:
        fd = await _open_at(eng, _k.AT_FDCWD, base_name, os.O_PATH | os.O_DIRECTORY, base)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        for name in names[:-1]:
            try:
                step = await _open_at(eng, fd, name, os.O_PATH | os.O_NOFOLLOW, path)
            except (FileNotFoundError, NotADirectoryError):
                return None
            os.close(fd)
            fd = step
            mode = os.fstat(fd).st_mode  # inline: an open descriptor's inode, no I/O
            if stat.S_ISLNK(mode):
                return _SYMLINK
            if not stat.S_ISDIR(mode):
                return None  # a name below a file (ENOTDIR, as Starlette's stat)
        if not names:
            return _Found(path, -1, os.fstat(fd))  # the directory itself
        try:
            return await _open_found(eng, path, names[-1], fd, os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the name is a symlink (O_NOFOLLOW)
                return _SYMLINK
            raise
    finally:
        os.close(fd)


async def _in_worker_found(directory: str, path: str, follow_symlink: bool
                           ) -> tuple[str, int, os.stat_result] | None:
    fut = asyncio.get_running_loop().run_in_executor(None, _lookup_blocking, directory, path,
                                                     follow_symlink)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(_close_found)
        raise


def _close_found(fut: asyncio.Future[tuple[str, int, os.stat_result] | None]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        result = fut.result()
        if result is not None:
            os.close(result[1])

