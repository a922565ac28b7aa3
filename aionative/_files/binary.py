"""The binary wrappers' reads (they resume after a short window), and ``AsyncFileIO``
(``buffering=0``: the raw file itself)."""

from __future__ import annotations

from _thread import get_ident as _get_ident
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from .. import _kernelops as _k
from .. import _lowlevel
from .._raw import SERVING as _SERVING
from .._raw import STREAM
from .base import AsyncBase
from .gate import _GRANT_LINES, _ROOM_CHARGE, _turn_spent
from .reads import _size_arg

if TYPE_CHECKING:
    from .._core import LazyReader

#: From this size on, ``read(n)`` / ``readinto(b)`` of a read-only regular file whose buffers
#: hold nothing at the position is one ``aionative.pread`` / ``preadinto`` (see
#: _BinaryBase._read_direct): the kernel copies into the result, where the window would copy
#: the data twice more (into the window, then out): faster from a cached file, no slower from
#: a cold one (``python -m bench.inproc w3-file`` compares the two).
_DIRECT_READ_MIN = 64 * 1024


class _BinaryBase(AsyncBase[bytes]):
    """Reads of the binary wrappers: they resume after a short window."""

    def _line_end_ready(self, buf: bytes | bytearray, i: int) -> bool:
        """Whether the window holds a line end at or after ``buf[i]``, and the margin past it
        (see _margin)."""
        k = buf.find(b"\n", i)
        return k >= 0 and len(buf) - k > self._margin()

    def _direct_read_ok(self, n: int) -> bool:
        """Whether ``n`` bytes of a ``read()`` may skip the window: a read-only regular file
        read through the engine under a buffered layer (``buffering=0`` is FileIO's one
        read(2), capped, with no tell()), nothing of the position's data in the window or
        the buffered layer (its position is the raw one), and ``n`` within the file as we
        know it (the builtin would allocate ``n`` bytes too, but this one stays within what
        the window's path would fetch)."""
        raw = self._raw
        assert raw is not None
        return (raw.kind != STREAM and not raw.direct and not raw.writes_fd
                and self._route == "engine" and self._file is not raw and not raw.available()
                and n <= raw.size - raw.pos + 65536
                and self._run(self._file.tell) == raw.pos)

    @overload
    async def _read_direct(self, into: None, n: int) -> bytes: ...
    @overload
    async def _read_direct(self, into: memoryview, n: int) -> int: ...

    async def _read_direct(self, into: memoryview | None, n: int) -> bytes | int:
        """Up to ``n`` bytes at the position in one ``aionative.pread`` (``into`` None: the
        bytes) or ``preadinto`` (the count), inline from the page cache within the budget,
        else after a turn or through the kernel queue. Short at the end of the file, which it
        then notes, or where a file system stops short of it (sysfs, FUSE, network file
        systems), which it does not. The position moves only once the data is here: a
        cancelled read leaves it where it was."""
        raw = self._raw
        assert raw is not None
        pos = raw.pos
        if into is None:
            data = await _lowlevel.pread(raw._fd, n, pos)
            res: bytes | int = data
            got = len(data)
        else:
            call = _lowlevel.preadinto(raw._fd, into, pos)
            del into  # the engine holds it while it must; a kept traceback must not
            res = got = await call
        raw.note_read(pos, got, n)
        raw.pos = pos + got
        self._run(self._file.tell)  # the buffered layer caches the raw position: refresh it
        return res

    async def _read_loop(self, fn: Callable[[int], bytes | None], n: int,
                         prefetch: int) -> bytes:
        raw = self._raw
        assert raw is not None
        # (_fetch and _push are skipped when they have nothing to do: a coroutine each.)
        if raw.kind != STREAM and not raw.at_eof_after(prefetch + self._dirty):
            await self._fetch(prefetch)
        res = self._run(fn, n) or b""
        while raw.missed and (n < 0 or len(res) < n):
            want, raw.missed = raw.missed, 0
            await self._push()
            await self._fetch(want if raw.kind == STREAM else max(want, prefetch))
            more = self._run(fn, n - len(res) if n >= 0 else -1)
            if more:
                res += more
        if raw.staged:
            await self._push()
        return res

    async def read(self, size: int | None = -1, /) -> bytes:
        """Read up to ``size`` bytes (to end of file if ``size`` is negative or ``None``), as the
        builtin's ``read()``; ``b""`` at end of file."""
        gate = self._gate
        if type(size) is int and 0 < size <= gate.room:
            # The window holds these bytes and a buffer more (see _read_room): the
            # synchronous file reads them without the lock, a fetch or a check.
            gate.room -= size if size >= _ROOM_CHARGE else _ROOM_CHARGE  # noqa: FURB136 (max() costs more)
            if gate.room <= 0:
                gate.room = -1  # spent by fast reads: the next read cedes first
            gate.budget = 0
            _SERVING[0] = _get_ident()  # (served from memory: see WindowRaw.fileno)
            try:
                return gate.read(size)  # type: ignore[no-any-return]
            except BaseException:
                gate.room = 0
                raise
            finally:
                _SERVING[0] = -1
        lazy = self._lazy
        if lazy is not None:
            if (size is None or type(size) is int and size == -1) and not self._busy:
                res = lazy.read_rest()
                if res is False:
                    res = await self._read_rest_later(lazy)
                if isinstance(res, bytes):
                    return res
            if self._lazy is not None:
                self._materialize()
        if self._raw is None:
            return bytes(await self._in_executor(self._file.read, size))
        if gate.room < 0:  # after a run of reads the room served (see _ROOM_CHARGE)
            gate.room = 0
            if _turn_spent():
                await _k.one_turn()
        if not self._try_lock():
            await self._lock()
        room = 0
        try:
            n = _size_arg(size)
            if n is None or self._raw.closed or not self._raw.reads_fd:
                return bytes(self._run(self._file.read, size) or b"")
            if n < 0:
                await self._fetch_to_eof()
                res = self._run(self._file.read, size)
                await self._push()
                return res if res is not None else b""
            # As BufferedReader.read(n) does: whole buffers' worth from the file straight
            # into the result, the rest through the buffer (which is then left as the
            # builtin's is: what peek() and read1() see, where the descriptor's offset is).
            whole = n - n % self._bufsize
            if whole >= _DIRECT_READ_MIN and self._direct_read_ok(whole):
                head = await self._read_direct(None, whole)
                if len(head) == n or (len(head) < whole and self._raw.eof >= 0):
                    return head  # all of it, or the end of the file
                rest = await self._read_loop(self._file.read, n - len(head),
                                             n - len(head) + self._bufsize)
                return head + rest if rest else head
            res = await self._read_loop(self._file.read, n, n + self._bufsize)
            room = self._read_room()
            return res
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()
            if room > 0:
                self._line_gate().room = room

    def _read_room(self) -> int:
        """How many bytes later ``read(n)`` calls may take without the lock, a fetch or a
        check (``gate.room``; any other call ends it, as it ends ``async for``'s line
        budget): on a read-only regular file under a buffered layer, the bytes the window
        holds past the position less one buffer — a ``BufferedReader`` takes at most a
        buffer more from its raw file than it hands out, so those reads never reach the
        window's end, where the end of the file would have to be looked for again."""
        raw = self._raw
        assert raw is not None
        if (self._fd_shared or raw.writes_fd or raw.kind == STREAM or self._file is raw
                or raw.closed):
            return 0
        return raw.available() - self._bufsize

    async def readline(self, size: int | None = -1, /) -> bytes:
        """Read one line, up to and including ``b"\\n"`` (at most ``size`` bytes if ``size`` is not
        negative); ``b""`` at end of file."""
        if size is None or type(size) is int and size == -1:
            # A whole line, while the gate's budget says the window holds its end (as
            # ``async for`` reads them; a whole line read below raises the budget).
            line = self._gated_line()
            if line:
                return line
            await self._cede()
        if self._raw is None:
            return bytes(await self._in_executor(self._file.readline, size))
        if not self._try_lock():
            await self._lock()
        grant = 0
        try:
            n = _size_arg(size)
            raw = self._raw
            if n is None or raw.closed or not raw.reads_fd:
                return bytes(self._run(self._file.readline, size) or b"")
            if raw.kind != STREAM:
                while True:
                    buf, i, at_eof = raw.window_view()
                    end = self._ready_end(buf, at_eof)
                    if at_eof or buf.find(b"\n", i, end) >= 0 or 0 <= n <= end - i:
                        break
                    await self._fetch(len(buf) - i + self._readahead)
            res = self._run(self._file.readline, size) or b""
            while raw.missed and not res.endswith(b"\n") and (n < 0 or len(res) < n):
                want, raw.missed = raw.missed, 0
                await self._push()
                await self._fetch(want)
                res += self._run(self._file.readline, n - len(res) if n >= 0 else -1) or b""
            await self._push()
            if n < 0 and res:
                grant = self._lines_ahead()
            return res
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()
            if grant > 0:
                self._line_gate().budget = min(grant, _GRANT_LINES)

    async def readlines(self, hint: int | None = -1, /) -> list[bytes]:
        """Read the remaining lines, stopping once their total size exceeds ``hint`` (if > 0)."""
        if self._raw is None:
            return list(await self._in_executor(self._file.readlines, hint))
        raw = self._raw
        n = _size_arg(hint)
        if n is not None and n > 0 and raw.kind == STREAM and not raw.closed and raw.reads_fd:
            # One line at a time, exactly as IOBase.readlines iterates: never waits for
            # data beyond the last line it returns.
            lines: list[bytes] = []
            total = 0
            while True:
                line = await self.readline()
                if not line:
                    return lines
                lines.append(line)
                total += len(line)
                if total > n:
                    return lines
        if not self._try_lock():
            await self._lock()
        try:
            if n is None or raw.closed or not raw.reads_fd:
                # Under the lock: a buffered layer flushes its writes first.
                lines = list(self._run(self._file.readlines, hint))
                await self._push()
                return lines
            if n <= 0:
                await self._fetch_to_eof()
                if raw.kind != STREAM:
                    start, lines = self._run(self._first_lines)
                    await self._push()
                    return await self._more_lines(start, lines)
            else:
                while True:
                    buf, i, at_eof = raw.window_view()
                    if at_eof or (len(buf) - i > n and self._line_end_ready(buf, i + n)):
                        break
                    await self._fetch(len(buf) - i + self._readahead)
            res = self._run(self._file.readlines, hint)
            await self._push()
            return list(res)
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def readinto(self, b: Any, /) -> int:
        """Read into the writable buffer ``b``; return the number of bytes read (0 at end of file).
        """
        if self._raw is None:
            return int(await self._in_executor(self._file.readinto, b))
        if not self._try_lock():
            await self._lock()
        try:
            raw = self._raw
            if raw.closed or not raw.reads_fd:
                return int(self._run(self._file.readinto, b) or 0)
            try:
                view = memoryview(b).cast("B")
            except TypeError:
                return int(self._run(self._file.readinto, b))
            with view:
                want = len(view)
                done = 0
                # As BufferedReader.readinto does: more than a buffer's worth goes from the
                # file straight into the caller's buffer (a slice of the view: the engine's
                # export of it outlives a cancelled call, which `with view` must not wait for).
                if (want >= _DIRECT_READ_MIN and want > self._bufsize and not view.readonly
                        and self._direct_read_ok(want)):
                    done = await self._read_direct(view[:], want)
                    if done == want or raw.eof >= 0:
                        await self._push()
                        return done  # all of it, or the end of the file
                if raw.kind != STREAM:
                    await self._fetch(want - done + self._bufsize)
                done += self._run(self._file.readinto, view[done:] if done else b) or 0
                while raw.missed and done < want:
                    need, raw.missed = raw.missed, 0
                    await self._push()
                    await self._fetch(need)
                    done += self._run(self._file.readinto, view[done:]) or 0
            await self._push()
            return done
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    def readable(self) -> bool:
        """Whether the file was opened for reading (a plain method in binary mode, as in aiofiles).
        """
        return bool(self._file.readable())

    async def _read_rest_later(self, lazy: LazyReader) -> bytes | None:
        """A lazy ``read()`` that found the budget spent: read inline on a later turn (a
        kernel round trip costs more), the file locked meanwhile — what
        ``_kernelops.after_a_turn`` does, the retry in C. The bytes, or None: the stack must
        read them."""
        self._busy = True
        try:
            await _k.one_turn()
            res = lazy.read_rest(True)
            if res is False:  # refused past the retry's grace as well
                want = lazy.want()
                res = lazy.take(await _k.refused_queue(lazy.engine(), "read_inline", lazy.fd,
                                                       want, lazy.pos), want)
            if res is not None and self._lazy is None:
                # A call waiting for this one built the stack meanwhile, at the old position.
                self._run(self._file.seek, lazy.pos)
            return res  # type: ignore[return-value]
        finally:
            self._busy = False
            if self._lazy is None and self._waiters:
                self._wake()

    def _batch_term(self) -> bytes | None:
        return b"\n"

    async def _readline_rest(self, head: bytes) -> bytes:
        """A binary line cut short by the window: continue it (called with the lock)."""
        raw = self._raw
        assert raw is not None
        res = head
        while not res.endswith(b"\n"):
            await self._push()
            await self._fetch(self._readahead)
            more = self._run(self._file.readline) or b""
            if not more:
                break
            res += more
        await self._push()
        return res


