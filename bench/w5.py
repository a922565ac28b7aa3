"""W5 (W5w): random 4 KiB buffered pwrite, N concurrent writers, event-loop lag measured too.

Why: ext4 refuses ``RWF_NOWAIT`` on buffered writes (EOPNOTSUPP), so aionative's ``linux_aio``
backend submits them without it and the kernel does the page-cache copy (and any dirty-page
throttling) synchronously inside ``io_submit``, on the event-loop thread. ``io_uring`` instead
tries a nonblocking attempt and hands what would block to its kernel io-wq workers
(``iou-wrk-*``, visible in the threads table), and the ``threads`` backend, ``run_in_executor``
and aiofiles do the ``pwrite`` on pool threads. Throughput alone hides that difference, so each
cell also runs a *ticker* task in the same loop: it awaits ``asyncio.sleep(0.001)`` over and
over and records lateness = measured interval - 1 ms; p50 / p99 / max over the timed window is
the loop lag a co-hosted request handler would see. Before the load, the ticker runs alone for
a moment (``IDLE_S``) to record the loop's own timer granularity (idle baseline).

Target: a preallocated random file (256 MiB by default, ``bench/.data/w5-write-*.bin``), warmed
into the page cache, so every write overwrites an existing, allocated block. Offsets are
4 KiB-aligned from a seeded pool (writer i starts at its own place in it); every write writes
the same fixed 4 KiB payload. Each worker ``fdatasync``s the file before measuring (untimed),
so a cell starts with no dirty pages left over from the previous cell; during the cell the
kernel's writeback and dirty throttling run as they would in production (a source of noise).

Systems (each cell in its own worker process):

- ``aionative-<backend>-<loop>``: N tasks, each ``await aionative.pwrite(fd, payload, off)``.
- ``aiofiles-<loop>``: N tasks, each with its own ``aiofiles.open(path, "r+b")`` handle doing
  ``await f.seek(off); await f.write(payload); await f.flush()``. aiofiles wraps a buffered
  file object, so without ``flush`` the 4 KiB would sit in Python's buffer; the flush pushes it
  to the kernel, as ``pwrite`` does (three thread-pool hops a write).
- ``executor-<loop>``: ``await loop.run_in_executor(None, os.pwrite, fd, payload, off)``.
- ``sync``: ``os.pwrite`` in a loop on one thread, no event loop; N does not apply and loop
  lag is not measurable (reported as n/a). A real asyncio program doing this would block its
  loop for the whole run.

No system calls ``fsync``/``fdatasync`` during the timed window: this measures the buffered
write path only, not durability.
"""

from __future__ import annotations

import array
import asyncio
import os
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench import clients
from bench.clients import BLOCK, Client, Op, Target, default_systems, prepare_file
from bench.common import JSONDict, PrepareConfig, System, Timing, Workload
from bench.meter import Meter, Pacer

DEFAULT_FILE_SIZE = 256 << 20
POOL_SIZE = 1 << 18          # 2 MiB of offsets, four times the blocks of the default file
LAG_INTERVAL = 0.001         # the ticker's asyncio.sleep
IDLE_S = 0.25                # ticker alone, before the load: the loop's idle baseline


def open_target(params: JSONDict) -> Target:
    """Open the prepared file read-write and rebuild the seeded offsets and payload."""
    payload = random.Random(params["seed"] + 5).randbytes(BLOCK)
    return clients.open_target(params, os.O_RDWR, payload)


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
        """Lateness percentiles (ms) of the ticks that woke within ``[lo, hi]``."""
        late = sorted(x for t, x in zip(self.wakes, self.late, strict=True) if lo <= t <= hi)
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


# --------------------------------------------------------------------------- the write


async def verify(client: Client, target: Target) -> None:
    """Zero a block, write it through the client, read it back with ``os.pread``."""
    off = target.offsets[0]
    os.pwrite(target.fd, bytes(BLOCK), off)
    n = await client.one(off)
    if n != BLOCK or os.pread(target.fd, BLOCK, off) != target.payload:
        raise RuntimeError(f"write at offset {off} did not land (returned {n})")


async def aiofiles_write(f: Any, target: Target, off: int) -> int:
    await f.seek(off)
    n: int = await f.write(target.payload)
    await f.flush()
    return n


async def aiofiles_writer(f: Any, target: Target, start: int, pacer: Pacer) -> None:
    buf, offs, mask, tick = target.payload, target.offsets, target.mask, pacer.tick
    j = start
    while True:
        await f.seek(offs[j & mask])
        await f.write(buf)
        await f.flush()
        j += 1
        if not tick():
            return


WRITE = Op(workload="W5", name="pwrite", arg=lambda target: target.payload, verify=verify,
           aiofiles_mode="r+b", aiofiles_one=aiofiles_write, aiofiles_loop=aiofiles_writer,
           aiofiles_info={"handles": "one per writer, r+b", "per_write": "seek + write + flush"})


# --------------------------------------------------------------------------- runs


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


def run_cell(system: System, writers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: measure ``system`` with ``writers`` concurrent writers."""
    target = open_target(params)
    try:
        started = time.perf_counter()
        os.fdatasync(target.fd)  # start clean: no dirty pages left by the previous cell
        presync = {"presync_s": round(time.perf_counter() - started, 3)}
        if system.kind == "sync":
            return (WRITE.measure_sync(target, timing) | lag_fields(LagProbe().summary())
                    | {"info": {"note": "one thread, no event loop; N ignored; lag n/a"}
                       | presync})
        result = WRITE.measure_async(system, writers, target, timing, with_lag)
        result["info"] |= presync
        return result
    finally:
        os.close(target.fd)


# --------------------------------------------------------------------------- parent side


def prepare(cfg: PrepareConfig) -> JSONDict:
    """Create (first run only) and warm the target file; return the workers' parameters."""
    return prepare_file(cfg, "w5-write", DEFAULT_FILE_SIZE, POOL_SIZE) | {
        "lag_interval_s": LAG_INTERVAL, "idle_lag_s": IDLE_S}


WORKLOAD = Workload(
    name="W5",
    title="random 4 KiB buffered pwrite (W5w), with event-loop lag",
    unit="writes",
    prepare=prepare,
    default_systems=default_systems,
    run_cell=run_cell,
    concurrency_free=frozenset({"sync"}),
    default_readers=(1, 64),
)
