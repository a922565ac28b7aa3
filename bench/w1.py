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

import os
from typing import Any

from bench.clients import BLOCK, Client, Op, Target, default_systems, open_target, prepare_file
from bench.common import JSONDict, PrepareConfig, System, Timing, Workload
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


async def aiofiles_read(f: Any, target: Target, off: int) -> bytes:
    await f.seek(off)
    data: bytes = await f.read(BLOCK)
    return data


async def aiofiles_reader(f: Any, target: Target, start: int, pacer: Pacer) -> None:
    offs, mask, tick = target.offsets, target.mask, pacer.tick
    j = start
    while True:
        await f.seek(offs[j & mask])
        await f.read(BLOCK)
        j += 1
        if not tick():
            return


READ = Op(workload="W1", name="pread", arg=lambda target: BLOCK, verify=verify,
          aiofiles_mode="rb", aiofiles_one=aiofiles_read, aiofiles_loop=aiofiles_reader,
          aiofiles_info={"handles": "one per reader"})


# --------------------------------------------------------------------------- runs


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: measure ``system`` with ``readers`` concurrent readers."""
    target = open_target(params)
    try:
        if system.kind == "sync":
            return (READ.measure_sync(target, timing)
                    | {"info": {"note": "one thread, no event loop; N ignored"}})
        return READ.measure_async(system, readers, target, timing)
    finally:
        os.close(target.fd)


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
    concurrency_free=frozenset({"sync"}),
)
