"""In-worker measurement: operation counting, CPU time, thread census and peak RSS.

Readers call ``tick()`` after every completed operation. Every 16th tick the meter looks at
the clock, so the warm-up/timed/stop transitions and the ~50 ms thread samples happen inline,
on whatever thread does the I/O. That makes the meter independent of the event loop: a system
that never yields (inline completions) is still stopped and sampled on time, and no sampler
thread of ours inflates the thread count.

CPU time is ``getrusage(RUSAGE_SELF)`` user+sys over the timed window, which covers every
thread of the process, including the kernel's io_uring workers (``iou-wrk-*``) and any
thread pool. Peak RSS is the process-lifetime ``ru_maxrss``.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bench.common import JSONDict, Timing

CHECK_MASK = 15          # look at the clock every 16 operations
SAMPLE_INTERVAL = 0.05   # seconds between thread censuses
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
            "rss_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
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
