"""What the positional-I/O workloads (W1, W2, W3, W5, W5F, W6) share: targets and systems.

A workload times one operation at offsets drawn from a pool (random 4 KiB-aligned ones, or the
chunks of a file in order) and describes it as an ``Op``: the ``os`` function and its middle
argument (``os.pread(fd, 4096, off)``, ``os.pwrite(fd, payload, off)``, ``os.preadv(fd,
[buf], off)``), aionative's spelling (``pread``, ``pwrite``, ``preadinto``), caio's
(``read``/``write``, also what aiofile calls), how a file object does it (aiofiles, anyio's
``AsyncFile`` and ``aionative.open`` share the builtin's methods: ``seek`` + ``read`` …), and
how to check one result. Everything else lives here: preparing and opening the target, the
systems offered by default, opening each system's client for N concurrent tasks, their
per-task loops and ``info()``, and the plain ``os`` loop (``sync``). The loops bind every name
they touch to a local first and are written out per system, because their per-operation
overhead is what the benchmarks measure.

Systems (each cell in its own worker process):

- ``aionative-<backend>-<loop>``: ``await aionative.<op>(fd, arg, off)``;
- ``executor-<loop>``: ``await loop.run_in_executor(None, os.<op>, fd, arg, off)``;
- ``aiofiles-<loop>`` / ``anyio-<loop>`` / ``aionative.open-<backend>-<loop>``: one file object
  per task (``aiofiles.open``, ``anyio.open_file``, ``aionative.open``), ``await f.seek(off)``
  then ``await f.read(n)`` (or ``write`` + ``flush``; ``readinto``): how their users read at an
  offset, since none of them has a positional read. anyio's file object runs each call in
  anyio's worker threads (``anyio.to_thread.run_sync``), on asyncio here;
- ``caio-<backend>-<loop>``: a ``caio`` ``AsyncioContext`` of the backend (``io_uring``: caio's
  ``linux_uring`` with its defaults, which turn SQPOLL on where the kernel allows it, as here;
  ``io_uring_nosqpoll``: the same with ``sqpoll=False``; ``linux_aio``), ``await
  ctx.read(n, fd, off)`` / ``ctx.write(payload, fd, off)``;
- ``aiofile-<loop>``: ``aiofile.AIOFile(path)`` (one per file) and ``await
  afp.read_bytes(n, off)`` / ``afp.write_bytes(payload, off)``, on caio's default context;
- ``sync``: the ``os`` call in a loop on one thread, no event loop; N does not apply.

A system that cannot be imported or set up here raises ``Skip`` (the harness lists it in the
notes with the reason and does not try it again); each client checks one operation's result
before timing.
"""

from __future__ import annotations

import array
import asyncio
import mmap
import os
from collections.abc import Awaitable, Callable, Sequence
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
CAIO_BACKENDS = ("io_uring", "io_uring_nosqpoll", "linux_aio")
PEERS = ("anyio", "caio", "aiofile")


# --------------------------------------------------------------------------- target


@dataclass(frozen=True)
class Target:
    """The open data file(s), the offsets every task draws from, payload and buffers.

    Task ``i`` works on file ``i % len(paths)`` (``fd_of``) and, with ``buffers``, into
    ``buffers[i]``. With ``spread`` the tasks start at evenly spread places of the pool (random
    offsets: readers do not read the same blocks in lockstep); without, each starts at the
    first (sequential chunks of its own file).
    """

    paths: tuple[str, ...]
    fds: tuple[int, ...]
    offsets: array.array[int]
    payload: bytes = b""
    buffers: tuple[mmap.mmap, ...] = ()
    spread: bool = True

    @property
    def path(self) -> str:
        return self.paths[0]

    @property
    def fd(self) -> int:
        return self.fds[0]

    @property
    def mask(self) -> int:
        return len(self.offsets) - 1

    def fd_of(self, task: int) -> int:
        return self.fds[task % len(self.fds)]

    def path_of(self, task: int) -> str:
        return self.paths[task % len(self.paths)]

    def start(self, task: int, tasks: int) -> int:
        """Pool index where ``task`` of ``tasks`` begins."""
        return task * len(self.offsets) // tasks if self.spread else 0

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        for buf in self.buffers:
            buf.close()


