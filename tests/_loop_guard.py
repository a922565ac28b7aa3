"""The suite's loop guards, active in every run (``make test``, CI) unless turned off:

* **Responsiveness**: beside every async test (and every coroutine a ``loop`` fixture's
  ``run_until_complete`` runs), a ticker runs on the test's loop every millisecond. The gap
  between two ticks is the loop thread's CPU time (``time.thread_time``) less the cyclic
  collector's pauses on that thread: the work the loop did without running anything else. A
  test whose longest gap passes ``BOUND`` fails, naming what held the loop: a watchdog thread
  samples the loop thread's stack once a gap passes the bound, and the message names the
  innermost aionative frame of the sample.
* **Blocking calls**: ``blockbuster`` (as Starlette and anyio use it) wraps the blocking entry
  points of os, io, socket, time and threading for the length of every test, scanning
  aionative: a wrapped call made on a thread that runs a loop, with an aionative frame on the
  stack, is an error. A user's detector must never flag aionative, so every such call fails the
  test, even one aionative caught and recovered from.

A hold the watchdog's sample shows in the test's own code (its set-up, a gather of thousands of
coroutines: asyncio's work, not aionative's) does not fail the test, nor does a hold of up to
twice the bound that the watchdog could not sample (it was not scheduled meanwhile); anything
else does.
``@pytest.mark.blocks_the_loop(reason)`` exempts a test whose own code holds the loop or makes
blocking calls on purpose (from both guards) (fault injection, a demonstration of a blocked loop); the reason is required.
``@pytest.mark.measures_the_loop`` marks a test that measures the loop's gaps itself, more
strictly and over repeated attempts: the responsiveness guard steps aside for it.
``AIONATIVE_LOOP_GUARD=0`` turns the responsiveness guard off (to debug a test in a debugger,
say); ``AIONATIVE_LOOP_GUARD_MS`` sets another bound.

Why the gap is CPU time, not wall time: on a shared machine the scheduler keeps a runnable
thread off the CPU for 10-20 ms now and then, whatever the thread runs; CPU time counts only
what the loop's thread did. A call that blocks in the kernel (a read of a cold file on the
loop's thread) costs little CPU: that is the blocking-call detector's to catch.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import os
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from blockbuster import BlockBuster
from blockbuster import blockbuster as _bb_module

import aionative

T = TypeVar("T")

# The bound. A gap is the CPU time between two ticks a millisecond apart: up to that much
# legitimate work of short iterations, plus the longest iteration in it. On this machine (2
# vCPUs, shared) a tight loop of reads served from the window (read(1), async for) yields a turn
# at each spent iteration budget, and the gaps it leaves are 1-3 ms, now and then 5-8 ms (a
# window fetched and copied inline, the engine reaping a batch). 10 ms stays clear of those and
# far under what a call that does not yield holds the loop for: 20 ms (async for over a 16 MiB
# file) to over 100 ms (read(1)), tests/engine/test_responsiveness.py. A collector pause is not
# counted (gc.callbacks): a full collection of the test process's heap stops any loop for 15 ms
# and more on 3.12, whatever code runs. Under the sanitizers (`make asan` preloads libasan and
# runs with PYTHONMALLOC=malloc) every allocation and C call is several times slower: the bound
# is four times longer there (make asan turns the guard off altogether: AIONATIVE_LOOP_GUARD=0). Across the whole suite, beside two CPUs shared with other work,
# a test's own set-up (files of several MiB made and compared in its body, which the sample
# may miss when the hold ends just past the bound) ran 10-16 ms now and then: the suite-wide
# bound is 20 ms, still a fifth of what a call that never yields holds; the targeted tests
# (tests/engine/test_responsiveness.py) keep 10 ms with the collector off.
_SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "") or "ASAN_OPTIONS" in os.environ
BOUND = float(os.environ.get("AIONATIVE_LOOP_GUARD_MS") or (80 if _SANITIZED else 20)) / 1000
INTERVAL = 0.001  # the ticker's period: a gap also holds up to this much legitimate work
ENABLED = os.environ.get("AIONATIVE_LOOP_GUARD", "1") != "0"

_PACKAGE = str(Path(aionative.__file__).resolve().parent) + os.sep
_MARKER = "blocks_the_loop"
_MEASURES = "measures_the_loop"


def _thread_usage() -> tuple[float, float, int, int]:
    """The calling thread's user and system CPU time and page faults (a hold made of system
    time and faults is the kernel's work: a large copy, or memory reclaimed for the thread)."""
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return (r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_majflt)


