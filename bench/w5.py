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
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from bench.common import (
    JSONDict,
    PrepareConfig,
    Skip,
    System,
    Timing,
    Workload,
    ensure_random_file,
    import_aionative,
    loop_factory,
    make_hot,
    offset_pool,
    size_label,
)
from bench.meter import Meter, Pacer, StatsFn
from bench.w1 import default_systems

BLOCK = 4096
DEFAULT_FILE_SIZE = 256 << 20
POOL_SIZE = 1 << 18          # 2 MiB of offsets, four times the blocks of the default file
LAG_INTERVAL = 0.001         # the ticker's asyncio.sleep
IDLE_S = 0.25                # ticker alone, before the load: the loop's idle baseline


@dataclass(frozen=True)
class Target:
    """The open file (read-write), the offsets every writer draws from, and the payload."""

    path: str
    fd: int
    offsets: array.array[int]
    payload: bytes

    @property
    def mask(self) -> int:
        return len(self.offsets) - 1

    def start(self, writer: int, writers: int) -> int:
        """Pool index where ``writer`` of ``writers`` begins, spread evenly."""
        return writer * len(self.offsets) // writers


def open_target(params: JSONDict) -> Target:
    """Open the prepared file and rebuild the seeded offsets and payload (before timing)."""
    offsets = offset_pool(params["seed"], params["file_size"], BLOCK, params["pool"])
    payload = random.Random(params["seed"] + 5).randbytes(BLOCK)
    return Target(params["path"], os.open(params["path"], os.O_RDWR), offsets, payload)


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


# --------------------------------------------------------------------------- clients


class Client(Protocol):
    """One async system, opened inside the running loop for N writers."""

    stats: StatsFn | None

    async def write_one(self, off: int) -> int: ...
    async def writer(self, index: int, start: int, pacer: Pacer) -> None: ...
    async def aclose(self) -> None: ...
    def info(self) -> JSONDict: ...


@dataclass
class AionativeClient:
    """``aionative.pwrite`` on the backend chosen by ``AIONATIVE_BACKEND``."""

    mod: ModuleType
    target: Target
    backend: str
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, target: Target, backend: str) -> AionativeClient:
        mod = import_aionative()
        if not hasattr(mod, "pwrite"):
            raise Skip("aionative has no pwrite")
        available = list(mod.available_backends())
        if backend not in available:
            raise Skip(f"aionative backend {backend} not available here (have {available})")
        return cls(mod, target, backend, getattr(mod, "engine_stats", None))

    async def write_one(self, off: int) -> int:
        n: int = await self.mod.pwrite(self.target.fd, self.target.payload, off)
        got = self.info()["backend_info"].get("backend", self.backend)
        if got != self.backend:
            raise RuntimeError(f"asked for backend {self.backend}, engine reports {got}; "
                               "is AIONATIVE_BACKEND being honoured?")
        return n

    async def writer(self, index: int, start: int, pacer: Pacer) -> None:
        pwrite, fd, buf, offs, mask, tick = (self.mod.pwrite, self.target.fd,
                                             self.target.payload, self.target.offsets,
                                             self.target.mask, pacer.tick)
        j = start
        while True:
            await pwrite(fd, buf, offs[j & mask])
            j += 1
            if not tick():
                return

    async def aclose(self) -> None:
        pass

    def info(self) -> JSONDict:
        backend_info = getattr(self.mod, "backend_info", None)
        return {"backend_info": dict(backend_info()) if backend_info else {},
                "version": getattr(self.mod, "__version__", None)}


@dataclass
class ExecutorClient:
    """``loop.run_in_executor(None, os.pwrite, ...)`` on the loop's default thread pool."""

    target: Target
    stats: StatsFn | None = None

    async def write_one(self, off: int) -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, os.pwrite, self.target.fd,
                                          self.target.payload, off)

    async def writer(self, index: int, start: int, pacer: Pacer) -> None:
        run = asyncio.get_running_loop().run_in_executor
        pwrite, fd, buf, offs, mask, tick = (os.pwrite, self.target.fd, self.target.payload,
                                             self.target.offsets, self.target.mask, pacer.tick)
        j = start
        while True:
            await run(None, pwrite, fd, buf, offs[j & mask])
            j += 1
            if not tick():
                return

    async def aclose(self) -> None:
        pass

    def info(self) -> JSONDict:
        return {"executor": "loop default ThreadPoolExecutor",
                "max_workers": min(32, (os.cpu_count() or 1) + 4)}


