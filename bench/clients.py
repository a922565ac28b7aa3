"""What the random 4 KiB workloads (W1 reads, W5 writes) share: target file and systems.

A workload times one operation at random 4 KiB-aligned offsets of a prepared file and
describes it as an ``Op``: the function both ``os`` and ``aionative`` name (``pread`` or
``pwrite``, each called as ``fn(fd, arg, offset)``), its middle argument (a length or a
payload), how aiofiles spells it, and how to check one result. Everything else lives here:
preparing and opening the target, the systems chosen by default, opening each system's client
for N concurrent tasks, their per-task loops and ``info()``, and the plain ``os`` loop
(``sync``). The loops bind every name they touch to a local first and are written out per
system, because their per-operation overhead is what the benchmarks measure.
"""

from __future__ import annotations

import array
import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from bench.common import (
    JSONDict,
    PrepareConfig,
    Skip,
    System,
    Timing,
    ensure_random_file,
    import_aionative,
    loop_factory,
    make_hot,
    native_systems,
    offset_pool,
    size_label,
)
from bench.meter import Meter, Pacer, Quota, StatsFn

BLOCK = 4096
Tick = Callable[[], bool]
Around = Callable[[Callable[[], Awaitable[Meter]]], Awaitable[JSONDict]]


# --------------------------------------------------------------------------- target


@dataclass(frozen=True)
class Target:
    """The open data file, the offsets every task draws from, and the payload (writes)."""

    path: str
    fd: int
    offsets: array.array[int]
    payload: bytes = b""

    @property
    def mask(self) -> int:
        return len(self.offsets) - 1

    def start(self, task: int, tasks: int) -> int:
        """Pool index where ``task`` of ``tasks`` begins, spread evenly."""
        return task * len(self.offsets) // tasks


def open_target(params: JSONDict, flags: int = os.O_RDONLY, payload: bytes = b"") -> Target:
    """Open the prepared file and rebuild the seeded offset pool (done before timing)."""
    offsets = offset_pool(params["seed"], params["file_size"], BLOCK, params["pool"])
    return Target(params["path"], os.open(params["path"], flags), offsets, payload)


def prepare_file(cfg: PrepareConfig, stem: str, default_size: int, pool: int) -> JSONDict:
    """Create (first run only) and warm ``<stem>-<size>.bin``; return the workers' parameters."""
    size = cfg.file_size or default_size
    if size < BLOCK * 2:
        raise ValueError("file size must be at least 8 KiB")
    path = cfg.data_dir / f"{stem}-{size_label(size)}.bin"
    ensure_random_file(path, size, cfg.log)
    cfg.log(f"warming {path.name} into the page cache")
    make_hot(path)
    return {"path": str(path), "file_size": size, "block": BLOCK, "seed": cfg.seed,
            "pool": pool}


def default_systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    """All systems this environment can run, and notes on those it cannot."""
    systems, notes, _ = native_systems(probe)
    systems.append("executor-asyncio")
    if probe["aiofiles"]["ok"]:
        systems.append("aiofiles-asyncio")
    else:
        notes.append(f"aiofiles-asyncio skipped: {probe['aiofiles']['error']}")
    return systems, notes


# --------------------------------------------------------------------------- the operation


class Client(Protocol):
    """One async system, opened inside the running loop for N concurrent tasks."""

    stats: StatsFn | None

    async def one(self, off: int) -> Any: ...
    async def worker(self, index: int, start: int, pacer: Pacer) -> None: ...
    async def aclose(self) -> None: ...
    def info(self) -> JSONDict: ...


@dataclass(frozen=True)
class Op:
    """One workload's operation, as each system spells it (see the module docstring).

    ``aiofiles_one(handle, target, off)`` does one operation on an aiofiles handle and
    ``aiofiles_loop(handle, target, start, pacer)`` is one task's loop; ``aiofiles_info`` is
    added to that client's ``info()``. ``verify(client, target)`` raises if one operation
    through the client is wrong.

    ``measure_sync`` and ``measure_async`` time one cell. ``around(measure)``, if given,
    wraps the async part: ``measure()`` starts the meter, runs the tasks and returns the
    stopped meter, and ``around`` returns the cell's figures (W5 runs its lag ticker there).
    """

    workload: str
    name: str
    arg: Callable[[Target], int | bytes]
    verify: Callable[[Client, Target], Awaitable[None]]
    aiofiles_mode: str
    aiofiles_one: Callable[[Any, Target, int], Awaitable[Any]]
    aiofiles_loop: Callable[[Any, Target, int, Pacer], Awaitable[None]]
    aiofiles_info: JSONDict

    async def open_client(self, system: System, tasks: int, target: Target) -> Client:
        """Open ``system`` for ``tasks`` concurrent tasks and verify one operation."""
        client: Client
        if system.kind == "aionative":
            assert system.backend is not None
            client = await AionativeClient.open(self, target, system.backend)
        elif system.kind == "executor":
            client = ExecutorClient(self, target)
        elif system.kind == "aiofiles":
            client = await AiofilesClient.open(self, target, tasks)
        else:
            raise ValueError(f"{self.workload} has no async system {system.name!r}")
        await self.verify(client, target)
        return client

    def loop_args(self, target: Target,
                  pacer: Pacer) -> tuple[int, int | bytes, array.array[int], int, Tick]:
        """What a task's loop binds to locals: fd, middle argument, offsets, mask, tick."""
        return target.fd, self.arg(target), target.offsets, target.mask, pacer.tick

    def sync_loop(self, target: Target, pacer: Pacer) -> None:
        """Plain ``os.<name>`` loop on this thread."""
        fn = getattr(os, self.name)
        fd, arg, offs, mask, tick = self.loop_args(target, pacer)
        j = 0
        while True:
            fn(fd, arg, offs[j & mask])
            j += 1
            if not tick():
                return

    def measure_sync(self, target: Target, timing: Timing) -> JSONDict:
        """The ``sync`` cell: ``sync_loop`` under a meter, no event loop."""
        meter = Meter(timing)
        self.sync_loop(target, meter)
        return meter.result()

    def measure_async(self, system: System, tasks: int, target: Target, timing: Timing,
                      around: Around | None = None) -> JSONDict:
        """An async cell on a fresh event loop of ``system``'s kind; figures plus ``info``."""
        assert system.loop is not None
        with asyncio.Runner(loop_factory=loop_factory(system.loop)) as runner:
            return runner.run(self._timed(system, tasks, target, timing, around or _plain))

    async def _timed(self, system: System, tasks: int, target: Target, timing: Timing,
                     around: Around) -> JSONDict:
        client = await self.open_client(system, tasks, target)
        try:
            async def measure() -> Meter:
                meter = Meter(timing, client.stats)
                await run_workers(client, target, [meter] * tasks)
                return meter

            result = await around(measure)
            result["info"] = client.info()
        finally:
            await client.aclose()
        return result