class _Guard:
    """A ticker on the running loop, and the longest gap between its ticks."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread = threading.get_ident()
        self.clock = time.pthread_getcpuclockid(self.thread)
        self.last = time.thread_time()
        self.last_wall = time.monotonic()
        self.in_gc_since: float | None = None
        self.gc_time = 0.0
        self.gap = 0  # the number of the gap under way, for the watchdog's samples
        self.sample: tuple[int, list[traceback.FrameSummary], bool] | None = None
        self.worst = 0.0
        self.worst_wall = 0.0
        self.last_usage = _thread_usage()
        self.worst_usage = (0.0, 0.0, 0, 0)
        self.worst_stack: list[traceback.FrameSummary] | None = None
        self.ticks = 0
        self.handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self.handle = self.loop.call_later(INTERVAL, self._tick)
        _watchdog.watch(self)

    def stop(self) -> None:
        _watchdog.unwatch(self)
        if self.handle is not None:
            self.handle.cancel()
        self._close_gap()
        gc.callbacks.remove(self._on_gc)

    def held(self) -> float:
        """The loop thread's CPU time in the gap under way, collector pauses left out (read
        from the watchdog's thread)."""
        busy = time.clock_gettime(self.clock) - self.last - self.gc_time
        return 0.0 if self.in_gc_since is not None else busy

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self.thread:
            return
        now = time.thread_time()
        if phase == "start":
            self.in_gc_since = now
        elif self.in_gc_since is not None:
            self.gc_time += now - self.in_gc_since
            self.in_gc_since = None

    def _close_gap(self) -> None:
        now, wall = time.thread_time(), time.monotonic()
        held = now - self.last - self.gc_time
        if held > self.worst:
            sample = self.sample
            self.worst = held
            self.worst_wall = wall - self.last_wall
            usage = _thread_usage()
            self.worst_usage = tuple(b - a for a, b in zip(self.last_usage, usage,
                                                          strict=True))  # type: ignore[assignment]
            self.worst_stack = sample[1] if sample is not None and sample[0] == self.gap else None
        self.last, self.last_wall, self.gc_time = now, wall, 0.0
        self.last_usage = _thread_usage()
        if self.in_gc_since is not None:
            self.in_gc_since = now
        self.gap += 1

    def _tick(self) -> None:
        self.ticks += 1
        self._close_gap()
        self.handle = self.loop.call_later(INTERVAL, self._tick)

    def report(self, what: str, test: str = "") -> str | None:
        if self.worst <= BOUND or _held_by_the_test(self.worst_stack):
            return None
        if not self.worst_stack and self.worst <= BOUND * 2:
            # No sample: the watchdog thread did not run while it lasted. On two CPUs shared
            # with other processes the scheduler can keep it off a CPU for 10-20 ms, and a
            # test's own set-up of a few MiB then goes unsampled; past twice the bound a hold
            # whose owner is unknown counts against aionative.
            return None
        user, system, minor, major = self.worst_usage
        if (not self.worst_stack and system < 0.001 and minor == 0 and major == 0
                and user >= 0.9 * self.worst):
            # No sample, and nothing but user time: no system call, not one page touched for
            # the first time. Python code is sampled (the interpreter hands the GIL to the
            # watchdog every switch interval), a system call or a copy into fresh memory shows
            # as system time or faults; what is left is C code computing over memory it had
            # already touched, with the GIL held, or the virtual machine's vCPU held by its
            # host (a guest page the host fills on first access) while the guest charges the
            # time to the thread that was running. The second is this machine's: such holds
            # do not recur when the same inputs run again (hypothesis replays them). Noted in
            # the session's summary, not failed; the loop's own measurements
            # (tests/engine/test_responsiveness.py) hold aionative's C paths to the bound.
            _unattributed.append(f"{test or what}: {self.worst * 1e3:.1f} ms of user time "
                                 f"({self.worst_wall * 1e3:.1f} ms wall), no sample")
            return None
        lines = [(f"{what} held the event loop for {self.worst * 1e3:.1f} ms of the loop "
                  f"thread's CPU time ({self.worst_wall * 1e3:.1f} ms wall) without letting the "
                  f"ticker run; the bound is {BOUND * 1e3:g} ms (tests/_loop_guard.py). Mark a "
                  f"test that blocks on purpose @pytest.mark.{_MARKER}(reason).")]
        lines.append(f"(user {user * 1e3:.1f} ms, system {system * 1e3:.1f} ms, {minor} minor "
                     f"and {major} major page faults in that gap)")
        if self.worst_stack:
            ours = [f for f in self.worst_stack if f.filename.startswith(_PACKAGE)]
            if ours:
                f = ours[-1]
                lines.append(f"aionative was running {Path(f.filename).name}:{f.lineno} "
                             f"in {f.name}()")
            lines.append("the loop thread's stack, sampled while it held the loop:")
            lines += [s.rstrip("\n") for s in traceback.format_list(self.worst_stack[-12:])]
        else:
            lines.append("(no stack sample: the hold was shorter than the watchdog's poll, or "
                         "held the GIL throughout)")
            if _watchdog.error is not None:
                lines.append(f"(the watchdog's last poll failed: {_watchdog.error})")
        return "\n".join(lines)


