"""In-worker measurement: operation counting, CPU time, thread census and peak RSS.

Two pacers. ``Meter`` (W1, W5) is time-boxed: the figures are operations per second over a
fixed window. ``Passes`` (W4, W7) is fixed-work: the same whole pass (every file once, every
line of the file once) runs again and again, and the figure is the median pass time.

Meter: readers call ``tick()`` after every completed operation. Every 16th tick the meter
looks at the clock, so the warm-up/timed/stop transitions and the ~50 ms thread samples happen
inline, on whatever thread does the I/O. That makes the meter independent of the event loop: a
system that never yields (inline completions) is still stopped and sampled on time, and no
sampler thread of ours inflates the thread count.

CPU time is ``getrusage(RUSAGE_SELF)`` user+sys over the timed window, which covers every
thread of the process, including the kernel's io_uring workers (``iou-wrk-*``) and any
thread pool. Peak RSS is the worker's ``VmHWM`` (peak since its ``exec``; see
``rss_peak_mib``); peak VSZ (``Passes`` only) is the process-lifetime ``VmPeak`` of
``/proc/self/status``.

Passes: no per-operation hook at all (a per-line call would cost the synchronous line loop
~5 %), so the thread census runs at pass boundaries and, in an event loop, from a timer
callback every ~50 ms: the loop gets control at every await that really waits, which is
where a thread pool or an io_uring worker does its share. A ``sync`` pass has one thread by
construction; its boundaries are sampled all the same.

Loop lag (W5, W6): ``LagProbe`` is a ticker task in the loop under load; it awaits
``asyncio.sleep(LAG_INTERVAL)`` over and over and records lateness = measured interval - 1 ms.
``with_lag`` runs it alone for ``IDLE_S`` first (the loop's own timer granularity, the idle
baseline), then alongside the load, and keeps the ticks inside the meter's timed window.
"""

from __future__ import annotations

import array
import asyncio
import os
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bench.common import JSONDict, Timing

CHECK_MASK = 15          # look at the clock every 16 operations
SAMPLE_INTERVAL = 0.05   # seconds between thread censuses
MIN_PASSES = 3           # timed passes of a fixed-work cell, at the least
LAG_INTERVAL = 0.001     # the lag ticker's asyncio.sleep
IDLE_S = 0.25            # ticker alone, before the load: the loop's idle baseline
StatsFn = Callable[[], dict[str, Any]]


class Pacer(Protocol):
    """What a reader loop calls after each operation: ``Meter`` or ``Quota``."""

    def tick(self) -> bool:
        """Count one completed operation; return False when the reader should stop."""
        ...


def thread_census() -> tuple[int, int]:
    """Return (threads in this process, of which kernel io_uring workers named ``iou-*``)."""
    total = iou = 0
    for tid in os.listdir("/proc/self/task"):
        total += 1
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as f:
                if f.read(4) == b"iou-":
                    iou += 1
        except FileNotFoundError:  # the thread exited between listdir and open
            pass
    return total, iou


def _status_mib(key: bytes) -> float | None:
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def vsz_peak_mib() -> float | None:
    """The process-lifetime peak virtual size (``VmPeak``), MiB; None where unreadable."""
    return _status_mib(b"VmPeak:")


