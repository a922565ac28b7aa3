"""W1: hot random 4 KiB reads of a page-cached file, N concurrent readers.

This is the case where the kernel does almost no work (a page-cache copy of 4 KiB), so the
figures expose each system's own overhead per read: thread hops for aiofiles and
``run_in_executor``, submission/completion and future round trips for aionative. The plain
``os.pread`` loop (``sync``) is the single-thread ceiling: it blocks the loop, so it is not a
usable asyncio design, but nothing async can beat it by much on a hot cache.

Systems (each cell in its own worker process):

- ``aionative-<backend>-<loop>``: N tasks, each ``await aionative.pread(fd, 4096, off)``.
- ``aiofiles-<loop>``: N tasks, each with its own ``aiofiles.open(path, "rb")`` handle doing
  ``await f.seek(off); await f.read(4096)`` (how aiofiles users read at an offset).
- ``executor-<loop>``: ``await loop.run_in_executor(None, os.pread, fd, 4096, off)``.
- ``sync``: ``os.pread`` in a loop on one thread, no event loop; N does not apply.

Offsets are 4 KiB-aligned, drawn from a seeded RNG into a pool before timing; reader i starts
at its own place in the pool so readers do not read the same blocks in lockstep.
"""

from __future__ import annotations

import array
import asyncio
import os
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
from bench.meter import Meter, Pacer, Quota, StatsFn

BLOCK = 4096
DEFAULT_FILE_SIZE = 1 << 30
POOL_SIZE = 1 << 18          # 2 MiB of offsets: far more blocks than any cache level holds


@dataclass(frozen=True)
class Target:
    """The open hot file and the offsets every reader draws from."""

    path: str
    fd: int
    offsets: array.array[int]

    @property
    def mask(self) -> int:
        return len(self.offsets) - 1

    def start(self, reader: int, readers: int) -> int:
        """Pool index where ``reader`` of ``readers`` begins, spread evenly."""
        return reader * len(self.offsets) // readers


def open_target(params: JSONDict) -> Target:
    """Open the prepared file and rebuild the seeded offset pool (done before timing)."""
    offsets = offset_pool(params["seed"], params["file_size"], BLOCK, params["pool"])
    return Target(params["path"], os.open(params["path"], os.O_RDONLY), offsets)


# --------------------------------------------------------------------------- clients


class Client(Protocol):
    """One async system, opened inside the running loop for N readers."""

    stats: StatsFn | None

    async def read_one(self, off: int) -> bytes: ...
    async def reader(self, index: int, start: int, pacer: Pacer) -> None: ...
    async def aclose(self) -> None: ...
    def info(self) -> JSONDict: ...


@dataclass
class AionativeClient:
    """``aionative.pread`` on the backend chosen by ``AIONATIVE_BACKEND``."""

    mod: ModuleType
    target: Target
    backend: str
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, target: Target, backend: str) -> AionativeClient:
        mod = import_aionative()
        available = list(mod.available_backends())
        if backend not in available:
            raise Skip(f"aionative backend {backend} not available here (have {available})")
        stats = getattr(mod, "engine_stats", None)
        return cls(mod, target, backend, stats)

    async def read_one(self, off: int) -> bytes:
        data: bytes = await self.mod.pread(self.target.fd, BLOCK, off)
        self._check_backend()
        return data

    def _check_backend(self) -> None:
        got = self.info()["backend_info"].get("backend", self.backend)
        if got != self.backend:
            raise RuntimeError(f"asked for backend {self.backend}, engine reports {got}; "
                               "is AIONATIVE_BACKEND being honoured?")

    async def reader(self, index: int, start: int, pacer: Pacer) -> None:
        pread, fd, offs, mask, tick = (self.mod.pread, self.target.fd, self.target.offsets,
                                       self.target.mask, pacer.tick)
        j = start
        while True:
            await pread(fd, BLOCK, offs[j & mask])
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
    """``loop.run_in_executor(None, os.pread, ...)`` on the loop's default thread pool."""

    target: Target
    stats: StatsFn | None = None

    async def read_one(self, off: int) -> bytes:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, os.pread, self.target.fd, BLOCK, off)

    async def reader(self, index: int, start: int, pacer: Pacer) -> None:
        run = asyncio.get_running_loop().run_in_executor
        pread, fd, offs, mask, tick = (os.pread, self.target.fd, self.target.offsets,
                                       self.target.mask, pacer.tick)
        j = start
        while True:
            await run(None, pread, fd, BLOCK, offs[j & mask])
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
    """One ``aiofiles.open(path, "rb")`` handle per reader; ``seek`` then ``read``."""

    target: Target
    handles: list[Any] = field(default_factory=list)
    version: str | None = None
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, target: Target, readers: int) -> AiofilesClient:
        try:
            import aiofiles  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise Skip(f"aiofiles not importable: {exc}") from exc
        handles = await asyncio.gather(*(aiofiles.open(target.path, "rb")
                                         for _ in range(readers)))
        return cls(target, list(handles), getattr(aiofiles, "__version__", None))

    async def read_one(self, off: int) -> bytes:
        await self.handles[0].seek(off)
        data: bytes = await self.handles[0].read(BLOCK)
        return data

    async def reader(self, index: int, start: int, pacer: Pacer) -> None:
        f, offs, mask, tick = self.handles[index], self.target.offsets, self.target.mask, pacer.tick
        j = start
        while True:
            await f.seek(offs[j & mask])
            await f.read(BLOCK)
            j += 1
            if not tick():
                return

    async def aclose(self) -> None:
        await asyncio.gather(*(h.close() for h in self.handles))
        self.handles.clear()

    def info(self) -> JSONDict:
        return {"aiofiles_version": self.version, "handles": "one per reader"}


