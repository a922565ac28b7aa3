"""Looking a path up beneath a ``StaticFiles`` directory without leaving it.

The directory is opened, then each name of the path below it relative to the descriptor of
the one before, with ``O_NOFOLLOW`` (unless symlinks are followed): with no ``..`` among the
names, what is opened lies in the directory. A symlink met on the way is checked as Starlette
checks it (``realpath``, in a worker thread), and the descriptor that lookup opens is checked
again (its ``/proc/self/fd`` path): a symlink swapped in between a check and the open cannot
lead outside. Where the engine has no kernel ``openat``, the whole lookup is that worker call.

The file found is returned open (:class:`Found`), so what is served is what was checked.
Used by :class:`aionative.starlette.StaticFiles`.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Callable

from . import _kernelops as _k
from ._awaiting import await_op, finished_anyway
from ._engine import EngineLike
from ._open_readonly import (
    NOT_OPENABLE,
    OPEN_FLAGS,
    fstat_regular,
    kernel_opens,
    open_stat_blocking,
    path_stat_blocking,
)

__all__ = ["Found", "find_in", "find_with_lookup_path", "relative_below"]


class Found:
    """A file a lookup found: its path, its stat and, unless ``fd`` is -1, the descriptor it
    was opened on (read-only, or ``O_PATH`` for what cannot be opened for reading), which
    the caller then owns."""

    __slots__ = ("fd", "path", "st")

    def __init__(self, path: str, fd: int, st: os.stat_result) -> None:
        self.path = path
        self.fd = fd
        self.st = st

    def release(self) -> None:
        """Close the descriptor, if it has one; a second call does nothing."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def relative_below(path: str) -> str | None:
    """``path`` (relative to the mount) normalised lexically, as Starlette's lookup does, or
    None if it is absolute or leads out of the directory. A NUL byte raises ``ValueError``."""
    if path.startswith(("/", "\\")):
        return None
    if "\x00" in path:
        raise ValueError("embedded null byte")
    # After Starlette's get_path, only a leading `..` can remain.
    relative = os.path.normpath(path)
    if relative == os.pardir or relative.startswith(("../", "/")):
        return None
    return relative


async def find_in(eng: EngineLike, directory: str, base: str | None, relative: str,
                  follow_symlink: bool) -> Found | None:
    """``relative`` (as :func:`relative_below` returns it) in ``directory``, whose absolute
    path is ``base`` (None if it was not resolved beforehand)."""
    if base is None or not kernel_opens(eng):
        # A directory added after construction, or no kernel openat: the lookup runs as
        # Starlette's lookup_path does, in one worker call.
        result = await _in_worker_found(directory, relative, follow_symlink)
        return None if result is None else Found(*result)
    joined = base if relative == os.curdir else os.path.join(base, relative)
    # Every name is encoded before anything is opened: one that cannot be (a lone
    # surrogate) raises ValueError (a 404) with nothing submitted, so nothing to close.
    if follow_symlink:
        return await _open_found(eng, joined, os.fsencode(joined))
    names = [] if relative == os.curdir else [os.fsencode(n) for n in relative.split("/")]
    found = await _walk(eng, os.fsencode(base), base, names, joined)
    if found is _SYMLINK:
        # A symlink on the way: Starlette's realpath check, in a worker, and the same check
        # on the descriptor it opens.
        result = await _in_worker_found(directory, relative, False)
        return None if result is None else Found(*result)
    assert not isinstance(found, _Symlink)
    return found


async def find_with_lookup_path(
        lookup_path: Callable[[str], tuple[str, os.stat_result | None]], path: str
) -> Found | None:
    """A subclass's own ``lookup_path``, run in a worker thread as Starlette runs it (it is
    synchronous, and may touch the disk); the regular file it names is then opened through
    the engine, and served from that descriptor with the descriptor's own stat."""
    full_path, st = await asyncio.get_running_loop().run_in_executor(None, lookup_path, path)
    if st is None:
        return None
    if not stat.S_ISREG(st.st_mode):
        return Found(full_path, -1, st)
    fd = await _k.open_fd(full_path, os.O_RDONLY)
    try:
        st = await _k.fstat(fd)
    except BaseException:
        await _k.close_fd(fd)
        raise
    return Found(full_path, fd, st)


# ---------------------------------------------------------------- through the engine


class _Symlink:
    """What ``_walk`` returns when it meets a symlink below the directory."""


_SYMLINK = _Symlink()


async def _open_at(eng: EngineLike, dir_fd: int, name: bytes, flags: int, filename: str) -> int:
    """The kernel's ``openat`` of ``name`` relative to ``dir_fd``. Cancelled, it waits until
    the kernel is done with the operation (which names ``dir_fd`` by number, and a number
    closed and reused meanwhile would be resolved instead); what it opens late is closed."""
    fut = eng.openat(dir_fd, name, flags | os.O_CLOEXEC, 0, filename)  # type: ignore[union-attr]
    return await await_op(eng, fut, on_cancel=_k._close_result)


