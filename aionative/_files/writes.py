"""Pushing what the synchronous stack staged — writes and truncations — to the engine, and
awaiting them, so an error is raised by the call that caused it; a cancelled call's writes
are left to finish, and the next call reports their outcome. Large writes pass through from
the caller's object, as the builtin's buffered layer passes them to its raw file."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from operator import index
from typing import Any, Literal

from .. import _kernelops as _k
from .._args import bytes_like
from .._awaiting import until_done
from .._direct import ALIGN
from .._engine import get_engine
from .._raw import STREAM
from .._threads import ThreadsEngine
from .core import S
from .direct import _DirectIO


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


class _Writes(_DirectIO[S]):
    """Staged writes and truncations pushed to the engine, and how they went."""

    _passing: Any = None  # a text file's pass-through write (_open._PassingWrite)

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
                    # Not await_op: a cancelled call does not cancel its write, which the file
                    # counted when it was staged; the write stays with the kernel and the next
                    # call reports it (the file's own bookkeeping, beside the wait).
                    try:
                        await asyncio.shield(fut)
                    except asyncio.CancelledError:
                        if not fut.cancelled():
                            # This call was cancelled, not the write: the kernel has (or had)
                            # the data. The next call waits for it and reports how it went.
                            # From the caller's own buffer, the kernel may be reading it: the
                            # call ends (cancelled) once it is done.
                            if type(data) is memoryview:
                                await until_done(fut)
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

    async def _finish_unfinished(self) -> None:
        """Writes a cancelled call left with the kernel: wait for them, then do the rest, and
        report their outcome to this call."""
        if self._unfinished:
            while self._unfinished:
                fut, off, data, positional = self._unfinished[0]
                try:  # (waited for, never cancelled: as in _push_items)
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


def _write_each(f: _Writes[Any], lines: list[Any]) -> None:
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