_STDLIB = os.path.dirname(os.__file__)
_TESTS = str(Path(__file__).parent)


def _held_by_the_test(stack: list[traceback.FrameSummary] | None) -> bool:
    """Whether the sample shows the test's own code holding the loop (its set-up of a 64 MiB
    buffer, a gather of ten thousand coroutines), not aionative: no aionative frame on the
    stack, and from the innermost frame out, past the standard library's and installed
    packages' (asyncio creating the tasks a test gathers, the blocking-call detector's
    wrappers), the first frame is the test module's, or a module is being imported (a library's
    import on first use). An aionative frame anywhere,
    the loop running a callback (the engine's are C functions, invisible in the sample), or no
    sample at all count against aionative."""
    if not stack or any(f.filename.startswith(_PACKAGE) for f in stack):
        return False
    if any(f.name == "_find_and_load" and f.filename.startswith("<frozen importlib") for f in stack):
        return True  # a module imported on first use (a framework's lazy import), not aionative
    for f in reversed(stack):
        # (code made at run time — "<string>", a dataclass's __init__ — or a frozen module's
        # is a library's too)
        if f.filename.startswith((_STDLIB, "<")) or "site-packages" in f.filename:
            if f.name in ("_run", "_run_once", "run_forever", "run_until_complete"):
                return False  # the loop running a callback: whose, the sample cannot say
            continue
        if f.filename == __file__ and f.name != "guarded":
            continue  # (the detector's check, wrapped here: a library's frame too)
        return f.filename.startswith(_TESTS) and f.filename != __file__
    return False


class _Watchdog:
    """One thread for the session: while a guard is active, it polls the loop thread's CPU
    clock and samples its stack once a gap passes the bound (what held the loop)."""

    def __init__(self) -> None:
        self.guard: _Guard | None = None
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.error: str | None = None  # the last exception a poll raised, for the report

    def watch(self, guard: _Guard) -> None:
        self.guard = guard
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="loop-guard-watchdog",
                                           daemon=True)
            self.thread.start()
        self.wake.set()

    def unwatch(self, guard: _Guard) -> None:
        if self.guard is guard:
            self.guard = None

    def _run(self) -> None:
        while True:
            guard = self.guard
            if guard is None:
                self.wake.wait()
                self.wake.clear()
                continue
            time.sleep(BOUND / 8)
            try:
                self._poll(guard)
            except Exception as exc:  # noqa: BLE001 (a sample lost, never the watchdog)
                self.error = f"{type(exc).__name__}: {exc}"

    def _poll(self, guard: _Guard) -> None:
        gap = guard.gap
        sample = guard.sample
        held = guard.held()
        # A gap is first sampled at half the bound, so that a hold which ends just past
        # it (before this thread gets the GIL, up to a switch interval later) has a
        # sample; it is sampled once more past the bound, which is the sample reported.
        if held <= BOUND / 2 or (sample is not None and sample[0] == gap
                                 and (sample[2] or held <= BOUND)):
            return
        frame = sys._current_frames().get(guard.thread)
        if frame is None:
            return
        # The source lines are looked up when the report is written: reading them here
        # would give the GIL back to the loop's thread at each file, and the hold would
        # be over before the sample is.
        stack = traceback.StackSummary.extract(traceback.walk_stack(frame),
                                               lookup_lines=False)
        del frame  # (held while this thread sleeps, it would keep the test's locals alive)
        stack.reverse()
        if stack and (stack[-1].name in ("select", "poll") and
                      stack[-1].filename.endswith("selectors.py") or
                      stack[-1].filename == __file__):
            # The loop waiting for events, or this guard's own code (the test just
            # returned, its locals freed): the hold (C code that kept the GIL, the
            # engine's callbacks, a large object freed) ended before this thread could
            # take the sample.
            return
        if guard.gap == gap:
            guard.sample = (gap, list(stack), held > BOUND)


