"""``aiofiles.ospath``, served by the engine: ``aionative.ospath`` is also ``aionative.os.path``.

The stat-based predicates use the kernel's ``statx`` on io_uring (no thread); the rest run in
the loop's executor, as aiofiles does. Semantics are ``os.path``'s (``exists`` is ``False``
for any ``OSError`` or ``ValueError``, and so on), and so are the parameters' names: a call
that names its argument (``getsize(filename=p)``, ``isdir(s=p)``) works as with ``os.path``
or aiofiles, which passes keywords through."""

from __future__ import annotations

import asyncio
import os
import stat as _stat
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial, wraps
from typing import Any, ParamSpec, TypeVar

from . import _kernelops as _k

P = ParamSpec("P")
T = TypeVar("T")
StrPath = _k.StrPath

__all__ = ["abspath", "exists", "getatime", "getctime", "getmtime", "getsize", "isdir",
           "isfile", "islink", "ismount", "samefile", "sameopenfile", "wrap"]


def wrap(func: Callable[P, T]) -> Callable[..., Any]:
    """Run ``func`` in ``executor`` (default: the loop's) and await it, as ``aiofiles.os.wrap``."""

    @wraps(func)
    async def run(*args: Any, loop: asyncio.AbstractEventLoop | None = None,
                  executor: Executor | None = None, **kwargs: Any) -> T:
        loop = loop or asyncio.get_running_loop()
        return await loop.run_in_executor(executor, partial(func, *args, **kwargs))

    return run


abspath = wrap(os.path.abspath)
ismount = wrap(os.path.ismount)


async def _stat_or_none(path: StrPath | int,
                        follow_symlinks: bool = True) -> os.stat_result | None:
    try:
        return await _k.stat(path, follow_symlinks=follow_symlinks)
    except (OSError, ValueError):
        return None


async def exists(path: StrPath | int, *, loop: Any = None, executor: Any = None) -> bool:
    """``os.path.exists``: whether ``path`` names an existing file or directory (``False`` on any
    ``OSError`` or ``ValueError``); a broken symlink does not exist."""
    return await _stat_or_none(path) is not None


async def isfile(path: StrPath | int, *, loop: Any = None, executor: Any = None) -> bool:
    """``os.path.isfile``: whether ``path`` is an existing regular file (symlinks followed)."""
    st = await _stat_or_none(path)
    return st is not None and _stat.S_ISREG(st.st_mode)


async def isdir(s: StrPath | int, *, loop: Any = None, executor: Any = None) -> bool:
    """``os.path.isdir``: whether ``s`` is an existing directory (symlinks followed)."""
    st = await _stat_or_none(s)
    return st is not None and _stat.S_ISDIR(st.st_mode)


async def islink(path: StrPath, *, loop: Any = None, executor: Any = None) -> bool:
    """``os.path.islink``: whether ``path`` is a symbolic link (a descriptor raises ``TypeError``,
    as ``os.path.islink``)."""
    if isinstance(path, int):  # os.lstat takes no descriptor, and islink lets TypeError out
        raise TypeError("lstat: path should be string, bytes or os.PathLike, "
                        f"not {type(path).__name__}")
    st = await _stat_or_none(path, follow_symlinks=False)
    return st is not None and _stat.S_ISLNK(st.st_mode)


async def getsize(filename: StrPath | int, *, loop: Any = None, executor: Any = None) -> int:
    """``os.path.getsize``: the size in bytes (raises ``OSError`` if it does not exist)."""
    return (await _k.stat(filename)).st_size


async def getmtime(filename: StrPath | int, *, loop: Any = None, executor: Any = None) -> float:
    """``os.path.getmtime``: the time of last modification, in seconds since the epoch."""
    return (await _k.stat(filename)).st_mtime


async def getatime(filename: StrPath | int, *, loop: Any = None, executor: Any = None) -> float:
    """``os.path.getatime``: the time of last access, in seconds since the epoch."""
    return (await _k.stat(filename)).st_atime


async def getctime(filename: StrPath | int, *, loop: Any = None, executor: Any = None) -> float:
    """``os.path.getctime``: the time of the last status change, in seconds since the epoch."""
    return (await _k.stat(filename)).st_ctime


def _same(s1: os.stat_result, s2: os.stat_result) -> bool:
    """``os.path.samestat`` (written out: blocking-call detectors wrap os.path's functions)."""
    return s1.st_ino == s2.st_ino and s1.st_dev == s2.st_dev


async def samefile(f1: StrPath | int, f2: StrPath | int, *, loop: Any = None,
                   executor: Any = None) -> bool:
    """``os.path.samefile``: whether both paths name the same file (same device and inode)."""
    # One after the other, as os.path's: an error is the first path's when both fail.
    s1 = await _k.stat(f1)
    return _same(s1, await _k.stat(f2))


async def sameopenfile(fp1: int, fp2: int, *, loop: Any = None, executor: Any = None) -> bool:
    """``os.path.sameopenfile``: whether both descriptors refer to the same file."""
    s1 = await _k.fstat(fp1)
    return _same(s1, await _k.fstat(fp2))