def open_target(params: JSONDict, flags: int = os.O_RDONLY, payload: bytes = b"",
                buffers: int = 0, buffer_size: int = BLOCK) -> Target:
    """Open the prepared file and rebuild the seeded offset pool (done before timing);
    ``buffers`` page-aligned buffers (anonymous ``mmap``), one per task."""
    offsets = offset_pool(params["seed"], params["file_size"], BLOCK, params["pool"])
    return Target((params["path"],), (os.open(params["path"], flags),), offsets, payload,
                  tuple(mmap.mmap(-1, buffer_size) for _ in range(buffers)))


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


def peer_systems(probe: JSONDict, loops: Sequence[str] = ("asyncio",),
                 caio_backends: Sequence[str] = CAIO_BACKENDS) -> tuple[list[str], list[str]]:
    """anyio, caio (each backend that loads) and aiofile, on ``loops``; notes on the rest."""
    systems: list[str] = []
    notes: list[str] = []
    peers = probe.get("peers", {})
    for kind in PEERS:
        info = peers.get(kind, {"ok": False, "error": f"{kind} not probed"})
        if not info["ok"]:
            notes.append(f"{kind}-* skipped: {info['error']}")
            continue
        if kind != "caio":
            systems += [f"{kind}-{lp}" for lp in loops]
            continue
        for backend in caio_backends:
            why = info["backends"].get(backend.removesuffix("_nosqpoll"))
            if why is None:
                systems += [f"caio-{backend}-{lp}" for lp in loops]
            else:
                notes.append(f"caio-{backend}-* skipped: {why}")
    return systems, notes


def fio_systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    fio = probe.get("fio") or {}
    if fio.get("path"):
        return [f"fio-{e}" for e in ("io_uring", "libaio", "psync")], []
    return [], [f"fio-* skipped: {fio.get('error') or 'fio not probed'}"]


def default_systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    """All systems this environment can run for a read/write workload, and notes on the rest."""
    systems, notes, _ = native_systems(probe)
    systems.append("executor-asyncio")
    if probe["aiofiles"]["ok"]:
        systems.append("aiofiles-asyncio")
    else:
        notes.append(f"aiofiles-asyncio skipped: {probe['aiofiles']['error']}")
    for more, why in (peer_systems(probe), fio_systems(probe)):
        systems += more
        notes += why
    return systems, notes


# --------------------------------------------------------------------------- the operation


class Client(Protocol):
    """One async system, opened inside the running loop for N concurrent tasks."""

    stats: StatsFn | None

    async def one(self, off: int) -> Any: ...
    async def worker(self, index: int, start: int, pacer: Pacer) -> None: ...
    async def aclose(self) -> None: ...
    def info(self) -> JSONDict: ...


ArgFn = Callable[[Target, int], Any]
HandleOne = Callable[[Any, Target, int, int], Awaitable[Any]]
HandleLoop = Callable[[Any, Target, int, int, Pacer], Awaitable[None]]


def const(value: Any) -> ArgFn:
    return lambda target, task: value


def payload(target: Target, task: int) -> bytes:
    """The write workloads' argument: the target's payload."""
    return target.payload


