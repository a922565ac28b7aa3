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

The plain helpers the tests share (``cold_file``, ``child_env``, ``BACKENDS``, ...) are in
``support.py``.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import sys
import time
import types
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path

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
    pytest_terminal_summary,
)
from .support import BACKENDS, LOOP_FACTORIES, NATIVE, use_backend


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


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test with engines of this backend."""
    yield from use_backend(request.param)


@pytest.fixture(params=NATIVE)
def native_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Only the kernel backends (for tests of kernel-specific behaviour)."""
    yield from use_backend(request.param)


@pytest.fixture(params=list(LOOP_FACTORIES))
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop]:
    """A new loop of each kind, for synchronous tests that drive it themselves (hypothesis
    tests: one loop for all of a test's examples); async generators shut down, then closed.
    Each coroutine its ``run_until_complete`` runs is under the loop guard."""
    lp = LOOP_FACTORIES[request.param]()
    if _loop_guard.responsiveness_guarded(request.node):
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
    yield from use_backend("linux_aio")


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

