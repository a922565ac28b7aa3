"""One engine per running event loop: created lazily on the loop's thread, watched through the
loop's reader on its eventfd, closed (after draining the kernel) when the loop is closed or
collected, and never touched by a forked child.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from . import _backend, _threads
from ._threads import ThreadsEngine

if TYPE_CHECKING:
    from ._core import Engine as NativeEngine

#: What serves a loop: the C engine (io_uring, Linux AIO) or the thread-pool fallback.
EngineLike: TypeAlias = "NativeEngine | ThreadsEngine"


class _Closed:
    """Stands for a native engine that was collected with its closed loop."""

    backend = None
    closed = True
    forked = False
    in_flight = 0

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


_CLOSED = _Closed()


class _Entry:
    __slots__ = (
        "_engine",
        "_engine_ref",
        "finalizer",
        "loop_ref",
        "rejected",
        "thread",
        "watch",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, engine: EngineLike,
                 rejected: dict[str, str]) -> None:
        self.loop_ref = weakref.ref(loop)
        # A native engine is kept alive by the loop's reader on its eventfd, and so lives
        # exactly as long as the loop is open: when the loop closes with operations in
        # flight, the engine is freed at once, and freeing drains the kernel first. Holding it
        # strongly here would keep its futures, and through them the closed loop, alive.
        # The threads engine has no reader: the registry owns it.
        self._engine: EngineLike | None = engine if isinstance(engine, ThreadsEngine) else None
        self._engine_ref = weakref.ref(engine)
        self.rejected = rejected
        self.thread = threading.get_ident()
        self.watch: AsyncGenerator[None, None] | None = None
        self.finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def engine(self) -> EngineLike:
        eng = self._engine_ref()
        return _CLOSED if eng is None else eng  # type: ignore[return-value]  # a closed stand-in


async def _watch_loop(entry: _Entry) -> AsyncGenerator[None, None]:
    """Started once per engine, so the running loop tracks it as an async generator:
    ``loop.shutdown_asyncgens()`` (which ``asyncio.run`` calls before closing the loop, on
    asyncio and uvloop alike) closes it, and the engine is drained and closed while the loop
    can still resolve its futures. Loops closed without that are swept later."""
    try:
        yield
    finally:
        _forget(entry)
        loop = entry.loop_ref()
        eng = entry.engine
        if (isinstance(eng, ThreadsEngine) and not eng.closed and loop is not None
                and asyncio._get_running_loop() is loop):
            # Its close() waits for the calls its workers are in (a descriptor one of them
            # uses must not be closed under it): that wait is a thread's, not the loop's.
            try:
                await loop.run_in_executor(None, eng.close)
            except RuntimeError:  # the default executor is shut down already
                eng.close()
        else:
            _retire(entry, loop)


def _start_watch(entry: _Entry) -> None:
    agen = _watch_loop(entry)
    entry.watch = agen  # the loop only keeps a weak reference
    try:
        agen.asend(None).send(None)
    except StopIteration:
        pass


def _forget(entry: _Entry) -> None:
    with _lock:
        for key, e in list(_entries.items()):
            if e is entry:
                del _entries[key]
    if _tls.__dict__.get("entry") is entry:
        _tls.__dict__.clear()
    # The generator refers to the loop (its finalizer hook) and the finalizer to the entry:
    # drop both so nothing keeps the finished loop alive.
    entry.watch = None
    if entry.finalizer is not None:
        entry.finalizer.detach()
        entry.finalizer = None


_BUDGET_ENV = "AIONATIVE_INLINE_BUDGET_US"
_DEFAULT_BUDGET_US = 150.0
_budget_us: float | None = None       # set_inline_budget(); None: the environment or default


def inline_budget(backend: str | None = None) -> float:
    """The cooperative budget new engines get, in µs: how much wall time reads completed
    inline (page-cache hits, no kernel round trip) may take per loop iteration before reads go
    to the kernel queue and the loop gets its turn. 0: no inline reads.

    Unless set (``set_inline_budget``, ``AIONATIVE_INLINE_BUDGET_US``), ``backend``'s default
    (``None``: the backend a new engine would get): 150 µs for the native engines, 100 µs for
    ``"threads"``, whose refused reads cost more of the iteration outside the budget
    (``_threads.DEFAULT_BUDGET_US``)."""
    value = _budget_set()
    if value is not None:
        return value
    if backend is None:
        try:
            backend = _backend.choose()[0]
        except _backend.BackendUnavailableError:  # get_engine() will say so
            pass
    return _threads.DEFAULT_BUDGET_US if backend == "threads" else _DEFAULT_BUDGET_US


def _budget_set() -> float | None:
    """The budget set by ``set_inline_budget`` or else ``AIONATIVE_INLINE_BUDGET_US``; None if
    neither (each backend's default applies)."""
    if _budget_us is not None:
        return _budget_us
    raw = os.environ.get(_BUDGET_ENV)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{_BUDGET_ENV} must be a number of microseconds, not {raw!r}"
                         ) from None
    _check_budget(value)
    return value


