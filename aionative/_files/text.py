"""``AsyncTextIOWrapper`` (the text modes), and where a text line ends in the bytes of its
encoding: what a fetch must find before a text read can run on the loop's thread."""

from __future__ import annotations

import asyncio
import codecs
import math
import os
import sys
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from .._raw import STREAM, WindowRaw
from .base import AsyncBase
from .core import T
from .gate import _GRANT_LINES
from .reads import _size_arg

_READ1_FLUSHES = sys.version_info >= (3, 13)  # BufferedRandom.read1 flushes its writes first
_HUGE = 1 << 62


class _TextRules:
    """Where a text line ends, in the bytes of one encoding: what a fetch must find before a
    text ``readline`` can run without reading past the window."""

    __slots__ = ("_orders", "bounded", "patterns", "pending", "unit")

    def __init__(self, encoding: str, errors: str, newline: str | None) -> None:
        try:
            name = codecs.lookup(encoding).name
        except LookupError:
            name = ""
        terms = ["\n", "\r"] if newline in (None, "") else [newline]
        self.unit = 1
        self.patterns: list[tuple[bytes, bool]] = []   # (bytes, needs one more unit after)
        # "utf-16" and "utf-32" read in the byte order of the BOM the file starts with (their
        # decoder raises without one): until the window has shown it, ``pending``.
        self.pending = False
        self._orders: list[tuple[bytes, list[tuple[bytes, bool]]]] = []  # (BOM, patterns)
        universal = newline in (None, "")
        if name.startswith(("utf-16", "utf-32")):
            self.unit = 2 if name.startswith("utf-16") else 4
            for e in (["-le", "-be"] if name in ("utf-16", "utf-32") else [name[6:]]):
                pats = [(t.encode(name[:6] + e), universal and t == "\r") for t in terms]
                self._orders.append(("\ufeff".encode(name[:6] + e), pats))
                self.patterns += pats
            self.pending = len(self._orders) > 1
        elif name:
            try:
                ok = all(t.encode(name) == t.encode("ascii") for t in ("\n", "\r"))
            except (UnicodeError, LookupError):
                ok = False
            if ok:
                self.patterns = [(t.encode("ascii"), universal and t == "\r") for t in terms]
        # read(n) may read ahead n * 8 bytes: at most 4 bytes a character in the codecs we
        # know, twice for "\r\n" read as one "\n". "ignore" may drop any number of bytes.
        self.bounded = bool(self.patterns) and errors != "ignore" and (
            self.unit > 1 or name in _BOUNDED_CODECS or name.startswith(("iso8859", "cp")))

    def learn(self, buf: bytes | bytearray, wstart: int) -> None:
        """While ``pending``: a generic UTF-16/32 file's byte order, from the BOM at its start
        when ``buf`` (the window, from file offset ``wstart``) holds it — each byte order's
        line ends are another's characters (U+0D00 is a big-endian ``"\\r"`` in a
        little-endian file). Learnt once: a file rewritten in the other order later is read
        in the first (a line judged ready that is not fails loudly, see _check_text_miss)."""
        if wstart != 0 or len(buf) < self.unit:
            return
        head = bytes(buf[:self.unit])
        for bom, pats in self._orders:
            if head == bom:
                self.patterns, self.pending = pats, False
                return
        # No BOM (yet): still pending, the decoder's business; lines go through a thread.

    def line_ready(self, buf: bytes | bytearray, i: int, end: int | None = None) -> bool:
        """Whether buf[i:end] holds a line end the text layer will see without reading more."""
        if end is None:
            end = len(buf)
        if self.unit == 1:
            if len(self.patterns) == 1:
                return buf.find(self.patterns[0][0], i, end) >= 0
            kn = buf.find(b"\n", i, end)
            kr = buf.find(b"\r", i, kn if kn >= 0 else end)
            if kr >= 0:
                return kr + 1 < len(buf)
            return kn >= 0
        if self.pending:  # (only a generic UTF-16/32 file's can be)
            return False
        # UTF-16/32: a line end at every possible alignment, with room for one more unit.
        unit = self.unit
        for align in range(unit):
            found = False
            for pat, _ in self.patterns:
                k = buf.find(pat, i, end)
                while k >= 0 and (k - i) % unit != align:
                    k = buf.find(pat, k + 1, end)
                if k >= 0 and k + len(pat) + 2 * unit <= len(buf):
                    found = True
                    break
            if not found:
                return False
        return True


_BOUNDED_CODECS = frozenset({
    "utf-8", "utf-8-sig", "ascii", "latin-1", "iso8859-1", "mac-roman", "koi8-r", "koi8-u",
    "big5", "gbk", "gb2312", "gb18030", "shift_jis", "cp932", "euc_jp", "euc_kr", "cp949"})