_watchdog = _Watchdog()
_unattributed: list[str] = []  # holds with no sample and nothing but user time (see report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _unattributed:
        terminalreporter.write_sep("-", "loop holds the guard could not attribute")
        for line in _unattributed:
            terminalreporter.write_line(line)


def _guarded(fn: Callable[..., Coroutine[Any, Any, T]], what: str,
             item: pytest.Item | None = None) -> Callable[..., Coroutine[Any, Any, T]]:
    @functools.wraps(fn)
    async def guarded(*args: Any, **kwargs: Any) -> T:
        guard = _Guard(asyncio.get_running_loop())
        guard.start()
        try:
            result = await fn(*args, **kwargs)
        finally:
            guard.stop()
            if item is not None:  # the longest hold, in a junit XML report's properties
                item.user_properties.append(("loop_held_ms", round(guard.worst * 1e3, 2)))
        message = guard.report(what, item.nodeid if item is not None else "")
        if message is not None:
            pytest.fail(message, pytrace=False)
        return result

    return guarded


def guard_loop(loop: asyncio.AbstractEventLoop, what: str, item: pytest.Item) -> None:
    """Guard every coroutine ``loop.run_until_complete`` runs (a synchronous test that drives
    its own loop)."""
    run = loop.run_until_complete

    def run_until_complete(future: Any) -> Any:
        if inspect.iscoroutine(future):
            coro = future  # (body must not see the name rebound below)

            async def body() -> Any:
                return await coro
            future = _guarded(body, what, item)()
        return run(future)

    loop.run_until_complete = run_until_complete  # type: ignore[method-assign]


def is_exempt(item: pytest.Item) -> bool:
    marker = item.get_closest_marker(_MARKER)
    if marker is None:
        return False
    if not (marker.args and isinstance(marker.args[0], str) and marker.args[0].strip()):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{_MARKER} needs a reason")
    return True


def measures_itself(item: pytest.Item) -> bool:
    """``@pytest.mark.measures_the_loop``: the test measures the loop's gaps itself, to a
    stricter bound and over repeated attempts (tests/engine/test_responsiveness.py); the
    responsiveness guard, which sees one attempt, steps aside. Blockbuster stays on."""
    return item.get_closest_marker(_MEASURES) is not None


