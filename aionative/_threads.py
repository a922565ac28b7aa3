"""The portable fallback: the engine interface served by a small thread pool.

Used where neither io_uring nor Linux AIO is available (macOS, old kernels, sandboxes that
forbid both), or when asked for. Semantics match the native engine: large operations are
split at the kernel's per-call limit, writes continue until everything is written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import fcntl
import functools
import os
import sys
import time
import types
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from operator import index
from typing import Any, TypeVar

from ._args import bytes_like, c_int, check_read_alloc, off_t, ssize_t
from ._compat import KERNEL_RW_MAX, WRITE_ASYNC_MIN, WRITER_NICE
from ._direct import direct_pread_sync, direct_pwrite_blocks

T = TypeVar("T")


def _einval() -> OSError:
    return OSError(errno.EINVAL, os.strerror(errno.EINVAL))


def _offset_slow(offset: Any) -> int:
    """An ``off_t`` offset (OverflowError outside 64 bits); EINVAL when negative, as pread(2)
    says (io_uring would take -1 for the file position)."""
    n = off_t(offset)
    if n < 0:
        raise _einval()
    return n


# The methods convert with index() and make one range test inline (all the common case
# costs); arguments out of range go through these, which raise what the native engine raises.

def _fd_offset(fd: Any, offset: Any) -> tuple[int, int]:
    return c_int(fd), _offset_slow(offset)  # (os.pread's descriptor: a C int)


def _read_args(fd: Any, size: Any, offset: Any) -> tuple[int, int, int]:
    """pread's arguments, converted in the native engine's order; then the size's sign, and
    the allocation of the whole result, which ``os.pread`` and the native engine make before
    reading (MemoryError for a size no file could fill, however little the file holds)."""
    f = c_int(fd)
    n = ssize_t(size)
    o = _offset_slow(offset)
    if n < 0:
        raise _einval()
    check_read_alloc(n)  # read in pieces of at most KERNEL_RW_MAX below
    return f, n, o


def _read_args_fast(fd: Any, size: Any, offset: Any) -> tuple[int, int, int]:
    """``_read_args`` with the common case (three ints in range) tested inline."""
    try:
        f, n, o = index(fd), index(size), index(offset)
    except Exception:  # noqa: BLE001 - converted again in order below, which raises it
        return _read_args(fd, size, offset)
    if 0 <= f < 1 << 31 and 0 <= n <= KERNEL_RW_MAX and 0 <= o < 1 << 63:
        return f, n, o
    return _read_args(fd, size, offset)


def _view(buffer: Any, writable: bool) -> memoryview:
    """The buffer a native operation would take (PyBUF_SIMPLE / PyBUF_WRITABLE): contiguous,
    writable for reads (BufferError otherwise, TypeError for what is no buffer)."""
    try:
        view = memoryview(buffer)
    except TypeError:
        bytes_like(buffer)  # raises it in os.pwrite's words
        raise
    if writable and view.readonly:
        raise BufferError("memoryview: underlying buffer is not writable"  # (a memoryview's
                          if isinstance(buffer, memoryview) else "Object is not writable.")
    if not view.c_contiguous:
        raise BufferError("memoryview: underlying buffer is not C-contiguous")
    return view.cast("B")


def _pread(fd: int, size: int, offset: int) -> bytes:
    if size <= KERNEL_RW_MAX:
        return os.pread(fd, size, offset)
    parts = []
    while size > 0:
        want = min(size, KERNEL_RW_MAX)
        part = os.pread(fd, want, offset)
        parts.append(part)
        if len(part) < want:
            break
        size -= want
        offset += want
    return b"".join(parts)


# The two workers below release their view before they return: the executor's work item keeps
# its arguments until after the future is resolved, and an export still held then would make the
# caller's ``mmap.close()`` or ``bytearray`` resize fail (BufferError) once the await is over.

def _preadinto(fd: int, buf: memoryview, offset: int) -> int:
    with buf:
        done = 0
        while True:
            want = min(len(buf) - done, KERNEL_RW_MAX)
            with buf[done : done + want] as piece:
                n = os.preadv(fd, [piece], offset + done)
            done += n
            if n < want or done >= len(buf) or n == 0:
                return done


def _pwrite(fd: int, data: memoryview, offset: int) -> int:
    with data:
        done = 0
        while True:
            try:
                with data[done : done + KERNEL_RW_MAX] as piece:
                    n = os.pwrite(fd, piece, offset + done)
            except OSError as exc:
                if done:  # like BlockingIOError: how much of `data` did reach the file
                    setattr(exc, "characters_written", done)  # noqa: B010 - not typed on OSError
                raise
            done += n
            if done >= len(data) or n == 0:
                return done


_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)  # Linux 4.14+; None elsewhere
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)
# Lower than the native engines' 150 µs: each read the spent budget refuses here costs a Python
# future, a queue entry and a task step, work outside the budget in the same iteration, so its
# loop iterations run longer than the native engines' for the same budget
# (`python -m bench.inproc w6-turns --backend threads`). 100 µs keeps W6's 1 ms ticker within
# its 1 ms p99 on asyncio with no fewer reads done (`python -m bench --workloads W6`).
DEFAULT_BUDGET_US = 100.0
INLINE_MAX = 1 << 20  # larger reads go to a worker (one copy stays well within a budget)
#: Every engine's: from this size on, a read the spent budget refused waits a turn of the loop
#: and is retried inline rather than queued (the native engines' ``_core.Call``; here
#: ``_read_after_a_turn``, while no refused read waits in the queue): its copy outweighs the
#: turn, and the native queue would make the same copy inside the iteration's flush (cached
#: reads complete inside their submission), unbounded by the budget. Smaller reads are queued:
#: a turn per read costs more than the batch. ``_lowlevel.set_turn_min`` changes it.
TURN_MIN = 64 << 10
RETRY_GRACE = 4  # as csrc/inline.c's: a retry is admitted while the iteration is under this
                 # many budgets


def _abandon(eng: Any, op: asyncio.Future[Any], fut: asyncio.Future[Any]) -> None:
    """``fut``'s caller gave up: so does ``op``, the operation ``eng`` (this engine, or the
    loop's new one) does for it (see ``_give_up``)."""
    if fut.cancelled():
        _give_up(eng, op)