def rss_peak_mib() -> float:
    """This process's peak resident set size since its ``exec`` (``VmHWM``), MiB.

    Not ``ru_maxrss``: Linux carries that across ``execve`` from the address space the
    process had before (with ``vfork``, the parent's), so a worker would report the harness
    parent's RSS whenever that is larger than its own.
    """
    hwm = _status_mib(b"VmHWM:")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_rss_peak() -> float | None:
    """Reset this process's peak resident set size (``VmHWM``) to its RSS now (``5`` written
    to ``/proc/self/clear_refs``) and return that, MiB: ``rss_peak_mib()`` afterwards minus it
    is what the work in between added. None where ``clear_refs`` is not writable."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return rss_peak_mib()


@dataclass(frozen=True)
class Snapshot:
    """Counters at one instant: wall clock, operations, process CPU, optional engine stats."""

    wall: float
    ops: int
    user: float
    sys: float
    stats: dict[str, Any] | None

    @classmethod
    def take(cls, ops: int, stats: StatsFn | None) -> Snapshot:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(time.perf_counter(), ops, usage.ru_utime, usage.ru_stime,
                   stats() if stats else None)


def stats_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> JSONDict | None:
    """Difference of the numeric counters of two ``engine_stats()`` dicts."""
    if before is None or after is None:
        return None
    return {k: v - before[k] for k, v in after.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
            and isinstance(before.get(k), int | float)}


class Meter:
    """Time-boxed pacer shared by all readers of one cell; see the module docstring."""

    def __init__(self, timing: Timing, stats: StatsFn | None = None) -> None:
        self.ops = 0
        self.running = True
        self._stats = stats
        self._timed = False
        self._begin_at = time.perf_counter() + timing.warmup
        self._end_at = self._begin_at + timing.duration
        self._next_sample = 0.0
        self._threads_peak = 0
        self._iou_peak = 0
        self._samples = 0
        self._start: Snapshot | None = None
        self._end: Snapshot | None = None

    def tick(self) -> bool:
        """Count one completed operation; return False once the timed window is over."""
        self.ops += 1
        if self.ops & CHECK_MASK:
            return self.running
        return self._check()

    def _check(self) -> bool:
        now = time.perf_counter()
        if not self._timed:
            if now >= self._begin_at:
                self._timed = True
                self._sample(now)
                self._start = Snapshot.take(self.ops, self._stats)
            return self.running
        if now >= self._next_sample:
            self._sample(now)
        if now >= self._end_at and self.running:
            self._end = Snapshot.take(self.ops, self._stats)
            self._sample(now)
            self.running = False
        return self.running

    def _sample(self, now: float) -> None:
        total, iou = thread_census()
        self._threads_peak = max(self._threads_peak, total)
        self._iou_peak = max(self._iou_peak, iou)
        self._samples += 1
        self._next_sample = now + SAMPLE_INTERVAL

    @property
    def window(self) -> tuple[float, float] | None:
        """``perf_counter()`` bounds of the timed window once it is over, else None."""
        if self._start is None or self._end is None:
            return None
        return self._start.wall, self._end.wall

    def result(self) -> JSONDict:
        """The cell's figures; call after every reader has stopped."""
        start, end = self._start, self._end
        if start is None or end is None:
            raise RuntimeError("meter never completed its timed window")
        ops = end.ops - start.ops
        wall = end.wall - start.wall
        cpu = (end.user - start.user) + (end.sys - start.sys)
        return {
            "ops": ops,
            "wall_s": wall,
            "ops_per_s": ops / wall,
            "cpu_user_s": end.user - start.user,
            "cpu_sys_s": end.sys - start.sys,
            "cpu_us_per_op": cpu / ops * 1e6 if ops else None,
            "cpu_util": cpu / wall,
            "threads_peak": self._threads_peak,
            "iou_workers_peak": self._iou_peak,
            "thread_samples": self._samples,
            "rss_peak_mib": rss_peak_mib(),
            "engine_stats_delta": stats_delta(start.stats, end.stats),
        }