@dataclass(frozen=True)
class Op:
    """One workload's operation, as each system spells it (see the module docstring).

    ``os_fn(fd, os_arg(target, task), off)`` is the ``sync`` and executor call;
    ``native_name`` / ``native_arg`` aionative's; ``peer_name`` (``read``/``write``) with
    ``peer_arg`` caio's and, as ``<peer_name>_bytes``, aiofile's. File objects are opened
    with ``handle_mode`` and ``handle_kwargs``; ``handle_one(f, target, task, off)`` does one
    operation and ``handle_loop(f, target, task, start, pacer)`` is one task's loop.
    ``verify(client, target)`` raises if one operation through the client is wrong.

    ``measure_sync`` and ``measure_async`` time one cell. ``around(measure)``, if given,
    wraps the async part: ``measure()`` starts the meter, runs the tasks and returns the
    stopped meter, and ``around`` returns the cell's figures (W5 and W6 run a lag ticker there).
    """

    workload: str
    os_fn: Callable[..., Any]
    os_arg: ArgFn
    native_name: str
    native_arg: ArgFn
    peer_name: str
    peer_arg: ArgFn
    verify: Callable[[Client, Target], Awaitable[None]]
    handle_mode: str
    handle_one: HandleOne
    handle_loop: HandleLoop
    handle_info: JSONDict
    handle_kwargs: Callable[[], JSONDict] = dict

    async def open_client(self, system: System, tasks: int, target: Target) -> Client:
        """Open ``system`` for ``tasks`` concurrent tasks and verify one operation."""
        client: Client
        kind = system.kind
        if kind in NATIVE_KINDS:
            assert system.backend is not None
            client = await AionativeClient.open(self, target, system.backend)
        elif kind == "executor":
            client = ExecutorClient(self, target)
        elif kind in HANDLE_KINDS:
            client = await HandleClient.open(self, target, tasks, system)
        elif kind == "caio":
            assert system.backend is not None
            client = CaioClient.open(self, target, system.backend)
        elif kind == "aiofile":
            client = await AiofileClient.open(self, target, tasks)
        else:
            raise ValueError(f"{self.workload} has no async system {system.name!r}")
        try:
            await self.verify(client, target)
        except BaseException:
            await client.aclose()
            raise
        return client

    def loop_args(self, target: Target, pacer: Pacer,
                  task: int = 0) -> tuple[int, Any, array.array[int], int, Tick]:
        """What an ``os`` loop binds to locals: fd, middle argument, offsets, mask, tick."""
        return (target.fd_of(task), self.os_arg(target, task), target.offsets, target.mask,
                pacer.tick)

    def sync_loop(self, target: Target, pacer: Pacer) -> None:
        """Plain ``os`` loop on this thread (several files: each whole in turn)."""
        fn = self.os_fn
        if len(target.fds) > 1:
            return self._sync_files(target, pacer)
        fd, arg, offs, mask, tick = self.loop_args(target, pacer)
        j = 0
        while True:
            fn(fd, arg, offs[j & mask])
            j += 1
            if not tick():
                return

    def _sync_files(self, target: Target, pacer: Pacer) -> None:
        fn, offs, tick = self.os_fn, target.offsets, pacer.tick
        while True:
            for task, fd in enumerate(target.fds):
                arg = self.os_arg(target, task)
                for off in offs:
                    fn(fd, arg, off)
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
    """``aionative.<op>`` on the backend chosen by ``AIONATIVE_BACKEND``."""

    op: Op
    target: Target
    mod: ModuleType
    backend: str
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, op: Op, target: Target, backend: str) -> AionativeClient:
        mod = import_aionative()
        if not hasattr(mod, op.native_name):
            raise Skip(f"aionative has no {op.native_name}")
        available = list(mod.available_backends())
        if backend not in available:
            raise Skip(f"aionative backend {backend} not available here (have {available})")
        return cls(op, target, mod, backend, getattr(mod, "engine_stats", None))

    async def one(self, off: int) -> Any:
        fn = getattr(self.mod, self.op.native_name)
        result = await fn(self.target.fd, self.op.native_arg(self.target, 0), off)
        got = self.info()["backend_info"].get("backend", self.backend)
        if got != self.backend:
            raise RuntimeError(f"asked for backend {self.backend}, engine reports {got}; "
                               "is AIONATIVE_BACKEND being honoured?")
        return result

    async def worker(self, index: int, start: int, pacer: Pacer) -> None:
        fn = getattr(self.mod, self.op.native_name)
        fd, arg = self.target.fd_of(index), self.op.native_arg(self.target, index)
        offs, mask, tick = self.target.offsets, self.target.mask, pacer.tick
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
    """``loop.run_in_executor(None, os.<op>, ...)`` on the loop's default thread pool."""

    op: Op
    target: Target
    stats: StatsFn | None = None

    async def one(self, off: int) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.op.os_fn, self.target.fd,
                                          self.op.os_arg(self.target, 0), off)

    async def worker(self, index: int, start: int, pacer: Pacer) -> None:
        run = asyncio.get_running_loop().run_in_executor
        fn = self.op.os_fn
        fd, arg, offs, mask, tick = self.op.loop_args(self.target, pacer, index)
        j = start
        while True:
            await run(None, fn, fd, arg, offs[j & mask])
            j += 1
            if not tick():
                return

    def info(self) -> JSONDict:
        return {"executor": "loop default ThreadPoolExecutor",
                "max_workers": min(32, (os.cpu_count() or 1) + 4)}