async def open_client(system: System, readers: int, target: Target) -> Client:
    """Open ``system`` for ``readers`` concurrent readers and check one read is correct."""
    client: Client
    if system.kind == "aionative":
        assert system.backend is not None
        client = await AionativeClient.open(target, system.backend)
    elif system.kind == "executor":
        client = ExecutorClient(target)
    elif system.kind == "aiofiles":
        client = await AiofilesClient.open(target, readers)
    else:
        raise ValueError(f"W1 has no async system {system.name!r}")
    await verify(client, target)
    return client


async def verify(client: Client, target: Target) -> None:
    """Compare one read against ``os.pread``; a benchmark of wrong answers is worthless."""
    off = target.offsets[0]
    got = await client.read_one(off)
    if got != os.pread(target.fd, BLOCK, off):
        raise RuntimeError(f"wrong data at offset {off} ({len(got)} bytes)")


# --------------------------------------------------------------------------- runs


async def run_readers(client: Client, target: Target, pacers: list[Pacer]) -> None:
    """Run one reader task per pacer until each pacer says stop."""
    n = len(pacers)
    await asyncio.gather(*(client.reader(i, target.start(i, n), p)
                           for i, p in enumerate(pacers)))


async def run_batch(client: Client, target: Target, readers: int, total: int) -> None:
    """Exactly ``total`` reads spread over ``readers`` tasks (for pytest-benchmark rounds)."""
    base, extra = divmod(total, readers)
    await run_readers(client, target, [Quota(base + (i < extra)) for i in range(readers)])


async def _timed_async(system: System, readers: int, target: Target,
                       timing: Timing) -> JSONDict:
    client = await open_client(system, readers, target)
    try:
        meter = Meter(timing, client.stats)
        await run_readers(client, target, [meter] * readers)
        result = meter.result()
        result["info"] = client.info()
    finally:
        await client.aclose()
    return result


def sync_loop(target: Target, pacer: Pacer) -> None:
    """Plain ``os.pread`` loop on this thread."""
    pread, fd, offs, mask, tick = os.pread, target.fd, target.offsets, target.mask, pacer.tick
    j = 0
    while True:
        pread(fd, BLOCK, offs[j & mask])
        j += 1
        if not tick():
            return


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: measure ``system`` with ``readers`` concurrent readers."""
    target = open_target(params)
    try:
        if system.kind == "sync":
            meter = Meter(timing)
            sync_loop(target, meter)
            return meter.result() | {"info": {"note": "one thread, no event loop; N ignored"}}
        assert system.loop is not None
        with asyncio.Runner(loop_factory=loop_factory(system.loop)) as runner:
            return runner.run(_timed_async(system, readers, target, timing))
    finally:
        os.close(target.fd)


# --------------------------------------------------------------------------- parent side


def prepare(cfg: PrepareConfig) -> JSONDict:
    """Create (first run only) and warm the hot file; return the workers' parameters."""
    size = cfg.file_size or DEFAULT_FILE_SIZE
    if size < BLOCK * 2:
        raise ValueError("file size must be at least 8 KiB")
    path = cfg.data_dir / f"w1-hot-{size_label(size)}.bin"
    ensure_random_file(path, size, cfg.log)
    cfg.log(f"warming {path.name} into the page cache")
    make_hot(path)
    return {"path": str(path), "file_size": size, "block": BLOCK, "seed": cfg.seed,
            "pool": POOL_SIZE}


def default_systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    """All systems this environment can run, and notes on those it cannot."""
    systems, notes = ["sync"], []
    loops = ["asyncio"]
    if probe["uvloop"]["ok"]:
        loops.append("uvloop")
    else:
        notes.append(f"uvloop variants skipped: {probe['uvloop']['error']}")
    native = probe["aionative"]
    if native["ok"]:
        systems += [f"aionative-{b}-{lp}" for b in native["backends"] for lp in loops]
    else:
        notes.append(f"aionative-* skipped: {native['error']}")
    systems.append("executor-asyncio")
    if probe["aiofiles"]["ok"]:
        systems.append("aiofiles-asyncio")
    else:
        notes.append(f"aiofiles-asyncio skipped: {probe['aiofiles']['error']}")
    return systems, notes


WORKLOAD = Workload(
    name="W1",
    title="hot random 4 KiB reads (page-cached file)",
    unit="reads",
    prepare=prepare,
    default_systems=default_systems,
    run_cell=run_cell,
    concurrency_free=frozenset({"sync"}),
)
