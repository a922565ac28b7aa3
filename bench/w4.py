"""W4: many small files: open + read whole + close, every file once a pass, N at a time.

A thousand files of seeded random sizes between 1 and 100 KiB (seeded random bytes, ~50 MiB in
all, ``bench/.data/w4-files-1000-seed<seed>/``), created once and read into the page cache by
``prepare``. One pass reads every file whole, through N tasks that pull the next path from one
shared iterator (a queue without ``asyncio.Queue``'s overhead) until none is left; the figure
is files/s of the median pass. Per file, this is three or four kernel operations
(open, fstat, read, close) on data the page cache already holds, so it measures each system's
overhead per operation, as W1 does, but through the file API applications call.

Systems (each cell in its own worker process, see ``bench.fileapi``):

- ``aionative-<backend>-<loop>``: ``async with aionative.open(path, "rb") as f:
  data = await f.read()``;
- ``aionative.read_bytes-<backend>-<loop>``: ``data = await aionative.read_bytes(path)``
  (open, read, close, no file object);
- ``aiofiles-<loop>``: ``async with aiofiles.open(path, "rb") as f: data = await f.read()``;
  ``aiofiles-asyncio@1cpu`` the same with its worker pinned to one CPU, where its thread pool
  runs 3–4× faster than spread over two (threads handing the GIL to each other across CPUs);
- ``sync``: ``with open(path, "rb") as f: data = f.read()`` in a loop, one thread, no event
  loop: the limit; N does not apply.

Every pass checks the total of ``len(data)`` against the files' sizes, and before timing each
system reads every file once (untimed, N=1) and must return exactly the files' contents (the
sum of the CRC-32s of all files, which does not depend on the order).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import zlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import fileapi
from bench.common import JSONDict, PrepareConfig, System, Timing, Variant, Workload, size_label

FILES = 1000
MIN_SIZE = 1 << 10
MAX_SIZE = 100 << 10
KINDS = ("sync", "aionative", "aionative.read_bytes", "aiofiles")


# --------------------------------------------------------------------------- the files


def sizes(seed: int, count: int) -> list[int]:
    """The seeded file sizes (their own RNG, so checking a set needs no content)."""
    rng = random.Random(seed)
    return [rng.randint(MIN_SIZE, MAX_SIZE) for _ in range(count)]


def paths(root: str, count: int) -> list[str]:
    return [os.path.join(root, f"{i:04d}.bin") for i in range(count)]


def _complete(root: Path, want: list[int]) -> bool:
    try:
        return all(os.stat(p).st_size == size
                   for p, size in zip(paths(str(root), len(want)), want, strict=True))
    except FileNotFoundError:
        return False


def ensure_files(root: Path, seed: int, count: int, log: Callable[[str], None]) -> bool:
    """Create the file set in ``root`` unless it is there whole; True if it was created.

    Written to ``<root>.part`` and renamed, so an interrupted run never leaves a partial set.
    """
    want = sizes(seed, count)
    if _complete(root, want):
        return False
    log(f"creating {root} ({count} files of {size_label(MIN_SIZE)}–{size_label(MAX_SIZE)})")
    tmp = root.with_name(root.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    rng = random.Random(seed + 1)
    for path, size in zip(paths(str(tmp), count), want, strict=True):
        with open(path, "wb") as out:
            out.write(rng.randbytes(size))
    os.sync()
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)
    return True


def digest(files: list[str]) -> tuple[int, int]:
    """(total bytes, sum of CRC-32s) of the files, read with the builtin ``open``."""
    total = crcs = 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        total += len(data)
        crcs += zlib.crc32(data)
    return total, crcs


def check(what: str, got: object, want: object) -> None:
    if got != want:
        raise RuntimeError(f"{what}: got {got}, expected {want}")


# --------------------------------------------------------------------------- the passes


def sync_pass(files: list[str], total: int) -> Callable[[], int]:
    def one_pass() -> int:
        got = 0
        for path in files:
            with open(path, "rb") as f:
                got += len(f.read())
        check("bytes read in a pass", got, total)
        return len(files)
    return one_pass


async def open_worker(open_: Callable[..., Any], it: Iterator[str]) -> int:
    """One task: ``async with open_(path, "rb")`` + ``read()`` for paths pulled from ``it``."""
    got = 0
    for path in it:
        async with open_(path, "rb") as f:
            got += len(await f.read())
    return got


async def read_bytes_worker(read_bytes: Callable[..., Any], it: Iterator[str]) -> int:
    """One task: ``await read_bytes(path)`` for paths pulled from ``it``."""
    got = 0
    for path in it:
        got += len(await read_bytes(path))
    return got


def async_pass(system: System, tasks: int, files: list[str], total: int,
               crcs: int) -> Callable[[ModuleType], fileapi.AsyncPass]:
    """``make_pass`` for ``fileapi.measure_async``: a pass of ``tasks`` workers, verified."""
    def make(mod: ModuleType) -> fileapi.AsyncPass:
        worker: Callable[[Callable[..., Any], Iterator[str]], Awaitable[int]]
        if system.kind == "aionative.read_bytes":
            worker, fn = read_bytes_worker, mod.read_bytes

            async def read_one(path: str) -> bytes:
                data: bytes = await mod.read_bytes(path)
                return data
        else:
            worker, fn = open_worker, mod.open

            async def read_one(path: str) -> bytes:
                async with mod.open(path, "rb") as f:
                    data: bytes = await f.read()
                return data
        verified = False

        async def one_pass() -> int:
            nonlocal verified
            if not verified:  # in the first pass, a warm-up one: never timed
                got = 0
                for path in files:
                    got += zlib.crc32(await read_one(path))
                check("contents (sum of CRC-32s)", got, crcs)
                verified = True
            it = iter(files)
            done = await asyncio.gather(*(worker(fn, it) for _ in range(tasks)))
            check("bytes read in a pass", sum(done), total)
            return len(files)
        return one_pass
    return make


# --------------------------------------------------------------------------- runs


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: every file once a pass, ``readers`` at a time."""
    if system.kind not in KINDS:
        raise ValueError(f"W4 has no system {system.name!r} (kinds: {', '.join(KINDS)})")
    files = paths(params["path"], params["files"])
    total, crcs = params["total_bytes"], params["crc_sum"]
    if system.kind == "sync":
        check("contents (sum of CRC-32s)", digest(files), (total, crcs))
        return fileapi.measure_sync(sync_pass(files, total), timing) | {
            "info": {"note": "builtin open(), one thread, no event loop; N ignored"}}
    return fileapi.measure_async(system, async_pass(system, readers, files, total, crcs),
                                 timing)


