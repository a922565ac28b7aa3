"""W8: ten large files written at once, one ``write()`` each, alone and beside CPU work.

What asyncio users try first when they ask whether async makes file I/O faster: ten tasks,
gathered, each ``async with open(path_i, "wb") as f: await f.write(data)`` — ten files of
256 MiB (64 MiB in the quick profile) from one payload — and the same writes gathered with three
tasks that each sum ``range(10**7)`` in pure Python, hoping the writes overlap the computation.
``W8`` writes in the data directory (ext4 here), ``W8-tmpfs`` on a tmpfs.
Beside them, ``sync.threads`` writes the files in ten threads without an event loop; its lag
column is an idle loop's in another process during those writes: the machine's own share of
any loop's lag while ten files are written in parallel. With the sums, an open for writing
that takes a turn of the loop lands only after the three sums have run (they are made ready in
one iteration), and its write follows them; aionative on io_uring waits for its opens in the
next iteration's first callback instead (the design page, "Large writes").

A cell runs ``ROUNDS`` rounds (5; 3 in the quick profile); each round deletes the files (and, on a disk, ``sync``s, so no
round inherits another's dirty pages: untimed), then times the writes alone, then the writes
with the sums. The figures are the medians of the rounds:

- ``pass_s``: the writes alone, wall time (``ops_per_s``: files a second; ``mb_per_s``);
- ``cpu_pass_s``: the writes with the sums; ``sums_s``: the three sums alone, the same way;
- ``lag_p99_ms`` (p50, max): a 1 ms ticker on the same loop during the writes alone;
- ``rss_peak_mib``: the process's peak resident memory during the writes (Linux ``VmHWM``,
  reset first), beside ``data_mib``, the payload the caller holds.

Systems (each cell in its own worker process):

- ``aionative-<backend>-<loop>``: ``aionative.open``;
- ``aiofiles-<loop>`` / ``anyio-<loop>``: ``aiofiles.open`` / ``anyio.open_file`` (a worker
  thread each call);
- ``sync``: the builtin, the files one after the other, then the sums, on one thread;
- ``sync.threads``: the builtin in ten threads at once, at nice +19, beside the sums on the
  main thread — no event loop. Its lag is an idle loop's, ticking in another process during the
  writes: what the machine itself (the kernel's writeback, interrupts, the writers' page-cache
  copies on every CPU) adds to any loop's wake-ups while ten files are written in parallel, the
  floor under an in-process writer's lag.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench.common import (
    JSONDict,
    PrepareConfig,
    Skip,
    System,
    Timing,
    Variant,
    Workload,
    import_aionative,
    loop_factory,
    native_systems,
    size_label,
)
from bench.meter import Census, LagProbe, lag_fields, reset_rss_peak, rss_peak_mib

FILES = 10
FILE_SIZE = 256 << 20
QUICK_FILE_SIZE = 64 << 20
ROUNDS = 5        # rounds a cell; 3 with smaller files (the quick profile)
SUMS, SUM_TO = 3, 10**7
KINDS = ("sync", "sync.threads", "aionative", "aiofiles", "anyio")
WRITER_NICE = 19  # sync.threads: its writers as nice as Linux allows


def cpu_work() -> int:
    """One of the sums: pure Python, holds the GIL throughout."""
    total = 0
    for i in range(SUM_TO):
        total += i
    return total


def _fresh(paths: list[str], disk: bool) -> None:
    """Untimed: no files from the last round, and (on a disk) no dirty pages left."""
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    if disk:
        os.sync()


def _check(paths: list[str], size: int) -> None:
    for p in paths:
        if os.stat(p).st_size != size:
            raise RuntimeError(f"{p}: {os.stat(p).st_size} bytes written, expected {size}")


class _AwaitedOpen:
    """``async with`` over an open that is awaited (anyio's): the file is closed on exit."""

    def __init__(self, opening: Any) -> None:
        self._opening = opening

    async def __aenter__(self) -> Any:
        self._file = await self._opening
        return self._file

    async def __aexit__(self, *exc: object) -> None:
        await self._file.aclose()


def _opener(system: System) -> Callable[[str], Any]:
    """The async ``open(path, "wb")`` of a system."""
    if system.kind == "aionative":
        mod = import_aionative()
        if system.backend not in mod.available_backends():
            raise Skip(f"aionative backend {system.backend} not available here")
        return lambda p: mod.open(p, "wb")
    if system.kind == "aiofiles":
        try:
            import aiofiles  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise Skip(f"aiofiles not importable: {exc}") from exc
        return lambda p: aiofiles.open(p, "wb")
    if system.kind == "anyio":
        try:
            import anyio
        except ImportError as exc:
            raise Skip(f"anyio not importable: {exc}") from exc
        return lambda p: _AwaitedOpen(anyio.open_file(p, "wb"))
    raise ValueError(f"W8 has no system {system.name!r} (kinds: {', '.join(KINDS)})")


async def _async_rounds(system: System, paths: list[str], data: bytes,
                        disk: bool) -> JSONDict:
    open_ = _opener(system)

    async def one(path: str) -> None:
        async with open_(path) as f:
            await f.write(data)

    async def sums() -> None:
        await asyncio.sleep(0)  # the writes are made first, as their tasks were
        cpu_work()

    async def timed(jobs: Callable[[], list[Coroutine[Any, Any, None]]]) -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*jobs())
        return time.perf_counter() - t0

    writes, with_cpu, alone, lags, peaks, cpu = [], [], [], [], [], []
    census = Census()
    await timed(lambda: [one(p) for p in paths[:1]])  # warm: the engine, the imports
    for _ in range(_rounds(len(data))):
        _fresh(paths, disk)
        probe = LagProbe()
        ticker = asyncio.create_task(probe.run())
        await asyncio.sleep(0.01)
        reset_rss_peak()
        census.attach(asyncio.get_running_loop())
        t0, c0 = time.perf_counter(), _cpu_s()
        writes.append(await timed(lambda: [one(p) for p in paths]))
        cpu.append(_cpu_s() - c0)
        census.detach()
        census.sample()
        peaks.append(rss_peak_mib())
        probe.stop()
        await ticker
        lags.append(probe.summary(t0, t0 + writes[-1]))
        _check(paths, len(data))
        _fresh(paths, disk)
        with_cpu.append(await timed(lambda: [one(p) for p in paths] +
                                    [sums() for _ in range(SUMS)]))
        _check(paths, len(data))
        alone.append(await timed(lambda: [sums() for _ in range(SUMS)]))
    _fresh(paths, disk)
    result = _figures(writes, with_cpu, alone, peaks, len(data), cpu, census)
    result |= _lag_of_rounds(lags)
    if system.kind == "aionative":
        mod = import_aionative()
        info = dict(mod.backend_info())
        if info.get("backend") != system.backend:
            raise RuntimeError(f"asked for {system.backend}, engine reports {info}")
        result["info"] = {"backend_info": info, "engine_stats": dict(mod.engine_stats())}
    return result


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _in_threads(paths: list[str], data: bytes, main: Callable[[], object] = lambda: None
                ) -> None:
    """sync.threads: the files written by ten threads at once at nice +WRITER_NICE (Linux
    nice values are per thread), while ``main`` runs on this thread."""
    def one(path: str) -> None:
        os.setpriority(os.PRIO_PROCESS, 0, WRITER_NICE)
        _write(path, data)

    threads = [threading.Thread(target=one, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    main()
    for t in threads:
        t.join()


# An idle loop in a process of its own: LagProbe's ticker until a line on stdin names a span
# (time.perf_counter() is CLOCK_MONOTONIC, one clock for every process), then the ticks'
# summary over that span as one JSON line.
_IDLE_TICKER = """
import asyncio, json, sys
from bench.meter import LagProbe

async def main():
    probe = LagProbe()
    ticker = asyncio.create_task(probe.run())
    loop = asyncio.get_running_loop()
    print("ready", flush=True)
    span = await loop.run_in_executor(None, sys.stdin.readline)
    probe.stop()
    await ticker
    lo, hi = map(float, span.split())
    print(json.dumps(probe.summary(lo, hi)), flush=True)

asyncio.run(main())
"""


def _idle_ticker() -> subprocess.Popen[str]:
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [root, os.environ.get("PYTHONPATH")])))
    child = subprocess.Popen([sys.executable, "-c", _IDLE_TICKER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError("the idle ticker did not start")
    return child


def _idle_lag(child: subprocess.Popen[str], lo: float, hi: float) -> JSONDict:
    out, _ = child.communicate(f"{lo} {hi}\n", timeout=60)
    summary: JSONDict = json.loads(out.strip().splitlines()[-1])
    return summary


def _sync_rounds(paths: list[str], data: bytes, disk: bool, threads: bool = False) -> JSONDict:
    def writes() -> None:
        if threads:
            _in_threads(paths, data)
            return
        for p in paths:
            _write(p, data)

    def sums() -> None:
        for _ in range(SUMS):
            cpu_work()

    def writes_and_sums() -> None:
        if threads:
            _in_threads(paths, data, sums)
            return
        writes()
        sums()

    def timed(fn: Callable[[], None]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    w, c, s, peaks, cpu, lags = [], [], [], [], [], []
    for _ in range(_rounds(len(data))):
        _fresh(paths, disk)
        ticker = _idle_ticker() if threads else None
        reset_rss_peak()
        c0, t0 = _cpu_s(), time.perf_counter()
        w.append(timed(writes))
        cpu.append(_cpu_s() - c0)
        peaks.append(rss_peak_mib())
        if ticker is not None:
            lags.append(_idle_lag(ticker, t0, t0 + w[-1]))
        _fresh(paths, disk)
        c.append(timed(writes_and_sums))
        s.append(timed(sums))
    _fresh(paths, disk)
    census = Census()
    census.sample()
    result = _figures(w, c, s, peaks, len(data), cpu, census)
    if not threads:
        return result | {"info": {"note": "builtin open(), the files one after the other, "
                                           "one thread"}}
    return result | _lag_of_rounds(lags) | {"info": {"note": (
        f"builtin open() in {FILES} threads at nice +{WRITER_NICE}, the sums on the main "
        "thread; lag: an idle loop in another process during the writes")}}


def _lag_of_rounds(lags: list[JSONDict]) -> JSONDict:
    """The worst round's lag figures, with the median of the rounds' p99 as ``lag_p99_ms``."""
    worst = max(lags, key=lambda s: s["p99_ms"] or 0.0)
    return lag_fields(worst) | {"lag_p99_ms": statistics.median(
        s["p99_ms"] for s in lags if s["p99_ms"] is not None)}


def _rounds(size: int) -> int:
    return ROUNDS if size >= FILE_SIZE else 3


def _cpu_s() -> float:
    """The process's CPU time (every thread's, io_uring's workers included)."""
    t = os.times()
    return t.user + t.system


def _figures(writes: list[float], with_cpu: list[float], alone: list[float],
             peaks: list[float], size: int, cpu: list[float], census: Census) -> JSONDict:
    pass_s = statistics.median(writes)
    cpu_s = statistics.median(cpu)
    return {"pass_s": pass_s, "ops_per_s": FILES / pass_s, "mb_per_s": FILES * size / pass_s / 1e6,
            "passes": len(writes), "cpu_us_per_op": cpu_s / FILES * 1e6,
            "cpu_util": cpu_s / pass_s, "threads_peak": census.threads_peak,
            "iou_workers_peak": census.iou_peak, "rss_peak_mib": max(peaks),
            "cpu_pass_s": statistics.median(with_cpu), "sums_s": statistics.median(alone),
            "data_mib": size / (1 << 20), "rounds": len(writes),
            "writes_s": writes, "cpu_passes_s": with_cpu}


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: ``ROUNDS`` rounds of the writes alone and beside the sums."""
    paths = [str(Path(params["dir"]) / f"w8-{i}.bin") for i in range(FILES)]
    data = os.urandom(params["file_size"])
    disk = params["fs"] != "tmpfs"
    if system.kind in ("sync", "sync.threads"):
        return _sync_rounds(paths, data, disk, threads=system.kind == "sync.threads")
    assert system.loop is not None
    with asyncio.Runner(loop_factory=loop_factory(system.loop)) as runner:
        return runner.run(_async_rounds(system, paths, data, disk))


# --------------------------------------------------------------------------- parent side


def prepare(cfg: PrepareConfig) -> JSONDict:
    size = cfg.file_size or FILE_SIZE
    d = cfg.data_dir / "w8"
    d.mkdir(parents=True, exist_ok=True)
    from bench.harness import filesystem_of
    return {"dir": str(d), "file_size": size, "fs": filesystem_of(d) or "?",
            "data": f"{FILES} files × {size_label(size)}, one write() each"}


def default_systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    systems, notes, loops = native_systems(probe)
    systems.insert(1, "sync.threads")
    for kind, ok in (("aiofiles", probe["aiofiles"]), ("anyio", probe["peers"]["anyio"])):
        if ok["ok"]:
            systems += [f"{kind}-{lp}" for lp in loops]
        else:
            notes.append(f"{kind}-* skipped: {ok['error']}")
    return systems, notes


WORKLOAD = Workload(
    name="W8",
    title="ten large files written at once (one write() each), alone and beside CPU work",
    unit="files",
    prepare=prepare,
    default_systems=default_systems,
    run_cell=run_cell,
    concurrency=False,
    filesystems=("tmpfs",),
    variants={"quick": Variant(file_size=QUICK_FILE_SIZE,
                               systems=("sync", "sync.threads", "aionative-io_uring", "aionative-linux_aio",
                                        "aionative-threads-asyncio", "aiofiles-asyncio"))},
)
