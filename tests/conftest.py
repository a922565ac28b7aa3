"""Shared fixtures: every I/O test runs on each available backend and on both loops.

* Loops: the ``pytest_asyncio_loop_factories`` hook makes pytest-asyncio run each async test on
  the default asyncio loop and on uvloop.
* Backends: tests that do I/O take the ``backend`` fixture (io_uring, linux_aio, threads);
  a backend this machine lacks is skipped, not failed.
* After every test, the engine's process-wide counters must be back where they started: no
  live operation, no pinned buffer, nothing left with the kernel.
* Every test runs under the loop guards of ``_loop_guard.py``: a ticker fails an async test
  that held its loop longer than a bound, and blockbuster fails one in which aionative made a
  blocking call on the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import importlib
import mmap
import os
import subprocess
import sys
import time
import types
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest


def _import_installed_aionative() -> None:
    """With ``AIONATIVE_TEST_INSTALLED=1`` the suite tests the installed package, not this
    tree: pytest puts the directory above ``tests/`` first on ``sys.path`` (a checkout or an
    unpacked sdist, whose ``aionative/`` has no built extension), so aionative is imported
    with that directory left out, then the path is given back (``bench`` and ``examples``
    still come from beside the tests). ``test_installed.py`` checks where it came from."""
    if os.environ.get("AIONATIVE_TEST_INSTALLED") != "1":
        return
    source = Path(__file__).resolve().parent.parent
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if Path(p or os.curdir).resolve() != source]
    try:
        importlib.import_module("aionative")
    finally:
        sys.path[:] = saved


_import_installed_aionative()

import aionative
from aionative import _backend, _kernelops

from . import _loop_guard

if (sys.platform.startswith("linux") and _backend._core is None
        and os.environ.get("AIONATIVE_ALLOW_NO_EXTENSION") != "1"):
    # Every native test would skip as "backend unavailable": on Linux that is a broken build
    # or install, not a platform without the engine. AIONATIVE_ALLOW_NO_EXTENSION=1 runs the
    # threads backend alone on purpose.
    raise ImportError(f"aionative imported from {aionative.__file__} without its C engine "
                      f"({_backend._CORE_ERROR}); build it (make build) or install the wheel, "
                      "or set AIONATIVE_ALLOW_NO_EXTENSION=1 to test the threads backend alone")

from ._loop_guard import (  # noqa: F401 (the plugin's hooks and fixture, registered here)
    _no_blocking_call_from_aionative,
    guard_loop,
    pytest_configure,
    pytest_runtest_call,
)

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


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.uses_internals(what)``: a test of a mechanism that exists only while the
    engine may use CPython's and asyncio's internals (csrc/compat.h) is skipped when
    ``AIONATIVE_INTERNALS=0`` keeps it to public APIs (``make test-portable``)."""
    mark = item.get_closest_marker("uses_internals")
    if mark is not None and os.environ.get("AIONATIVE_INTERNALS", "1") == "0":
        pytest.skip(f"tests {mark.args[0]}, which AIONATIVE_INTERNALS=0 turns off")


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return LOOP_FACTORIES


def _first_difference(a: bytes | bytearray | str, b: bytes | bytearray | str) -> int:
    """The first offset where ``a`` and ``b`` differ (the shorter's length if one is a
    prefix of the other): whole pages compared first, then bytes."""
    n, i, step = min(len(a), len(b)), 0, 4096
    while i < n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def pytest_assertrepr_compare(config: pytest.Config, op: str, left: object,
                              right: object) -> list[str] | None:
    """A failed ``==`` of long bytes or strings says where they first differ and how long
    each is, not a diff of every line of both: the test's name stays in the last lines of
    the output, which is what CI shows of a failure."""
    if op != "==":
        return None
    binary = (bytes, bytearray)
    if not (isinstance(left, binary) and isinstance(right, binary)
            or isinstance(left, str) and isinstance(right, str)):
        return None
    if max(len(left), len(right)) <= 256:
        return None
    i = _first_difference(left, right)
    what = ("the right side starts with the left" if i == len(left) else
            "the left side starts with the right" if i == len(right) else
            f"at offset {i}: {left[i:i + 24]!r} != {right[i:i + 24]!r}")
    return [f"{type(left).__name__} of {len(left)} == {type(right).__name__} of {len(right)}",
            f"they first differ {what}",
            f"just before: {left[max(0, i - 24):i]!r}"]


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