def _import(name: str) -> ModuleType:
    """Import a peer library, raising Skip with the reason if it cannot be imported."""
    import importlib

    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise Skip(f"{name} not importable: {exc!r}") from exc


def _open_fn(system: System) -> tuple[Callable[..., Any], JSONDict]:
    """The ``open`` of a file-object system, and what its ``info()`` reports."""
    if system.kind == "aiofiles":
        mod = _import("aiofiles")
        return mod.open, {"aiofiles_version": getattr(mod, "__version__", None)}
    if system.kind == "anyio":
        mod = _import("anyio")
        from importlib import metadata

        return mod.open_file, {"anyio_version": metadata.version("anyio"),
                               "threads": "anyio.to_thread (default limiter: 40)"}
    mod = import_aionative()
    available = list(mod.available_backends())
    if system.backend not in available:
        raise Skip(f"aionative backend {system.backend} not available here (have {available})")
    return mod.open, {"version": getattr(mod, "__version__", None), "module": mod}


HANDLE_KINDS = ("aiofiles", "anyio", "aionative.open")
NATIVE_KINDS = ("aionative", "aionative.preadinto")   # positional calls: AionativeClient


@dataclass
class HandleClient:
    """One file object per task (``aiofiles.open``, ``anyio.open_file``, ``aionative.open``),
    used as ``op`` says."""

    op: Op
    target: Target
    handles: list[Any]
    extra: JSONDict
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, op: Op, target: Target, tasks: int, system: System) -> HandleClient:
        open_, extra = _open_fn(system)
        mod = extra.pop("module", None)
        kwargs = op.handle_kwargs()

        async def one(task: int) -> Any:
            return await open_(target.path_of(task), op.handle_mode, **kwargs)

        handles = list(await asyncio.gather(*(one(i) for i in range(tasks))))
        client = cls(op, target, handles, extra)
        if mod is not None:
            client.stats = getattr(mod, "engine_stats", None)
            client.extra["backend_info"] = dict(mod.backend_info())
            if client.extra["backend_info"].get("backend") != system.backend:
                await client.aclose()
                raise RuntimeError(f"asked for backend {system.backend}, engine reports "
                                   f"{client.extra['backend_info'].get('backend')}")
        return client

    async def one(self, off: int) -> Any:
        return await self.op.handle_one(self.handles[0], self.target, 0, off)

    async def worker(self, index: int, start: int, pacer: Pacer) -> None:
        await self.op.handle_loop(self.handles[index], self.target, index, start, pacer)

    async def aclose(self) -> None:
        await asyncio.gather(*((getattr(h, "aclose", None) or h.close)() for h in self.handles))
        self.handles.clear()

    def info(self) -> JSONDict:
        return self.extra | self.op.handle_info