@dataclass
class AiofilesClient:
    """One ``aiofiles.open(path, "r+b")`` handle per writer; ``seek``, ``write``, ``flush``."""

    target: Target
    handles: list[Any] = field(default_factory=list)
    version: str | None = None
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, target: Target, writers: int) -> AiofilesClient:
        try:
            import aiofiles  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise Skip(f"aiofiles not importable: {exc}") from exc
        handles = await asyncio.gather(*(aiofiles.open(target.path, "r+b")
                                         for _ in range(writers)))
        return cls(target, list(handles), getattr(aiofiles, "__version__", None))

    async def write_one(self, off: int) -> int:
        f = self.handles[0]
        await f.seek(off)
        n: int = await f.write(self.target.payload)
        await f.flush()
        return n

    async def writer(self, index: int, start: int, pacer: Pacer) -> None:
        f, buf, offs, mask, tick = (self.handles[index], self.target.payload,
                                    self.target.offsets, self.target.mask, pacer.tick)
        j = start
        while True:
            await f.seek(offs[j & mask])
            await f.write(buf)
            await f.flush()
            j += 1
            if not tick():
                return

    async def aclose(self) -> None:
        await asyncio.gather(*(h.close() for h in self.handles))
        self.handles.clear()

    def info(self) -> JSONDict:
        return {"aiofiles_version": self.version, "handles": "one per writer, r+b",
                "per_write": "seek + write + flush"}


async def open_client(system: System, writers: int, target: Target) -> Client:
    """Open ``system`` for ``writers`` concurrent writers and check one write lands."""
    client: Client
    if system.kind == "aionative":
        assert system.backend is not None
        client = await AionativeClient.open(target, system.backend)
    elif system.kind == "executor":
        client = ExecutorClient(target)
    elif system.kind == "aiofiles":
        client = await AiofilesClient.open(target, writers)
    else:
        raise ValueError(f"W5 has no async system {system.name!r}")
    await verify(client, target)
    return client


async def verify(client: Client, target: Target) -> None:
    """Zero a block, write it through the client, read it back with ``os.pread``."""
    off = target.offsets[0]
    os.pwrite(target.fd, bytes(BLOCK), off)
    n = await client.write_one(off)
    if n != BLOCK or os.pread(target.fd, BLOCK, off) != target.payload:
        raise RuntimeError(f"write at offset {off} did not land (returned {n})")


# --------------------------------------------------------------------------- runs


async def run_writers(client: Client, target: Target, pacers: list[Pacer]) -> None:
    """Run one writer task per pacer until each pacer says stop."""
    n = len(pacers)
    await asyncio.gather(*(client.writer(i, target.start(i, n), p)
                           for i, p in enumerate(pacers)))


def lag_fields(summary: JSONDict) -> JSONDict:
    """Flat ``lag_*`` keys of a LagProbe summary, as the harness and report expect."""
    return {f"lag_{k}": v for k, v in summary.items()}


async def _timed_async(system: System, writers: int, target: Target,
                       timing: Timing) -> JSONDict:
    client = await open_client(system, writers, target)
    try:
        idle = await idle_lag()
        meter = Meter(timing, client.stats)
        probe = LagProbe()
        ticker = asyncio.create_task(probe.run())
        try:
            await run_writers(client, target, [meter] * writers)
        finally:
            probe.stop()
            await ticker
        result = meter.result()
        window = meter.window
        assert window is not None
        result |= lag_fields(probe.summary(*window)) | {"lag_idle": idle}
        result["info"] = client.info()
    finally:
        await client.aclose()
    return result


def sync_loop(target: Target, pacer: Pacer) -> None:
    """Plain ``os.pwrite`` loop on this thread."""
    pwrite, fd, buf, offs, mask, tick = (os.pwrite, target.fd, target.payload, target.offsets,
                                         target.mask, pacer.tick)
    j = 0
    while True:
        pwrite(fd, buf, offs[j & mask])
        j += 1
        if not tick():
            return


def run_cell(system: System, writers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: measure ``system`` with ``writers`` concurrent writers."""
    target = open_target(params)
    try:
        started = time.perf_counter()
        os.fdatasync(target.fd)  # start clean: no dirty pages left by the previous cell
        presync = {"presync_s": round(time.perf_counter() - started, 3)}
        if system.kind == "sync":
            meter = Meter(timing)
            sync_loop(target, meter)
            return (meter.result() | lag_fields(LagProbe().summary())
                    | {"info": {"note": "one thread, no event loop; N ignored; lag n/a"}
                       | presync})
        assert system.loop is not None
        with asyncio.Runner(loop_factory=loop_factory(system.loop)) as runner:
            result = runner.run(_timed_async(system, writers, target, timing))
        result["info"] |= presync
        return result
    finally:
        os.close(target.fd)


# --------------------------------------------------------------------------- parent side


def prepare(cfg: PrepareConfig) -> JSONDict:
    """Create (first run only) and warm the target file; return the workers' parameters."""
    size = cfg.file_size or DEFAULT_FILE_SIZE
    if size < BLOCK * 2:
        raise ValueError("file size must be at least 8 KiB")
    path = cfg.data_dir / f"w5-write-{size_label(size)}.bin"
    ensure_random_file(path, size, cfg.log)
    cfg.log(f"warming {path.name} into the page cache")
    make_hot(path)
    return {"path": str(path), "file_size": size, "block": BLOCK, "seed": cfg.seed,
            "pool": POOL_SIZE, "lag_interval_s": LAG_INTERVAL, "idle_lag_s": IDLE_S}


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