# --------------------------------------------------------------------------- parent side


def prepare_files(root: Path, seed: int, count: int, log: Callable[[str], None]) -> JSONDict:
    """Create (first time only) and warm ``count`` files in ``root``; the workers' parameters
    (also the pytest-benchmark tests' fixture, with fewer files)."""
    ensure_files(root, seed, count, log)
    log(f"warming {root.name} into the page cache")
    total, crcs = digest(paths(str(root), count))
    return {"path": str(root), "files": count, "min_size": MIN_SIZE, "max_size": MAX_SIZE,
            "total_bytes": total, "crc_sum": crcs, "seed": seed,
            "data": f"{count} files of {size_label(MIN_SIZE)}–{size_label(MAX_SIZE)} "
                    f"({total / (1 << 20):.1f} MiB in all)"}


def prepare(cfg: PrepareConfig) -> JSONDict:
    if cfg.file_size:
        cfg.log(f"W4: --file-size does not apply (files of {size_label(MIN_SIZE)}–"
                f"{size_label(MAX_SIZE)}); ignored")
    root = cfg.data_dir / f"w4-files-{FILES}-seed{cfg.seed}"
    return prepare_files(root, cfg.seed, FILES, cfg.log)


def default_systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    """fileapi's, and aiofiles-asyncio once more pinned to one CPU (``@1cpu``): its thread
    pool's speed depends on whether its threads share a CPU (3–4× faster when they do), so
    both placements are measured and each ratio names its own."""
    systems, notes = fileapi.default_systems(probe, helpers=("read_bytes",))
    if "aiofiles-asyncio" in systems and len(os.sched_getaffinity(0)) > 1:
        systems.append("aiofiles-asyncio@1cpu")
    return systems, notes


WORKLOAD = Workload(
    name="W4",
    title="many small files: open + read whole + close (page-cached)",
    unit="files",
    prepare=prepare,
    default_systems=default_systems,
    run_cell=run_cell,
    concurrency_free=frozenset({"sync"}),
    default_readers=(1, 6, 12, 24),
    variants={"quick": Variant(readers=(1, 24), timing=Timing(warmup=0.1, duration=0.6),
                               systems=("sync", "aionative-io_uring", "aionative-linux_aio",
                                        "aionative.read_bytes-io_uring",
                                        "aionative.read_bytes-linux_aio", "aiofiles",
                                        "aiofiles-asyncio@1cpu"))},
)