@dataclass
class CaioClient:
    """A caio ``AsyncioContext`` of one backend: ``ctx.read(n, fd, off)`` /
    ``ctx.write(payload, fd, off)``."""

    op: Op
    target: Target
    ctx: Any
    backend: str
    version: str | None
    stats: StatsFn | None = None

    @classmethod
    def open(cls, op: Op, target: Target, backend: str) -> CaioClient:
        caio = _import("caio")
        loop = asyncio.get_running_loop()
        kwargs: JSONDict = {}
        if backend.startswith("io_uring"):
            mod = _import("caio.linux_uring_asyncio")
            if backend.endswith("_nosqpoll"):
                kwargs["sqpoll"] = False
        elif backend == "linux_aio":
            mod = _import("caio.linux_aio_asyncio")
        else:
            raise ValueError(f"unknown caio backend {backend!r} (have {CAIO_BACKENDS})")
        try:
            ctx = mod.AsyncioContext(loop=loop, **kwargs)
        except Exception as exc:
            raise Skip(f"caio {backend} context could not be created: {exc!r}") from exc
        return cls(op, target, ctx, backend, getattr(caio, "__version__", None))

    async def one(self, off: int) -> Any:
        fn = getattr(self.ctx, self.op.peer_name)
        return await fn(self.op.peer_arg(self.target, 0), self.target.fd, off)

    async def worker(self, index: int, start: int, pacer: Pacer) -> None:
        fn = getattr(self.ctx, self.op.peer_name)
        fd, arg = self.target.fd_of(index), self.op.peer_arg(self.target, index)
        offs, mask, tick = self.target.offsets, self.target.mask, pacer.tick
        j = start
        while True:
            await fn(arg, fd, offs[j & mask])
            j += 1
            if not tick():
                return

    async def aclose(self) -> None:
        self.ctx.close()

    def info(self) -> JSONDict:
        context = self.ctx.context
        return {"caio_version": self.version, "context": type(self.ctx).__module__,
                "max_requests": self.ctx.MAX_REQUESTS_DEFAULT,
                "sqpoll": bool(getattr(context, "sqpoll", False))}


@dataclass
class AiofileClient:
    """``aiofile.AIOFile(path, mode)`` per file: ``read_bytes(n, off)`` / ``write_bytes``."""

    op: Op
    target: Target
    files: list[Any] = field(default_factory=list)
    version: str | None = None
    stats: StatsFn | None = None

    @classmethod
    async def open(cls, op: Op, target: Target, tasks: int) -> AiofileClient:
        aiofile = _import("aiofile")
        mode, kwargs = op.handle_mode, op.handle_kwargs()
        paths = target.paths[:max(1, tasks)]
        if kwargs:  # e.g. W2's O_DIRECT opener: open it ourselves, hand aiofile the object
            files = [aiofile.AIOFile.from_fp(open(p, mode, **kwargs)) for p in paths]  # noqa: ASYNC230, SIM115
        else:
            files = [aiofile.AIOFile(p, mode) for p in paths]
            await asyncio.gather(*(f.open() for f in files))
        return cls(op, target, files, getattr(aiofile, "__version__", None))

    def _fn(self, task: int) -> Callable[..., Awaitable[Any]]:
        afp = self.files[task % len(self.files)]
        fn: Callable[..., Awaitable[Any]] = getattr(afp, f"{self.op.peer_name}_bytes")
        return fn

    async def one(self, off: int) -> Any:
        return await self._fn(0)(self.op.peer_arg(self.target, 0), off)

    async def worker(self, index: int, start: int, pacer: Pacer) -> None:
        fn, arg = self._fn(index), self.op.peer_arg(self.target, index)
        offs, mask, tick = self.target.offsets, self.target.mask, pacer.tick
        j = start
        while True:
            await fn(arg, offs[j & mask])
            j += 1
            if not tick():
                return

    async def aclose(self) -> None:
        # AIOFile.close() fdatasyncs a writable file first: untimed, after the cell.
        await asyncio.gather(*(f.close() for f in self.files))
        for f in self.files:
            if not f._file_obj_owner and f._file_obj is not None:  # from_fp: ours to close
                f._file_obj.close()
        self.files.clear()

    def info(self) -> JSONDict:
        import caio

        return {"aiofile_version": self.version, "caio_context": caio.AsyncioContext.__module__,
                "files": len(self.files)}


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


def run_cell(op: Op, system: System, tasks: int, target: Target, timing: Timing,
             around: Around | None = None, sync_note: str = "") -> JSONDict:
    """The usual worker entry of a workload: ``sync`` or an async system (fio is separate)."""
    if system.kind.startswith("sync"):
        return op.measure_sync(target, timing) | {
            "info": {"note": "one thread, no event loop; N ignored" + sync_note}}
    return op.measure_async(system, tasks, target, timing, around)