def _check_budget(us: float) -> None:
    if not 0 <= us <= 1e9:
        raise ValueError(f"the inline budget must be between 0 and 1e9 µs, not {us!r}")


def set_inline_budget(us: float | None) -> None:
    """Set the cooperative budget (µs) of every engine: those running now and those created
    later. ``0`` turns inline completion off (every read goes through the kernel queue);
    ``None`` restores ``AIONATIVE_INLINE_BUDGET_US`` or each backend's default (150 µs, the
    threads engine's 100 µs)."""
    global _budget_us
    if us is not None:
        _check_budget(float(us))
    _budget_us = None if us is None else float(us)
    _budget_set()  # a bad AIONATIVE_INLINE_BUDGET_US raises here, before any engine changes
    with _lock:
        entries = list(_entries.values())
    for entry in entries:
        eng = entry.engine
        if not eng.closed and entry.thread == threading.get_ident():
            eng.inline_budget_us = inline_budget(eng.backend)


_entries: dict[int, _Entry] = {}      # id(loop) -> entry; guarded by _lock
_lock = threading.Lock()
_tls = threading.local()              # .loop (weakref) / .entry: this thread's last lookup


def _create(loop: asyncio.AbstractEventLoop, backend: str | None) -> _Entry:
    passed_over: dict[str, str] = {}
    while True:
        name, rejected = _backend.choose(backend, passed_over)
        engine: EngineLike
        budget = inline_budget(name)
        if name == "threads":
            engine = ThreadsEngine(loop, get_engine)
            engine.inline_budget_us = budget
            return _Entry(loop, engine, rejected)
        assert _backend._core is not None
        try:
            engine = _backend._core.Engine(name, loop)
        except OSError as exc:
            # It probed fine, yet cannot be set up now: fall back unless it was asked for. A
            # passing error (out of descriptors, aio-max-nr used up by others: EMFILE, ENFILE,
            # EAGAIN) is raised as itself when the backend was asked for, and passes the
            # backend over for this engine alone; any other (ENOMEM from a locked-memory
            # limit) makes it unavailable in this process.
            reason = f"engine setup failed: {exc}"
            asked = backend is not None or _backend.requested_backend()[0] == name
            if exc.errno in _backend.TRANSIENT_ERRNOS:
                if asked:
                    raise
                passed_over[name] = reason
                continue
            if asked:
                raise _backend.BackendUnavailableError(
                    f"aionative backend {name!r} is unavailable: {reason}") from exc
            _backend.mark_unavailable(name, reason)
            continue
        engine.inline_budget_us = budget
        loop.add_reader(engine.fileno(), engine._on_ready)
        return _Entry(loop, engine, rejected)


def _retire(entry: _Entry, loop: asyncio.AbstractEventLoop | None) -> None:
    """Stop watching the eventfd (if the loop still can) and drain-close the engine."""
    eng = entry.engine
    if eng.closed:
        return
    if loop is not None and not loop.is_closed() and eng.fileno() >= 0:
        try:
            loop.remove_reader(eng.fileno())
        except (RuntimeError, ValueError):  # the loop is shutting down
            pass
    eng.close()


def _finished(loop: asyncio.AbstractEventLoop | None) -> bool:
    return loop is None or loop.is_closed()


