"""``AsyncBase``: what every async file shares — the call machinery (the lock, the fetch into
the raw window, the push of staged writes) and the members all modes have."""

from __future__ import annotations

import asyncio
import collections
import errno
import fcntl
import io
import os
import stat
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from concurrent.futures import Executor
from functools import partial
from operator import index
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from .. import _kernelops as _k
from .. import _lowlevel
from .._args import bytes_like, check_read_alloc, off_t, ssize_t
from .._backend import _core
from .._direct import (
    ALIGN,
    align_up,
    direct_buffer,
    direct_lock_range,
    direct_pread_sync,
    lock_backoff,
    lock_blocks,
    rmw_blocks,
    unlock_blocks,
)
from .._engine import get_engine
from .._raw import STREAM, WindowRaw, WritesFirst
from .._threads import ThreadsEngine
from .gate import _GRANT_LINES, _NO_GATE, _LineGate, _turn_spent

if TYPE_CHECKING:
    from .._core import LazyReader

T = TypeVar("T")
S = TypeVar("S", str, bytes)

_READAHEAD_MIN = 32 * 1024
_READAHEAD_MAX = 1024 * 1024


def _count(buf: bytes | bytearray, term: bytes, start: int, stop: int) -> int:
    """``buf.count(term, start, stop)``; a one-byte ``term`` is counted by the extension,
    several times faster than ``bytes.count``'s byte-at-a-time loop (``async for`` counts
    every byte of the file once)."""
    if len(term) == 1 and _core is not None:
        return _core.count_byte(buf, term[0], start, stop)
    return buf.count(term, start, stop)


def _size_arg(size: Any) -> int | None:
    """The size a read was asked for (-1: all), or None when the argument is not one (the
    synchronous call then raises the builtin's TypeError, or OverflowError past Py_ssize_t,
    before reading anything)."""
    if size is None:
        return -1
    try:
        n = index(size)
    except TypeError:
        return None
    return n if -(1 << 63) <= n < 1 << 63 else None  # index(): a small int is returned as it is


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


def _stopped_short(fut: asyncio.Future[Any], data: bytes | None) -> OSError | None:
    """The error of a write future that succeeded with fewer bytes than ``data`` holds. The
    engines carry on after a short piece, so that is a piece that moved nothing, and the file
    layer counted the whole write when it staged it: an error, with ``characters_written``
    (the native engines' words for what a failed write got through). A future that failed
    raises its own error from here."""
    done = fut.result()
    if data is None or not isinstance(done, int) or done >= len(data):
        return None
    exc = OSError(errno.EIO, f"write stopped after {done} of {len(data)} bytes")
    setattr(exc, "characters_written", done)  # noqa: B010 - not typed on OSError
    return exc


