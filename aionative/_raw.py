"""The bottom of an ``aionative.open`` file: a raw stream that never makes a system call.

``aionative.open`` builds the same object stack the builtin ``open()`` builds —
``TextIOWrapper`` over ``BufferedReader``/``BufferedWriter``/``BufferedRandom`` over a raw file —
from CPython's own C classes, so every semantic detail (buffering, newline translation,
incremental decoding, ``tell()`` cookies, error messages) is the builtin's. Only the raw layer is
ours: :class:`WindowRaw` serves reads from a *window* of file data that the async layer fetched
through the engine before running the synchronous operation, and *stages* writes (and
truncations) that the async layer hands to the engine right after it. So the synchronous stack
never blocks, and the awaiting caller sees each write's outcome before its ``await`` returns.

A read beyond the window (the async layer fetched too little) returns ``None`` — the
"would block" answer of a non-blocking raw stream, which the buffered layer turns into a
partial result without losing state — and records how much was wanted, so the caller can fetch
and continue. While an operation runs in a worker thread (the few cases the async layer cannot
bound, see ``_files``), a miss reads the descriptor directly instead.

The window is a cache below CPython's own 8 KiB buffer: like it, it can be stale with respect to
another process's writes, over more bytes (up to the window's size). A read past the window
re-checks the end of the file; one that finds nothing where the size known said there was more
(another writer shrank the file) asks the file's size and cuts the window there, so a read to
the end never returns bytes past the new end.
"""

from __future__ import annotations

import errno
import io
import os
from _thread import get_ident
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._args import (
    bytes_like,
    c_int,
    check_read_alloc,
    not_writable,
    off_t,
    optional_size,
)
from ._backend import _core
from ._compat import INTERNALS, KERNEL_RW_MAX
from ._direct import direct_pread_sync, direct_pwrite_sync

#: What a stream's file types are: read at the descriptor's position, not at an offset.
REGULAR, STREAM = 0, 1


def _einval() -> OSError:
    return OSError(errno.EINVAL, os.strerror(errno.EINVAL))


class WritesFirst(Exception):
    """``WindowRaw.seek`` with SEEK_DATA or SEEK_HOLE while writes are staged (the buffered
    layer's seek flushed its write buffer just before): lseek(2) answers from the file on
    disk, so the async layer lands them and seeks again. Nothing has changed yet, in the raw
    layer or in the buffered one, which keeps its read buffer when its raw seek raises."""


def _espipe() -> OSError:
    return OSError(errno.ESPIPE, os.strerror(errno.ESPIPE))


#: The thread serving a read from a window without the async layer's lock (``_BinaryBase.read``'s
#: fast path: one read at a time a thread, start to end in one call), for ``fileno`` (see
#: there); -1: none. A cell, not an attribute of the raw file: changing its dictionary on every
#: such read cost several hundred instructions a read
#: (`python -m bench.instructions --cases read:1000`).
SERVING: list[int] = [-1]


# _core.WindowBase extends CPython's _io._RawIOBase (a name private to the io module): it is
# used when the extension could build it and the internals are allowed (AIONATIVE_INTERNALS).
if TYPE_CHECKING:
    from ._core import WindowBase as _WindowBase
elif _core is not None and INTERNALS and hasattr(_core, "WindowBase"):
    class _WindowBase(io.RawIOBase, _core.WindowBase):
        """io.RawIOBase with the window state in ``_core.WindowBase``'s struct."""
else:
    class _WindowBase(io.RawIOBase):
        """``_core.WindowBase`` without the extension."""

        buf: bytes | bytearray = b""
        pos = wstart = kind = 0
        _readable = _shut = False