def _give_up(eng: Any, op: asyncio.Future[Any]) -> None:
    """Abandon ``op``: a task holds nothing; a threads engine's future is cancelled (queued,
    it never runs; a worker's call runs on, and ``cancel_wait`` waits for it); a native
    engine keeps the buffer until its kernel is done."""
    if op.done():
        return
    if isinstance(op, asyncio.Task) or isinstance(eng, ThreadsEngine):
        op.cancel()
    else:
        eng.cancel(op)


def _release_if_cancelled(args: tuple[Any, ...], fut: Any) -> None:
    """Work that will never run (cancelled before it started) lets go of the caller's
    buffers at once. (A view a running retry made of them is its own: releasing these leaves
    the caller's buffer exported until that one ends.)"""
    if fut.cancelled():
        for a in args:
            if isinstance(a, memoryview):
                a.release()


_WRITERS = 4  # as Linux AIO's KAIO_WRITERS


def _lower_priority() -> None:
    """A writer thread's start: WRITER_NICE nicer than the thread that started it (Linux nice
    values are per thread; elsewhere the call would change the whole process's)."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + WRITER_NICE)
        except OSError:
            pass


@types.coroutine
def one_turn() -> Generator[None, None, None]:
    """A bare yield: the task runs again on the loop's next iteration, after everything that
    was ready (asyncio.sleep(0) without its frame)."""
    yield


class ThreadsEngine:
    """Same interface as ``aionative._core.Engine``; operations run in a private pool."""

    backend = "threads"

    def __init__(self, loop: asyncio.AbstractEventLoop, current_engine: Callable[[], Any],
                 max_workers: int | None = None) -> None:
        self._loop_ref = weakref.ref(loop)  # the registry must not keep a finished loop alive
        # The loop's engine now (aionative._engine.get_engine): a read refused while this one
        # was closed moves to it.
        self._current_engine = current_engine
        self._pid = os.getpid()
        self._executor = ThreadPoolExecutor(max_workers or min(32, (os.cpu_count() or 1) + 4),
                                            thread_name_prefix="aionative-io")
        # Writes of WRITE_ASYNC_MIN or more: threads of their own, at a lower weight than the
        # loop's (Linux AIO's writer threads, csrc/kaio.c): copying them keeps every CPU busy,
        # and the loop's thread, waking, would wait for one.
        self._writers = ThreadPoolExecutor(_WRITERS, thread_name_prefix="aionative-write",
                                           initializer=_lower_priority)
        self._closed = False
        self._stats = {"submitted": 0, "completed": 0, "cancels": 0, "inline_hits": 0,
                       "inline_misses": 0, "budget_exhausted": 0, "inline_retries": 0,
                       "retries_refused": 0, "async_writes": 0}
        # Futures of work handed to a worker and not yet seen done: a future is done before its
        # done callbacks run (they are scheduled), so in_flight asks the futures themselves.
        self._live: set[asyncio.Future[Any]] = set()
        # The worker's side of each: running until the call returns, whatever becomes of the
        # asyncio future (removed by the worker when it is done).
        self._work: dict[asyncio.Future[Any], concurrent.futures.Future[Any]] = {}
        self._budget_ns = int(DEFAULT_BUDGET_US * 1000) if _NOWAIT is not None else 0
        self._window_start = 0
        self._spent = False
        # Whether each descriptor read inline this iteration may be (not O_DIRECT): asked once
        # an iteration, as the native engine's fd_memo (csrc/inline.c) does.
        self._buffered: dict[int, bool] = {}
        # Reads a spent budget refused, oldest first, and whether a turn to retry them is queued.
        self._deferred: deque[tuple[asyncio.Future[Any], str, tuple[Any, ...]]]
        self._deferred = deque()
        self._drain_queued = False
        # A retried read queued again (the budget spent again, or the engine closed: on the
        # loop's new engine), by the future its caller awaits: the engine and its operation.
        self._relayed: dict[asyncio.Future[Any], tuple[Any, asyncio.Future[Any]]] = {}
        self._scratch = bytearray()  # where inline reads land first (_inline_bytes)

    @property
    def inline_budget_us(self) -> float:
        return self._budget_ns / 1000

    @inline_budget_us.setter
    def inline_budget_us(self, value: float) -> None:
        if not 0 <= value <= 1e9:
            raise ValueError("inline_budget_us must be between 0 and 1e9")
        self._budget_ns = int(value * 1000) if _NOWAIT is not None else 0

    def _reopen(self) -> None:
        self._window_start = 0
        self._spent = False
        self._buffered.clear()

    def _inline_allowed(self, fd: int, retry: bool = False) -> bool:
        """The same cooperative budget as the native engine (see its ``read``); a ``retry``
        (_read_after_a_turn) is admitted past it while the iteration is under RETRY_GRACE
        budgets."""
        if not self._budget_ns or (self._spent and not retry):
            return False
        now = time.monotonic_ns()
        if not self._window_start:
            loop = self._loop_ref()
            if loop is None or self._closed:
                return False
            loop.call_soon(self._reopen)  # runs on the next iteration, after the loop polled
            self._window_start = now
        elif now - self._window_start >= self._budget_ns:
            if not self._spent:
                self._spent = True
                self._stats["budget_exhausted"] += 1
            if not retry or now - self._window_start >= RETRY_GRACE * self._budget_ns:
                return False
        buffered = self._buffered.get(fd)
        if buffered is None:
            try:
                buffered = not fcntl.fcntl(fd, fcntl.F_GETFL) & _O_DIRECT
            except (OSError, ValueError):  # a bad descriptor: the worker reports it as before
                return False
            self._buffered[fd] = buffered
        return buffered

    def forget_fd(self, fd: int) -> None:
        """The descriptor's flags changed (fcntl F_SETFL): ask them again."""
        self._buffered.pop(fd, None)

    def _inline_bytes(self, fd: int, size: int, offset: int) -> bytes | None:
        """Up to ``size`` bytes at ``offset`` from the page cache (see _inline_into), or None
        when a worker must read them. Read into the engine's scratch buffer, then copied: a
        new temporary buffer a read, freed at the heap's top, had glibc give that memory back
        and take it again, page fault by page fault, read after read."""
        if len(self._scratch) < size:
            self._scratch = bytearray(size)
        with memoryview(self._scratch)[:size] as view:
            n = self._inline_into(fd, view, offset)
            return None if n < 0 else bytes(view[:n])

    def _inline_into(self, fd: int, view: memoryview, offset: int) -> int:
        """Read ``view`` at ``offset`` from the page cache without blocking: the byte count
        (short only at end of file), or -1 when a worker must do it."""
        assert _NOWAIT is not None
        done, size = 0, len(view)
        while done < size:
            try:
                n = os.preadv(fd, [view[done:]], offset + done, _NOWAIT)
            except OSError:
                n = -1
            if n < 0:
                self._stats["inline_misses"] += 1
                return -1
            if n == 0:
                break
            done += n
        self._stats["inline_hits"] += 1
        return done

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def forked(self) -> bool:
        return os.getpid() != self._pid

    @property
    def in_flight(self) -> int:
        return sum(not f.done() for f in self._live)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop_ref()

    def _done(self, fut: asyncio.Future[Any]) -> None:
        self._live.discard(fut)
        self._stats["completed"] += 1

    def _submit(self, fn: Callable[..., T], *args: Any,
                pool: ThreadPoolExecutor | None = None) -> asyncio.Future[T]:
        loop = self._loop_ref()
        if self._closed or loop is None:
            raise RuntimeError("aionative: engine is closed")
        work = (pool or self._executor).submit(fn, *args)
        fut = asyncio.wrap_future(work, loop=loop)
        self._work[fut] = work
        work.add_done_callback(lambda _: self._work.pop(fut, None))  # (in the worker)
        # Work cancelled before a worker took it never runs, but the pool's queue keeps it,
        # with the view of the caller's buffer, until a worker gets to it: let go of it now.
        work.add_done_callback(functools.partial(_release_if_cancelled, args))
        self._live.add(fut)
        self._stats["submitted"] += 1
        fut.add_done_callback(self._done)
        return fut

    def pread(self, fd: int, size: int, offset: int) -> asyncio.Future[bytes]:
        fd, size, offset = _read_args_fast(fd, size, offset)
        return self._submit(_pread, fd, size, offset)

    def pread_direct(self, fd: int, size: int, offset: int) -> asyncio.Future[bytes]:
        """An O_DIRECT read into aligned memory of the worker's own (see the native engine's
        ``pread_direct``)."""
        fd, size, offset = _read_args_fast(fd, size, offset)
        if size < 0 or offset < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return self._submit(direct_pread_sync, fd, size, offset)

    def read(self, fd: int, size: int, offset: int, retry: bool = False
             ) -> bytes | Awaitable[bytes]:
        """``pread``, completed inline when the page cache holds the data (see the native
        engine's ``read``); else an awaitable of the bytes: a worker's future, the queue's
        future of a read the spent budget refused, or, for one of TURN_MIN bytes or more, a
        retry after a turn (``retry``: that retry)."""
        fd, size, offset = _read_args_fast(fd, size, offset)
        if self._closed:
            raise RuntimeError("aionative: engine is closed")
        if size == 0:  # nothing to wait for; os.pread reports what it reports (EISDIR, ...)
            data = os.pread(fd, 0, offset)
            self._stats["inline_hits"] += 1
            return data
        if size <= INLINE_MAX and self._inline_allowed(fd, retry):
            got = self._inline_bytes(fd, size, offset)
            if got is not None:
                return got
        elif size <= INLINE_MAX and self._spent:
            if size >= TURN_MIN and not retry and not self._deferred:
                return self._read_after_a_turn(fd, size, offset)
            # Queued, it is retried as ``retry`` too: never a coroutine for _retry to deliver.
            return self._next_turn("read", fd, size, offset, True)
        return self._submit(_pread, fd, size, offset)

    async def _read_after_a_turn(self, fd: int, size: int, offset: int) -> bytes:
        """A large read the spent budget refused, retried inline after one turn of the loop
        and its bytes returned to the caller. Through the queue's future (as smaller reads
        go) a 1 MiB result is still held by the future while the woken task's next read
        allocates another, and glibc gave the heap's top back and took it again between reads:
        hundreds of page faults a read, several times slower than os.pread (`python -m bench.inproc w3-seq
        --backend threads`). It joins the queue instead if
        reads wait there (first come, first served: the queue is drained only while the budget
        lasts, which retries admitted within the grace ahead of it would spend every turn), or
        if refused even within the grace. Closed during the turn, the engine hands it to the
        loop's new one."""
        await one_turn()
        if self._closed:  # close_engine() during the turn: as a queued read, it moves (_retry)
            loop = self._loop_ref()
            assert loop is not None  # (its task runs on it)
            fut: asyncio.Future[bytes] = loop.create_future()
            self._retry(fut, "read", (fd, size, offset))
            return await fut
        self._stats["inline_retries"] += 1
        if self._deferred:
            queued: bytes = await self._next_turn("read", fd, size, offset, True)
            return queued
        res = self.read(fd, size, offset, True)
        if isinstance(res, bytes):
            return res
        if self._deferred and self._deferred[-1][0] is res:  # refused past the grace: queued
            self._stats["retries_refused"] += 1
        return await res

    def read_inline(self, fd: int, size: int, offset: int) -> bytes | bool | None:
        """``read``'s inline part alone (see the native engine's ``read_inline``): the
        bytes, False when the budget is spent, None when a worker would have to read."""
        fd, size, offset = _read_args_fast(fd, size, offset)
        if self._closed:
            raise RuntimeError("aionative: engine is closed")
        if 0 < size <= INLINE_MAX and self._inline_allowed(fd):
            return self._inline_bytes(fd, size, offset)
        return False if self._budget_ns and self._spent and 0 < size <= INLINE_MAX else None

    def readinto(self, fd: int, buffer: Any, offset: int) -> int | asyncio.Future[int]:
        """``preadinto``, completed inline when the page cache holds the data."""
        fd, offset = index(fd), index(offset)
        if not (0 <= fd < 1 << 31 and 0 <= offset < 1 << 63):
            fd, offset = _fd_offset(fd, offset)
        view = _view(buffer, True)
        if self._closed:
            raise RuntimeError("aionative: engine is closed")
        if len(view) == 0:  # nothing to wait for; os.preadv reports what it reports (EBADF)
            os.preadv(fd, [view], offset)
            self._stats["inline_hits"] += 1
            return 0
        if len(view) <= INLINE_MAX and self._inline_allowed(fd):
            n = self._inline_into(fd, view, offset)
            if n >= 0:
                return n
        elif len(view) <= INLINE_MAX and self._spent:
            return self._next_turn("readinto", fd, view, offset)
        return self._submit(_preadinto, fd, view, offset)

    def _next_turn(self, method: str, *args: Any) -> asyncio.Future[Any]:
        """The budget is spent: try again on the loop's next iteration (when ``_reopen``, which
        was scheduled before, has renewed it) rather than hand the read to a worker — a thread
        hop costs tens of microseconds and the GIL, a turn of the loop a few.

        Refused reads wait in one queue, oldest first, drained by one callback per turn for as
        long as the renewed budget lasts: N reads issued at once cost O(N), not a retry of every
        waiting read on every turn."""
        loop = self._loop_ref()
        if loop is None or self._closed:
            raise RuntimeError("aionative: engine is closed")
        fut: asyncio.Future[Any] = loop.create_future()
        self._deferred.append((fut, method, args))
        fut.add_done_callback(functools.partial(_release_if_cancelled, args))
        if not self._drain_queued:
            self._drain_queued = True
            loop.call_soon(self._drain)
        return fut

    def _drain(self) -> None:
        self._drain_queued = False
        queue = self._deferred
        while queue:
            if self._spent_now():  # this turn's budget is gone too: the rest wait for the next
                loop = self._loop_ref()
                if loop is not None and not self._closed:
                    if not self._drain_queued:  # (a read re-queued just now may have queued it)
                        self._drain_queued = True
                        loop.call_soon(self._drain)
                    return
                # the engine closed under them: each goes to the loop's new engine (_retry)
            fut, method, args = queue.popleft()
            self._retry(fut, method, args)

    def turn_spent(self) -> bool:
        """Whether this loop iteration's budget is spent (the native engine's ``turn_spent``):
        work served from memory yields a turn when it is. Opens the iteration's window."""
        if not self._budget_ns:
            return False
        if not self._window_start:
            loop = self._loop_ref()
            if loop is None or self._closed:
                return False
            loop.call_soon(self._reopen)
            self._window_start = time.monotonic_ns()
            return False
        return self._spent_now()

    def _spent_now(self) -> bool:
        """Whether this iteration's budget is gone, by the clock: ``_spent`` is set only when a
        call finds it so, and a read the drain let through may have spent it. (Taken from the
        head of the queue then, the next read would be refused and queued again at its end:
        a small read behind large ones went round the queue for as long as they came.)"""
        if (not self._spent and self._window_start
                and time.monotonic_ns() - self._window_start >= self._budget_ns):
            self._spent = True
            self._stats["budget_exhausted"] += 1
        return self._spent

    def _retry(self, fut: asyncio.Future[Any], method: str, args: tuple[Any, ...]) -> None:
        if fut.done():  # cancelled meanwhile
            return
        try:
            if self._closed:
                # close_engine() while it waited ("the next operation makes a new one"): the
                # loop's engine reads it, without a retry flag, as the native engines' calls
                # move (csrc/call.c, call_after_turn; _kernelops._Deferred).
                eng = self._current_engine()
                res = getattr(eng, method)(*args[:3])
                if asyncio.iscoroutine(res):  # a threads engine's large read, after its turn
                    res = asyncio.ensure_future(res)
            else:
                eng = self
                res = getattr(self, method)(*args)
        except BaseException as exc:  # noqa: BLE001 - delivered to the awaiting task
            fut.set_exception(exc)
            return
        if not isinstance(res, asyncio.Future):
            fut.set_result(res)
            return
        work = self._work.get(res)
        if work is not None:  # a cancelled caller waits for the worker (cancel_wait)
            self._work[fut] = work
            work.add_done_callback(lambda _: self._work.pop(fut, None))
        else:
            # Queued again, here or on the loop's new engine (or a task there): a caller that
            # gives up gives up `res` too, and a cancelled one (cancel_wait) goes on only once
            # `res` can no longer read into its buffer (a preadinto's).
            self._relayed[fut] = (eng, res)
            fut.add_done_callback(functools.partial(_abandon, eng, res))

        def relay(done: asyncio.Future[Any]) -> None:
            self._relayed.pop(fut, None)
            if fut.done():  # its caller is gone: nobody will look at the outcome
                if not done.cancelled():
                    done.exception()  # (retrieved: no "exception was never retrieved")
                return
            if done.cancelled():
                fut.cancel()
            elif (exc := done.exception()) is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(done.result())

        res.add_done_callback(relay)

    def preadinto(self, fd: int, buffer: Any, offset: int) -> asyncio.Future[int]:
        fd, offset = index(fd), index(offset)
        if not (0 <= fd < 1 << 31 and 0 <= offset < 1 << 63):
            fd, offset = _fd_offset(fd, offset)
        return self._submit(_preadinto, fd, _view(buffer, True), offset)

    def pwrite(self, fd: int, data: Any, offset: int) -> asyncio.Future[int]:
        fd, offset = index(fd), index(offset)
        if not (0 <= fd < 1 << 31 and 0 <= offset < 1 << 63):
            fd, offset = _fd_offset(fd, offset)
        view = _view(data, False)
        if view.nbytes >= WRITE_ASYNC_MIN:
            self._stats["async_writes"] += 1
            return self._submit(_pwrite, fd, view, offset, pool=self._writers)
        return self._submit(_pwrite, fd, view, offset)

    def pwrite_direct(self, fd: int, data: Any, offset: int) -> asyncio.Future[int]:
        """An O_DIRECT write of whole blocks from aligned memory of the worker's own (see the
        native engine's ``pwrite_direct``)."""
        fd, offset = index(fd), index(offset)
        if not (0 <= fd < 1 << 31 and 0 <= offset < 1 << 63):
            fd, offset = _fd_offset(fd, offset)
        data = bytes(_view(data, False))
        if offset < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return self._submit(direct_pwrite_blocks, fd, data, offset)

    def write(self, fd: int, data: Any, offset: int, retry: bool = False
              ) -> asyncio.Future[int]:
        """``pwrite``: the native engines write inline when they can; here a worker does."""
        return self.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> asyncio.Future[None]:
        return self._submit(os.fsync, index(fd))

    def fdatasync(self, fd: int) -> asyncio.Future[None]:
        return self._submit(os.fdatasync, index(fd))

    def cancel(self, future: Awaitable[Any]) -> bool:
        # A running os.pread cannot be interrupted; its buffer stays referenced by the worker
        # until it returns, so nothing is freed under it.
        self._stats["cancels"] += 1
        return False

    def cancel_wait(self, future: Awaitable[Any]) -> asyncio.Future[Any] | None:
        """While a worker still runs ``future``'s call (a cancelled asyncio future does not
        stop it), a future done when it has returned; else None. A read queued again for it
        (``_retry``) is given up, and waited for through the engine that has it."""
        self._stats["cancels"] += 1
        relayed = self._relayed.pop(future, None)  # type: ignore[call-overload]
        if relayed is not None:
            eng, op = relayed
            if isinstance(op, asyncio.Task):  # a large read's: into memory of its own
                op.cancel()
                return None
            if isinstance(eng, ThreadsEngine):
                op.cancel()  # still queued, it never runs
            return eng.cancel_wait(op)  # type: ignore[no-any-return]
        work = self._work.get(future)  # type: ignore[call-overload]
        loop = self._loop_ref()
        if work is None or work.done() or loop is None:
            return None
        return asyncio.wrap_future(work, loop=loop)

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.forked:
            # A call a worker is in is waited for: the caller may close its descriptor next,
            # and the number must not name another file under it. Idle workers exit on their
            # own, and are not waited for (on the loop's thread that would be a blocking join).
            busy = any(not work.done() for work in list(self._work.values()))
            self._executor.shutdown(wait=busy)
            self._writers.shutdown(wait=busy)

    def stats(self) -> dict[str, int]:
        return {**self._stats, "in_flight": self.in_flight}

    def info(self) -> dict[str, object]:
        return {"backend": "threads", "max_workers": self._executor._max_workers,
                "large_writes_from": WRITE_ASYNC_MIN, "writer_threads": len(self._writers._threads)}