class Quota:
    """Count-based pacer for one reader: continue until ``count`` operations are done."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("a reader needs a quota of at least one operation")
        self.left = count

    def tick(self) -> bool:
        self.left -= 1
        return self.left > 0


class Census:
    """Thread peaks of a fixed-work cell: ``sample()`` at will, ``maybe()`` at most every
    ``SAMPLE_INTERVAL``, and ``attach(loop)`` for a timer-driven census inside a loop."""

    def __init__(self) -> None:
        self.threads_peak = 0
        self.iou_peak = 0
        self.samples = 0
        self._last = float("-inf")
        self._timer: asyncio.TimerHandle | None = None

    def sample(self) -> None:
        total, iou = thread_census()
        self.threads_peak = max(self.threads_peak, total)
        self.iou_peak = max(self.iou_peak, iou)
        self.samples += 1
        self._last = time.perf_counter()

    def maybe(self) -> None:
        if time.perf_counter() - self._last >= SAMPLE_INTERVAL:
            self.sample()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Sample every ``SAMPLE_INTERVAL`` from ``loop``'s timers until ``detach()``."""
        def again() -> None:
            self.sample()
            self._timer = loop.call_later(SAMPLE_INTERVAL, again)

        self._timer = loop.call_later(SAMPLE_INTERVAL, again)

    def detach(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Passes:
    """Fixed-work pacer: whole passes, warm-up first, then timed ones; the median pass counts.

    Warm-up passes run until ``timing.warmup`` seconds have gone by (at least one: it also
    creates the engine, the thread pool, the codec state, and proves the pass correct); timed
    passes then run until ``timing.duration`` seconds have gone by and at least ``min_passes``
    are done. Use as::

        passes = Passes(timing, stats)
        while passes.begin():
            passes.end(one_pass())      # one_pass() returns how many operations it did

    CPU time, engine counters and operations are taken over the whole timed window; pass
    times one by one, for the median (``pass_s``) that throughput is computed from.
    """

    def __init__(self, timing: Timing, stats: StatsFn | None = None,
                 min_passes: int = MIN_PASSES) -> None:
        self.census = Census()
        self.times: list[float] = []
        self.ops = 0
        self.warmup_passes = 0
        self._timing = timing
        self._stats = stats
        self._min = min_passes
        self._warm_until = time.perf_counter() + timing.warmup
        self._timed_until = 0.0
        self._began = 0.0
        self._pass_ops: int | None = None
        self._start: Snapshot | None = None
        self._end: Snapshot | None = None

    def begin(self) -> bool:
        """Start a pass; False once enough timed passes are done (the timed window ends)."""
        self.census.maybe()
        now = time.perf_counter()
        if self._start is None:
            if not self.warmup_passes or now < self._warm_until:
                self._began = time.perf_counter()
                return True
            self.census.sample()
            self._start = Snapshot.take(0, self._stats)
            self._timed_until = self._start.wall + self._timing.duration
        elif len(self.times) >= self._min and now >= self._timed_until:
            self._end = Snapshot.take(self.ops, self._stats)
            self.census.sample()
            return False
        self._began = time.perf_counter()
        return True

    def end(self, ops: int) -> None:
        """End the pass begun last; ``ops`` operations (files, lines) were done in it."""
        elapsed = time.perf_counter() - self._began
        if self._pass_ops is not None and ops != self._pass_ops:
            raise RuntimeError(f"a pass did {ops} operations, an earlier one {self._pass_ops}")
        self._pass_ops = ops
        if self._start is None:
            self.warmup_passes += 1
        else:
            self.times.append(elapsed)
            self.ops += ops

    def result(self) -> JSONDict:
        """The cell's figures; call once ``begin()`` has returned False."""
        start, end = self._start, self._end
        if start is None or end is None or self._pass_ops is None:
            raise RuntimeError("the passes never completed their timed window")
        wall = end.wall - start.wall
        cpu = (end.user - start.user) + (end.sys - start.sys)
        median = statistics.median(self.times)
        return {
            "ops": self.ops,
            "ops_per_pass": self._pass_ops,
            "passes": len(self.times),
            "warmup_passes": self.warmup_passes,
            "pass_s": median,
            "pass_times_s": self.times,
            "wall_s": wall,
            "ops_per_s": self._pass_ops / median,
            "cpu_user_s": end.user - start.user,
            "cpu_sys_s": end.sys - start.sys,
            "cpu_us_per_op": cpu / self.ops * 1e6 if self.ops else None,
            "cpu_util": cpu / wall,
            "threads_peak": self.census.threads_peak,
            "iou_workers_peak": self.census.iou_peak,
            "thread_samples": self.census.samples,
            "rss_peak_mib": rss_peak_mib(),
            "vsz_peak_mib": vsz_peak_mib(),
            "engine_stats_delta": stats_delta(start.stats, end.stats),
        }


# --------------------------------------------------------------------------- loop lag


class LagProbe:
    """Ticker task: ``await asyncio.sleep(LAG_INTERVAL)`` until stopped, recording lateness."""

    def __init__(self) -> None:
        self.wakes = array.array("d")
        self.late = array.array("d")
        self._stop = False

    async def run(self) -> None:
        sleep, now, interval = asyncio.sleep, time.perf_counter, LAG_INTERVAL
        wakes, late = self.wakes, self.late
        while not self._stop:
            t0 = now()
            await sleep(interval)
            t1 = now()
            wakes.append(t1)
            late.append(t1 - t0 - interval)

    def stop(self) -> None:
        self._stop = True

    def summary(self, lo: float = float("-inf"), hi: float = float("inf")) -> JSONDict:
        """Lateness percentiles (ms) of the ticks that overlap ``[lo, hi]``: woke after ``lo``
        and went to sleep before ``hi`` (so a tick the load starved past the window's end
        still counts)."""
        interval = LAG_INTERVAL
        late = sorted(x for t, x in zip(self.wakes, self.late, strict=True)
                      if t >= lo and t - x - interval <= hi)
        if not late:
            return {"p50_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None,
                    "samples": 0}

        def pct(q: float) -> float:
            return late[min(len(late) - 1, int(q * len(late)))] * 1e3

        return {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": late[-1] * 1e3,
                "mean_ms": statistics.fmean(late) * 1e3, "samples": len(late)}


async def idle_lag(seconds: float = IDLE_S) -> JSONDict:
    """The ticker alone in this loop for ``seconds``: the loop's own timer granularity."""
    probe = LagProbe()
    task = asyncio.create_task(probe.run())
    await asyncio.sleep(seconds)
    probe.stop()
    await task
    return probe.summary() | {"seconds": seconds}


def lag_fields(summary: JSONDict) -> JSONDict:
    """Flat ``lag_*`` keys of a LagProbe summary, as the harness and report expect."""
    return {f"lag_{k}": v for k, v in summary.items()}


async def with_lag(measure: Callable[[], Awaitable[Meter]]) -> JSONDict:
    """Around the timed tasks: idle baseline first, then the ticker alongside the load."""
    idle = await idle_lag()
    probe = LagProbe()
    ticker = asyncio.create_task(probe.run())
    try:
        meter = await measure()
    finally:
        probe.stop()
        await ticker
    result = meter.result()
    window = meter.window
    assert window is not None
    return result | lag_fields(probe.summary(*window)) | {"lag_idle": idle}