class AsyncFileIO(_BinaryBase):
    """``buffering=0``: the raw file itself (``FileIO``'s behaviour)."""

    async def readall(self) -> bytes:
        """Read from the position to end of file."""
        raw = self._raw
        if raw is None:
            return bytes(await self._in_executor(self._file.readall))
        if not self._try_lock():
            await self._lock()
        try:
            if not raw.closed and raw.reads_fd:
                await self._fetch_to_eof()
            res = self._run(self._file.readall)
            await self._push()
            return res if res is not None else b""
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def read(self, size: int | None = -1, /) -> bytes:
        """Read up to ``size`` bytes (to end of file if negative or ``None``), as ``FileIO.read()``:
        on a pipe or other stream a short result does not mean end of file."""
        raw = self._raw
        if raw is None or raw.kind != STREAM:
            return await super().read(size)
        # A stream, unbuffered: one read of at most `size` bytes, as FileIO.read does.
        if not self._try_lock():
            await self._lock()
        try:
            n = _size_arg(size)
            if n is None or raw.closed or not raw.reads_fd:
                pass
            elif n < 0:
                await self._fetch_to_eof()
            elif n and not raw.available():
                await self._fetch(n)
            res = self._run(self._file.read, size)
            raw.missed = 0
            await self._push()
            return res if res is not None else b""
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()
