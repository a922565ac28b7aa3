"""``AsyncBase``: the members every async file has (aiofiles' and a few beyond), over the call
machinery of the layers below it (core, direct, writes, reads)."""

from __future__ import annotations

import errno
import io
import os
import stat
import warnings
from collections.abc import Iterable
from typing import Any

from .. import _kernelops as _k
from .._args import check_read_alloc, off_t, ssize_t
from .._awaiting import await_owned
from .._engine import get_engine
from .._raw import STREAM, WritesFirst
from .core import S
from .gate import _turn_spent
from .reads import _Reads
from .writes import _owned, _pwrite_args, _Short, _write_all, _write_each


def _seek_refused(text: bool, offset: Any, whence: Any) -> bool:
    """Whether the builtin's seek() — TextIOWrapper's (``text``) or BufferedWriter's —
    refuses these arguments before it flushes its buffer: a bad whence, a nonzero relative
    text seek, a negative text position, an offset that is no integer. The good ones are
    answered here (an empty file would refuse a text cookie the real file takes: one that
    skips characters past its end); any other is asked of the same builtin over an empty
    in-memory file, whose seek refuses such arguments as the real one does."""
    if isinstance(offset, int) and type(whence) is int:
        if text and (whence == os.SEEK_SET and offset >= 0
                     or whence in (os.SEEK_CUR, os.SEEK_END) and offset == 0):
            return False
        if not text and 0 <= whence <= 4 and -1 << 63 <= offset < 1 << 63:  # 3, 4: DATA, HOLE
            return False
    probe: Any = io.TextIOWrapper(io.BytesIO(), encoding="utf-8") if text \
        else io.BufferedWriter(io.BytesIO())
    try:
        probe.seek(offset, whence)
    except Exception:  # noqa: BLE001 - any refusal: the real seek raises its own
        return True
    return False


