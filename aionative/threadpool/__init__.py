"""``aiofiles.threadpool``: ``open``, ``wrap`` and the class names, for code that imports them.

``open`` is :func:`aionative.open` (served by the engine, not a thread pool — the module keeps
aiofiles' name). ``wrap`` turns any synchronous file object into the matching async class, whose
calls then run in the executor, as aiofiles runs them; ``sync_open`` is the builtin ``open``.
"""

from __future__ import annotations

import asyncio
import builtins
from concurrent.futures import Executor
from functools import singledispatch
from io import (
    BufferedIOBase,
    BufferedRandom,
    BufferedReader,
    BufferedWriter,
    FileIO,
    TextIOBase,
)
from typing import Any

from .._files import (
    AsyncBase,
    AsyncBufferedIOBase,
    AsyncBufferedReader,
    AsyncFileIO,
    AsyncTextIOWrapper,
)
from .._open import open
from .._stdio import (
    AsyncIndirectBufferedIOBase,
    AsyncIndirectBufferedReader,
    AsyncIndirectFileIO,
    AsyncTextIndirectIOWrapper,
    stderr,
    stderr_bytes,
    stdin,
    stdin_bytes,
    stdout,
    stdout_bytes,
)

__all__ = [
    "AsyncBufferedIOBase",
    "AsyncBufferedReader",
    "AsyncFileIO",
    "AsyncIndirectBufferedIOBase",
    "AsyncIndirectBufferedReader",
    "AsyncIndirectFileIO",
    "AsyncTextIOWrapper",
    "AsyncTextIndirectIOWrapper",
    "binary",
    "open",
    "stderr",
    "stderr_bytes",
    "stdin",
    "stdin_bytes",
    "stdout",
    "stdout_bytes",
    "sync_open",
    "text",
    "wrap",
]

sync_open = builtins.open

from . import binary, text


@singledispatch
def wrap(file: Any, *, loop: asyncio.AbstractEventLoop | None = None,
         executor: Executor | None = None) -> AsyncBase[Any]:
    """The async wrapper of a synchronous file object; its calls run in ``executor``."""
    raise TypeError(f"Unsupported io type: {file}.")


@wrap.register(TextIOBase)
def _(file: TextIOBase, *, loop: asyncio.AbstractEventLoop | None = None,
      executor: Executor | None = None) -> AsyncBase[Any]:
    return AsyncTextIOWrapper(file, loop=loop, executor=executor)


@wrap.register(BufferedWriter)
@wrap.register(BufferedIOBase)
def _(file: BufferedIOBase, *, loop: asyncio.AbstractEventLoop | None = None,
      executor: Executor | None = None) -> AsyncBase[Any]:
    return AsyncBufferedIOBase(file, loop=loop, executor=executor)


@wrap.register(BufferedReader)
@wrap.register(BufferedRandom)
def _(file: BufferedReader | BufferedRandom, *, loop: asyncio.AbstractEventLoop | None = None,
      executor: Executor | None = None) -> AsyncBase[Any]:
    return AsyncBufferedReader(file, loop=loop, executor=executor)


@wrap.register(FileIO)
def _(file: FileIO, *, loop: asyncio.AbstractEventLoop | None = None,
      executor: Executor | None = None) -> AsyncBase[Any]:
    return AsyncFileIO(file, loop=loop, executor=executor)