def _use_backend(name: str) -> Iterator[str]:
    probe = _backend.probe(name)  # type: ignore[arg-type]
    if not probe.available:
        pytest.skip(f"{name} unavailable here: {probe.reason}")
    aionative.set_default_backend(name)
    try:
        yield name
    finally:
        aionative.set_default_backend(None)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test with engines of this backend."""
    yield from _use_backend(request.param)


@pytest.fixture(params=NATIVE)
def native_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Only the kernel backends (for tests of kernel-specific behaviour)."""
    yield from _use_backend(request.param)


@pytest.fixture(params=list(LOOP_FACTORIES))
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop]:
    """A new loop of each kind, for synchronous tests that drive it themselves (hypothesis
    tests: one loop for all of a test's examples); async generators shut down, then closed.
    Each coroutine its ``run_until_complete`` runs is under the loop guard."""
    lp = LOOP_FACTORIES[request.param]()
    if not _loop_guard.is_exempt(request.node) and _loop_guard.ENABLED:
        guard_loop(lp, "the coroutine run_until_complete ran", request.node)
    yield lp
    lp.run_until_complete(lp.shutdown_asyncgens())
    lp.close()


@pytest.fixture
def ring_only() -> Iterator[None]:
    """Turn the inline fast path off: every read goes through the kernel queue (for tests of
    the queue's own behaviour: batching, injected completion faults, in-flight operations)."""
    aionative.set_inline_budget(0)
    try:
        yield
    finally:
        aionative.set_inline_budget(None)


@pytest.fixture
def retries_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call the spent budget refused waits its turn (``_kernelops.one_turn``, the bare
    yield), then finds the new iteration's budget spent past the retry's grace as well: it
    goes on to the queue of refused calls. For tests of that queue, which a retry admitted
    after one turn would otherwise bypass."""
    turn = _kernelops.one_turn

    @types.coroutine
    def turn_then_spend() -> Generator[None, None, None]:
        yield from turn()
        eng = aionative.get_engine()
        fd = eng.open_cached(_kernelops.AT_FDCWD, b"/", os.O_RDONLY)  # opens the window
        if isinstance(fd, int):
            os.close(fd)
        time.sleep(0.001)  # past RETRY_GRACE budgets of any budget these tests set

    monkeypatch.setattr(_kernelops, "one_turn", turn_then_spend)


@pytest.fixture
def linux_aio() -> Iterator[str]:
    """Only Linux AIO."""
    yield from _use_backend("linux_aio")


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


def _counters() -> dict[str, int]:
    if _backend._core is None:
        return {}
    c = _backend._core.debug_counters()
    return {k: c[k] for k in ("live_ops", "pinned_buffers", "in_kernel", "engines", "rings",
                              "eventfds", "direct_fds", "direct_parked")}


@pytest.fixture(autouse=True)
def _no_leaked_operations() -> Iterator[None]:
    """When a test ends, every operation it started has been reaped and released, and every
    engine (ring, eventfd, O_DIRECT descriptor, parked or not) it created is closed."""
    yield
    gc.collect()
    assert _counters() == {k: 0 for k in _counters()}, _counters()
    if _backend._core is not None:
        _backend._core.clear_faults()


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[Path, bytes]:
    """A 1 MiB + 123 bytes file of random data (not a multiple of the page size)."""
    data = os.urandom((1 << 20) + 123)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    return path, data


@pytest.fixture
def fd_of() -> Iterator[Callable[..., int]]:
    """Open a file with os.open and close it when the test ends."""
    fds: list[int] = []

    def _open(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        fd = os.open(path, flags | os.O_CLOEXEC, mode)
        fds.append(fd)
        return fd

    yield _open
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


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
