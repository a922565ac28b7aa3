"""``aionative.open``: aiofiles' ``open``, served by the engine.

The builtin's rules are applied by the builtin itself: ``io.open`` validates the arguments
(mode letters, encoding in binary mode, ``closefd`` with a name, path types, …) and computes the
``open(2)`` flags, handing them to an opener that stops it there. The file is then opened
through the engine (``openat`` on io_uring), ``fstat``-ed (``statx``), and given the stack
``io.open`` would have built — ``TextIOWrapper``/``Buffered*`` from CPython's C classes, with the
same buffer size (``st_blksize``) and line buffering — over a :class:`~aionative._raw.WindowRaw`.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import fcntl
import io
import os
import stat
import weakref
from abc import ABCMeta
from collections.abc import Awaitable, Callable, Generator
from concurrent.futures import Executor
from operator import index
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from . import _kernelops as _k
from ._args import arg_type_name
from ._backend import _core
from ._engine import get_engine
from ._files import (
    AsyncBase,
    AsyncBufferedIOBase,
    AsyncBufferedReader,
    AsyncFileIO,
    AsyncTextIOWrapper,
)
from ._raw import REGULAR, STREAM, WindowRaw
from ._threads import ThreadsEngine

F = TypeVar("F", bound=AsyncBase[Any])
FileArg = str | bytes | os.PathLike[str] | os.PathLike[bytes] | int
Opener = Callable[[str | bytes, int], int]


class _Flags(Exception):
    """Raised by the validating opener: carries the flags ``io.open`` computed."""

    def __init__(self, flags: int) -> None:
        super().__init__(flags)
        self.flags = flags


def _capture(path: Any, flags: int) -> int:
    raise _Flags(flags)


def validate(file: Any, mode: str, buffering: int, encoding: str | None, errors: str | None,
             newline: str | None, closefd: bool) -> int:
    """Apply ``open()``'s argument checks (raising what it raises) and return its flags. A
    descriptor is replaced by a path the opener catches; a negative one is not, so that its
    error comes where FileIO raises it (before FileIO's own mode checks)."""
    by_fd = _is_fd(file) and file >= 0
    try:
        builtins.open("aionative-probe" if by_fd else file, mode, buffering, encoding, errors,  # noqa: SIM115
                newline, True if by_fd else closefd, _capture)
    except _Flags as f:
        return f.flags
    raise AssertionError("unreachable: io.open returned without calling its opener")


_flags_seen: dict[tuple[Any, ...], int] = {}


def _flags(file: Any, mode: str, buffering: int, encoding: str | None, errors: str | None,
           newline: str | None, closefd: bool) -> int:
    """``validate``'s flags, remembered for a ``str`` path: once a set of arguments has been
    accepted with one, the next ``str`` path without a NUL is accepted with the same flags."""
    if type(file) is not str or "\0" in file:
        return validate(file, mode, buffering, encoding, errors, newline, closefd)
    key = (mode, type(buffering), buffering, encoding, errors, newline, closefd)  # 1 == 1.0
    try:
        return _flags_seen[key]
    except (KeyError, TypeError):  # TypeError: an unhashable argument, refused just below
        pass
    flags = validate(file, mode, buffering, encoding, errors, newline, closefd)
    if len(_flags_seen) < 256:
        _flags_seen[key] = flags
    return flags


def _refuse_appending(file: Any, flags: int) -> None:
    """``direct=True`` refuses append mode, and a caller's descriptor opened ``O_APPEND``, as
    ``open()`` refuses a mode it cannot honour (ValueError, before anything is opened):
    ``O_DIRECT`` writes whole aligned blocks, so a record can only be appended by reading the
    file's last block, changing it and writing it back, at the end of file known then. A
    second writer (another file object, another process) appending meanwhile is overwritten
    by that block: records lost, and zeros between blocks. ``O_APPEND`` with ``O_DIRECT``
    fails with EINVAL wherever the end is not block-aligned."""
    if flags & os.O_APPEND:
        raise ValueError("can't have append mode and direct I/O at once")
    if _is_fd(file):
        try:
            fl = fcntl.fcntl(file, fcntl.F_GETFL)
        except OSError:
            return  # a bad descriptor: opening reports it, as FileIO does
        if fl & os.O_APPEND:
            raise ValueError("can't have an O_APPEND descriptor and direct I/O at once")


def _is_fd(file: Any) -> bool:
    # An int that is no C int is a path to FileIO: validate() lets open() refuse it (TypeError).
    return isinstance(file, int) and -(1 << 31) <= file < 1 << 31


class AiofilesContextManager(Generic[F], metaclass=ABCMeta):
    """What ``open`` returns: ``await`` it (once; again returns the same file) or use it with
    ``async with`` (the file is closed on exit). ``open(path, "rb")`` returns a
    ``_core.RbOpen``, registered as one: the same behaviour in C, without a coroutine when the
    engine opens and closes the file inline."""

    __slots__ = ("_coro", "_obj")

    def __init__(self, coro: Awaitable[F]) -> None:
        self._coro: Awaitable[F] | None = coro
        self._obj: F | None = None

    def __await__(self) -> Generator[Any, None, F]:
        if self._obj is None:
            if self._coro is None:
                raise RuntimeError("cannot reuse already awaited coroutine")
            coro, self._coro = self._coro, None
            self._obj = yield from coro.__await__()
        return self._obj

    async def __aenter__(self) -> F:
        obj = self._obj  # what ``await self`` does, without its generator
        if obj is None:
            coro = self._coro
            if coro is None:
                raise RuntimeError("cannot reuse already awaited coroutine")
            self._coro = None
            obj = self._obj = await coro
        return obj

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        obj, self._obj = self._obj, None
        if obj is not None:
            try:
                await obj.close()
            finally:
                path = getattr(obj, "_unlink_on_exit", None)
                if path is not None:  # NamedTemporaryFile(delete_on_close=False)
                    try:
                        await _k.unlink(path)
                    except FileNotFoundError:
                        pass

    def close(self) -> None:
        """Close the coroutine if it was never awaited (no file was opened)."""
        coro = self._coro
        if coro is not None and hasattr(coro, "close"):
            coro.close()
        self._coro = None

    def __del__(self) -> None:
        if self._coro is not None:
            self.close()


async def open_file(file: FileArg, mode: str = "r", buffering: int = -1,
                    encoding: str | None = None, errors: str | None = None,
                    newline: str | None = None, closefd: bool = True,
                    opener: Opener | None = None, *,
                    loop: asyncio.AbstractEventLoop | None = None,
                    executor: Executor | None = None, direct: bool = False) -> AsyncBase[Any]:
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {arg_type_name(mode)}")
    flags = _flags(file, mode, buffering, encoding, errors, newline, closefd)
    if direct:
        # O_DIRECT moves whole blocks: the kernel cannot append a record at an unaligned end
        # of file, and no emulation can append at the end another writer leaves (see
        # _refuse_appending). Writes of partial blocks read them first, so the descriptor is
        # read-write (the file object still refuses what its mode does not allow).
        _refuse_appending(file, flags)
        flags |= os.O_DIRECT
        if flags & os.O_ACCMODE == os.O_WRONLY:
            flags = flags & ~os.O_ACCMODE | os.O_RDWR
    name: Any
    nonblocking_open = False
    if isinstance(file, int):
        fd = index(file)
        if fd < 0:
            raise ValueError("negative file descriptor")
        name = file
        owned = False
    else:
        name = os.fspath(file)
        if opener is not None:
            running = asyncio.get_running_loop()
            fd = await running.run_in_executor(executor, opener, name, flags)
            if not isinstance(fd, int):
                raise TypeError("expected integer from opener")
            if fd < 0:
                raise ValueError(f"opener returned {fd}")
        else:
            fd = await _k.open_fd(name, flags, 0o666)
            nonblocking_open = _k.opens_nonblocking()
        owned = True
    return await _wrap(fd, name, owned, mode, buffering, encoding, errors, newline, closefd,
                       loop, executor, direct,
                       nonblocking_open and flags & os.O_ACCMODE == os.O_RDONLY)


async def open_rb_rest(cm: Any, got: tuple[int, str] | None,
                        file: str | os.PathLike[str] | os.PathLike[bytes],
                        loop: asyncio.AbstractEventLoop | None,
                        executor: Executor | None) -> AsyncBase[Any]:
    """What ``open(file, "rb")`` (``_core.RbOpen``) awaits when the engine could not open the
    file lazily inline: the file object over the non-regular file it opened (``got``: the
    descriptor and the path; a directory, FIFO or device, opened with O_NONBLOCK as io_uring
    opens), or ``open_file``'s way (``got`` None: not cached, a bytes path, the threads
    backend, …). Stored in ``cm._obj``: awaiting ``cm`` again returns it."""
    if got is not None:
        f = await _wrap(got[0], got[1], True, "rb", -1, None, None, None, True, loop,
                        executor, False, True)
    else:
        f = await open_file(file, "rb", loop=loop, executor=executor)
    cm._obj = f
    return f


if _core is not None:
    AiofilesContextManager.register(_core.RbOpen)


async def _wrap(fd: int, name: Any, owned: bool, mode: str, buffering: int,
                encoding: str | None, errors: str | None, newline: str | None, closefd: bool,
                loop: asyncio.AbstractEventLoop | None, executor: Executor | None,
                direct: bool, fifo_wait: bool) -> AsyncBase[Any]:
    """The file object over ``fd`` (``owned``: opened here, closed if this fails)."""
    try:
        f = await _build(fd, name, mode, buffering, encoding, errors, newline, closefd,
                         loop, executor, fifo_wait)
        if direct:
            if not owned:  # the caller's descriptor: switch it to O_DIRECT (fcntl allows it)
                fl = fcntl.fcntl(fd, fcntl.F_GETFL)
                fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_DIRECT)
                get_engine().forget_fd(fd)  # it may have been read inline as buffered
            assert f._raw is not None
            f._raw.direct = True
        return f
    except _NotAFile as exc:
        # Refused before a file object existed: FileIO closes only a descriptor it opened.
        if owned:
            os.close(fd)
        raise exc.error from None
    except BaseException:
        if owned or closefd:  # the file object existed: closing it closes the descriptor
            try:
                os.close(fd)
            except OSError:
                pass
        raise


