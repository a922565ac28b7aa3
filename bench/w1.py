"""W1: hot random 4 KiB reads of a page-cached file, N concurrent readers.

This is the case where the kernel does almost no work (a page-cache copy of 4 KiB), so the
figures expose each system's own overhead per read: thread hops for aiofiles and
``run_in_executor``, submission/completion and future round trips for aionative. The plain
``os.pread`` loop (``sync``) is the single-thread ceiling: it blocks the loop, so it is not a
usable asyncio design, but nothing async can beat it by much on a hot cache.

Systems (each cell in its own worker process; how each peer reads: ``bench.clients``):

- ``aionative-<backend>-<loop>``: N tasks, each ``await aionative.pread(fd, 4096, off)``.
- ``aiofiles-<loop>`` / ``anyio-<loop>``: N tasks, each with its own ``aiofiles.open(path,
  "rb")`` / ``anyio.open_file(path, "rb")`` handle doing ``await f.seek(off); await
  f.read(4096)`` (how their users read at an offset: neither has a positional read).
- ``executor-<loop>``: ``await loop.run_in_executor(None, os.pread, fd, 4096, off)``.
- ``caio-<backend>-<loop>``: ``await ctx.read(4096, fd, off)`` on a caio ``AsyncioContext``.
- ``aiofile-<loop>``: ``await afp.read_bytes(4096, off)`` on one ``aiofile.AIOFile``.
- ``sync``: ``os.pread`` in a loop on one thread, no event loop; N does not apply.
- ``fio-<engine>``: fio ``--rw=randread --bs=4k --iodepth=N`` on the same file (``psync``:
  depth 1, once), the C limit (``bench.fio``).

Offsets are 4 KiB-aligned, drawn from a seeded RNG into a pool before timing; reader i starts
at its own place in the pool so readers do not read the same blocks in lockstep.
"""

from __future__ import annotations

import os
from typing import Any

from bench import fio
from bench.clients import (
    BLOCK,
    Client,
    Op,
    Target,
    const,
    default_systems,
    open_target,
    prepare_file,
)
from bench.clients import run_cell as run_cell_on
from bench.common import JSONDict, PrepareConfig, System, Timing, Variant, Workload
from bench.meter import Pacer

DEFAULT_FILE_SIZE = 1 << 30
POOL_SIZE = 1 << 18          # 2 MiB of offsets: far more blocks than any cache level holds


# --------------------------------------------------------------------------- the read


async def verify(client: Client, target: Target) -> None:
    """Compare one read against ``os.pread``; a benchmark of wrong answers is worthless."""
    off = target.offsets[0]
    got = await client.one(off)
    if got != os.pread(target.fd, BLOCK, off):
        raise RuntimeError(f"wrong data at offset {off} ({len(got)} bytes)")


async def handle_read(f: Any, target: Target, task: int, off: int) -> bytes:
    await f.seek(off)
    data: bytes = await f.read(BLOCK)
    return data


async def handle_reader(f: Any, target: Target, task: int, start: int, pacer: Pacer) -> None:
    offs, mask, tick = target.offsets, target.mask, pacer.tick
    j = start
    while True:
        await f.seek(offs[j & mask])
        await f.read(BLOCK)
        j += 1
        if not tick():
            return


READ = Op(workload="W1", os_fn=os.pread, os_arg=const(BLOCK), native_name="pread",
          native_arg=const(BLOCK), peer_name="read", peer_arg=const(BLOCK), verify=verify,
          handle_mode="rb", handle_one=handle_read, handle_loop=handle_reader,
          handle_info={"handles": "one per reader", "per_read": "seek + read"})


def fio_job(params: JSONDict, readers: int, direct: bool = False) -> fio.Job:
    """fio reading 4 KiB at uniform random offsets of the same file, depth ``readers``."""
    return fio.Job([params["path"]], "randread", BLOCK, params["file_size"], readers,
                   direct=direct)


# --------------------------------------------------------------------------- runs


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: measure ``system`` with ``readers`` concurrent readers."""
    if system.kind == "fio":
        return fio.run(params.get("fio"), system.backend or "", fio_job(params, readers), timing)
    target = open_target(params)
    try:
        return run_cell_on(READ, system, readers, target, timing)
    finally:
        target.close()


# --------------------------------------------------------------------------- parent side


def prepare(cfg: PrepareConfig) -> JSONDict:
    """Create (first run only) and warm the hot file; return the workers' parameters."""
    return prepare_file(cfg, "w1-hot", DEFAULT_FILE_SIZE, POOL_SIZE)


WORKLOAD = Workload(
    name="W1",
    title="hot random 4 KiB reads (page-cached file)",
    unit="reads",
    prepare=prepare,
    default_systems=default_systems,
    run_cell=run_cell,
    concurrency_free=frozenset({"sync"}) | fio.CONCURRENCY_FREE,
    variants={"quick": Variant(readers=(1, 64), timing=Timing(warmup=0.1, duration=0.5))},
)