class AsyncTextIOWrapper(AsyncBase[str]):
    """Text modes: a ``TextIOWrapper``."""

    _text_layer = True

    def __init__(self, file: Any, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None, *, raw: WindowRaw | None = None,
                 route: str = "thread", newline: str | None = None) -> None:
        super().__init__(file, loop, executor, raw=raw, route=route)
        self._rules: _TextRules | None = None
        self._chunk = 8192
        if raw is not None:
            self._rules = _TextRules(file.encoding, file.errors, newline)
            self._chunk = max(int(getattr(file, "_CHUNK_SIZE", 8192)), 1)

    @property
    def buffer(self) -> Any:
        """The underlying binary buffered object, as the builtin ``TextIOWrapper``'s."""
        self._end_line_budget()
        return self._file.buffer

    @property
    def encoding(self) -> str:
        """The encoding the text is decoded and encoded with."""
        return str(self._file.encoding)

    @property
    def errors(self) -> str | None:
        """The error handler of the encoding (``"strict"`` unless given)."""
        return self._file.errors  # type: ignore[no-any-return]

    @property
    def line_buffering(self) -> bool:
        """Whether a write containing a newline flushes, as the builtin's ``line_buffering``."""
        return bool(self._file.line_buffering)

    @property
    def newlines(self) -> str | tuple[str, ...] | None:
        """The newlines translated so far while reading (``None``, a string or a tuple)."""
        self._end_line_budget()
        return self._file.newlines  # type: ignore[no-any-return]

    async def readable(self) -> bool:  # async in text mode, as in aiofiles
        """Whether the file was opened for reading (a coroutine in text mode, as in aiofiles)."""
        if self._raw is None:
            return await self._in_executor(self._file.readable)
        return bool(self._file.readable())

    def detach(self) -> Any:
        """Separate the underlying binary buffer from the text layer and return it; the wrapper is
        then unusable, as after the builtin's ``detach()``."""
        self._end_line_budget()
        return self._file.detach()

    def _margin(self) -> int:
        # TextIOWrapper reads chunks of _CHUNK_SIZE: read1(), which makes one raw read of
        # that size when nothing is buffered, whatever the buffer's size.
        return self._chunk

    def _batch_term(self) -> bytes | None:
        rules = self._rules
        if rules is None or rules.unit != 1 or not rules.patterns:
            return None
        if len(rules.patterns) == 2:  # universal newlines: every "\n" ends a line
            return b"\n"
        return rules.patterns[0][0]

    def _needs_thread(self) -> bool:
        raw = self._raw
        assert raw is not None and self._rules is not None
        return raw.kind == STREAM or not self._rules.patterns

    def _check_text_miss(self) -> None:
        raw = self._raw
        assert raw is not None
        if raw.missed:  # a bug in a bound: fail loudly rather than return a short result
            raw.missed = 0
            raise RuntimeError("aionative: a text read went past its prefetched window")

    async def _text_read(self, fn: Callable[..., T], *args: Any, lines: int = -2,
                         chars: int = -1) -> T:
        """Fetch what a text read needs, then run it. ``lines``: -2 no line rule, -1 to
        end-of-file, n>=0 a line end after n bytes; ``chars``: characters it may return."""
        raw = self._raw
        rules = self._rules
        assert raw is not None and rules is not None
        if raw.closed or not raw.reads_fd:
            return self._run(fn, *args)
        to_end = lines == -2 and chars < 0  # read(): everything to the end of the file
        if _READ1_FLUSHES or to_end:
            # A read to the end flushes first and reads from where the append ended: land it
            # before fetching. (Before 3.13, read(n), readline() and readlines() read through
            # read1(), which does not flush: the write stays buffered.)
            await self._land_appends()
        if self._needs_thread() or (lines == -2 and chars >= 0 and not rules.bounded):
            res = await self._run_blocking(fn, *args)
            await self._push()
            return res
        if lines == -1 or to_end:
            await self._fetch_to_eof()
        else:
            # n characters come from at most 8n bytes only where decoding cannot drop bytes;
            # the chunk that completes them may reach the margin further (see _margin).
            limit = chars * 8 + 64 + self._margin() if chars >= 0 and rules.bounded else _HUGE
            if lines == -2:
                await self._fetch(limit)
            else:
                skip = lines + self._dirty
                limit += self._dirty
                while True:
                    buf, i, at_eof = raw.window_view()
                    if rules.pending:
                        rules.learn(buf, raw.wstart)
                        if rules.pending and len(buf) >= rules.unit and not at_eof:
                            # A generic UTF-16/32 file whose start the window has not shown.
                            res = await self._run_blocking(fn, *args)
                            await self._push()
                            return res
                    have = len(buf) - i
                    if at_eof or have >= limit or have > skip and rules.line_ready(
                            buf, i + skip, self._ready_end(buf, at_eof)):
                        break
                    await self._fetch(have + self._readahead)
        res = self._run(fn, *args)
        self._check_text_miss()
        await self._push()
        return res

    async def read(self, size: int | None = -1, /) -> str:
        """Read up to ``size`` characters (to end of file if negative or ``None``), decoded and with
        newlines translated as the builtin's; ``""`` at end of file."""
        if self._raw is None:
            return str(await self._in_executor(self._file.read, size))
        if not self._try_lock():
            await self._lock()
        try:
            n = _size_arg(size)
            if n is None:
                return str(self._run(self._file.read, size))
            return str(await self._text_read(self._file.read, size, chars=n))
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def readline(self, size: int | None = -1, /) -> str:
        """Read one line, with its (translated) line ending (at most ``size`` characters if ``size``
        is not negative); ``""`` at end of file."""
        if type(size) is int and size == -1:  # (TextIOWrapper.readline refuses None)
            # A whole line, while the gate's budget says the window holds its end (as
            # ``async for`` reads them; a whole line read below raises the budget).
            line = self._gated_line()
            if line:
                return line
            await self._cede()
        if self._raw is None:
            return str(await self._in_executor(self._file.readline, size))
        if not self._try_lock():
            await self._lock()
        grant = 0
        try:
            raw = self._raw
            rules = self._rules
            assert rules is not None
            whole = type(size) is int and size < 0
            # The common case first: a line end already in the window, nothing to await.
            if not self._dirty and raw.kind != STREAM and rules.patterns and not raw.closed:
                buf, i, at_eof = raw.window_view()
                if rules.line_ready(buf, i, self._ready_end(buf, at_eof)):
                    res = str(self._run(self._file.readline, size))
                    self._check_text_miss()
                    if whole and res:
                        grant = self._lines_ahead()
                    return res
            n = _size_arg(size)
            if n is None:
                return str(self._run(self._file.readline, size))
            res = str(await self._text_read(self._file.readline, size, lines=0,
                                            chars=n if n >= 0 else -1))
            if whole and res:
                grant = self._lines_ahead()
            return res
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()
            if grant > 0:
                self._line_gate().budget = min(grant, _GRANT_LINES)

    async def readlines(self, hint: int | None = -1, /) -> list[str]:
        """Read the remaining lines, stopping once their total size exceeds ``hint`` (if > 0)."""
        if self._raw is None:
            return list(await self._in_executor(self._file.readlines, hint))
        if not self._try_lock():
            await self._lock()
        try:
            n = _size_arg(hint)
            if n is None:
                return list(self._run(self._file.readlines, hint))
            raw = self._raw
            assert raw is not None
            if n <= 0 and not (self._needs_thread() or raw.closed or not raw.reads_fd):
                start, lines = await self._text_read(self._first_lines, lines=-1)
                return await self._more_lines(start, lines)
            return list(await self._text_read(self._file.readlines, hint,
                                              lines=-1 if n <= 0 else n * 8))
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def _before_seek(self, offset: Any, whence: Any) -> None:
        """Seeking to a cookie whose decoder state skips characters re-reads the bytes that
        state needs (``TextIOWrapper.seek`` reads nothing otherwise: a descriptor that cannot
        read still seeks): fetch them. The C ``TextIOWrapper`` packs the cookie as start
        position (64 bits), decoder flags, bytes to feed, characters to skip (32 bits each).
        It takes an int or a float (``int()``-ed) and compares anything else with 0 first
        (TypeError): nothing to fetch for those. ``seek(0, SEEK_CUR)`` seeks to ``tell()``'s
        cookie the same way."""
        raw = self._raw
        assert raw is not None
        if raw.kind == STREAM or raw.closed or not raw.reads_fd:
            return
        if whence == os.SEEK_CUR and type(offset) is int and offset == 0:
            try:
                offset = self._file.tell()
            except Exception:  # noqa: BLE001 - the seek itself raises it, as the builtin's
                return
        elif whence != os.SEEK_SET:
            return
        if not isinstance(offset, int) and not (isinstance(offset, float)
                                                and math.isfinite(offset)):
            return
        cookie = int(offset)
        if cookie < 0 or not (cookie >> 128) & 0xFFFFFFFF:  # no characters to skip
            return
        start = cookie & ((1 << 64) - 1)
        to_feed = (cookie >> 96) & 0xFFFFFFFF
        await self._fetch(to_feed + self._bufsize + 64, at=start)