class _PassingWrite:
    """A text file's buffered layer's ``write``, set on that (builtin) object itself for the
    length of a write call (``AsyncBase._pass_through``): the text layer hands it the bytes it
    encoded, and a write larger than the buffer, which the
    builtin's buffered layer passes straight to its raw file, then reaches the kernel from
    those bytes rather than from a copy (see ``AsyncBase._pass_through``). Holds the buffered
    object weakly: set on it, a strong reference would make a cycle, and the builtin's file
    is closed as soon as it is dropped, not at the next collection."""

    __slots__ = ("_buffer", "_raw", "_size", "_write")

    def __init__(self, buffer: io.BufferedIOBase, raw: WindowRaw, size: int) -> None:
        self._buffer = weakref.ref(buffer)
        self._raw = raw
        self._size = size
        self._write = type(buffer).write

    def __call__(self, b: Any, /) -> int:
        buffer, raw = self._buffer(), self._raw
        if buffer is None:  # (only the buffer itself calls this, and it is alive)
            raise ValueError("I/O operation on closed file.")
        if raw.passing and type(b) is bytes and len(b) > self._size:
            raw.owned = (b, len(b))
            try:
                return self._write(buffer, b)
            finally:
                raw.owned = None
        return self._write(buffer, b)


def _text_calls_instance_write() -> bool:
    """Whether a ``TextIOWrapper`` finds its buffer's ``write`` as Python code would (an
    attribute set on the object comes before the type's method), so ``_PassingWrite`` is
    used; else text writes take the builtin's path, one copy more."""
    seen: list[Any] = []

    def write(b: Any, /) -> int:
        seen.append(b)
        return len(b)

    buffer = io.BufferedWriter(io.BytesIO(), 16)
    buffer.write = write  # type: ignore[method-assign]
    text = io.TextIOWrapper(buffer, "ascii", write_through=True)
    text.write("x")
    return seen == [b"x"]