async def _plain(measure: Callable[[], Awaitable[Meter]]) -> JSONDict:
    return (await measure()).result()


# --------------------------------------------------------------------------- clients


class NothingToClose:
    """Base of the clients that hold no handles of their own."""

    async def aclose(self) -> None:
        pass


@dataclass
class AionativeClient(NothingToClose):
    """``aionative.<name>`` on the backend chosen by ``AIONATIVE_BACKEND``."""

    op: Op
    target: Target
    mod: ModuleType
    backend: str
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, op: Op, target: Target, backend: str) -> AionativeClient:
        mod = import_aionative()
        if not hasattr(mod, op.name):
            raise Skip(f"aionative has no {op.name}")
        available = list(mod.available_backends())
        if backend not in available:
            raise Skip(f"aionative backend {backend} not available here (have {available})")
        return cls(op, target, mod, backend, getattr(mod, "engine_stats", None))

    async def one(self, off: int) -> Any:
        result = await getattr(self.mod, self.op.name)(self.target.fd, self.op.arg(self.target),
                                                       off)
        got = self.info()["backend_info"].get("backend", self.backend)
        if got != self.backend:
            raise RuntimeError(f"asked for backend {self.backend}, engine reports {got}; "
                               "is AIONATIVE_BACKEND being honoured?")
        return result

    async def worker(self, index: int, start: int, pacer: Pacer) -> None:
        fn = getattr(self.mod, self.op.name)
        fd, arg, offs, mask, tick = self.op.loop_args(self.target, pacer)
        j = start
        while True:
            await fn(fd, arg, offs[j & mask])
            j += 1
            if not tick():
                return

    def info(self) -> JSONDict:
        backend_info = getattr(self.mod, "backend_info", None)
        return {"backend_info": dict(backend_info()) if backend_info else {},
                "version": getattr(self.mod, "__version__", None)}


@dataclass
class ExecutorClient(NothingToClose):
    """``loop.run_in_executor(None, os.<name>, ...)`` on the loop's default thread pool."""

    op: Op
    target: Target
    stats: StatsFn | None = None

    async def one(self, off: int) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, getattr(os, self.op.name), self.target.fd,
                                          self.op.arg(self.target), off)

    async def worker(self, index: int, start: int, pacer: Pacer) -> None:
        run = asyncio.get_running_loop().run_in_executor
        fn = getattr(os, self.op.name)
        fd, arg, offs, mask, tick = self.op.loop_args(self.target, pacer)
        j = start
        while True:
            await run(None, fn, fd, arg, offs[j & mask])
            j += 1
            if not tick():
                return

    def info(self) -> JSONDict:
        return {"executor": "loop default ThreadPoolExecutor",
                "max_workers": min(32, (os.cpu_count() or 1) + 4)}


@dataclass
class AiofilesClient:
    """One ``aiofiles.open(path, op.aiofiles_mode)`` handle per task, used as ``op`` says."""

    op: Op
    target: Target
    handles: list[Any] = field(default_factory=list)
    version: str | None = None
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, op: Op, target: Target, tasks: int) -> AiofilesClient:
        try:
            import aiofiles  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise Skip(f"aiofiles not importable: {exc}") from exc
        handles = await asyncio.gather(*(aiofiles.open(target.path, op.aiofiles_mode)
                                         for _ in range(tasks)))
        return cls(op, target, list(handles), getattr(aiofiles, "__version__", None))

    async def one(self, off: int) -> Any:
        return await self.op.aiofiles_one(self.handles[0], self.target, off)

    async def worker(self, index: int, start: int, pacer: Pacer) -> None:
        await self.op.aiofiles_loop(self.handles[index], self.target, start, pacer)

    async def aclose(self) -> None:
        await asyncio.gather(*(h.close() for h in self.handles))
        self.handles.clear()

    def info(self) -> JSONDict:
        return {"aiofiles_version": self.version} | self.op.aiofiles_info


# --------------------------------------------------------------------------- runs


async def run_workers(client: Client, target: Target, pacers: list[Pacer]) -> None:
    """Run one task per pacer until each pacer says stop."""
    n = len(pacers)
    await asyncio.gather(*(client.worker(i, target.start(i, n), p)
                           for i, p in enumerate(pacers)))


async def run_batch(client: Client, target: Target, tasks: int, total: int) -> None:
    """Exactly ``total`` operations spread over ``tasks`` tasks (pytest-benchmark rounds)."""
    base, extra = divmod(total, tasks)
    await run_workers(client, target, [Quota(base + (i < extra)) for i in range(tasks)])
