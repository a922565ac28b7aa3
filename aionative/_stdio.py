"""``aionative.stdin``/``stdout``/``stderr`` (text) and ``*_bytes`` (binary).

As in aiofiles, each looks up ``sys.stdin`` (``sys.stdout.buffer``, …) on every access — so a
replaced ``sys.stdout`` (pytest's capture, a redirect) is honoured — and runs its calls in the
loop's executor: the interpreter's own objects keep their buffers, and a terminal or pipe read
never blocks the loop.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import Executor
from typing import Any

from ._files import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO, AsyncTextIOWrapper


def _resolve(path: str) -> Any:
    obj: Any = sys
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


class AsyncIndirectBase:
    """Resolves ``_file`` from a dotted name (``"sys.stdout.buffer"``) on every access."""

    _name: str

    @property
    def _file(self) -> Any:
        return _resolve(self._name)

    @_file.setter
    def _file(self, value: Any) -> None:
        self._name = value


class AsyncTextIndirectIOWrapper(AsyncIndirectBase, AsyncTextIOWrapper):
    """``sys.stdin``/``stdout``/``stderr``, resolved on each call."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None) -> None:
        AsyncTextIOWrapper.__init__(self, name, loop, executor)


class AsyncIndirectBufferedReader(AsyncIndirectBase, AsyncBufferedReader):
    """``sys.stdin.buffer``, resolved on each call."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None) -> None:
        AsyncBufferedReader.__init__(self, name, loop, executor)


class AsyncIndirectBufferedIOBase(AsyncIndirectBase, AsyncBufferedIOBase):
    """``sys.stdout.buffer``/``sys.stderr.buffer``, resolved on each call."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None) -> None:
        AsyncBufferedIOBase.__init__(self, name, loop, executor)


class AsyncIndirectFileIO(AsyncIndirectBase, AsyncFileIO):
    """A raw standard stream, resolved on each call."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None) -> None:
        AsyncFileIO.__init__(self, name, loop, executor)


stdin = AsyncTextIndirectIOWrapper("sys.stdin")
stdout = AsyncTextIndirectIOWrapper("sys.stdout")
stderr = AsyncTextIndirectIOWrapper("sys.stderr")
stdin_bytes = AsyncIndirectBufferedIOBase("sys.stdin.buffer")  # no peek, as in aiofiles
stdout_bytes = AsyncIndirectBufferedIOBase("sys.stdout.buffer")
stderr_bytes = AsyncIndirectBufferedIOBase("sys.stderr.buffer")