async def _open_found(eng: EngineLike, path: str, name: bytes, dir_fd: int = _k.AT_FDCWD,
                      nofollow: int = 0) -> Found | None:
    """Open ``name`` (relative to ``dir_fd``) read-only, or, if it cannot be opened for reading
    (a socket, a device, a directory or file we may not read), with ``O_PATH``, as Starlette
    stat-s it (no permission needed): its descriptor and stat, None if it does not exist, a
    ``PermissionError`` for a regular file we may not read (a 401)."""
    try:
        fd = await _open_at(eng, dir_fd, name, OPEN_FLAGS | nofollow, path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno not in NOT_OPENABLE:
            raise
        refused = exc
    else:
        try:
            return Found(path, fd, fstat_regular(fd))  # fstat inline: see open_stat
        except BaseException:
            os.close(fd)
            raise
    try:
        fd = await _open_at(eng, dir_fd, name, os.O_PATH | nofollow, path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        raise refused from None
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
        os.close(fd)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        raise refused  # a file we may not read: 401
    return Found(path, fd, st)


async def _walk(eng: EngineLike, base_name: bytes, base: str, names: list[bytes], path: str
                ) -> Found | _Symlink | None:
    """Open the directory, then each name below it in turn, relative to the descriptor of the
    one before, following no symlink (``O_NOFOLLOW``): with no ``..`` among the names, what is
    opened lies in the directory (as the kernel resolved it now — a ``current -> release-N``
    symlink switched by a deploy is followed at once). A symlink on the way gives
    ``_SYMLINK``: whether it stays in the directory is for Starlette's check."""
    try:
        fd = await _open_at(eng, _k.AT_FDCWD, base_name, os.O_PATH | os.O_DIRECTORY, base)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        for name in names[:-1]:
            try:
                step = await _open_at(eng, fd, name, os.O_PATH | os.O_NOFOLLOW, path)
            except (FileNotFoundError, NotADirectoryError):
                return None
            os.close(fd)
            fd = step
            mode = os.fstat(fd).st_mode  # inline: an open descriptor's inode, no I/O
            if stat.S_ISLNK(mode):
                return _SYMLINK
            if not stat.S_ISDIR(mode):
                return None  # a name below a file (ENOTDIR, as Starlette's stat)
        if not names:
            return Found(path, -1, os.fstat(fd))  # the directory itself
        try:
            return await _open_found(eng, path, names[-1], fd, os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the name is a symlink (O_NOFOLLOW)
                return _SYMLINK
            raise
    finally:
        os.close(fd)


# ---------------------------------------------------------------- in a worker thread


_FD_DIR = "/proc/self/fd/"


def _fd_path(fd: int) -> str | None:
    """The path the kernel resolved for an open descriptor (no I/O: the dentry is pinned)."""
    try:
        return os.readlink(f"{_FD_DIR}{fd}")
    except OSError:
        return None


def _beneath(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def _lookup_blocking(directory: str, path: str, follow_symlink: bool
                     ) -> tuple[str, int, os.stat_result] | None:
    """Starlette's ``lookup_path`` for one directory, with the file opened and, without
    ``follow_symlink``, the opened descriptor's own path checked too (in a worker)."""
    joined = os.path.join(directory, path)
    if follow_symlink:
        full, base = os.path.abspath(joined), os.path.abspath(directory)
    else:
        full, base = os.path.realpath(joined), os.path.realpath(directory)
    if not _beneath(full, base):
        return None
    refused: OSError | None = None
    try:
        fd, st = open_stat_blocking(full)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno not in NOT_OPENABLE:
            raise
        refused = exc
        try:
            fd, st = path_stat_blocking(full)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            raise refused from None
    if not follow_symlink:
        real = _fd_path(fd)
        if real is not None and not _beneath(real, base):  # swapped for a symlink meanwhile
            os.close(fd)
            return None
    if refused is not None and stat.S_ISREG(st.st_mode):  # a file we may not read: 401
        os.close(fd)
        raise refused
    return full, fd, st


async def _in_worker_found(directory: str, path: str, follow_symlink: bool
                           ) -> tuple[str, int, os.stat_result] | None:
    fut = asyncio.get_running_loop().run_in_executor(None, _lookup_blocking, directory, path,
                                                     follow_symlink)
    return await finished_anyway(fut, _close_found)


def _close_found(fut: asyncio.Future[tuple[str, int, os.stat_result] | None]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        result = fut.result()
        if result is not None:
            os.close(result[1])
