"""Fetching what a synchronous read will read into the raw window (reading ahead on regular
files), and the line gate's steps: ``async for`` reads lines the window is known to hold
without the lock, a fetch or a check."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable
from operator import index
from typing import Any

from .. import _kernelops as _k
from .._awaiting import await_owned
from .._backend import _core
from .._engine import get_engine
from .._raw import STREAM
from .core import S
from .gate import _GRANT_LINES, _LineGate, _turn_spent
from .writes import _Writes

_READAHEAD_MIN = 32 * 1024
_READAHEAD_MAX = 1024 * 1024
# readlines() to the end builds its list in slices of lines this long (bytes or characters),
# looking at the loop iteration's budget between two: splitting a file of a million short
# lines takes tens of milliseconds, longer than the loop may be held.
_LINES_SLICE = 1 << 16


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


class _Reads(_Writes[S]):
    """The window filled before a read runs, and lines served from it."""

    _readahead = _READAHEAD_MIN

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
            return await await_owned(eng, fut)  # (bytes of the engine's own)
        except OSError as exc:
            # Linux AIO cannot read some pseudo-files (procfs without read_iter): read them in
            # the executor from now on.
            if exc.errno == 22 and eng.backend == "linux_aio" and raw.kind != STREAM:
                self._route = "thread"
                return await self._in_executor(os.pread, raw._fd, size, offset)
            raise

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

    # lines ---------------------------------------------------------------------------------

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
            # AsyncBase's readline, a layer above (declared here for the type checker, it
            # would move in the API reference's order of members)
            return await self.readline()  # type: ignore[attr-defined, no-any-return]
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
                return await self.readline()  # type: ignore[attr-defined, no-any-return]
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

    def _first_lines(self) -> tuple[int, list[S]]:
        """Where a ``readlines()`` to the end starts (``tell()``), and its first slice of
        lines; run once the window holds the rest of a regular file. Start -1: the call
        was done in one step, as the builtin's — when writes may still sit in the buffered or
        text layer (``tell()`` would flush them, which the builtin's ``readlines`` does not
        before 3.13), or when seeking back to where it began would not be exact: a text
        position that carries decoder state (a cookie past 64 bits: seeking to it reads
        bytes again), or one the text layer will not tell (after a ``readlines(hint)``
        stopped by its hint)."""
        f = self._file
        if self._dirty:
            return -1, f.readlines()
        try:
            start = f.tell()
        except OSError:
            start = -1
        if start < 0 or start >> 64:
            return -1, f.readlines()
        return start, f.readlines(_LINES_SLICE)

    async def _more_lines(self, start: int, lines: list[S]) -> list[S]:
        """The rest of a ``readlines()`` to the end, after its first slice ``lines``: a slice
        at a time, with a turn of the loop whenever this iteration's budget is spent. The
        window holds the rest of the file, so no slice reads the descriptor; the call's lock
        is held throughout. A cancellation during a turn puts the position back at
        ``start``, so the lines already split are not lost."""
        if start < 0:
            return lines
        f = self._file
        while True:
            if _turn_spent():
                try:
                    await _k.one_turn()
                except BaseException:
                    self._run(f.seek, start)
                    raise
            more = self._run(f.readlines, _LINES_SLICE)
            if not more:
                return lines
            lines += more

    async def _readline_rest(self, head: bytes) -> bytes:
        raise NotImplementedError
