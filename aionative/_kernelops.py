"""Path and descriptor operations as coroutines with ``os``'s signatures and errors.

On io_uring they are kernel operations (``openat``, ``close``, ``statx``, ``unlinkat``,
``renameat``, ``mkdirat``, ``symlinkat``, ``linkat``, ``fallocate``, ``ftruncate`` — whichever
the kernel's opcode probe reports), so they never touch a thread. Elsewhere (Linux AIO, the
threads backend, an older kernel) they run in the loop's default executor, as aiofiles does.
Errors are what ``os`` raises: the same ``OSError`` subclass, errno, message and filenames.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._awaiting import await_op, finished_anyway, settle_cancelled
from ._engine import get_engine
from ._threads import ThreadsEngine
from ._threads import one_turn as one_turn  # re-exported: _files and after_a_turn turn with it

if TYPE_CHECKING:
    from ._core import Engine

T = TypeVar("T")
StrPath = str | bytes | os.PathLike[str] | os.PathLike[bytes]

AT_FDCWD: int = getattr(os, "AT_FDCWD", -100)
_AT_REMOVEDIR = 0x200
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_SYMLINK_FOLLOW = 0x400
_AT_EMPTY_PATH = 0x1000
_STATX_BASIC_STATS = 0x7FF


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


def _close_result(fut: asyncio.Future[int]) -> None:
    """An open's ``on_cancel``: a descriptor that arrives for a cancelled caller is closed, not
    leaked (aiofiles leaks it: a thread's os.open cannot be stopped). (What the kernel opens
    after the engine cancelled the open, the engine closes itself.)"""
    if not fut.cancelled() and fut.exception() is None:
        os.close(fut.result())


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: its caller was cancelled and reports that


def _native(name: str, eng: Any = None, flags: int = 0) -> Engine | None:
    """The running loop's engine (``eng`` if given) if it runs `name` itself (for an open:
    with these ``flags``; see ``Engine.supports``), else None (use a thread)."""
    if eng is None:
        eng = get_engine()
    if isinstance(eng, ThreadsEngine) or not eng.supports(name, flags):
        return None
    return eng  # type: ignore[no-any-return]


class _Deferred:
    """Inline calls a spent budget refused, oldest first, for one engine. One callback per loop
    turn runs them while the renewed budget lasts; each caller waits on its own future. (Each
    caller retrying on every turn instead would cost O(waiting callers) attempts per turn.)"""

    __slots__ = ("engine", "queue", "queued")

    def __init__(self, engine: Engine) -> None:
        self.engine = weakref.ref(engine)
        self.queue: deque[tuple[asyncio.Future[Any], str, tuple[Any, ...]]] = deque()
        self.queued = False

    def drain(self) -> None:
        self.queued = False
        eng, queue = self.engine(), self.queue
        while queue:
            fut, method, args = queue[0]
            if fut.done():  # its caller was cancelled
                queue.popleft()
                continue
            try:  # a closed engine (close_engine() meanwhile) counts as gone
                res = False if eng is None or eng.closed else getattr(eng, method)(*args)
            except BaseException as exc:  # noqa: BLE001 - delivered to the awaiting caller
                queue.popleft()
                fut.set_exception(exc)
                continue
            if res is False:
                if eng is not None and not eng.closed:  # spent again: the rest wait a turn
                    self.queued = True
                    fut.get_loop().call_soon(self.drain)
                    return
                res = None  # engine gone: the caller takes the queued path, which reports it
            queue.popleft()
            fut.set_result(res)


_deferred: weakref.WeakKeyDictionary[Any, _Deferred] = weakref.WeakKeyDictionary()


async def after_a_turn(eng: Any, method: str, *args: Any) -> Any:
    """An inline call of ``eng`` that said False (this iteration's budget is spent): run it again
    on a later turn of the loop, which renews the budget — far cheaper than the queued
    operations it stands for. None if it can no longer run inline (the caller then queues it).

    First once right after one turn (a bare yield: the cheapest way to let everything else
    run), as a retry, which the engine admits past the renewed budget up to a grace
    (``RETRY_GRACE`` budgets, csrc/inline.c): otherwise each task but the first to run on that
    turn would be refused again. Refused even so, it waits in the queue of refused calls
    (``refused_queue``).

    A result that is a descriptor (an ``int`` from ``open_cached`` or ``read_file``) is closed
    if the caller is cancelled after the call ran."""
    if isinstance(eng, ThreadsEngine):
        return None
    await one_turn()
    if eng.closed:  # closed during the turn (close_engine()): the caller's next step gets
        return None  # the loop's new engine
    res = getattr(eng, method)(*args, True)
    if res is not False:
        return res
    return await refused_queue(eng, method, *args)


#: The inline calls whose ``int`` result is a new descriptor (``write``'s is a count).
_GIVES_FD = frozenset({"open_cached", "read_file"})


async def refused_queue(eng: Any, method: str, *args: Any) -> Any:
    """``eng.<method>(*args)``, refused by the budget even as a retry: wait in the engine's
    queue of refused calls (``_Deferred``) for a turn whose budget admits it."""
    d = _deferred.get(eng)
    if d is None:
        d = _deferred[eng] = _Deferred(eng)
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    d.queue.append((fut, method, args))
    if not d.queued:
        d.queued = True
        fut.get_loop().call_soon(d.drain)
    try:
        return await fut
    except asyncio.CancelledError:
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            res = fut.result()
            if type(res) is int and method in _GIVES_FD:
                os.close(res)
            elif isinstance(res, asyncio.Future):
                # Queued for it (a write from the caller's buffer): nobody will await it, and
                # the caller's cancellation goes on once the kernel is done with the buffer,
                # as await_op's does.
                await settle_cancelled(eng, res)
        raise


def _null_in(*args: Any) -> bool:
    """Whether a path argument holds a null character (``_refuse_null`` then raises)."""
    for a in args:
        if isinstance(a, (str, bytes, os.PathLike)):
            p = os.fspath(a)
            if ("\0" if isinstance(p, str) else b"\0") in p:
                return True
    return False


async def _refuse_null(builtin: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Raise the builtin's own ValueError for a path argument that holds a null character.

    ``os`` checks its arguments before any system call, so calling the builtin with such a
    path raises at once, in the running Python's words (3.13 and 3.12's bytes paths name the
    function and the argument: "stat: embedded null character in path"). It is called in a
    worker thread all the same: on the loop's thread a blocking-call detector (blockbuster
    wraps ``os.stat``, ``os.rename``, ...) cannot know that it never reaches the kernel."""
    await _in_thread(builtin, *args, **kwargs)
    raise ValueError("embedded null byte")  # (the builtin raised already)


def _dirfd(dir_fd: int | None) -> int:
    return AT_FDCWD if dir_fd is None else dir_fd


def stat_result(t: tuple[int, ...]) -> os.stat_result:
    """An ``os.stat_result`` equal to what ``os.stat`` builds, from the engine's statx tuple."""
    (mode, ino, dev_major, dev_minor, nlink, uid, gid, size, a_s, a_ns, m_s, m_ns, c_s, c_ns,
     _b_s, _b_ns, blksize, blocks, rdev_major, rdev_minor, _mask, _attrs, _attrs_mask) = t
    return os.stat_result(
        (mode, ino, os.makedev(dev_major, dev_minor), nlink, uid, gid, size, a_s, m_s, c_s),
        {"st_atime": a_s + a_ns * 1e-9, "st_mtime": m_s + m_ns * 1e-9,
         "st_ctime": c_s + c_ns * 1e-9, "st_atime_ns": a_s * 10**9 + a_ns,
         "st_mtime_ns": m_s * 10**9 + m_ns, "st_ctime_ns": c_s * 10**9 + c_ns,
         "st_blksize": blksize, "st_blocks": blocks,
         "st_rdev": os.makedev(rdev_major, rdev_minor)})


async def open_fd(path: StrPath, flags: int, mode: int = 0o777, *,
                  dir_fd: int | None = None) -> int:
    """``os.open``: the new descriptor is non-inheritable, as ``os.open`` makes it.

    A path whose every component is in the dentry cache is opened inside the call (no kernel
    round trip), within the loop's cooperative budget; native backends only."""
    if _null_in(path):
        await _refuse_null(os.open, path, flags, mode, dir_fd=dir_fd)
    cur = get_engine()
    if not isinstance(cur, ThreadsEngine):
        res = cur.open_cached(_dirfd(dir_fd), os.fsencode(path), flags)
        if res is False:
            res = await after_a_turn(cur, "open_cached", _dirfd(dir_fd), os.fsencode(path),
                                     flags)
            cur = get_engine()
        if res is not None:
            return int(res)
    eng = _native("openat", cur, flags)  # (Linux AIO: only an open that creates or truncates)
    if eng is None:
        loop = asyncio.get_running_loop()
        return await finished_anyway(loop.run_in_executor(
            None, functools.partial(os.open, path, flags, mode, dir_fd=dir_fd)), _close_result)
    fut = eng.openat(_dirfd(dir_fd), os.fsencode(path), flags | os.O_CLOEXEC,
                     mode, os.fspath(path))
    try:
        if dir_fd is None:
            # Awaited directly, not through a shield: the task resumes in the iteration that
            # reaps the open (for one that creates or truncates, the engine's first callback
            # of the next iteration, which waits for it: OPEN_WAIT_NS in csrc/engine.h), not
            # one turn later. Cancelled while the open
            # is with the kernel, its future is cancelled too and the engine closes what the
            # kernel opens for nobody; a descriptor delivered to a task cancelled before it
            # resumed is closed here.
            try:
                return await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    _close_result(fut)
                else:
                    eng.cancel(fut)
                raise
        # Relative to a directory descriptor, a cancelled open ends once the kernel is done
        # with it, as the other path operations do: the kernel resolves dir_fd by its number
        # when the open runs, and a caller that closed it meanwhile (its number reused) would
        # have the open, O_CREAT and all, done in another directory.
        return await await_op(eng, fut, on_cancel=_close_result)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
    # io_uring tries an open with O_NONBLOCK first, so a FIFO opened for writing with no
    # reader fails with ENXIO where open(2) waits for one: wait in a worker, as open(2) does.
    loop = asyncio.get_running_loop()
    return await finished_anyway(loop.run_in_executor(
        None, functools.partial(os.open, path, flags, mode, dir_fd=dir_fd)), _close_result)


def opens_nonblocking() -> bool:
    """Whether ``open_fd`` may open with ``O_NONBLOCK`` first, as io_uring's ``openat`` and
    the inline open do (so a FIFO opened for reading has not waited for a writer)."""
    return not isinstance(get_engine(), ThreadsEngine)


async def wait_readable(fd: int) -> None:
    """Wait until the loop's selector reports ``fd`` readable (or hung up)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    blocking = os.get_blocking(fd)
    loop.add_reader(fd, ready)
    try:
        await fut
    finally:
        loop.remove_reader(fd)
        if blocking:  # uvloop (libuv's uv_poll_init) made it non-blocking
            os.set_blocking(fd, True)


async def close_fd(fd: int) -> None:
    """``os.close``. A descriptor whose close cannot wait (see ``Engine.close_cached``) is
    closed inside the call."""
    cur = get_engine()
    if not isinstance(cur, ThreadsEngine) and cur.close_cached(fd):
        return
    eng = _native("close", cur)
    if eng is not None:
        return await await_op(eng, eng.close_fd(fd))
    # A close still waiting for a worker would never run if its caller's cancellation reached
    # it, and the descriptor would stay open: it runs anyway.
    await finished_anyway(asyncio.get_running_loop().run_in_executor(None, os.close, fd),
                          _retrieve)


async def stat(path: StrPath | int, *, dir_fd: int | None = None,
               follow_symlinks: bool = True) -> os.stat_result:
    """``os.stat`` (``lstat`` with ``follow_symlinks=False``); an int is a descriptor, with
    ``os.stat``'s checks of the arguments that go with one."""
    eng = _native("statx")
    if eng is None:
        return await _in_thread(os.stat, path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    if isinstance(path, int):
        if dir_fd is not None:
            raise ValueError("stat: can't specify dir_fd without matching path")
        if path > 0 and not follow_symlinks:  # (os.stat lets descriptor 0 through)
            raise ValueError("stat: cannot use fd and follow_symlinks together")
        return await _fstat(eng, path, path)
    if _null_in(path):
        await _refuse_null(os.stat, path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    flags = 0 if follow_symlinks else _AT_SYMLINK_NOFOLLOW
    fut = eng.statx(_dirfd(dir_fd), os.fsencode(path), flags,
                    _STATX_BASIC_STATS, os.fspath(path))
    return stat_result(await await_op(eng, fut))


async def fstat(fd: int) -> os.stat_result:
    """``os.fstat``."""
    eng = _native("statx")
    if eng is None:
        return await _in_thread(os.fstat, fd)
    return await _fstat(eng, fd.__index__(), None)


async def _fstat(eng: Any, fd: int, name: int | None) -> os.stat_result:
    if fd < 0:  # statx(AT_FDCWD, "", AT_EMPTY_PATH) is the working directory's
        # (os.stat(-1) reads -1 as "no descriptor" and calls stat(NULL): EFAULT)
        err = errno.EFAULT if fd == -1 and name is not None else errno.EBADF
        raise OSError(err, os.strerror(err), name)
    fut = eng.statx(fd, b"", _AT_EMPTY_PATH, _STATX_BASIC_STATS, name)
    return stat_result(await await_op(eng, fut))


async def unlink(path: StrPath, *, dir_fd: int | None = None) -> None:
    """``os.unlink`` / ``os.remove``."""
    eng = _native("unlinkat")
    if eng is None:
        return await _in_thread(os.unlink, path, dir_fd=dir_fd)
    if _null_in(path):
        await _refuse_null(os.unlink, path, dir_fd=dir_fd)
    await await_op(eng, eng.unlinkat(_dirfd(dir_fd), os.fsencode(path), 0, os.fspath(path)))


async def rmdir(path: StrPath, *, dir_fd: int | None = None) -> None:
    """``os.rmdir``."""
    eng = _native("unlinkat")
    if eng is None:
        return await _in_thread(os.rmdir, path, dir_fd=dir_fd)
    if _null_in(path):
        await _refuse_null(os.rmdir, path, dir_fd=dir_fd)
    fut = eng.unlinkat(_dirfd(dir_fd), os.fsencode(path), _AT_REMOVEDIR, os.fspath(path))
    await await_op(eng, fut)


async def mkdir(path: StrPath, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
    """``os.mkdir``."""
    eng = _native("mkdirat")
    if eng is None:
        return await _in_thread(os.mkdir, path, mode, dir_fd=dir_fd)
    if _null_in(path):
        await _refuse_null(os.mkdir, path, mode, dir_fd=dir_fd)
    await await_op(eng, eng.mkdirat(_dirfd(dir_fd), os.fsencode(path), mode, os.fspath(path)))


async def rename(src: StrPath, dst: StrPath, *, src_dir_fd: int | None = None,
                 dst_dir_fd: int | None = None) -> None:
    """``os.rename`` (on POSIX also ``os.replace``)."""
    eng = _native("renameat")
    if eng is None:
        return await _in_thread(os.rename, src, dst, src_dir_fd=src_dir_fd,
                                dst_dir_fd=dst_dir_fd)
    if _null_in(src, dst):
        await _refuse_null(os.rename, src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    fut = eng.renameat(_dirfd(src_dir_fd), os.fsencode(src),
                       _dirfd(dst_dir_fd), os.fsencode(dst), 0, os.fspath(src), os.fspath(dst))
    await await_op(eng, fut)


replace = rename


async def link(src: StrPath, dst: StrPath, *, src_dir_fd: int | None = None,
               dst_dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
    """``os.link``."""
    eng = _native("linkat")
    if eng is None:
        return await _in_thread(os.link, src, dst, src_dir_fd=src_dir_fd,
                                dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks)
    if _null_in(src, dst):
        await _refuse_null(os.link, src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd,
                           follow_symlinks=follow_symlinks)
    # os.link calls link(2), which does not follow a symbolic link, unless a directory
    # descriptor makes it linkat(2) (or follow_symlinks=False asks for it).
    dir_fds = src_dir_fd is not None or dst_dir_fd is not None
    flags = _AT_SYMLINK_FOLLOW if follow_symlinks and dir_fds else 0
    fut = eng.linkat(_dirfd(src_dir_fd), os.fsencode(src),
                     _dirfd(dst_dir_fd), os.fsencode(dst), flags, os.fspath(src),
                     os.fspath(dst))
    await await_op(eng, fut)


async def symlink(src: StrPath, dst: StrPath, target_is_directory: bool = False, *,
                  dir_fd: int | None = None) -> None:
    """``os.symlink``."""
    eng = _native("symlinkat")
    if eng is None:
        return await _in_thread(os.symlink, src, dst, target_is_directory, dir_fd=dir_fd)
    if _null_in(src, dst):
        await _refuse_null(os.symlink, src, dst, target_is_directory, dir_fd=dir_fd)
    fut = eng.symlinkat(os.fsencode(src), _dirfd(dir_fd), os.fsencode(dst),
                        os.fspath(src), os.fspath(dst))
    await await_op(eng, fut)


async def ftruncate(fd: int, length: int) -> None:
    """``os.ftruncate`` (a kernel operation from Linux 6.9)."""
    eng = _native("ftruncate")
    if eng is None:
        return await _in_thread(os.ftruncate, fd, length)
    await await_op(eng, eng.ftruncate(fd, length))


async def posix_fallocate(fd: int, offset: int, length: int) -> None:
    """``os.posix_fallocate`` (``fallocate(2)`` with mode 0)."""
    eng = _native("fallocate")
    if eng is None:
        return await _in_thread(os.posix_fallocate, fd, offset, length)
    await await_op(eng, eng.fallocate(fd, 0, offset, length))
