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
import mimetypes
import os
import stat
from collections.abc import Awaitable, Callable, Mapping

from starlette.background import BackgroundTask
from starlette.datastructures import URL, Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse as _StarletteFileResponse
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.staticfiles import NotModifiedResponse
from starlette.staticfiles import StaticFiles as _StarletteStaticFiles
from starlette.types import Message, Receive, Scope, Send

from . import _kernelops as _k
from ._awaiting import settle
from ._engine import EngineLike, get_engine
from ._http_ranges import (
    BodyPlan,
    MalformedRange,
    UnsatisfiableRange,
    chunked_reads,
    if_range_matches,
    multipart_byteranges,
    not_modified,
    parse_range,
    range_and_conditions,
)
from ._open_readonly import NOT_OPENABLE, open_stat
from ._static_lookup import Found, find_in, find_with_lookup_path, relative_below

__all__ = ["FileResponse", "StaticFiles"]

PathLike = str | os.PathLike[str]

# The media types a response guesses from its path come from the system's tables, read (files
# opened and stat'ed) the first time one is asked for: here, at import, not on the loop's
# thread in the first request (Starlette's FileResponse guesses in its constructor).
mimetypes.init()


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
        # A method, as in Starlette: its own __call__ (serving under another async library
        # than asyncio) calls it too.
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
            plan = list(chunked_reads(0, size, self.chunk_size))
            if size % self.chunk_size == 0:
                plan.append(b"")  # Starlette ends on a short read: here an empty message
        elif len(ranges) == 1:
            start, end = ranges[0]
            mutable = MutableHeaders(raw=list(self.raw_headers))
            mutable["content-range"] = f"bytes {start}-{end - 1}/{size}"
            mutable["content-length"] = str(end - start)
            headers = mutable.raw
            plan = list(chunked_reads(start, end, self.chunk_size))
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
            transfer.fd, opened = await open_stat(transfer.eng, os.fspath(self.path))
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
            fd, st = await open_stat(eng, path)
        except FileNotFoundError:
            raise RuntimeError(f"File at path {self.path} does not exist.") from None
        except OSError as exc:
            if exc.errno not in NOT_OPENABLE:
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


def _serves(response: FileResponse, found: Found) -> bool:
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

    def _serve(self, found: Found, scope: Scope) -> Response:
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

    async def _find(self, path: str) -> Found | None:
        if type(self).lookup_path is not _StarletteStaticFiles.lookup_path:
            return await find_with_lookup_path(self.lookup_path, path)
        relative = relative_below(path)
        if relative is None:
            return None
        eng = get_engine()
        for directory in self.all_directories:
            name = os.fspath(directory)
            found = await find_in(eng, name, self._absolute.get(name), relative,
                                  self.follow_symlink)
            if found is not None:
                return found
        return None