class AsyncBase(Generic[S]):
    """What every async file shares: the call machinery and the members all modes have."""

    # State that starts the same in every file: class attributes, set on the instance only
    # when it changes (a file costs fewer dictionary writes to open).
    _busy = False
    # Bytes (an upper bound) written since the last flush: they may still sit in the
    # buffered or text layer, and a read flushes them to the raw layer first, moving the
    # raw position by as much — the window must reach that far too.
    _dirty = 0
    _readahead = _READAHEAD_MIN
    _bufsize = io.DEFAULT_BUFFER_SIZE
    _passing: Any = None  # a text file's pass-through write (_open._PassingWrite)
    _unlink_on_close: Any = None  # a NamedTemporaryFile's path
    _unlink_on_exit: Any = None   # … with delete_on_close=False (3.12+)
    # Opened from a descriptor the caller holds: keep the descriptor's offset where
    # FileIO's read(2)/write(2) would leave it, and follow it if the caller moves it.
    _fd_shared = False
    _synced_pos = -1
    _lazy: LazyReader | None = None  # an ``rb`` file whose stack is not built yet
    # How many more lines ``async for`` may read, and bytes ``read(n)`` may take, without
    # checking the window (see __anext__, _read_room); any other call sets both to 0. The
    # shared _NO_GATE (never raised) until the file needs its own (_line_gate).
    _gate: Any = _NO_GATE

    def __init__(self, file: Any, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None, *, raw: WindowRaw | None = None,
                 route: str = "thread") -> None:
        self._file = file
        self._loop = loop
        self._executor = executor
        self._raw = raw
        self._route = route     # "engine" | "stream" (engine reads at the fd's position) |
        #                         "thread" (streams without a kernel path)
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        # Writes a cancelled call left with the kernel: (future, offset, data, positional), as
        # _push_items had them (see _after_failed_push).
        self._unfinished: list[tuple[asyncio.Future[Any], int, bytes | None, bool]] = []
        self._unfinished_staged: list[tuple[int, bytes | None]] = []

    # --- the machinery --------------------------------------------------------------------

    def _materialize(self) -> None:
        """Build the synchronous stack of a lazy file (only ``rb`` files start lazy)."""
        raise AssertionError(f"{type(self).__name__} never starts lazy")

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop or asyncio.get_running_loop()

    async def _in_executor(self, fn: Callable[..., T], *args: Any) -> T:
        loop = self._get_loop()
        return await loop.run_in_executor(self._executor, partial(fn, *args))

    def _try_lock(self) -> bool:
        if self._busy or self._unfinished:  # (_lock finishes what a cancelled call left;
            return False                     # _unfinished_staged is set only beside it)
        self._busy = True
        gate = self._gate
        gate.budget = gate.room = 0
        assert self._raw is not None
        self._raw.begin()
        if self._fd_shared:
            self._pull_offset()
        return True

    def _adopt_fd(self) -> None:
        """Opened from the caller's descriptor: keep its offset where FileIO's read(2)/write(2)
        would leave it, and follow it if the caller moves it. The kernel appends when the
        descriptor has O_APPEND, whatever the mode says; in append mode FileIO moves the
        offset to the end when it opens (writes then go there, O_APPEND or not). A
        write-only descriptor reads nothing and a read-only one writes nothing, whatever the
        mode says (``reads_fd``, ``writes_fd``)."""
        raw = self._raw
        assert raw is not None
        fd = raw._fd
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        raw.appending = bool(flags & os.O_APPEND)
        if flags & os.O_ACCMODE == os.O_WRONLY:
            raw.reads_fd = False
        elif flags & os.O_ACCMODE == os.O_RDONLY:
            raw.writes_fd = False
        if "a" in raw.mode:
            os.lseek(fd, raw.pos, os.SEEK_SET)  # the end, where _build put the position
        self._fd_shared = True
        self._synced_pos = raw.pos

    def _pull_offset(self) -> None:
        raw = self._raw
        assert raw is not None
        if raw.closed or raw._closed_fd:
            return
        try:
            pos = os.lseek(raw._fd, 0, os.SEEK_CUR)
        except OSError:
            return
        if pos != self._synced_pos:
            raw.pos = self._synced_pos = pos
            raw.drop_window()

    def _push_offset(self) -> None:
        raw = self._raw
        assert raw is not None
        if raw._closed_fd or raw.pos == self._synced_pos:
            return
        try:
            self._synced_pos = os.lseek(raw._fd, raw.pos, os.SEEK_SET)
        except OSError:
            pass

    async def _lock(self) -> None:
        loop = asyncio.get_running_loop()
        while self._busy:
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self._waiters:
                    self._waiters.remove(fut)
                elif not self._busy:
                    self._wake()  # we were handed the turn: pass it on
                raise
        self._busy = True
        gate = self._gate
        gate.budget = gate.room = 0
        try:
            await self._finish_unfinished()
        except BaseException:
            self._unlock()
            raise
        assert self._raw is not None
        self._raw.begin()
        if self._fd_shared:
            self._pull_offset()

    def _unlock(self) -> None:
        if self._fd_shared:
            self._push_offset()
        self._busy = False
        if self._waiters:
            self._wake()

    def _after_failed_push(self, off: int, data: bytes | None, exc: OSError,
                           dropped: list[tuple[int, bytes | None]], positional: bool) -> None:
        """A write or truncation failed (ENOSPC, EFBIG, EIO, …), perhaps after part of a
        write landed: the size (and, after a write the position followed, the position)
        become what the file really holds, so ``tell()`` and later writes agree with the file;
        what did not land (this write's rest, and what was staged after it) is not retried.
        ``positional``: a ``pwrite``, which never moves the position."""
        raw = self._raw
        assert raw is not None
        if raw.kind != STREAM and data is not None and not positional:
            done = int(getattr(exc, "characters_written", 0) or 0)
            ends = [off + len(data)] + [o + len(d) for o, d in dropped
                                        if d is not None and o >= 0]
            if off >= 0 and raw.pos in ends:
                raw.pos = off + done
        if raw.kind != STREAM:
            try:
                raw.size = raw.disk_size = os.fstat(raw._fd).st_size
            except OSError:
                pass
            if raw.appending and data is not None and not positional:
                raw.pos = raw.size
            raw.eof = -1
            raw.drop_window()
        raw.appended = False

    def _margin(self) -> int:
        """How far past the bytes it needs the synchronous stack may read: a line read stops
        in the raw read that finds the line end, which asks for a buffer's worth. The window
        holds that much more (or reaches the end of the file), so every raw read gets all it
        asks for, as from the file: a read cut short at the window's end would move where
        later reads start (visible in ``read1()``, ``peek()``, ``tell()`` cookies) and what
        the decoder sees at once (where a decoding error is raised)."""
        return self._bufsize

    def _ready_end(self, buf: bytes | bytearray, at_eof: bool) -> int:
        """Where in the window a line end must lie to be followed by the margin's worth of it
        (see _margin): the window's end at the end of the file, else the margin before it,
        and 0 when the window is shorter than the margin (a negative end would be counted
        from the window's end by find() and count())."""
        return len(buf) if at_eof else max(len(buf) - self._margin(), 0)

    def _end_line_budget(self) -> None:
        """Members that hand out the synchronous stack end ``async for``'s line budget (and
        ``read(n)``'s room)."""
        gate = self._gate
        gate.budget = gate.room = 0

    def _wake(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    async def _finish_unfinished(self) -> None:
        """Writes a cancelled call left with the kernel: wait for them, then do the rest, and
        report their outcome to this call."""
        if self._unfinished:
            while self._unfinished:
                fut, off, data, positional = self._unfinished[0]
                try:
                    await asyncio.shield(fut)
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if not fut.cancelled() or task is not None and task.cancelling():
                        raise  # this call was cancelled; the write stays first in the list
                    # (the write's own future was cancelled: no outcome to report)
                except Exception:  # noqa: BLE001, S110 - reported below, once it has left the list
                    pass
                self._unfinished.pop(0)
                exc = None if fut.cancelled() else fut.exception() or _stopped_short(fut, data)
                if exc is not None:
                    if isinstance(exc, OSError):
                        # Reported to this call, once, as for a write its caller waited for:
                        # what was staged after it is dropped, the size is taken from the file
                        # (a whole-block direct write counted its end when it was sent), and a
                        # position at the write's end moves back to where the file stopped.
                        staged, self._unfinished_staged = self._unfinished_staged, []
                        self._after_failed_push(off, data, exc, staged, positional)
                        _as_builtins(exc)
                    raise exc
            raw = self._raw
            if raw is not None and raw.appends_open():
                # Appends that landed after their call was cancelled leave the position at the
                # end they found, as the ones _push_items waited for do.
                raw.sync_append_position(self._append_end())
        staged, self._unfinished_staged = self._unfinished_staged, []
        if staged:
            await self._push_list(staged)

    async def _push_after_error(self) -> None:
        """A locked call raised: push what its synchronous part staged before (a buffered
        layer flushes before it looks at its arguments: ``truncate(-2**64)``, ``seek(2**64)``,
        a read on a descriptor that cannot read). The builtin had written it by then, so a
        write's error (EFBIG, ENOSPC, …) is raised instead of the call's own, as in the
        builtin, where it came first; the call's error stays as its ``__context__``."""
        raw = self._raw
        if raw is not None and raw.staged and not raw._closed_fd:
            await self._push()

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        raw = self._raw
        assert raw is not None
        raw.in_op = True
        try:
            return fn(*args)
        finally:
            raw.in_op = False

    def _pass_through(self, b: Any, owned: tuple[bytes | memoryview, int] | None,
                      fn: Callable[[Any], Any] | None = None) -> Any:
        """Write ``b`` through the synchronous stack (``fn``: its ``write``), letting a write
        larger than the buffer reach the kernel from the caller's object, as the builtin's
        buffered layer passes it to its raw file: ``owned`` (binary: ``b`` as staged, and its
        size), or for text whatever the text layer encodes (``_open._PassingWrite``). The buffered
        layer does the rest as the builtin's does: it writes what it holds first, and keeps
        its own position. The staged write is pushed before the call ends (``write`` and
        ``writelines``), so the window need not hold a copy of it."""
        raw = self._raw
        assert raw is not None
        raw.owned = owned
        raw.passing = True
        passing = self._passing
        buffer = None
        if passing is not None:  # (only for this call: a finalizer's flush is the builtin's)
            try:
                buffer = self._file.buffer  # (None, or ValueError, once detached)
            except ValueError:
                pass
            if buffer is not None:
                buffer.write = passing
        try:
            return self._run(fn or self._file.write, b)
        finally:
            raw.owned = None
            raw.passing = False
            if buffer is not None:
                del buffer.write

    async def _run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a synchronous call in the executor; the raw layer may read the descriptor."""
        raw = self._raw
        assert raw is not None
        fd = raw._fd
        stream = raw.kind == STREAM

        direct = raw.direct

        def reader(n: int, pos: int) -> bytes:
            if stream:
                return os.read(fd, n)
            return direct_pread_sync(fd, n, pos) if direct else os.pread(fd, n, pos)

        def call() -> T:
            raw.blocking_reader = reader
            raw.in_op = True
            try:
                return fn(*args)
            finally:
                raw.in_op = False
                raw.blocking_reader = None

        return await self._get_loop().run_in_executor(self._executor, call)

    # fetching ------------------------------------------------------------------------------

    async def _read_at(self, size: int, offset: int) -> bytes:
        raw = self._raw
        assert raw is not None
        if raw.direct and raw.kind != STREAM:
            return await self._direct_read(size, offset)
        if self._route == "thread":
            if raw.kind == STREAM:
                return await self._in_executor(os.read, raw._fd, size)
            return await self._in_executor(os.pread, raw._fd, size, offset)
        eng = get_engine()
        fut: Awaitable[bytes]
        if raw.kind == STREAM:
            fut = eng.pread(raw._fd, size, 0)
        else:
            res = eng.read(raw._fd, size, offset)
            if isinstance(res, bytes):  # completed inline (page cache hit)
                return res
            fut = res
        try:
            return await fut
        except asyncio.CancelledError:
            eng.cancel(fut)
            raise
        except OSError as exc:
            # Linux AIO cannot read some pseudo-files (procfs without read_iter): read them in
            # the executor from now on.
            if exc.errno == 22 and eng.backend == "linux_aio" and raw.kind != STREAM:
                self._route = "thread"
                return await self._in_executor(os.pread, raw._fd, size, offset)
            raise

    async def _engine_readinto(self, buf: Any, offset: int) -> int:
        eng = get_engine()
        res = eng.readinto(self._raw_fd(), buf, offset)
        if isinstance(res, int):  # completed inline (never for O_DIRECT descriptors)
            return res
        fut = res
        try:
            return await fut
        except asyncio.CancelledError:
            await _lowlevel.settle_cancelled(eng, fut)  # the read may land in `buf` until then
            raise

    def _raw_fd(self) -> int:
        assert self._raw is not None
        return self._raw._fd

    async def _direct_read(self, size: int, offset: int) -> bytes:
        """An O_DIRECT read: the engine reads the aligned range around it into aligned memory
        of its own and returns the part asked for."""
        eng = get_engine()
        fut = eng.pread_direct(self._raw_fd(), size, offset)
        try:
            return await fut
        except asyncio.CancelledError:
            eng.cancel(fut)  # the kernel keeps the engine's memory until the read completes
            raise

    async def _direct_write(self, off: int, data: bytes) -> int | None:
        """An O_DIRECT write, under the lock of the blocks it writes (see ``_direct``'s locks):
        whole blocks go to the engine, which writes a copy from aligned memory of its own
        (their count returned); otherwise read the partial edge blocks, write the aligned
        range from page-aligned memory, trim the file if the padding went past its new end.
        A lock another writer holds is tried again after a short sleep: the loop's thread
        never waits for it."""
        raw = self._raw
        assert raw is not None
        fd = raw._fd
        start, length = direct_lock_range(off, len(data), raw.disk_size)
        delay = 0.0005
        while True:
            while not lock_blocks(fd, start, length):
                await asyncio.sleep(delay)
                delay = lock_backoff(delay)
            try:
                # The size under the lock: another writer's blocks decide the edges to read
                # and the trim, not the size this file object last knew.
                size = (await _k.fstat(fd)).st_size
            except BaseException:
                unlock_blocks(fd, start, length)
                raise
            if length == 0 or align_up(off + len(data)) <= size:
                break
            unlock_blocks(fd, start, length)  # the file shrank meanwhile: lock to its end
            length = 0
        fut: asyncio.Future[Any] | None = None
        try:
            if not (off | len(data)) & (ALIGN - 1):
                fut = get_engine().pwrite_direct(fd, data, off)
                done = await asyncio.shield(fut)
                raw.disk_size = max(size, off + done)
                return done
            a0, a1, edges = rmw_blocks(off, len(data), size)
            buf = direct_buffer(a1 - a0)
            for edge in edges:
                block = direct_buffer(ALIGN)
                got = await self._engine_readinto(block, edge)
                buf[edge - a0:edge - a0 + got] = block[:got]
            buf[off - a0:off - a0 + len(data)] = data
            eng = get_engine()
            fut = eng.pwrite(fd, memoryview(buf)[:a1 - a0], a0)
            await asyncio.shield(fut)
            new_size = max(size, off + len(data))
            if a1 > new_size:
                await _k.ftruncate(fd, new_size)
            raw.disk_size = new_size
            return None
        finally:
            if fut is None or fut.done():
                unlock_blocks(fd, start, length)
            else:  # this task was cancelled: the blocks stay locked until the kernel is done
                def unlock(_: object) -> None:
                    if not raw._closed_fd:  # (closed: the lock went with the descriptor)
                        unlock_blocks(fd, start, length)

                fut.add_done_callback(unlock)

    async def _fetch(self, need: int, at: int | None = None) -> None:
        """Make the window hold ``need`` bytes from ``at`` (default: the raw position), or
        everything up to end-of-file. A stream is read once (what one read returns)."""
        raw = self._raw
        assert raw is not None
        if raw.kind == STREAM:
            if not raw.at_eof_after(max(need, 1)):
                size = max(need - raw.available(), 1)
                raw.add_data(0, await self._read_at(size, 0), size)
            return
        if at is not None and at != raw.pos:
            saved, raw.pos = raw.pos, at
            try:
                await self._fetch(need)
            finally:
                raw.pos = saved
            return
        need += self._dirty
        while not raw.at_eof_after(need):
            off = raw.next_fetch()
            have = off - raw.pos
            if off == raw.wend and raw.buf:
                self._readahead = min(self._readahead * 2, _READAHEAD_MAX)
            else:
                self._readahead = _READAHEAD_MIN
            size = max(need - have, self._readahead)
            # Never ask for (and allocate) much more than the file holds; a file that grew
            # returns a full read and the loop goes on.
            size = min(size, max(raw.size - off, 0) + max(self._readahead, 65536))
            raw.add_data(off, await self._read_at(size, off), size)

    async def _fetch_to_eof(self) -> None:
        raw = self._raw
        assert raw is not None
        if raw.kind == STREAM:
            while not raw.stream_eof:
                raw.add_data(0, await self._read_at(65536, 0), 65536)
            return
        extra = 1
        while True:
            if raw.window_view()[2]:
                return
            off = raw.next_fetch()
            # One byte past the size we know: a short read proves the end; a file that grew
            # returns a full read and the loop goes on, in larger steps.
            size = max(raw.size - off, 0) + extra
            raw.add_data(off, await self._read_at(size, off), size)
            # A file that keeps growing: larger steps, up to the readahead's largest. A file
            # without a size (procfs: a page a read) is read in 64 KiB requests.
            extra = min(max(extra * 4, 65536), _READAHEAD_MAX) if raw.sized else 65536

    # pushing -------------------------------------------------------------------------------

    async def _push(self) -> None:
        raw = self._raw
        assert raw is not None
        staged = raw.take_staged()
        if staged:
            await self._push_list(staged)

    async def _push_list(self, staged: list[tuple[int, bytes | None]]) -> None:
        raw = self._raw
        assert raw is not None
        end = await self._push_items(staged)
        if raw.appends_open():
            raw.sync_append_position(end)

    def _append_end(self) -> int:
        """The file's end right after an append landed (the position it leaves)."""
        assert self._raw is not None
        self._synced_pos = -1  # a caller's descriptor: _push_offset puts it back
        return os.lseek(self._raw._fd, 0, os.SEEK_END)

    async def _push_items(self, staged: list[tuple[int, bytes | None]],
                          positional: bool = False) -> int:
        """Hand staged writes and truncations to the engine in order; in append mode, return
        the file's end measured right after the last write landed (-1: no write).
        ``positional``: the write of a ``pwrite`` (see _after_failed_push)."""
        raw = self._raw
        assert raw is not None
        fd = raw._fd
        staged = _coalesce(staged)
        end = -1
        while staged:
            off, data = staged.pop(0)
            fut: asyncio.Future[Any] | None
            if data is None:
                raw.disk_size = off  # a failure restores it (_after_failed_push)
                fut = asyncio.ensure_future(_k.ftruncate(fd, off))
            elif raw.direct and off >= 0 and not (off | len(data)) & (ALIGN - 1):
                # Whole blocks: nothing around them to read first or to trim after. The engine
                # writes a copy from aligned memory of its own. The size the partial writes go
                # by is raised now: the next operation waits for this write (a cancelled
                # caller's too: _finish_unfinished), and a failure takes it back from the file.
                fut = asyncio.ensure_future(self._direct_write(off, data))
                raw.disk_size = max(raw.disk_size, off + len(data))
            elif raw.direct and off >= 0:
                fut = asyncio.ensure_future(self._direct_write(off, data))
            elif self._route == "thread":
                fut = asyncio.ensure_future(self._in_executor(_write_all, fd, data, off))
            else:
                res = _write_or_queue(fd, data, max(off, 0), False)
                if res is False:  # the spent budget refused it: once more after a turn
                    try:
                        await _k.one_turn()
                    except asyncio.CancelledError:
                        # Cancelled (a close's timeout, say): the kernel takes the write now,
                        # submitted at once (a close may follow before the iteration's batch),
                        # as if it had been queued; the next call reports it, as below.
                        eng = get_engine()
                        if type(data) is not bytes:  # the caller's buffer: its await ends now
                            data = bytes(data)
                        self._unfinished.append((eng.pwrite(fd, data, max(off, 0)), off, data,
                                                 positional))
                        if not isinstance(eng, ThreadsEngine):  # (its writes start at once)
                            eng._send_now()
                        self._unfinished_staged = staged
                        raise
                    res = _write_or_queue(fd, data, max(off, 0), True)
                assert res is not False  # a retry refused again is queued
                fut = res
            if fut is not None:  # (None: written inline)
                try:
                    try:
                        await asyncio.shield(fut)
                    except asyncio.CancelledError:
                        if not fut.cancelled():
                            # This call was cancelled, not the write: the kernel has (or had)
                            # the data. The next call waits for it and reports how it went.
                            # From the caller's own buffer, the kernel may be reading it: the
                            # call ends (cancelled) once it is done.
                            if type(data) is memoryview:
                                await _until_done(fut)
                                # Done with it: the caller's buffer is no longer exported
                                # (what is reported later needs only the write's length).
                                view, data = data, range(len(data))
                                view.release()
                            self._unfinished.append((fut, off, data, positional))
                            self._unfinished_staged = staged
                        raise
                    short = _stopped_short(fut, data)
                    if short is not None:
                        raise short
                except OSError as exc:
                    self._after_failed_push(off, data, exc, staged, positional)
                    written = _as_builtins(exc)
                    if written and self._file is raw and not positional and not staged:
                        # An unbuffered file: FileIO.write returns what write(2) took (the
                        # position is there now), and only a write that took nothing raises.
                        raise _Short(written) from exc
                    raise
            if data is not None and raw.appending and off >= 0:
                end = self._append_end()
        return end

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
        fut = res
        try:
            return await fut
        except asyncio.CancelledError:
            eng.cancel(fut)
            raise

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
        fut = getattr(eng, name)(fd)
        try:
            await fut
        except asyncio.CancelledError:
            eng.cancel(fut)
            raise

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
                self._dirty = sum(4 * len(x) + 8 for x in lines
                                  if hasattr(x, "__len__") and not _owned(x, self._bufsize))
            else:
                self._dirty += sum(4 * len(x) + 8 for x in lines if hasattr(x, "__len__"))
            if raw.staged:
                await self._push()
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

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

    def __aiter__(self) -> AsyncIterator[S]:
        return self

    async def __anext__(self) -> S:
        """The next line, as ``readline()`` would return it (aiofiles' iteration).

        When the window is known to hold the ends of the next lines, they are read by the
        builtin's ``readline`` directly — no lock, fetch or check per line — until that
        budget (the file's line gate) is spent or any other call on the file ends it. With
        the extension, that step is ``_core.LineStep`` (below), which costs no coroutine."""
        line = self._gated_line()
        if line:
            return line
        return await self._anext_slow()

    _anext_py = __anext__

    async def _anext_slow(self) -> S:
        await self._cede()
        line = await self._next_line()
        if line:
            return line
        raise StopAsyncIteration

    if _core is not None:
        __anext__ = _core.LineStep(_anext_slow)  # type: ignore[assignment]

    def _line_gate(self) -> Any:
        """The file's own gate (made on first use; the shared one is never raised)."""
        gate = self.__dict__.get("_gate")
        if gate is None:
            gate = self._gate = _LineGate(self._file.readline, self._file.read)
        return gate

    def _batch_term(self) -> bytes | None:
        """The byte sequence that ends every line, if counting them is possible here."""
        return None

    async def _next_line(self) -> S:
        if not self._lines_countable():
            return await self.readline()
        return await self._counted_line()

    def _lines_countable(self) -> bool:
        """Whether the window's line ends can be counted ahead (``_counted_line``)."""
        raw = self._raw
        return not (raw is None or raw.kind == STREAM or self._dirty or raw.closed
                    or not raw.reads_fd or self._batch_term() is None)

    def _gated_line(self) -> S | None:
        """``readline()``'s line when the gate's budget allows (else None): the step of
        ``async for`` without the extension, and of ``readline()`` calls."""
        gate = self._gate
        if gate.budget > 0:
            # No async call drives the raw layer here: were the budget ever wrong, it would
            # make a blocking read — still the right line, never a short one.
            gate.budget -= 1
            gate.room = 0
            try:
                line: S = gate.readline()
            except BaseException:
                gate.budget = 0  # (as LineStep: the budget no longer describes the file)
                raise
            if line:
                return line
            gate.budget = 0  # end of file: the full step says so
        return None

    def _lines_ahead(self) -> int:
        """After a whole line read under the lock: the line ends the window holds from the
        raw position on, with the margin after them (see _margin) — that many more
        ``readline()`` calls stay within the window (the gate's budget). Counted without
        fetching, so a ``readline()`` loop reads no further ahead than it did; 0 where lines
        cannot be counted (or a caller's descriptor must be followed)."""
        if self._fd_shared or not self._lines_countable():
            return 0
        return self._window_line_ends()[0]

    def _window_line_ends(self) -> tuple[int, bool]:
        """The line ends (``_batch_term``) the window holds in the 64 KiB from the raw
        position, each followed by the margin's worth of the window (see _margin), and
        whether the window reaches the end of the file."""
        raw = self._raw
        term = self._batch_term()
        assert raw is not None and term is not None
        buf, i, at_eof = raw.window_view()
        return _count(buf, term, i, min(i + 65536, self._ready_end(buf, at_eof))), at_eof

    async def _counted_line(self) -> S:
        """The next line, the lock taken, and the gate's budget raised to the further lines
        whose ends the window holds."""
        if not self._try_lock():
            await self._lock()
            if not self._lines_countable():  # closed, written or detached meanwhile
                self._unlock()
                return await self.readline()
        raw = self._raw
        assert raw is not None
        grant = 0
        try:
            while True:
                count, at_eof = self._window_line_ends()
                if count >= 2 or at_eof:
                    break
                await self._fetch(raw.available() + self._readahead)
            # Each of those line ends closes a line at or after the current one: that many
            # readline() calls stay within the window. (Not a last line without an end at
            # the end of the file: the file may grow before it is read, which only a call
            # that looks for the end again sees.)
            budget = count
            line: S = self._run(self._file.readline)
            if raw.missed:
                raw.missed = 0
                if isinstance(line, str):
                    raise RuntimeError("aionative: a text line went past its window")
                return await self._readline_rest(line)
            await self._push()
            grant = budget - 1 if line and not self._fd_shared else 0
            return line
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()
            if grant > 0:
                self._line_gate().budget = min(grant, _GRANT_LINES)

    async def _cede(self) -> None:
        """Yield one turn of the loop if this iteration's budget is spent (see _GRANT_LINES):
        the slow paths of the calls the window serves without I/O come here first."""
        if _turn_spent():
            await _k.one_turn()

    async def _readline_rest(self, head: bytes) -> bytes:
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


def _is_block(mode: int) -> bool:
    return stat.S_ISBLK(mode)


def _as_builtins(exc: OSError) -> int:
    """A file object's write error as the builtin's: FileIO's OSError says nothing of how
    much was written (the engines' carries ``characters_written``; the file's position and
    size already account for it). Returns that count (0: none)."""
    written = getattr(exc, "characters_written", None)
    if written is None:
        return 0
    del exc.characters_written  # type: ignore[attr-defined]
    return int(written)


class _Short(Exception):
    """An unbuffered file's write stopped after ``written`` bytes: its call returns that."""

    def __init__(self, written: int) -> None:
        self.written = written


async def _until_done(fut: asyncio.Future[Any]) -> None:
    """Wait for ``fut`` whatever cancels the waiting task meanwhile (the caller raises its
    own CancelledError afterwards)."""
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except BaseException:  # noqa: BLE001, S110 - the outcome is fut's, read later
            pass


def _owned(b: Any, least: int) -> tuple[bytes | memoryview, int] | None:
    """``b`` as a write larger than ``least`` bytes hands it to the kernel, and its size:
    a ``bytes`` itself (immutable), any other contiguous buffer as a byte view that exports it
    (a bytearray cannot be resized until the write is done, and the write's ``await`` ends
    only when the kernel is done reading it). None: not larger, or not such a buffer (the
    buffered layer's write then raises what the builtin's does)."""
    if type(b) is bytes:
        return (b, len(b)) if len(b) > least else None
    if type(b) is str:
        return None
    try:
        view = memoryview(b)
    except TypeError:
        return None
    if view.nbytes <= least or not view.c_contiguous:
        return None
    view = view.cast("B")
    return view, view.nbytes


def _write_each(f: AsyncBase[Any], lines: list[Any]) -> None:
    """``IOBase.writelines`` (which calls ``write`` for each item, in order, once the file is
    known open), each large item passed through from the caller's object (``_owned``)."""
    file = f._file
    if file.closed:
        file.writelines(lines)  # the builtin's error
        return
    raw = f._raw
    assert raw is not None
    for line in lines:
        owned = _owned(line, f._bufsize)
        if owned is None:
            file.write(line)
            continue
        raw.owned = owned  # (within the caller's one _run: see _pass_through)
        try:
            file.write(line)
        finally:
            raw.owned = None


def _pwrite_args(data: Any, offset: Any) -> tuple[bytes | memoryview, int]:
    """``os.pwrite``'s argument conversions, before anything is staged: a contiguous
    bytes-like object (TypeError, BufferError) and an offset that fits ``off_t``
    (``__index__``; TypeError, OverflowError; EINVAL when negative). Not copied: ``bytes``
    as it is, any other buffer as a byte view exporting it until the write is done."""
    if type(data) is not bytes:
        view = bytes_like(data)
        if not view.c_contiguous:
            raise BufferError("memoryview: underlying buffer is not C-contiguous")
        data = view.cast("B")
    offset = index(offset)
    if not -(1 << 63) <= offset < 1 << 63:
        raise OverflowError("Python int too large to convert to C long")
    if offset < 0:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    return data, offset


def _write_or_queue(fd: int, data: bytes, off: int, retry: bool
                    ) -> asyncio.Future[int] | Literal[False] | None:
    """The running loop's engine writes ``data`` at ``off``: None when it was written inline,
    False when the spent budget refused it (wait a turn, then call again with ``retry``),
    else the kernel queue's operation (also for a retry refused again)."""
    eng = get_engine()
    res = eng.write(fd, data, off, retry)
    if res is False:
        return eng.pwrite(fd, data, off) if retry else False
    return None if isinstance(res, int) else res


def _write_all(fd: int, data: bytes, off: int) -> int:
    view = memoryview(data)
    done = 0
    while done < len(view):
        if off < 0:
            n = os.write(fd, view[done:])
        else:
            n = os.pwrite(fd, view[done:], off + done)
        done += n
    return done


_ENCODE_CEDE = 1 << 20  # characters: a write this large yields first if the turn is spent
_JOIN_MAX = 1 << 20  # adjacent small writes are joined into one write of at most this


def _coalesce(staged: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Adjacent small writes (a buffered layer's flushes) become one, up to ``_JOIN_MAX``
    bytes; a larger write, or the caller's own buffer, is written as it is (no copy)."""
    out: list[tuple[int, Any]] = []
    run: list[bytes] = []
    run_off = run_len = 0

    def end_run() -> None:
        if run:
            out.append((run_off, run[0] if len(run) == 1 else b"".join(run)))
            run.clear()

    for off, data in staged:
        small = type(data) is bytes and len(data) < _JOIN_MAX
        if small and run and run_len + len(data) <= _JOIN_MAX and (
                run_off < 0 and off < 0 or run_off >= 0 and run_off + run_len == off):
            run.append(data)
            run_len += len(data)
            continue
        end_run()
        if small:
            run.append(data)
            run_off, run_len = off, len(data)
        else:
            out.append((off, data))
    end_run()
    return out
