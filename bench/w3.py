"""W3: sequential read of a hot 1 GiB file in 1 MiB chunks, one reader: GB/s.

The file is W1's (``bench/.data/w1-hot-1GiB.bin``), page-cached. One task reads it from start
to end in 1 MiB chunks, then again from the start, until the cell's time is up; the figure is
chunks/s and MB/s (10⁶ bytes/s) over the timed window. The kernel's work per chunk is a
1 MiB copy (~0.2 ms), so this measures how close each system gets to memory bandwidth, and
what it adds per chunk: a thread hop, a future, the allocation of a 1 MiB ``bytes`` (and its
page faults) where the API returns one.

Two operations, so each async system is compared with the synchronous loop doing the same
work:

- returning a new ``bytes`` per chunk: ``sync`` (``os.pread(fd, 1 MiB, off)``),
  ``aionative-<backend>-<loop>`` (``await aionative.pread(fd, 1 MiB, off)``),
  ``executor-<loop>`` (``os.pread`` in the loop's thread pool), ``aionative.open-<backend>-
  <loop>`` / ``aiofiles-<loop>`` / ``anyio-<loop>`` (``f = open(path, "rb")`` once, then
  ``await f.read(1 MiB)`` chunk after chunk, ``seek(0)`` at the end), ``caio-<backend>-<loop>``
  (``ctx.read(1 MiB, fd, off)``), ``aiofile-<loop>`` (``afp.read_bytes(1 MiB, off)``);
- into one reused buffer: ``sync.preadinto`` (``os.preadv(fd, [buf], off)``) and
  ``aionative.preadinto-<backend>-<loop>`` (``await aionative.preadinto(fd, buf, off)``), and
  fio (``--rw=read --bs=1M``, its own reused buffers; ``io_uring``/``libaio`` at depth 1 too:
  one reader).

Before timing, each system reads one chunk, which must equal ``os.pread``'s.
"""

from __future__ import annotations

import array
import mmap
import os
from typing import Any

from bench import fio
from bench.clients import (
    Client,
    Op,
    Target,
    const,
    default_systems,
    prepare_file,
)
from bench.clients import (
    run_cell as run_cell_on,
)
from bench.common import JSONDict, PrepareConfig, System, Timing, Variant, Workload
from bench.meter import Pacer
from bench.w1 import DEFAULT_FILE_SIZE, POOL_SIZE

CHUNK = 1 << 20


def open_target(params: JSONDict, into: bool) -> Target:
    """The file, its chunks in order as the offset pool, one 1 MiB buffer for ``into``."""
    size = params["file_size"] - params["file_size"] % CHUNK
    chunks = size // CHUNK
    if chunks & (chunks - 1):
        raise ValueError("W3's file must hold a power-of-two number of 1 MiB chunks")
    offsets = array.array("q", range(0, size, CHUNK))
    return Target((params["path"],), (os.open(params["path"], os.O_RDONLY),), offsets,
                  buffers=(mmap.mmap(-1, CHUNK),) if into else (), spread=False)


async def verify(client: Client, target: Target) -> None:
    off = target.offsets[len(target.offsets) // 2]
    if target.buffers:
        target.buffers[0][:] = bytes(CHUNK)
    got = await client.one(off)
    data = got if isinstance(got, bytes) else bytes(target.buffers[0])
    if data != os.pread(target.fd, CHUNK, off):
        raise RuntimeError(f"wrong data at offset {off} ({len(data)} bytes)")


async def handle_read(f: Any, target: Target, task: int, off: int) -> bytes:
    await f.seek(off)
    data: bytes = await f.read(CHUNK)
    return data


async def handle_reader(f: Any, target: Target, task: int, start: int, pacer: Pacer) -> None:
    read, tick = f.read, pacer.tick
    await f.seek(0)
    while True:
        if not await read(CHUNK):      # end of file: start again (not counted)
            await f.seek(0)
            continue
        if not tick():
            return


READ = Op(workload="W3", os_fn=os.pread, os_arg=const(CHUNK), native_name="pread",
          native_arg=const(CHUNK), peer_name="read", peer_arg=const(CHUNK), verify=verify,
          handle_mode="rb", handle_one=handle_read, handle_loop=handle_reader,
          handle_info={"handle": "one, buffered (rb)", "per_chunk": "read(1 MiB)"})
READINTO = Op(workload="W3", os_fn=os.preadv, os_arg=lambda t, i: [t.buffers[0]],
              native_name="preadinto", native_arg=lambda t, i: t.buffers[0],
              peer_name="read", peer_arg=const(CHUNK), verify=verify, handle_mode="rb",
              handle_one=handle_read, handle_loop=handle_reader, handle_info={})


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: one sequential reader of ``system``."""
    if system.kind == "fio":
        job = fio.Job([params["path"]], "read", CHUNK, params["file_size"], 1)
        result = fio.run(params.get("fio"), system.backend or "", job, timing)
    else:
        into = system.kind.endswith(".preadinto")
        target = open_target(params, into)
        try:
            result = run_cell_on(READINTO if into else READ, system, 1, target, timing)
        finally:
            target.close()
    return result | {"mb_per_s": result["ops_per_s"] * CHUNK / 1e6}


def prepare(cfg: PrepareConfig) -> JSONDict:
    return prepare_file(cfg, "w1-hot", DEFAULT_FILE_SIZE, POOL_SIZE) | {"chunk": CHUNK}


def systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    chosen, notes = default_systems(probe)
    native = [s for s in chosen if s.startswith("aionative-")]
    extra = ["sync.preadinto"] + [s.replace("aionative-", "aionative.preadinto-")
                                  for s in native]
    extra += [s.replace("aionative-", "aionative.open-") for s in native]
    return chosen[:1] + extra[:1] + chosen[1:] + extra[1:], notes


QUICK_SYSTEMS = ("sync", "sync.preadinto", "aionative-io_uring", "aionative-linux_aio-asyncio",
                 "aionative.preadinto-io_uring-asyncio", "aionative.open-io_uring-asyncio",
                 "aiofiles-asyncio", "anyio-asyncio", "fio-psync", "fio-io_uring")

WORKLOAD = Workload(
    name="W3",
    title="sequential read of a hot 1 GiB file in 1 MiB chunks",
    unit="chunks",
    prepare=prepare,
    default_systems=systems,
    run_cell=run_cell,
    concurrency=False,
    variants={"quick": Variant(timing=Timing(warmup=0.15, duration=0.6),
                               systems=QUICK_SYSTEMS)},
)
