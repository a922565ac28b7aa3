"""``aiofiles.tempfile``, served by the engine.

``TemporaryFile`` is an ``O_TMPFILE`` descriptor and ``NamedTemporaryFile`` an
``O_CREAT|O_EXCL`` file with ``tempfile``'s naming, both opened by the kernel (``openat`` on
io_uring: no thread) and given ``aionative.open``'s file objects; the named file is unlinked on
close when ``delete`` is true. ``SpooledTemporaryFile`` keeps data in memory until it rolls over,
and ``TemporaryDirectory`` creates and removes a directory tree: both run in the executor, as in
aiofiles.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile as _tempfile
from collections.abc import Awaitable, Generator
from concurrent.futures import Executor
from functools import partial
from types import TracebackType
from typing import Any, AnyStr, Generic

from .. import _kernelops as _k
from .._files import AsyncBase
from .._open import AiofilesContextManager, open_file
from .temptypes import AsyncSpooledTemporaryFile, AsyncTemporaryDirectory

__all__ = ["NamedTemporaryFile", "SpooledTemporaryFile", "TemporaryDirectory", "TemporaryFile"]

from . import temptypes as temptypes  # the submodule, as aiofiles.tempfile has it

_O_TMPFILE = getattr(os, "O_TMPFILE", 0)


async def _tempdir(dir: str | bytes | os.PathLike[str] | None, executor: Executor | None,
                   prefix: Any = None, suffix: Any = None) -> Any:
    if dir is not None:
        return os.fspath(dir)
    if _tempfile.tempdir is None:  # the first call probes candidate directories
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, _tempfile.gettempdir)
    # bytes when a bytes prefix or suffix asks for bytes names, as tempfile decides it
    return _tempfile._sanitize_params(prefix, suffix, None)[2]  # type: ignore[attr-defined]


def _flags(mode: str) -> int:
    # tempfile opens read-write whatever the mode (the mode only shapes the file object).
    return os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)


async def _temporary_file(mode: str, buffering: int, encoding: str | None,
                          newline: str | None, suffix: AnyStr | None, prefix: AnyStr | None,
                          dir: Any, errors: str | None, loop: Any,
                          executor: Executor | None) -> AsyncBase[Any]:
    directory = await _tempdir(dir, executor, prefix, suffix)
    fd = -1
    if _O_TMPFILE:
        try:
            fd = await _k.open_fd(directory, _flags(mode) | _O_TMPFILE | os.O_EXCL, 0o600)
        except OSError:
            # As tempfile's: any refusal (no O_TMPFILE on this filesystem, a kernel that
            # reads it as O_DIRECTORY, a missing directory) falls back to a named file, whose
            # error then names the file it tried.
            pass
    if fd < 0:
        fd, name = await _create_named(directory, suffix, prefix, mode)
        await _k.unlink(name)
    # open_file closes the descriptor it was given if it fails (closefd): a second close
    # here would raise EBADF over its error, or close a number reused meanwhile.
    return await open_file(fd, mode, buffering, encoding, errors, newline, loop=loop,
                           executor=executor)


async def _create_named(directory: Any, suffix: Any, prefix: Any, mode: str
                        ) -> tuple[int, Any]:
    """``tempfile.mkstemp``'s loop, with the kernel's openat."""
    prefix, suffix, directory, output_type = _tempfile._sanitize_params(  # type: ignore[attr-defined]
        prefix, suffix, directory)
    names = _tempfile._get_candidate_names()  # type: ignore[attr-defined]
    if output_type is bytes:
        names = map(os.fsencode, names)
    if not os.path.isabs(directory):
        # mkstemp returns abspath(name), which asks getcwd(2) for a relative one: asked in a
        # worker thread, so that nothing on the loop's thread calls into the kernel for it.
        cwd = await _k._in_thread(os.getcwdb if output_type is bytes else os.getcwd)
        directory = os.path.join(cwd, directory)  # type: ignore[call-overload]
    for _ in range(_tempfile.TMP_MAX):
        name = os.path.join(directory, prefix + next(names) + suffix)
        try:
            fd = await _k.open_fd(name, _flags(mode) | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        return fd, os.path.normpath(name)  # abspath(name): the directory is absolute
    raise FileExistsError(17, "No usable temporary file name found")


def TemporaryFile(mode: str = "w+b", buffering: int = -1, encoding: str | None = None,
                  newline: str | None = None, suffix: AnyStr | None = None,
                  prefix: AnyStr | None = None, dir: Any = None,
                  loop: asyncio.AbstractEventLoop | None = None,
                  executor: Executor | None = None, *, errors: str | None = None
                  ) -> AiofilesContextManager[Any]:
    """An unnamed temporary file (``tempfile.TemporaryFile``), opened by the kernel."""
    return AiofilesContextManager(_temporary_file(mode, buffering, encoding, newline, suffix,
                                                  prefix, dir, errors, loop, executor))


async def _named(mode: str, buffering: int, encoding: str | None, newline: str | None,
                 suffix: Any, prefix: Any, dir: Any, delete: bool, errors: str | None,
                 loop: Any, executor: Executor | None,
                 delete_on_close: bool = True) -> AsyncBase[Any]:
    directory = await _tempdir(dir, executor, prefix, suffix)
    fd, name = await _create_named(directory, suffix, prefix, mode)
    try:
        f = await open_file(fd, mode, buffering, encoding, errors, newline, loop=loop,
                            executor=executor)
    except BaseException:
        # (open_file has closed the descriptor: closefd)
        await _k.unlink(name)
        raise
    assert f._raw is not None
    f._raw.name = name
    f.delete = delete  # type: ignore[attr-defined]  # as tempfile's wrapper has (< 3.12)
    if delete and delete_on_close:
        f._unlink_on_close = name
    elif delete:
        f._unlink_on_exit = name  # removed when `async with` ends, not on close()
    return f


if sys.version_info >= (3, 12):
    def NamedTemporaryFile(mode: str = "w+b", buffering: int = -1,
                           encoding: str | None = None, newline: str | None = None,
                           suffix: AnyStr | None = None, prefix: AnyStr | None = None,
                           dir: Any = None, delete: bool = True,
                           loop: asyncio.AbstractEventLoop | None = None,
                           executor: Executor | None = None, *, errors: str | None = None,
                           delete_on_close: bool = True) -> AiofilesContextManager[Any]:
        """A named temporary file (``tempfile.NamedTemporaryFile``), removed on close."""
        return AiofilesContextManager(_named(mode, buffering, encoding, newline, suffix,
                                             prefix, dir, delete, errors, loop, executor,
                                             delete_on_close))
else:
    def NamedTemporaryFile(mode: str = "w+b", buffering: int = -1,
                           encoding: str | None = None, newline: str | None = None,
                           suffix: AnyStr | None = None, prefix: AnyStr | None = None,
                           dir: Any = None, delete: bool = True,
                           loop: asyncio.AbstractEventLoop | None = None,
                           executor: Executor | None = None, *, errors: str | None = None
                           ) -> AiofilesContextManager[Any]:
        """A named temporary file (``tempfile.NamedTemporaryFile``), removed on close."""
        return AiofilesContextManager(_named(mode, buffering, encoding, newline, suffix,
                                             prefix, dir, delete, errors, loop, executor))


async def _spooled(max_size: int, mode: str, buffering: int, encoding: str | None,
                   newline: str | None, suffix: Any, prefix: Any, dir: Any,
                   errors: str | None, loop: Any,
                   executor: Executor | None) -> AsyncSpooledTemporaryFile:
    running = asyncio.get_running_loop()
    f = await running.run_in_executor(executor, partial(
        _tempfile.SpooledTemporaryFile, max_size, mode, buffering, encoding, newline, suffix,
        prefix, dir, errors=errors))
    return AsyncSpooledTemporaryFile(f, loop, executor)


def SpooledTemporaryFile(max_size: int = 0, mode: str = "w+b", buffering: int = -1,
                         encoding: str | None = None, newline: str | None = None,
                         suffix: AnyStr | None = None, prefix: AnyStr | None = None,
                         dir: Any = None, loop: asyncio.AbstractEventLoop | None = None,
                         executor: Executor | None = None, *, errors: str | None = None
                         ) -> AiofilesContextManager[Any]:
    """``tempfile.SpooledTemporaryFile``: in memory until ``max_size``, then on disk."""
    return AiofilesContextManager(_spooled(max_size, mode, buffering, encoding, newline,
                                           suffix, prefix, dir, errors, loop, executor))


class AiofilesContextManagerTempDir(Generic[AnyStr]):
    """``async with TemporaryDirectory() as name``: the name; removed on exit."""

    __slots__ = ("_coro", "_obj")

    def __init__(self, coro: Awaitable[AsyncTemporaryDirectory]) -> None:
        self._coro: Awaitable[AsyncTemporaryDirectory] | None = coro
        self._obj: AsyncTemporaryDirectory | None = None

    def __await__(self) -> Generator[Any, None, AsyncTemporaryDirectory]:
        if self._obj is None:
            assert self._coro is not None
            coro, self._coro = self._coro, None
            self._obj = yield from coro.__await__()
        return self._obj

    async def __aenter__(self) -> Any:
        return (await self).name

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        obj, self._obj = self._obj, None
        if obj is not None:
            await obj.cleanup()


async def _tempdir_obj(suffix: Any, prefix: Any, dir: Any, loop: Any,
                       executor: Executor | None) -> AsyncTemporaryDirectory:
    running = asyncio.get_running_loop()
    d = await running.run_in_executor(executor, partial(_tempfile.TemporaryDirectory, suffix,
                                                        prefix, dir))
    return AsyncTemporaryDirectory(d, loop, executor)


def TemporaryDirectory(suffix: AnyStr | None = None, prefix: AnyStr | None = None,
                       dir: Any = None, loop: asyncio.AbstractEventLoop | None = None,
                       executor: Executor | None = None) -> AiofilesContextManagerTempDir[Any]:
    """``tempfile.TemporaryDirectory``: ``async with`` gives its name."""
    return AiofilesContextManagerTempDir(_tempdir_obj(suffix, prefix, dir, loop, executor))