def _sweep(current: asyncio.AbstractEventLoop | None = None) -> None:
    """Close engines whose loop is closed or gone (on this thread: single-issuer rings)."""
    me = threading.get_ident()
    with _lock:
        dead = [(k, e) for k, e in _entries.items()
                if e.thread == me and _finished(loop := e.loop_ref()) and loop is not current]
        for k, _ in dead:
            del _entries[k]
    for _, e in dead:
        _retire(e, e.loop_ref())


def _on_loop_collected(key: int, entry: _Entry) -> None:
    with _lock:
        if _entries.get(key) is entry:
            del _entries[key]
    try:
        _retire(entry, None)
    except RuntimeError:
        # Collected on another thread while the kernel still holds buffers of a single-issuer
        # ring: keep the engine (and what it pins) alive rather than free memory under the
        # kernel. Its own thread's exit cancels those requests.
        _leaked.append(entry.engine)


_leaked: list[EngineLike] = []


def _no_answer() -> None:
    return None


#: The running loop, or None (then asyncio answers): on Python 3.11 without the getpid(2)
#: that asyncio.get_running_loop() makes on every call.
_running_loop: Callable[[], asyncio.AbstractEventLoop | None] = (
    _backend._core.running_loop if _backend._core is not None else _no_answer)


def get_engine(backend: str | None = None) -> EngineLike:
    """The running loop's engine, created on first use.

    ``backend`` names the backend for a new engine (``io_uring``, ``linux_aio``, ``threads``);
    by default ``AIONATIVE_BACKEND``, else the best available. Raises ``RuntimeError`` when no
    loop is running, as ``asyncio.get_running_loop()`` does.
    """
    loop = _running_loop()
    if loop is None:
        loop = asyncio.get_running_loop()  # raises RuntimeError when no loop runs
    tls = _tls.__dict__
    ref = tls.get("loop")
    if ref is not None and ref() is loop:
        entry: _Entry = tls["entry"]
        if not entry.engine.closed and (backend is None or entry.engine.backend == backend):
            return entry.engine
    return _lookup(loop, backend).engine


def _lookup(loop: asyncio.AbstractEventLoop, backend: str | None) -> _Entry:
    key = id(loop)
    entry = _entries.get(key)
    if entry is not None and entry.loop_ref() is not loop:
        entry = None  # id reused by a new loop
    if entry is not None and entry.thread != threading.get_ident():
        # The loop now runs on another thread; a single-issuer ring stays with its creator.
        if entry.engine.in_flight:
            raise RuntimeError("aionative: this loop moved to another thread while its engine "
                               "still has operations in flight")
        _retire(entry, loop)
        entry = None
    if entry is not None and backend is not None and entry.engine.backend != backend:
        raise RuntimeError(
            f"this loop's engine already uses {entry.engine.backend!r}; "
            f"close it (aionative.close_engine()) before asking for {backend!r}")
    if entry is None or entry.engine.closed:
        _sweep(loop)
        entry = _create(loop, backend)
        with _lock:
            _entries[key] = entry
        entry.finalizer = weakref.finalize(loop, _on_loop_collected, key, entry)
        _start_watch(entry)
    _tls.loop = weakref.ref(loop)  # never keeps a finished loop (and its engine) alive
    _tls.entry = entry
    return entry


def current_entry() -> _Entry | None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    entry = _entries.get(id(loop))
    return entry if entry is not None and entry.loop_ref() is loop else None


def close_engine() -> None:
    """Drain and close the running loop's engine (the next operation makes a new one)."""
    loop = asyncio.get_running_loop()
    with _lock:
        entry = _entries.pop(id(loop), None)
    ref = _tls.__dict__.get("loop")
    if ref is not None and ref() is loop:
        _tls.__dict__.clear()
    if entry is not None:
        _retire(entry, loop)


def _after_fork_child() -> None:
    # The parent's rings and AIO contexts are not ours: release their memory without a system
    # call on them, and never remove their eventfds from a selector we may share with the parent.
    if _backend._core is not None:
        _backend._core.forget_inherited()
    for entry in _entries.values():
        if isinstance(entry.engine, ThreadsEngine):
            entry.engine._closed = True
    _entries.clear()
    _tls.__dict__.clear()


def _at_exit() -> None:
    _sweep()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_child)
atexit.register(_at_exit)
