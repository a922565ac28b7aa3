"""The buffered binary wrappers: ``AsyncBufferedReader`` (``rb`` and the ``+`` modes, and the
lazy ``rb`` file) and ``AsyncBufferedIOBase`` (``wb``/``ab``/``xb``)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._raw import REGULAR, STREAM, WindowRaw
from .base import AsyncBase
from .binary import _BinaryBase
from .core import T
from .reads import _size_arg


class _BufferedBase(_BinaryBase):
    """What BufferedReader, BufferedWriter and BufferedRandom wrappers share."""

    @property
    def raw(self) -> Any:
        """The underlying raw file object, as the builtin buffered object's ``raw``."""
        self._end_line_budget()
        return self._file.raw

    def detach(self) -> Any:
        """Separate the underlying raw file from the buffer and return it; the wrapper is then
        unusable, as after the builtin's ``detach()``."""
        self._end_line_budget()
        return self._file.detach()

    async def _buffered_once(self, fn: Callable[..., T], *args: Any, n: int) -> T:
        """read1/peek/readinto1: at most one raw read. A regular file is fetched generously;
        on a stream the call runs first, and if the raw read it made found nothing, the
        call had no effect: fetch what that read asked for (one read) and run it again."""
        raw = self._raw
        assert raw is not None
        if raw.kind != STREAM and not raw.closed and raw.reads_fd:
            await self._fetch(max(n, self._bufsize))
        res = self._run(fn, *args)
        if raw.missed and not res:
            want, raw.missed = raw.missed, 0
            await self._fetch(want)
            res = self._run(fn, *args)
        raw.missed = 0
        await self._push()
        return res

    async def read1(self, size: int = -1, /) -> bytes:
        """Read up to ``size`` bytes with at most one read of the raw file, as the builtin's
        ``read1()`` (``size`` negative: as much as one read returns)."""
        if self._raw is None:
            return bytes(await self._in_executor(self._file.read1, size))
        if not self._try_lock():
            await self._lock()
        try:
            n = _size_arg(size)
            return bytes(await self._buffered_once(self._file.read1, size,
                                                   n=n if n is not None and n >= 0
                                                   else self._bufsize) or b"")
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()

    async def readinto1(self, b: Any, /) -> int:
        """Read into ``b`` with at most one read of the raw file; return the number of bytes read.
        """
        if self._raw is None:
            return int(await self._in_executor(self._file.readinto1, b))
        if not self._try_lock():
            await self._lock()
        try:
            try:
                n = memoryview(b).nbytes
            except TypeError:
                n = 0
            return int(await self._buffered_once(self._file.readinto1, b, n=n) or 0)
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()


class AsyncBufferedIOBase(_BufferedBase):
    """``wb``/``ab``/``xb``: a ``BufferedWriter`` (aiofiles' class for them)."""


class AsyncBufferedReader(_BufferedBase):
    """``rb`` and the ``+`` binary modes: a ``BufferedReader`` or ``BufferedRandom``."""

    def _materialize(self) -> None:
        """Build the stack ``_build`` builds for a regular file opened ``rb``, where the lazy
        calls left the file."""
        lazy = self._lazy
        assert lazy is not None
        lazy.settle()  # the inline open's O_NONBLOCK: the stack reads through the queue too
        del self._lazy  # the class's None from now on
        raw = WindowRaw(lazy.fd, kind=REGULAR, readable=True, writable=False, appending=False,
                        created=False, seekable=True, closefd=True, size=lazy.size,
                        pos=lazy.pos, blksize=lazy.blksize, isatty=False)
        raw.name = lazy.name
        buffer = io.BufferedReader(raw, lazy.blksize)  # type: ignore[type-var]
        AsyncBase.__init__(self, buffer, lazy.loop, lazy.executor, raw=raw, route="engine")
        self._bufsize = lazy.blksize
        if lazy.closed:  # the descriptor is closed already: close the stack over it
            raw._closed_fd = True
            buffer.close()

    if not TYPE_CHECKING:  # (mypy would accept any attribute on the class)
        def __getattr__(self, name: str) -> Any:
            # Only called for attributes the object lacks: on a lazy file, the stack's.
            if name in _STACK_ATTRS and self._lazy is not None:
                self._materialize()
                return getattr(self, name)
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}", name=name,
                obj=self)

    async def peek(self, size: int = 0, /) -> bytes:
        """Return buffered bytes at the position without moving it (at least one byte unless at end
        of file), as ``BufferedReader.peek()``."""
        if self._raw is None:
            return bytes(await self._in_executor(self._file.peek, size))
        if not self._try_lock():
            await self._lock()
        try:
            return bytes(await self._buffered_once(self._file.peek, size, n=self._bufsize))
        except Exception:
            await self._push_after_error()
            raise
        finally:
            self._unlock()


# The instance attributes AsyncBase.__init__ sets: a lazy file builds its stack when one of
# them is first asked for.
_STACK_ATTRS = frozenset({"_file", "_raw", "_route", "_waiters", "_unfinished",
                          "_unfinished_staged", "_gate", "_loop", "_executor"})