class AsyncBase(_Reads[S]):
    """What every async file shares: the call machinery and the members all modes have."""

    _unlink_on_close: Any = None  # a NamedTemporaryFile's path
    _unlink_on_exit: Any = None   # … with delete_on_close=False (3.12+)

    # --- the members every wrapper has ----------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the file is closed."""
        return bool(self._file.closed)

    @property
    def name(self) -> Any:
        """The name the file was opened with (a path, or the descriptor), as the builtin's."""
        return self._file.name

    @property
    def mode(self) -> str:
        """The mode the file was opened with, as the builtin's ``mode``."""
        return str(self._file.mode)

    def fileno(self) -> int:
        """The file descriptor (a plain method, as in aiofiles)."""
        return int(self._file.fileno())

    async def isatty(self) -> bool:
        """Whether the file is a terminal."""
        if self._raw is None:
            return await self._in_executor(self._file.isatty)
        return bool(self._file.isatty())

    async def seekable(self) -> bool:
        """Whether the file supports random access (``seek``, ``tell``)."""
        if self._raw is None:
            return await self._in_executor(self._file.seekable)
        return bool(self._file.seekable())

    async def writable(self) -> bool:
        """Whether the file was opened for writing."""
        if self._raw is None:
            return await self._in_executor(self._file.writable)
        return bool(self._file.writable())

    async def flush(self) -> None:
        """Write what the buffered and text layers hold; the data is with the kernel (in the page
        cache, not necessarily on disk: see ``fsync``) when the await returns."""
        if self._raw is None:
            return await self._in_executor(self._file.flush)
        if not self._try_lock():
            await self._lock()
        try:
            self._run(self._file.flush)
            self._dirty = 0
            await self._push()
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def close(self) -> None:
        """Flush and close the file (a ``NamedTemporaryFile`` with ``delete=True`` is also
        unlinked); a flush error is raised once the file is closed, as the builtin's ``close()``."""
        lazy = self._lazy
        if lazy is not None and not self._busy:  # (busy: wait below for the lazy read)
            if not lazy.close_now():
                lazy.closed = True  # FileIO's close: closed, whatever close(2) says
                await _k.close_fd(lazy.fd)
            return
        raw = self._raw
        if raw is None:
            return await self._in_executor(self._file.close)
        if not self._try_lock():
            try:
                await self._lock()
            except OSError:
                # A write a cancelled call left failed, reported here (_finish_unfinished):
                # the builtin's close() raises its flush's error with the file closed all the
                # same. Closed, then raised (a second such write's error takes its place).
                await self.close()
                raise
        try:
            try:
                self._run(self._file.close)
                await self._push()
            except Exception:
                await self._push_after_error()
                raise
            finally:
                if raw.closed and raw.closefd and not raw._closed_fd:
                    raw._closed_fd = True
                    await _k.close_fd(raw._fd)
                path, self._unlink_on_close = self._unlink_on_close, None
                if path is not None and raw.closed:
                    try:
                        await _k.unlink(path)
                    except FileNotFoundError:
                        pass
        finally:
            self._unlock()

    # --- beyond aiofiles --------------------------------------------------------------------

    async def pread(self, size: int, offset: int) -> bytes:
        """Read up to ``size`` bytes at ``offset`` without moving the file position
        (``os.pread`` on the descriptor: data still in the file object's buffers is not seen)."""
        raw = self._raw
        if raw is None:
            return await self._in_executor(os.pread, self.fileno(), size, offset)
        raw._check("r")
        if raw.direct:  # os.pread's conversions and checks, in the native engine's order
            if type(size) is not int or not -(1 << 63) <= size < 1 << 63:
                size = ssize_t(size)
            if type(offset) is not int or not -(1 << 63) <= offset < 1 << 63:
                offset = off_t(offset)
            if offset < 0 or size < 0:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            check_read_alloc(size)
            return await self._direct_read(size, offset)
        if self._route == "thread":
            return await self._in_executor(os.pread, raw._fd, size, offset)
        eng = get_engine()
        res = eng.read(raw._fd, size, offset)
        if isinstance(res, bytes):  # completed inline (page cache hit)
            return res
        return await await_owned(eng, res)  # (bytes of the engine's own)

    async def pwrite(self, data: Any, offset: int) -> int:
        """Write all of ``data`` at ``offset`` without moving the file position
        (``os.pwrite`` on the descriptor, continued until everything is written)."""
        raw = self._raw
        if raw is None:
            data, offset = _pwrite_args(data, offset)
            return await self._in_executor(_write_all, self.fileno(), data, offset)
        raw._check("w")
        data, offset = _pwrite_args(data, offset)
        if not data:
            # os.pwrite of nothing changes nothing, wherever it is aimed, but the kernel still
            # checks the descriptor (EBADF, ESPIPE): one write(2) of 0 bytes, which never
            # waits. Not through O_DIRECT, which could refuse the unaligned offset.
            return 0 if raw.direct else os.pwrite(raw._fd, data, offset)
        if not self._try_lock():
            await self._lock()
        try:
            if raw.kind != STREAM and raw.appending:
                # O_APPEND: on Linux pwrite(2) writes at the end of the file whatever the
                # offset (man 2 pwrite, BUGS), os.pwrite and every backend alike: the data
                # ends the file, wherever that was when it landed. direct=True emulates it
                # at the size we know, as its writes do.
                if not raw.direct:
                    raw.size = await self._push_items([(offset, data)], positional=True)
                    raw.drop_window()
                    return len(data)
                if offset + len(data) >= 1 << 63:  # pwrite(2) checks the range it was given
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
                offset = raw.size
            if raw.kind != STREAM:
                raw._overlay(offset, data)
                raw.size = max(raw.size, offset + len(data))
            await self._push_items([(offset, data)], positional=True)
            return len(data)
        finally:
            self._unlock()

    async def fsync(self) -> None:
        """Flush the file object's buffers, then ``fsync(2)`` the descriptor."""
        await self.flush()
        await self._sync_op("fsync")

    async def fdatasync(self) -> None:
        """Flush the file object's buffers, then ``fdatasync(2)`` the descriptor."""
        await self.flush()
        await self._sync_op("fdatasync")

    async def _sync_op(self, name: str) -> None:
        fd = self.fileno()
        if self._raw is None or self._route == "thread":
            return await self._in_executor(getattr(os, name), fd)
        eng = get_engine()
        await await_owned(eng, getattr(eng, name)(fd))  # (no memory of the caller's)

    _text_layer = False  # TextIOWrapper: its tell() and seek() flush the buffer first

    async def _land_appends(self) -> None:
        """In append mode a write's position is the end of file the kernel finds when the
        write lands, which other writers (or a truncation) may have moved. The builtin's
        truncate(), text seek(), a write-only seek() and a text read to the end flush the
        buffer first and then go by the position that write left: land what is buffered,
        through the engine, before the call runs. (Before, they went by the end known before
        the write: truncate() cut another writer's data and this write off.) A text tell()
        lands after it asks instead (see tell())."""
        raw = self._raw
        if raw is not None and self._dirty and raw.appends_open():
            self._run(self._file.flush)
            self._dirty = 0
            await self._push()

    async def tell(self) -> int:
        """The current position, as the builtin's ``tell()`` (an opaque number in text mode)."""
        if self._raw is None:
            return await self._in_executor(self._file.tell)
        if not self._try_lock():
            await self._lock()
        try:
            pos = self._run(self._file.tell)
            raw = self._raw
            landing = raw.appended and self._text_layer
            if self._text_layer:  # a binary tell() leaves the buffer as it is
                self._dirty = 0
            await self._push()
            if landing:
                # TextIOWrapper's tell() flushed an append (after its own checks, which a
                # flush made first would change) and answered before it landed: ask again.
                pos = self._run(self._file.tell)
            return int(pos)
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move to ``offset`` relative to ``whence`` (``os.SEEK_SET``, ``SEEK_CUR``, ``SEEK_END``,
        ``SEEK_DATA``, ``SEEK_HOLE``) and return the new position, as the builtin's ``seek()``."""
        if self._raw is None:
            return await self._in_executor(self._file.seek, offset, whence)
        raw = self._raw
        if not self._try_lock():
            await self._lock()
        try:
            if (self._text_layer or not raw.reads_fd) and \
                    not _seek_refused(self._text_layer, offset, whence):
                # TextIOWrapper's and BufferedWriter's seek() flush first (once they have
                # found their arguments good); BufferedRandom's may not (a seek inside its
                # read buffer): its own flush, if any, rewinds relative to the end the append
                # finds (the raw layer's append_delta).
                await self._land_appends()
            if whence == os.SEEK_END and raw.kind != STREAM and not raw.closed:
                await self._refresh_size()
            await self._before_seek(offset, whence)
            try:
                pos = self._run(self._file.seek, offset, whence)
            except WritesFirst:
                pos = None
            if pos is None:
                # SEEK_DATA or SEEK_HOLE, after the buffered layer flushed writes: they land
                # (as the builtin's flush had written them), then lseek(2) answers. The
                # buffered layer keeps its read buffer until the raw seek succeeds, as the
                # builtin's does (a seek that fails with ENXIO leaves it for later reads).
                await self._push()
                pos = self._run(self._file.seek, offset, whence)
            self._dirty = 0
            before = raw.pos
            await self._push()
            if pos == before != raw.pos and not self._text_layer:
                # BufferedRandom's flush staged an append and its seek was relative to it:
                # the answer is where the landed append left the position (the end another
                # writer may have moved), as the raw layer's is now.
                pos = raw.pos
            return int(pos)
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def _before_seek(self, offset: int, whence: int) -> None:
        pass

    async def _refresh_size(self) -> None:
        raw = self._raw
        assert raw is not None
        if raw.staged:
            return
        try:
            st = await _k.fstat(raw._fd)
        except OSError:
            return  # the synchronous call reports a closed or bad descriptor
        if st.st_size or not _is_block(st.st_mode):
            raw.size = st.st_size
        else:
            raw.size = os.lseek(raw._fd, 0, os.SEEK_END)

    async def truncate(self, size: int | None = None) -> int:
        """Resize the file to ``size`` bytes (default: the current position); return the size."""
        if self._raw is None:
            return await self._in_executor(self._file.truncate, size)
        if not self._try_lock():
            await self._lock()
        try:
            await self._land_appends()
            n = self._run(self._file.truncate, size)
            self._dirty = 0
            await self._push()
            return int(n)
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def write(self, b: Any, /) -> int:
        """Write ``b`` (``str`` in text mode, a bytes-like object in binary mode); return what the
        builtin's ``write()`` returns. What the layers pass on has reached the kernel when the await
        returns."""
        raw = self._raw
        if raw is None:
            return await self._in_executor(self._file.write, b)
        if self._text_layer and type(b) is str and len(b) > _ENCODE_CEDE:
            # Encoding is the text layer's work on the loop's thread (as anywhere, the
            # builtin's one copy): tasks writing large text at once encode one an iteration
            # once its budget is spent, not all back to back.
            while _turn_spent():
                await _k.one_turn()
        if not self._try_lock():
            await self._lock()
        try:
            if self._text_layer:
                # Text larger than this may encode (newlines translated) to more bytes than
                # the buffer holds, which the buffered layer passes on from the encoded bytes.
                n = (self._pass_through(b, None) if type(b) is str and
                     len(b) > self._bufsize >> 3 else self._run(self._file.write, b))
            else:
                owned = _owned(b, self._bufsize)
                n = (self._run(self._file.write, b) if owned is None else
                     self._pass_through(b, owned))
            if raw.passed_through:
                raw.passed_through = False
                self._dirty = 0  # the buffered and text layers hold nothing now
            else:
                self._dirty += 4 * n + 8
            if raw.staged:
                try:
                    await self._push()
                except _Short as short:
                    return short.written
            return int(n)
        except Exception:
            self._held_after_error((b,))
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def writelines(self, lines: Iterable[Any], /) -> None:
        """Write every item of ``lines`` (no separators added), as the builtin's ``writelines()``.
        """
        raw = self._raw
        if raw is None:
            return await self._in_executor(self._file.writelines, lines)
        if not self._try_lock():
            await self._lock()
        try:
            if self._file.closed:  # IOBase.writelines checks that before iterating
                self._run(self._file.writelines, lines)
            lines = list(lines)
            if self._text_layer:
                self._pass_through(lines, None, self._file.writelines)
            elif any(_owned(x, self._bufsize) for x in lines):
                self._run(_write_each, self, lines)
            else:
                self._run(self._file.writelines, lines)
            if raw.passed_through:  # what the layers may hold: at most the smaller items
                raw.passed_through = False
                self._dirty = _held_bound(x for x in lines if not _owned(x, self._bufsize))
            else:
                self._dirty += _held_bound(lines)
            if raw.staged:
                await self._push()
        except Exception:
            self._held_after_error(lines if isinstance(lines, list) else ())
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    def _held_after_error(self, items: Iterable[Any]) -> None:
        """A write call raised part-way (``writelines``: at an item the text layer cannot
        encode, or the buffered layer refuses): the items before it may sit in the buffered or
        text layer, so ``_dirty`` counts all of them — an upper bound, as always. Whether one
        was passed through to the kernel no longer says the layers hold nothing."""
        raw = self._raw
        if raw is not None:
            raw.passed_through = False
        self._dirty += _held_bound(items)

    # reads shared by all modes --------------------------------------------------------------

    async def read(self, size: int = -1, /) -> S:
        """Read up to ``size`` bytes or characters (all, to end of file, if ``size`` is negative).
        """
        raise NotImplementedError

    async def readline(self, size: int = -1, /) -> S:
        """Read one line, with its line ending (at most ``size`` if ``size`` is not negative)."""
        raise NotImplementedError

    async def readlines(self, hint: int = -1, /) -> list[S]:
        """Read the remaining lines (stopping once their total size exceeds ``hint`` > 0)."""
        raise NotImplementedError

    def __del__(self) -> None:
        lazy = self._lazy
        if lazy is not None:
            if not lazy.closed:
                warnings.warn(f"unclosed file {self!r}", ResourceWarning, stacklevel=2,
                              source=self)
                lazy.closed = True
                os.close(lazy.fd)  # as the stack's FileIO closes it when collected
            return
        raw = self.__dict__.get("_raw")
        if raw is not None and not raw.closed:
            warnings.warn(f"unclosed file {self!r}", ResourceWarning, stacklevel=2, source=self)
            # Closed now, as the builtin's stack closes itself when collected: the warning's
            # source may keep this wrapper alive (warnings being recorded, as pytest does),
            # and the data a buffered or text writer holds must not wait for that. The
            # synchronous stack writes it and closes the descriptor (an error is reported
            # as unraisable, as the builtin's is).
            self._file.close()

    def __repr__(self) -> str:
        lazy = self._lazy
        if lazy is not None:  # what the BufferedReader it stands for would say
            return f"<{type(self).__name__} <_io.BufferedReader name={lazy.name!r}>>"
        return f"<{type(self).__name__} {self._file!r}>"


def _held_bound(items: Iterable[Any]) -> int:
    """An upper bound of the bytes written items may leave in the buffered or text layer (a
    character encodes to at most 4 bytes; a newline may become two)."""
    return sum(4 * len(x) + 8 for x in items if hasattr(x, "__len__"))


def _is_block(mode: int) -> bool:
    return stat.S_ISBLK(mode)


_ENCODE_CEDE = 1 << 20  # characters: a write this large yields first if the turn is spent