_TEXT_PASSES = _text_calls_instance_write()


class _NotAFile(Exception):
    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


async def _build(fd: int, name: Any, mode: str, buffering: int, encoding: str | None,
                 errors: str | None, newline: str | None, closefd: bool,
                 loop: asyncio.AbstractEventLoop | None,
                 executor: Executor | None, fifo_wait: bool = False) -> AsyncBase[Any]:
    try:
        # Inline, as FileIO does: the descriptor was just opened, its inode is in memory.
        st = os.fstat(fd)
    except OSError as exc:
        raise _NotAFile(exc) from None
    if fifo_wait and stat.S_ISFIFO(st.st_mode):
        # io_uring opened the FIFO with O_NONBLOCK first (then cleared it), so it did not
        # wait for a writer as open(2) does, and a read now would see end-of-file: wait
        # until a writer has written or come and gone (epoll reports neither before).
        await _k.wait_readable(fd)
    if stat.S_ISDIR(st.st_mode):
        raise _NotAFile(IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name))
    chars = set(mode)
    created = "x" in chars
    appending = "a" in chars
    plus = "+" in chars
    readable = "r" in chars or plus
    writable = bool(chars & set("wax")) or plus
    binary = "b" in chars

    is_reg = stat.S_ISREG(st.st_mode) or stat.S_ISBLK(st.st_mode)
    kind = REGULAR if is_reg else STREAM
    seekable = is_reg
    isatty = False
    if not is_reg:
        try:
            os.lseek(fd, 0, os.SEEK_CUR)
            seekable = stat.S_ISCHR(st.st_mode)
        except OSError:
            seekable = False
        isatty = stat.S_ISCHR(st.st_mode) and os.isatty(fd)
    size = st.st_size
    if stat.S_ISBLK(st.st_mode):
        size = os.lseek(fd, 0, os.SEEK_END)
        os.lseek(fd, 0, os.SEEK_SET)
    pos = 0
    if is_reg:
        if appending:
            pos = size
        elif not isinstance(name, (str, bytes)):  # opened by descriptor: its position
            pos = os.lseek(fd, 0, os.SEEK_CUR)
    blksize = st.st_blksize if st.st_blksize > 1 else io.DEFAULT_BUFFER_SIZE

    raw = WindowRaw(fd, kind=kind, readable=readable, writable=writable, appending=appending,
                    created=created, seekable=seekable, closefd=closefd, size=size, pos=pos,
                    blksize=blksize, isatty=isatty)
    raw.name = name
    eng = get_engine()
    if kind == STREAM and (isinstance(eng, ThreadsEngine) or eng.backend != "io_uring"):
        route = "thread"
    else:
        route = "stream" if kind == STREAM else "engine"

    line_buffering = False
    if buffering == 1 or (buffering < 0 and isatty):
        buffering = -1
        line_buffering = True
    if buffering < 0:
        buffering = blksize
    if buffering == 0:
        if binary:
            f = AsyncFileIO(raw, loop, executor, raw=raw, route=route)
            f._bufsize = blksize
            return _share(f, raw, name)
        raw.in_op = True  # closing it must not close the descriptor (the caller does)
        raw.close()
        raise ValueError("can't have unbuffered text I/O")
    buffer: io.BufferedIOBase
    if plus:
        buffer = io.BufferedRandom(raw, buffering)
    elif writable:
        buffer = io.BufferedWriter(raw, buffering)
    else:
        buffer = io.BufferedReader(raw, buffering)  # type: ignore[type-var]
    result: AsyncBase[Any]
    if binary:
        if isinstance(buffer, io.BufferedWriter):
            result = AsyncBufferedIOBase(buffer, loop, executor, raw=raw, route=route)
        else:
            result = AsyncBufferedReader(buffer, loop, executor, raw=raw, route=route)
        result._bufsize = buffering
        return _share(result, raw, name)
    raw.in_op = True
    try:
        text = io.TextIOWrapper(buffer, encoding, errors, newline, line_buffering)
    except BaseException:
        buffer.close()
        raise
    finally:
        raw.in_op = False
    text.mode = mode  # type: ignore[misc]  # io.open sets it too
    result = AsyncTextIOWrapper(text, loop, executor, raw=raw, route=route, newline=newline)
    result._bufsize = buffering
    if writable and _TEXT_PASSES:
        result._passing = _PassingWrite(buffer, raw, buffering)
    return _share(result, raw, name)