def responsiveness_guarded(item: pytest.Item) -> bool:
    """Whether the responsiveness guard measures ``item``: on, and the test neither exempt nor
    measuring the loop itself."""
    return ENABLED and not is_exempt(item) and not measures_itself(item)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", (f"{_MARKER}(reason): the test's own body holds the event loop on purpose; "
                    "the loop-responsiveness guard does not measure it"))
    config.addinivalue_line(
        "markers", (f"{_MEASURES}: the test measures the loop's gaps itself, more strictly; "
                    "the responsiveness guard does not (the blocking-call detector does)"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run an async test's coroutine under a guard: pytest-asyncio runs ``item.obj`` on the
    test's loop, so the guard wraps it (inside the one ``run_until_complete``: no work of
    pytest's between the ticks)."""
    fn = getattr(item, "obj", None)
    if (not isinstance(item, pytest.Function) or not responsiveness_guarded(item)
            or item.get_closest_marker("asyncio") is None
            or not inspect.iscoroutinefunction(fn)):
        return (yield)
    item.obj = _guarded(fn, "the test", item)
    try:
        return (yield)
    finally:
        item.obj = fn


# --- the blocking-call detector -------------------------------------------------------------

_flagged: list[tuple[str, list[traceback.FrameSummary]]] = []


class _RecordedBlockingError(_bb_module.BlockingError):
    """blockbuster's error, recorded where it is raised: aionative might catch it (an
    ``except Exception`` that falls back), and the test must fail all the same."""

    def __init__(self, func: str) -> None:
        super().__init__(func)
        _flagged.append((func, traceback.extract_stack()[:-1]))


_bb_module.BlockingError = _RecordedBlockingError  # the name blockbuster's wrappers raise


@functools.cache
def _detector() -> BlockBuster:
    """A detector scanning aionative, as a user's ``blockbuster_ctx()`` would see it: a
    wrapped call with an aionative frame on the stack, made on a thread that runs a loop."""
    bb = BlockBuster(scanned_modules=[aionative])
    # The suite's own fault injection, patched into aionative's call paths, blocks on
    # purpose (it stands for a busy loop iteration).
    bb.functions["time.sleep"].can_block_in("tests/conftest.py", "turn_then_spend")
    # Closing an engine while calls are in flight waits for them, on purpose (the native
    # engines' close waits for the kernel alike, in C where no detector looks): a worker may be
    # in a pwrite on a descriptor the caller closes next. Only then: idle workers are not
    # waited for, and a loop's own shutdown closes its threads engine in an executor.
    bb.functions["threading.Lock.acquire"].can_block_in("aionative/_threads.py", "close")
    # A direct write made synchronously (the raw file used without the async layer: a
    # finalizer, f.raw) waits for another writer's block lock as any synchronous write waits.
    bb.functions["time.sleep"].can_block_in("aionative/_direct.py", "direct_pwrite_sync")
    # StaticFiles checks its directory when it is made, in Starlette's own constructor (as
    # Starlette's class does: a detector scanning Starlette flags it alike); apps are made
    # before their loop runs, tests make them in their bodies.
    bb.functions["os.stat"].can_block_in("starlette/staticfiles.py", "__init__")
    # ... and aionative's makes a relative directory absolute there, once (getcwd, no I/O).
    for name in ("os.path.abspath", "os.getcwd"):
        if name in bb.functions:
            bb.functions[name].can_block_in("aionative/starlette.py", "__init__")
    # detach() is synchronous in aiofiles' API: what the text layer holds is written then and
    # there, as the builtin's detach writes it.
    for function in bb.functions.values():
        function.can_block_in("aionative/_files/buffered.py", "detach")
        function.can_block_in("aionative/_files/text.py", "detach")
    # A file dropped unclosed is closed by its finalizer, its buffered data written there and
    # then, as the builtin's file is (after the ResourceWarning that names the bug).
    for function in bb.functions.values():
        function.can_block_in("aionative/_files/base.py", "__del__")
    # The detector's own check of a file (isatty(), fileno()) raises on a closed file before
    # the wrapped call could raise its own error ("write to closed file" becomes "I/O
    # operation on closed file"): a check that raises lets the call run and raise its own.
    for function in bb.functions.values():
        function.can_block_predicate = _tolerant(function.can_block_predicate)
    return bb


def _tolerant(predicate: Callable[..., bool]) -> Callable[..., bool]:
    def check(*args: Any, **kwargs: Any) -> bool:
        try:
            return predicate(*args, **kwargs)
        except (ValueError, OSError):
            return True
    return check


@pytest.fixture(autouse=True)
def _no_blocking_call_from_aionative(request: pytest.FixtureRequest) -> Iterator[None]:
    """blockbuster active for the test, its fixtures' set-up and their teardown: nothing
    aionative does on a loop's thread may call a blocking entry point. Not for a test marked
    as blocking the loop on purpose: its own code, called back from aionative's (a server's
    send, a subclass's hook, the builtin's file run beside aionative's), blocks."""
    if is_exempt(request.node):
        yield
        return
    detector = _detector()
    del _flagged[:]
    detector.activate()
    try:
        yield
    finally:
        detector.deactivate()
    if _flagged:
        lines = [(f"aionative made {len(_flagged)} blocking call(s) on the event loop's thread "
                  "(blockbuster, scanning aionative):")]
        for func, stack in _flagged[:3]:
            ours = [f for f in stack if f.filename.startswith(_PACKAGE)]
            where = (f" from {Path(ours[-1].filename).name}:{ours[-1].lineno} in "
                     f"{ours[-1].name}()") if ours else ""
            lines.append(f"- {func}{where}")
            lines += ["    " + s.rstrip("\n").replace("\n", "\n    ")
                      for s in traceback.format_list(stack[-8:])]
        del _flagged[:]
        pytest.fail("\n".join(lines), pytrace=False)
