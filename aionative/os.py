"""``aiofiles.os``, served by the engine.

On io_uring, ``stat``, ``rename``, ``replace``, ``remove``/``unlink``, ``mkdir``, ``rmdir``,
``symlink`` and ``link`` are kernel operations (no thread); ``makedirs``, ``renames`` and
``removedirs`` are built from them as ``os`` builds them. Operations the kernel has no
asynchronous form of (``listdir``, ``scandir``, ``access``, ``readlink``, ``getcwd``,
``statvfs``, ``sendfile``) run in the loop's executor, as aiofiles runs everything. Every
function accepts aiofiles' ``loop=`` and ``executor=`` keywords.
"""

from __future__ import annotations

import os as _os
from typing import Any

from . import _kernelops as _k
from . import ospath as path
from .ospath import wrap

__all__ = [
    "access",
    "getcwd",
    "link",
    "listdir",
    "makedirs",
    "mkdir",
    "path",
    "readlink",
    "remove",
    "removedirs",
    "rename",
    "renames",
    "replace",
    "rmdir",
    "scandir",
    "sendfile",
    "stat",
    "statvfs",
    "symlink",
    "unlink",
    "wrap",
]

StrPath = _k.StrPath

listdir = wrap(_os.listdir)
scandir = wrap(_os.scandir)
access = wrap(_os.access)
readlink = wrap(_os.readlink)
getcwd = wrap(_os.getcwd)
if hasattr(_os, "sendfile"):
    sendfile = wrap(_os.sendfile)
if hasattr(_os, "statvfs"):
    statvfs = wrap(_os.statvfs)


async def stat(path: StrPath | int, *, dir_fd: int | None = None, follow_symlinks: bool = True,
               loop: Any = None, executor: Any = None) -> _os.stat_result:
    """``os.stat``: the file's status (``follow_symlinks=False``: ``os.lstat``'s).

    On io_uring a kernel ``statx`` (no thread); elsewhere in the loop's default executor.
    ``loop`` and ``executor`` are accepted for aiofiles' sake and unused."""
    return await _k.stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)


async def rename(src: StrPath, dst: StrPath, *, src_dir_fd: int | None = None,
                 dst_dir_fd: int | None = None, loop: Any = None, executor: Any = None) -> None:
    """``os.rename``: rename ``src`` to ``dst``.

    On io_uring a kernel ``renameat`` (no thread); elsewhere in the loop's default executor."""
    await _k.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


async def replace(src: StrPath, dst: StrPath, *, src_dir_fd: int | None = None,
                  dst_dir_fd: int | None = None, loop: Any = None, executor: Any = None) -> None:
    """``os.replace``: rename ``src`` to ``dst``, replacing ``dst`` if it exists.

    On io_uring a kernel ``renameat`` (no thread); elsewhere in the loop's default executor."""
    await _k.replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


async def remove(path: StrPath, *, dir_fd: int | None = None, loop: Any = None,
                 executor: Any = None) -> None:
    """``os.remove`` (also ``unlink``): delete the file ``path``.

    On io_uring a kernel ``unlinkat`` (no thread); elsewhere in the loop's default executor."""
    await _k.unlink(path, dir_fd=dir_fd)


unlink = remove


async def mkdir(path: StrPath, mode: int = 0o777, *, dir_fd: int | None = None,
                loop: Any = None, executor: Any = None) -> None:
    """``os.mkdir``: create the directory ``path`` with ``mode`` (less the umask).

    On io_uring a kernel ``mkdirat`` (no thread); elsewhere in the loop's default executor."""
    await _k.mkdir(path, mode, dir_fd=dir_fd)


async def rmdir(path: StrPath, *, dir_fd: int | None = None, loop: Any = None,
                executor: Any = None) -> None:
    """``os.rmdir``: remove the empty directory ``path``.

    On io_uring a kernel ``unlinkat`` (no thread); elsewhere in the loop's default executor."""
    await _k.rmdir(path, dir_fd=dir_fd)


async def symlink(src: StrPath, dst: StrPath, target_is_directory: bool = False, *,
                  dir_fd: int | None = None, loop: Any = None, executor: Any = None) -> None:
    """``os.symlink``: create a symbolic link ``dst`` pointing to ``src``.

    On io_uring a kernel ``symlinkat`` (no thread); elsewhere in the loop's default executor."""
    await _k.symlink(src, dst, target_is_directory, dir_fd=dir_fd)


async def link(src: StrPath, dst: StrPath, *, src_dir_fd: int | None = None,
               dst_dir_fd: int | None = None, follow_symlinks: bool = True, loop: Any = None,
               executor: Any = None) -> None:
    """``os.link``: create a hard link ``dst`` to ``src``.

    On io_uring a kernel ``linkat`` (no thread); elsewhere in the loop's default executor."""
    await _k.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd,
                  follow_symlinks=follow_symlinks)


async def makedirs(name: StrPath, mode: int = 0o777, exist_ok: bool = False, *,
                   loop: Any = None, executor: Any = None) -> None:
    """``os.makedirs``, step by step with kernel ``mkdirat``s (same algorithm)."""
    name = _os.fspath(name)
    head, tail = _os.path.split(name)
    if not tail:
        head, tail = _os.path.split(head)
    if head and tail and not await path.exists(head):
        try:
            await makedirs(head, exist_ok=exist_ok)
        except FileExistsError:
            pass  # another task or process created it meanwhile
        cdir: Any = _os.curdir if isinstance(tail, str) else bytes(_os.curdir, "ascii")
        if tail == cdir:
            return
    try:
        await _k.mkdir(name, mode)
    except OSError:
        if not exist_ok or not await path.isdir(name):
            raise


async def removedirs(name: StrPath, *, loop: Any = None, executor: Any = None) -> None:
    """``os.removedirs``: remove the leaf, then empty parents while possible."""
    await _k.rmdir(name)
    head, tail = _os.path.split(_os.fspath(name))
    if not tail:
        head, tail = _os.path.split(head)
    while head and tail:
        try:
            await _k.rmdir(head)
        except OSError:
            break
        head, tail = _os.path.split(head)


async def renames(old: StrPath, new: StrPath, *, loop: Any = None,
                  executor: Any = None) -> None:
    """``os.renames``: make the new parents, rename, prune the old parents."""
    head, tail = _os.path.split(_os.fspath(new))
    if head and tail and not await path.exists(head):
        await makedirs(head)
    await _k.rename(old, new)
    head, tail = _os.path.split(_os.fspath(old))
    if head and tail:
        try:
            await removedirs(head)
        except OSError:
            pass