def _share(f: F, raw: WindowRaw, name: Any) -> F:
    """A file opened from the caller's descriptor keeps that descriptor's offset current."""
    if isinstance(name, int) and raw.kind != STREAM:
        f._adopt_fd()
    return f


if TYPE_CHECKING:
    from _typeshed import (
        OpenBinaryMode,
        OpenBinaryModeReading,
        OpenBinaryModeUpdating,
        OpenBinaryModeWriting,
        OpenTextMode,
    )


@overload
def open(file: FileArg, mode: OpenTextMode = "r", buffering: int = -1,
         encoding: str | None = None, errors: str | None = None, newline: str | None = None,
         closefd: bool = True, opener: Opener | None = None, *,
         loop: asyncio.AbstractEventLoop | None = None, executor: Executor | None = None,
         direct: bool = False) -> AiofilesContextManager[AsyncTextIOWrapper]: ...
@overload
def open(file: FileArg, mode: OpenBinaryMode, buffering: Literal[0], encoding: None = None,
         errors: None = None, newline: None = None, closefd: bool = True,
         opener: Opener | None = None, *, loop: asyncio.AbstractEventLoop | None = None,
         executor: Executor | None = None, direct: bool = False
         ) -> AiofilesContextManager[AsyncFileIO]: ...
@overload
def open(file: FileArg, mode: OpenBinaryModeUpdating, buffering: Literal[-1, 1] = -1,
         encoding: None = None, errors: None = None, newline: None = None,
         closefd: bool = True, opener: Opener | None = None, *,
         loop: asyncio.AbstractEventLoop | None = None, executor: Executor | None = None,
         direct: bool = False) -> AiofilesContextManager[AsyncBufferedReader]: ...
