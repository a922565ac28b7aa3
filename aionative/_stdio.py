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
    """Resolves ``_file`` on every access: from a dotted name (``"sys.stdout.buffer"``), or
    by calling ``indirect`` (aiofiles' constructor argument) when one is given."""

    _name: str
    _indirect: Any = None

    @property
    def _file(self) -> Any:
        if self._indirect is not None:
            return self._indirect()
        return _resolve(self._name)

    @_file.setter
    def _file(self, value: Any) -> None:
        self._name = value


class AsyncTextIndirectIOWrapper(AsyncIndirectBase, AsyncTextIOWrapper):
    """``sys.stdin``/``stdout``/``stderr``, resolved on each call."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None, indirect: Any = None) -> None:
        AsyncTextIOWrapper.__init__(self, name, loop, executor)
        self._indirect = indirect


class AsyncIndirectBufferedReader(AsyncIndirectBase, AsyncBufferedReader):
    """``sys.stdin.buffer``, resolved on each call."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None, indirect: Any = None) -> None:
        AsyncBufferedReader.__init__(self, name, loop, executor)
        self._indirect = indirect


class AsyncIndirectBufferedIOBase(AsyncIndirectBase, AsyncBufferedIOBase):
    """``sys.stdout.buffer``/``sys.stderr.buffer``, resolved on each call."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None, indirect: Any = None) -> None:
        AsyncBufferedIOBase.__init__(self, name, loop, executor)
        self._indirect = indirect


class AsyncIndirectFileIO(AsyncIndirectBase, AsyncFileIO):
    """A raw standard stream, resolved on each call."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None, indirect: Any = None) -> None:
        AsyncFileIO.__init__(self, name, loop, executor)
        self._indirect = indirect


stdin = AsyncTextIndirectIOWrapper("sys.stdin")
"""``sys.stdin`` as an async text file (looked up on every call; calls run in the executor)."""
stdout = AsyncTextIndirectIOWrapper("sys.stdout")
"""``sys.stdout`` as an async text file (looked up on every call; calls run in the executor)."""
stderr = AsyncTextIndirectIOWrapper("sys.stderr")
"""``sys.stderr`` as an async text file (looked up on every call; calls run in the executor)."""
stdin_bytes = AsyncIndirectBufferedIOBase("sys.stdin.buffer")  # no peek, as in aiofiles
"""``sys.stdin.buffer`` as an async binary file (no ``peek``, as in aiofiles)."""
stdout_bytes = AsyncIndirectBufferedIOBase("sys.stdout.buffer")
"""``sys.stdout.buffer`` as an async binary file."""
stderr_bytes = AsyncIndirectBufferedIOBase("sys.stderr.buffer")
"""``sys.stderr.buffer`` as an async binary file."""