class WindowRaw(_WindowBase):
    """A raw file (``FileIO``'s behaviour and errors) over a window of prefetched data.

    The window: file bytes [wstart, wstart + len(buf)) (a regular file), or the stream's
    unread bytes from buf[rpos:] (a stream; wstart unused); ``buf`` is bytes as fetched (no
    copy) until something must change it in place (see _mutable). The window, the position,
    the kind, whether the mode reads and whether ``close()`` has run (``_shut``) live in the
    base, ``_core.WindowBase``, whose struct the C ``readinto`` reads."""

    # ``name`` and ``mode`` are plain attributes, as on FileIO (``open()`` sets ``name``).
    name: Any
    mode: str

    # State that starts the same in every file: class attributes, set on the instance only
    # when it changes (a file costs fewer dictionary writes to open).
    rpos = 0
    eof = -1                    # offset known to be end-of-file in this operation, or -1
    stream_eof = False          # a stream read returned 0 in this operation
    missed = 0                  # bytes the last read beyond the window wanted (0: none)
    in_op = False               # an async operation is running the stack right now
    blocking_reader: Callable[[int, int], bytes] | None = None  # set in a worker
    _closed_fd = False
    direct = False              # O_DIRECT: aligned transfers through bounce buffers
    appended = False            # the position was last set by an append: the kernel's end of
    #                             file decides it once the write lands
    append_delta = 0            # ... plus this: a relative seek since (a buffered layer's
    #                             rewind after its flush), from the end the append finds
    # A write the caller's object is handed to the kernel from (see ``pass_through``): that
    # object as it is staged (``bytes``, or a byte view exporting the caller's buffer) and its
    # size in bytes. The buffered layer's raw write of exactly that many bytes is that object's
    # memory: everything else it writes meanwhile is its own buffer, never that large.
    owned: tuple[bytes | memoryview, int] | None = None
    passed_through = False      # a write went to the kernel from the caller's object
    passing = False             # in a write call: a text file's buffered layer may pass its
    #                             large writes through (see _open._PassingWrite)

    def __init__(self, fd: int, *, kind: int, readable: bool, writable: bool, appending: bool,
                 created: bool, seekable: bool, closefd: bool, size: int, pos: int,
                 blksize: int, isatty: bool) -> None:
        self._fd = fd
        self.kind = kind
        self._readable = readable
        # Reads go to the descriptor: False when the mode reads but the caller's descriptor
        # is write-only (open(fd, "r+") on O_WRONLY, as the builtin allows). Nothing is then
        # fetched or kept in the window, and a read raises the kernel's EBADF from inside
        # the synchronous call, as it does there (see _miss).
        self.reads_fd = readable
        self._writable = writable
        self.writes_fd = writable   # likewise: False for a mode that writes on O_RDONLY
        self.appending = appending
        self._seekable = seekable
        # What seekable() says: FileIO remembers the outcome of its first lseek(2) (made at
        # open in append mode, else by the first seek, tell or seekable call), so a first
        # seek that fails (EINVAL: a negative offset; ENXIO: SEEK_DATA past the end) makes
        # it say False from then on, while seeks still work. None: not asked yet.
        self.seekable_said: bool | None = seekable if appending else None
        self.closefd = closefd
        self._isatty = isatty
        self.blksize = blksize
        self.mode = _MODES[readable, writable, appending, created]
        self.pos = pos
        self.size = size            # the file's size as we know it (regular files)
        # Whether a short read that reaches `size` proves the end of the file. Not for a file
        # that said it was empty: procfs files (/proc/self/maps, /proc/kallsyms) report size
        # 0 and return a page per read, so only an empty read ends them, as it ends the
        # builtin's loops. Once written through this object the size is the file's own.
        self.sized = size > 0
        self.staged: list[tuple[int, bytes | None]] = []  # (offset, data) or (size, None)
        self.disk_size = size       # the size on disk (direct writes pad, then trim to it)

    # --- state the async layer drives ---------------------------------------------------

    @property
    def wend(self) -> int:
        return self.wstart + len(self.buf)

    def begin(self) -> None:
        """A new operation: end-of-file must be observed again, nothing missed yet."""
        self.eof = -1
        self.stream_eof = False
        self.missed = 0

    def available(self) -> int:
        """Window bytes at the current position (regular file) or unread (stream)."""
        if self.kind == STREAM:
            return len(self.buf) - self.rpos
        i = self.pos - self.wstart
        return len(self.buf) - i if 0 <= i <= len(self.buf) else 0

    def at_eof_after(self, n: int) -> bool:
        """Whether the window holds ``n`` bytes from the position, or everything up to EOF."""
        if self.kind == STREAM:
            return len(self.buf) - self.rpos >= n or self.stream_eof
        i = self.pos - self.wstart
        if not 0 <= i <= len(self.buf):
            return self.eof >= 0 and self.pos >= self.eof
        return len(self.buf) - i >= n or (self.eof >= 0 and self.eof <= self.wend)

    def _mutable(self) -> bytearray:
        buf = self.buf
        if not isinstance(buf, bytearray):
            buf = self.buf = bytearray(buf)
        return buf

    def window_view(self) -> tuple[bytes | bytearray, int, bool]:
        """(buffer, index of the position in it, whether the buffer ends at EOF)."""
        if self.kind == STREAM:
            return self.buf, self.rpos, self.stream_eof
        i = self.pos - self.wstart
        if not 0 <= i <= len(self.buf):
            return b"", 0, self.eof >= 0 and self.pos >= self.eof
        return self.buf, i, self.eof >= 0 and self.eof <= self.wend

    def add_data(self, offset: int, data: bytes, requested: int) -> None:
        """Data the engine read at ``offset`` (regular) or from the stream. End of file: an
        empty read, or (regular files) a short read that reaches the size we know — a short
        read that stops before it is a short transfer (a signal, FUSE, a network filesystem),
        and reading goes on from where it stopped, as the builtin's loops do."""
        if self.kind == STREAM:
            if not data:
                self.stream_eof = True
            elif self.rpos >= len(self.buf):
                self.buf, self.rpos = data, 0
            else:
                buf = self._mutable()
                del buf[:self.rpos]
                self.rpos = 0
                buf += data
            return
        if self.buf and self.wstart <= offset <= self.wend:
            # Continue the window; keep up to 64 KiB behind the position for short seeks back.
            drop = max(0, min(self.pos, offset) - self.wstart - 65536)
            buf = self._mutable()
            del buf[offset - self.wstart:]
            del buf[:drop]
            self.wstart += drop
            buf += data
        else:
            self.buf = data
            self.wstart = offset
        self.note_read(offset, len(data), requested)

    def note_read(self, offset: int, got: int, requested: int) -> None:
        """What a read of ``requested`` bytes at ``offset`` that returned ``got`` says of the
        file's size and end (regular files; see add_data)."""
        end = offset + got
        if got < requested and (not got or self.sized and end >= self.size):
            self.eof = end
            # Data ending here: the file's size. Nothing at an offset past our size: the size
            # we know stands (nothing at an offset below it: the file shrank under us).
            shrank = not got and end < self.size
            if got or shrank:
                self.size = end
            if shrank and self.wstart < self.wend:
                self._shrunk()
        elif end > self.size:
            self.size = end

    def _shrunk(self) -> None:
        """Nothing where the size we knew said there was more: another writer shrank the file,
        maybe below the end of the window. Its bytes past the new end are gone: the window
        ends there (the builtin's reads see the new end past its own buffer's few KiB; the
        window may hold far more)."""
        try:
            size = os.fstat(self._fd).st_size
        except OSError:
            return
        if size < self.wend:
            self._end_window_at(size)
            self.eof = self.size = size

    def _end_window_at(self, size: int) -> None:
        """The file ends at ``size``: the window's bytes past it go."""
        if size < self.wend:
            del self._mutable()[max(0, size - self.wstart):]

    def next_fetch(self) -> int:
        """Offset at which the window continues from the position (regular files)."""
        i = self.pos - self.wstart
        return self.wend if 0 <= i <= len(self.buf) else self.pos

    def drop_window(self) -> None:
        self.buf = b""
        self.wstart = self.pos
        self.rpos = 0

    def take_staged(self) -> list[tuple[int, bytes | None]]:
        staged, self.staged = self.staged, []
        return staged

    # --- RawIOBase ----------------------------------------------------------------------

    def _check(self, want: str | None = None) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if want == "r" and not self._readable:
            raise io.UnsupportedOperation("File not open for reading")
        if want == "w" and not self._writable:
            raise io.UnsupportedOperation("File not open for writing")

    def readable(self) -> bool:
        self._check()
        return self._readable

    def writable(self) -> bool:
        self._check()
        return self._writable

    def seekable(self) -> bool:
        self._check()
        if self.seekable_said is None:
            self.seekable_said = self._seekable
        return self.seekable_said

    def isatty(self) -> bool:
        self._check()
        return self._isatty

    def fileno(self) -> int:
        self._check()
        if self.in_op and self.blocking_reader is None or SERVING[0] == get_ident():
            # A call served from the window on the loop's thread (AsyncBase._run): nothing in
            # it reads or writes the descriptor (a miss returns None, a write is staged; the
            # async layer does the I/O). Blocking-call detectors (blockbuster) wrap
            # BufferedReader.read, TextIOWrapper.write, ... and let a call through on a
            # loop's thread when the file has no descriptor to block on: while such a call
            # runs, none is given out. The async file's fileno() and every call outside an
            # operation (a worker thread's has a blocking reader) see the descriptor.
            raise io.UnsupportedOperation("served from memory: no descriptor in use")
        return self._fd

    # FileIO converts its arguments before it checks closed and mode: so do read, readinto,
    # write and seek (truncate converts after).

    def readinto(self, b: Any) -> int | None:
        # FileIO's "w*": whatever is not a writable contiguous buffer is one TypeError (CPython
        # clears the exporter's error)
        try:
            mv = memoryview(b)
        except Exception:  # noqa: BLE001
            raise not_writable(b) from None
        try:
            if mv.readonly:
                raise not_writable(b)
            out = mv.cast("B")
        except Exception:  # noqa: BLE001
            mv.release()  # not exported while the exception lives
            raise not_writable(b) from None
        with mv, out:
            self._check("r")
            want = len(out)
            if want == 0:
                return 0
            if self.kind == STREAM:
                have = len(self.buf) - self.rpos
                if have:
                    n = min(want, have)
                    out[:n] = self.buf[self.rpos:self.rpos + n]
                    self.rpos += n
                    return n
                if self.stream_eof:
                    return 0
                return self._miss(out, want)
            i = self.pos - self.wstart
            if 0 <= i < len(self.buf):
                n = min(want, len(self.buf) - i)
                out[:n] = self.buf[i:i + n]
                if n < want and (self.blocking_reader is not None or not self.in_op):
                    n += self._read_on(out, n, want)
                self.pos += n
                return n
            if self.eof >= 0 and self.pos >= self.eof:
                return 0
            return self._miss(out, want)

    _readinto_py = readinto
    if _core is not None:
        # The window hit (a regular file, all of ``b`` in the window) without a frame.
        readinto = _core.WindowReadinto(_readinto_py)  # type: ignore[assignment]

    def _read_on(self, out: memoryview, n: int, want: int) -> int:
        """The window ended after ``n`` of the ``want`` bytes, in a worker thread or in
        synchronous use, where the descriptor can be read: the rest as a file's read(2) would
        return it (a read cut short would move where the buffered layer's next reads start,
        and what a decoder sees at once). Async operations make the window long enough."""
        if self.eof >= 0 and self.eof <= self.wend:
            return 0
        reader = self.blocking_reader or self._sync_read
        more = reader(min(want - n, KERNEL_RW_MAX), self.pos + n)
        out[n:n + len(more)] = more
        return len(more)

    def _sync_read(self, n: int, pos: int) -> bytes:
        if self.kind == STREAM:
            return os.read(self._fd, n)
        if self.direct:
            return direct_pread_sync(self._fd, n, pos)
        return os.pread(self._fd, n, pos)

    def _miss(self, out: memoryview, want: int) -> int | None:
        reader = self.blocking_reader
        if reader is None and not self.in_op:
            # Used synchronously (a detached buffer, ``f.buffer``/``f.raw``, a finalizer):
            # behave as FileIO does, with the real, blocking system call.
            reader = self._sync_read
        if reader is not None:  # in a worker thread, or synchronous use
            data = reader(min(want, KERNEL_RW_MAX), self.pos)
            out[:len(data)] = data
            if self.kind != STREAM:
                self.pos += len(data)
                self.drop_window()
            return len(data)
        if not self.reads_fd:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        self.missed = max(self.missed, want)
        return None

    def read(self, size: int | None = -1, /) -> bytes | None:
        if type(size) is int and -(1 << 63) <= size < 1 << 63:
            n = size
        else:
            n = optional_size(size)
        self._check("r")
        if n < 0:
            return self.readall()
        if n > KERNEL_RW_MAX:  # FileIO allocates n bytes, then one read(2) returns no more
            check_read_alloc(n)
            n = KERNEL_RW_MAX
        b = bytearray(n)
        got = self.readinto(b)
        if got is None:
            return None
        del b[got:]
        return bytes(b)

    def readall(self) -> bytes | None:  # type: ignore[override]
        self._check()
        if not self._readable:  # FileIO.readall just calls read(2)
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        if self.kind != STREAM:
            buf, i, at_eof = self.window_view()
            if at_eof:  # the whole rest is in the window: one copy out
                rest = bytes(buf[i:]) if i or not isinstance(buf, bytes) else buf
                self.pos += len(rest)
                return rest
        parts: list[bytes] = []
        while True:
            chunk = self.read(max(self.available(), 65536))
            if chunk is None:
                return b"".join(parts) if parts else None
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)

    def write(self, b: Any) -> int:
        # A contiguous bytes-like object, as FileIO's "y*" takes (TypeError, BufferError);
        # copied: the caller's buffer is only valid during this call.
        t = type(b)
        owned = False
        if t is bytes:
            data = b
        else:
            view = b if t is memoryview else bytes_like(b)
            if not view.c_contiguous:
                raise BufferError("memoryview: underlying buffer is not C-contiguous")
            whole = self.owned
            if whole is not None and view.nbytes == whole[1]:
                data, owned = whole[0], True  # the caller's object: no copy
            else:
                data = view.tobytes()
        self._check("w")
        if not self.writes_fd:  # the kernel's answer, at once: the buffers keep the data
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        if not data:
            return 0
        self.passed_through |= owned
        if self.kind == STREAM:
            self.staged.append((-1, data))
            if not self.in_op:
                self._sync_flush_staged()
            return len(data)
        if self.pos + len(data) >= 1 << 63:
            # write(2) refuses to move the file position past the largest off_t, appending or
            # not (rw_verify_area): EINVAL, raised here as FileIO's write raises it, so the
            # buffered layer keeps the data, as the builtin's does.
            raise _einval()
        off = self.size if self.appending else self.pos
        self.append_delta = 0  # an append leaves the position at the end it finds
        self.appended = self.appending
        self.staged.append((off, data))
        self._overlay(off, data, self.appending, owned)
        self.pos = off + len(data)
        self.size = max(self.size, self.pos)
        self.sized = True
        if not self.in_op:
            self._sync_flush_staged()
        return len(data)

    def _overlay(self, off: int, data: bytes | memoryview, appended: bool = False,
                 owned: bool = False) -> None:
        """Keep the window equal to what the file will hold once the staged write lands.
        An append ends the file, and the position follows it: the window then reaches a
        known end of file there, whatever it held before (a read that the same call makes
        next, from the new position, finds the end rather than a miss). A write from the
        caller's object (``owned``: a write call's, pushed before the call ends, so no read
        sees the window before it lands) is not copied in: the window is emptied instead."""
        end = off + len(data)
        old_eof = self.eof
        if appended:
            self.eof = end
        elif old_eof >= 0:
            self.eof = max(old_eof, end)
        wstart, wend = self.wstart, self.wend
        if not self.reads_fd:
            return
        if owned:
            if end > wstart and off <= wend:
                self.buf, self.wstart, self.rpos = b"", end, 0
            return
        # Past the window: extend it only across a hole after a known end of file (zeros).
        if end <= wstart or off > wend and old_eof != wend:
            if appended:  # (never the caller's object: an owned write returned above)
                self.buf, self.wstart = bytes(data) if type(data) is not bytes else data, off
            return
        buf = self._mutable()
        if end > wend:
            buf.extend(bytes(end - wend))
        lo = max(off, wstart)
        buf[lo - wstart:end - wstart] = data[lo - off:]

    def truncate(self, size: int | None = None) -> int:
        self._check("w")
        if self.kind == STREAM:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if size is None:
            if self.seekable_said is None:  # FileIO asks lseek(2) for the position
                self.seekable_said = self._seekable
            size = self.pos
        elif type(size) is not int or not -(1 << 63) <= size < 1 << 63:
            size = off_t(size)
        if size < 0:
            raise _einval()
        self.staged.append((size, None))
        self.size = size
        self.sized = True
        self._end_window_at(size)
        self.eof = size
        if not self.in_op:
            try:
                self._sync_flush_staged()
            except OSError:  # the file keeps its size (EFBIG, …): so does what we know
                self.size = self.disk_size = os.fstat(self._fd).st_size
                self.eof = -1
                self.drop_window()
                raise
        return size

    def seek(self, pos: int, whence: int = 0) -> int:
        # FileIO's order: whence (a C int) is converted with the arguments, before the
        # closed check; the position (an off_t) after it.
        if type(whence) is not int or not -(1 << 31) <= whence < 1 << 31:
            whence = c_int(whence)
        self._check()
        if type(pos) is not int or not -(1 << 63) <= pos < 1 << 63:
            pos = off_t(pos)
        try:
            if not self._seekable:
                raise _espipe()
            if self.kind == STREAM:  # a seekable character device: its own position
                new = os.lseek(self._fd, pos, whence)
                self.drop_window()
                self.pos = new
                return new
            if whence == os.SEEK_SET:
                new = pos
            elif whence == os.SEEK_CUR:
                new = self.pos + pos
            elif whence == os.SEEK_END:
                if not self.in_op and self.blocking_reader is None:
                    self.size = os.fstat(self._fd).st_size
                new = self.size + pos
            else:
                # SEEK_DATA, SEEK_HOLE, or a whence lseek(2) refuses (EINVAL): the kernel
                # answers, from the file on disk, once what is staged has landed.
                if self.staged and self.in_op:
                    raise WritesFirst
                new = os.lseek(self._fd, pos, whence)
            if new < 0 or new >= 1 << 63:
                raise _einval()
            if new > self.size:
                # Past the end: whether the filesystem takes the offset is lseek(2)'s to say
                # (ext4: up to 16 TiB - 4 KiB, EINVAL beyond); up to the size it always does.
                os.lseek(self._fd, new, os.SEEK_SET)
        except OSError:
            if self.seekable_said is None:
                self.seekable_said = False
            raise
        if self.seekable_said is None:
            self.seekable_said = True
        if self.appended and whence in (os.SEEK_CUR, os.SEEK_END):
            # Relative to an append that has not landed: to the end it will find.
            self.append_delta = new - self.size
        elif new != self.pos or whence != os.SEEK_CUR:  # seek(0, SEEK_CUR) just asks
            self.appended = False
        self.pos = new
        return new

    def tell(self) -> int:
        self._check()
        if self.seekable_said is None:
            self.seekable_said = self._seekable
        if not self._seekable:
            raise _espipe()
        if self.kind == STREAM:
            return os.lseek(self._fd, 0, os.SEEK_CUR) - (len(self.buf) - self.rpos)
        return self.pos

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self.in_op:
                # Closed synchronously (the garbage collector, or a caller of the sync
                # object): write what is staged and close the descriptor as FileIO would.
                self._sync_flush_staged()
        finally:
            try:
                super().close()
            finally:
                self._shut = True  # (IOBase's close marks the file closed, even if it raises)
            if not self.in_op and self.closefd:
                self.close_fd_now()

    def close_fd_now(self) -> None:
        if not self._closed_fd and self.closefd:
            self._closed_fd = True
            os.close(self._fd)

    def _sync_flush_staged(self) -> None:
        staged = self.take_staged()
        end = -1
        for off, data in staged:
            if data is None:
                os.ftruncate(self._fd, off)
                self.disk_size = off
                continue
            if self.appending and off >= 0:
                end = -2  # measured after this write lands
            if self.direct and off >= 0:
                self.disk_size = direct_pwrite_sync(self._fd, off, data, self.disk_size)
                if end == -2:
                    end = os.lseek(self._fd, 0, os.SEEK_END)
                continue
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view) if off < 0 else os.pwrite(self._fd, view, off)
                view = view[n:]
                if off >= 0:
                    off += n
            if end == -2:
                end = os.lseek(self._fd, 0, os.SEEK_END)
        self.sync_append_position(end)

    def appends_open(self) -> bool:
        """An open regular file in append mode: its position follows the appends' landing."""
        return self.appending and self.kind != STREAM and not self.closed

    def sync_append_position(self, end: int) -> None:
        """After appending: the kernel wrote at the file's end, wherever other writers left
        it; the position is the end measured right after the last append landed, as FileIO's
        is (unless a seek moved it since)."""
        if not self.appended or end < 0:
            return
        self.appended = False
        pos, self.append_delta = end + self.append_delta, 0
        if end != self.size or pos != self.pos:
            self.size = end
            self.pos = max(pos, 0)
            self.drop_window()

    def __repr__(self) -> str:
        return f"<aionative raw name={getattr(self, 'name', None)!r} mode={self.mode!r}>"


def _mode_string(readable: bool, writable: bool, appending: bool, created: bool) -> str:
    """``FileIO.mode`` for these flags."""
    if created:
        return "xb+" if readable else "xb"
    if appending:
        return "ab+" if readable else "ab"
    if readable:
        return "rb+" if writable else "rb"
    return "wb"


_MODES = {(r, w, a, c): _mode_string(r, w, a, c)
          for r in (False, True) for w in (False, True) for a in (False, True)
          for c in (False, True)}
