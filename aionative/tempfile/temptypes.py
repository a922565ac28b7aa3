"""``aiofiles.tempfile.temptypes``: the async classes of the spooled file and the directory."""

from __future__ import annotations

import asyncio
import tempfile as _tempfile
from concurrent.futures import Executor
from functools import partial
from typing import Any

__all__ = ["AsyncSpooledTemporaryFile", "AsyncTemporaryDirectory"]


class AsyncSpooledTemporaryFile:
    """``tempfile.SpooledTemporaryFile`` with aiofiles' async members (run in the executor)."""

    def __init__(self, file: _tempfile.SpooledTemporaryFile[Any],
                 loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None) -> None:
        self._file = file
        self._loop = loop
        self._executor = executor

    async def _call(self, name: str, *args: Any) -> Any:
        loop = self._loop or asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(getattr(self._file, name),
                                                                  *args))

    async def fileno(self) -> int:
        return int(await self._call("fileno"))

    async def rollover(self) -> None:
        await self._call("rollover")

    async def close(self) -> None:
        await self._call("close")

    async def flush(self) -> None:
        await self._call("flush")

    async def isatty(self) -> bool:
        return bool(await self._call("isatty"))

    async def read(self, size: int = -1) -> Any:
        return await self._call("read", size)

    async def readline(self, size: int = -1) -> Any:
        return await self._call("readline", size)

    async def readlines(self, hint: int = -1) -> list[Any]:
        return list(await self._call("readlines", hint))

    async def seek(self, offset: int, whence: int = 0) -> int:
        return int(await self._call("seek", offset, whence))

    async def tell(self) -> int:
        return int(await self._call("tell"))

    async def truncate(self, size: int | None = None) -> int | None:
        return await self._call("truncate", size)  # type: ignore[no-any-return]

    async def write(self, s: Any) -> int:
        return int(await self._call("write", s))

    async def writelines(self, iterable: Any) -> None:
        await self._call("writelines", iterable)

    @property
    def closed(self) -> bool:
        return bool(self._file.closed)

    @property
    def encoding(self) -> Any:
        return self._file.encoding

    @property
    def mode(self) -> Any:
        return self._file.mode

    @property
    def name(self) -> Any:
        return self._file.name

    @property
    def newlines(self) -> Any:
        return self._file.newlines

    def __aiter__(self) -> AsyncSpooledTemporaryFile:
        return self

    async def __anext__(self) -> Any:
        line = await self.readline()
        if line:
            return line
        raise StopAsyncIteration



class AsyncTemporaryDirectory:
    """``await TemporaryDirectory()``: the directory's ``name``; ``cleanup()`` removes it."""

    def __init__(self, file: _tempfile.TemporaryDirectory[Any],
                 loop: asyncio.AbstractEventLoop | None = None,
                 executor: Executor | None = None) -> None:
        self._file = file
        self._loop = loop
        self._executor = executor

    @property
    def name(self) -> Any:
        return self._file.name

    async def cleanup(self) -> None:
        loop = self._loop or asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._file.cleanup)

    async def close(self) -> None:
        await self.cleanup()