@overload
def open(file: FileArg, mode: OpenBinaryModeWriting, buffering: Literal[-1, 1] = -1,
         encoding: None = None, errors: None = None, newline: None = None,
         closefd: bool = True, opener: Opener | None = None, *,
         loop: asyncio.AbstractEventLoop | None = None, executor: Executor | None = None,
         direct: bool = False) -> AiofilesContextManager[AsyncBufferedIOBase]: ...
@overload
def open(file: FileArg, mode: OpenBinaryModeReading, buffering: Literal[-1, 1] = -1,
         encoding: None = None, errors: None = None, newline: None = None,
         closefd: bool = True, opener: Opener | None = None, *,
         loop: asyncio.AbstractEventLoop | None = None, executor: Executor | None = None,
         direct: bool = False) -> AiofilesContextManager[AsyncBufferedReader]: ...
@overload
def open(file: FileArg, mode: str, buffering: int = -1, encoding: str | None = None,
         errors: str | None = None, newline: str | None = None, closefd: bool = True,
         opener: Opener | None = None, *, loop: asyncio.AbstractEventLoop | None = None,
         executor: Executor | None = None, direct: bool = False
         ) -> AiofilesContextManager[AsyncBase[Any]]: ...


def open(file: FileArg, mode: str = "r", buffering: int = -1, encoding: str | None = None,
         errors: str | None = None, newline: str | None = None, closefd: bool = True,
         opener: Opener | None = None, *, loop: asyncio.AbstractEventLoop | None = None,
         executor: Executor | None = None, direct: bool = False) -> AiofilesContextManager[Any]:
    """Open a file: ``aiofiles.open``'s signature and behaviour, the builtin ``open()``'s
    arguments, modes, results and errors, with every read and write served by the engine.

    Not a coroutine: returns an object to ``await`` (the file) or to use with ``async with``
    (the file, closed on exit). ``file`` is a path, a path-like object or a descriptor.
    ``loop`` and ``executor`` are aiofiles' (the executor runs ``opener`` and the calls that
    have no kernel path).

    ``direct=True`` (beyond aiofiles) opens with ``O_DIRECT``, bypassing the page cache, and
    handles the alignment: reads and writes of any size at any offset become aligned transfers
    through page-aligned buffers (partial edge blocks read, modified and written back; the file
    trimmed to its true size), so the descriptor is opened read-write. Each direct write
    holds an ``F_OFD_SETLK`` lock on the blocks it rewrites, so aionative writers of one file
    (file objects of this process or of others) do not write back each other's old bytes.
    Append mode (and a descriptor opened ``O_APPEND``) is refused with ``ValueError``:
    appending whole blocks at the end one writer knows overwrites another appender's records.
    """
    if ((type(file) is str or isinstance(file, os.PathLike)) and mode == "rb"
            and type(buffering) is int and buffering == -1
            and encoding is None and errors is None and newline is None and closefd is True
            and opener is None and not direct and _core is not None):
        return _core.rb_open(file, loop, executor)  # type: ignore[return-value]
    return AiofilesContextManager(open_file(file, mode, buffering, encoding, errors, newline,
                                            closefd, opener, loop=loop, executor=executor,
                                            direct=direct))
