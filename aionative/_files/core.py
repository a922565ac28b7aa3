"""The call machinery of an async file: its state, the lock that serialises its calls (a
second task's call waits for the first to finish), the caller's descriptor offset it follows,
and running the synchronous stack — on the loop's thread, or in the executor."""

from __future__ import annotations

import asyncio
import collections
import fcntl
import io
import os
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._direct import direct_pread_sync
from .._raw import STREAM, WindowRaw
from .gate import _NO_GATE

if TYPE_CHECKING:
    from .._core import LazyReader

T = TypeVar("T")
S = TypeVar("S", str, bytes)


class _Core(Generic[S]):
    """The state and call machinery every async file has; the layers above (direct, writes,
    reads, base) add the I/O and the members."""

    # State that starts the same in every file: class attributes, set on the instance only
    # when it changes (a file costs fewer dictionary writes to open). The layers above
    # declare theirs the same way.
    _busy = False
    # Bytes (an upper bound) written since the last flush: they may still sit in the
    # buffered or text layer, and a read flushes them to the raw layer first, moving the
    # raw position by as much — the window must reach that far too.
    _dirty = 0
    _bufsize = io.DEFAULT_BUFFER_SIZE
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

    # the lock: one call at a time ---------------------------------------------------------

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

    def _wake(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    if TYPE_CHECKING:
        async def _finish_unfinished(self) -> None:
            """The writes layer's (writes.py): a call that takes the lock first finishes the
            writes a cancelled call left with the kernel, and reports their outcome."""

    # a caller's descriptor: its offset ----------------------------------------------------

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

    # running the synchronous stack --------------------------------------------------------

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        raw = self._raw
        assert raw is not None
        raw.in_op = True
        try:
            return fn(*args)
        finally:
            raw.in_op = False

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
