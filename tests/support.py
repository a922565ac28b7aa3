"""Plain helpers and constants the tests share: which backends and loops a run covers, files
the page cache does not hold, child interpreters that import the aionative under test, and the
like. The fixtures live in ``conftest.py``, which imports from here what they need; test files
import helpers from here (``from tests.support import cold_file``)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import mmap
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import aionative
from aionative import _backend

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a test dependency
    uvloop = None

T = TypeVar("T")


def _chosen(names: tuple[str, ...], variable: str) -> tuple[str, ...]:
    """``names``, or the part of them a comma-separated environment variable names: a bounded
    run (CI's passes on other interpreters) takes one cell of the backend x loop matrix."""
    wanted = os.environ.get(variable)
    if not wanted:
        return names
    chosen = tuple(n for n in names if n in wanted.split(","))
    if not chosen:
        raise ValueError(f"{variable}={wanted!r} names none of {', '.join(names)}")
    return chosen


BACKENDS = _chosen(("io_uring", "linux_aio", "threads"), "AIONATIVE_TEST_BACKENDS")
NATIVE = tuple(b for b in BACKENDS if b != "threads")

_LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
if uvloop is not None:
    _LOOPS["uvloop"] = uvloop.new_event_loop
LOOP_FACTORIES = {name: _LOOPS[name] for name in _chosen(tuple(_LOOPS), "AIONATIVE_TEST_LOOPS")}


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child interpreter that must import the aionative under test (the
    checkout, or the installed wheel): PYTHONPATH starts with the directory it came from. Run
    the child with ``-P`` where its working directory is a checkout."""
    home = str(Path(aionative.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": home + (os.pathsep + path if path else ""), **extra}


@contextlib.contextmanager
def held_in_the_ring() -> Iterator[None]:
    """io_uring_enter refuses every submission (EAGAIN, as when the kernel is short of
    memory) until the block ends: a read handed to the kernel queue stays there, pending and
    in flight, for as long as a test needs it to (a pipe's read once served; aionative.pread
    now refuses streams with ESPIPE, as os.pread does)."""
    aionative.set_inline_budget(0)  # every read goes to the kernel queue
    _backend._core.set_fault("io_uring_enter", errno.EAGAIN, 1 << 30)
    try:
        yield
    finally:
        _backend._core.clear_faults()
        aionative.set_inline_budget(None)


def use_backend(name: str) -> Iterator[str]:
    probe = _backend.probe(name)  # type: ignore[arg-type]
    if not probe.available:
        pytest.skip(f"{name} unavailable here: {probe.reason}")
    aionative.set_default_backend(name)
    try:
        yield name
    finally:
        aionative.set_default_backend(None)


def cold_file(path: Path, size: int) -> tuple[int, bytes]:
    """Write `size` random bytes that the page cache does not hold: the next reads are cold.
    Returns an open read-only descriptor (the caller closes it) and the data.

    The whole blocks go through O_DIRECT, so no page of them is ever cached. Evicting
    written pages afterwards (evict: written back, then dropped) is best effort: now and then
    the kernel kept every page of a freshly written 16 MiB file, and a read meant to be cold
    was answered from the cache. Only the tail (and a filesystem without O_DIRECT) relies on
    eviction."""
    data = os.urandom(size)
    whole = size & ~(_BLOCK - 1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        done = _write_direct(path, data, whole)
        os.pwrite(fd, data[done:], done)
    finally:
        os.close(fd)
    evict(path)
    return os.open(path, os.O_RDONLY), data


_BLOCK = 4096  # a multiple of every logical block size O_DIRECT asks alignment to


def _write_direct(path: Path, data: bytes, size: int) -> int:
    """Write ``data[:size]`` (whole blocks) through an O_DIRECT descriptor: how many bytes
    went that way (0 where the filesystem has no O_DIRECT)."""
    try:
        dfd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError:
        return 0
    step = 1 << 20
    buf = mmap.mmap(-1, step)  # page-aligned, as O_DIRECT wants
    done = 0
    try:
        while done < size:
            n = min(step, size - done)
            buf[:n] = data[done:done + n]
            try:
                wrote = os.pwrite(dfd, memoryview(buf)[:n], done)
            except OSError:
                break  # the filesystem refused O_DIRECT writes: the rest goes buffered
            done += wrote
    finally:
        buf.close()
        os.close(dfd)
    return done


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache: its next reads are cold. Written back first:
    POSIX_FADV_DONTNEED drops clean pages only, and only starts the writeback of dirty ones, so
    a file just written (``Path.write_bytes``) stayed cached, and on a busy machine still was
    at the next evict (a test's five cold reads all answered before their cancellation)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


async def close_running_engine() -> None:
    """``aionative.close_engine()`` as a coroutine: for a synchronous test that drives its own
    loop (``loop.run_until_complete``) and must leave no engine behind."""
    aionative.close_engine()


async def cancel_after_a_turn(aw: Awaitable[T], turns: int = 1) -> T | None:
    """Start ``aw`` as a task, let the loop turn once (or ``turns`` times: the second lets
    the engine's flush hand a queued operation to the kernel), then cancel it: its result if
    it finished first, None if the cancellation took."""
    task = asyncio.ensure_future(aw)
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return None


def open_fds_to(path: Path) -> int:
    """How many of this process's descriptors are open on ``path``."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            pass
    return n


def unwrapped(fn: Any) -> Any:
    """The function itself, not the wrapper the suite's blocking-call detector (blockbuster)
    puts in its place while a test runs: it keeps the function in its closure as ``func``.
    For tests that look at a standard function's signature or name."""
    if getattr(fn, "__name__", "") == "wrapper" and getattr(fn, "__closure__", None):
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__, strict=True))
        if "func" in cells:
            return cells["func"].cell_contents
    return fn


def unpacked_sdist(requirement: str, where: Path) -> Path:
    """Download ``requirement``'s sdist from PyPI into ``where`` and unpack it; its top
    directory. Skips the test when it cannot be had (no network, no such release)."""
    import tarfile
    name = requirement.split("==")[0]
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                          "--no-binary", ":all:", requirement, "-d", str(where)],
                         capture_output=True, text=True, check=False)
    sdists = list(where.glob(f"{name}-*.tar.gz"))
    if got.returncode != 0 or not sdists:
        pytest.skip(f"the {requirement} sdist could not be downloaded: {got.stderr[-500:]}")
    with tarfile.open(sdists[0]) as tar:
        tar.extractall(where, filter="data")
    return next(p for p in where.iterdir() if p.is_dir())
