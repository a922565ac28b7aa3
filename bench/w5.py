"""W5 (W5w): random 4 KiB buffered pwrite, N concurrent writers, event-loop lag measured too.

Why: ext4 and tmpfs refuse ``RWF_NOWAIT`` on buffered writes (EOPNOTSUPP), so a kernel queue
cannot copy them without possibly waiting: io_uring hands each to its io-wq workers
(``iou-wrk-*``, visible in the threads table) and Linux AIO copies it inside ``io_submit``.
aionative's native backends therefore copy a write to a local regular file inline, under the
inline budget, and send writes to the kernel queue for a second after one that slept; the
``threads`` backend, ``run_in_executor`` and aiofiles do the ``pwrite`` on pool threads.
Throughput alone hides what each costs the loop, so each cell also runs a *ticker* task in the
same loop: it awaits ``asyncio.sleep(0.001)`` over and
over and records lateness = measured interval - 1 ms; p50 / p99 / max over the timed window is
the loop lag a co-hosted request handler would see. Before the load, the ticker runs alone for
a moment (``IDLE_S``) to record the loop's own timer granularity (idle baseline).

Target: a preallocated random file (256 MiB by default, ``bench/.data/w5-write-*.bin``), warmed
into the page cache, so every write overwrites an existing, allocated block. Offsets are
4 KiB-aligned from a seeded pool (writer i starts at its own place in it); every write writes
the same fixed 4 KiB payload. Each worker ``fdatasync``s the file before measuring (untimed),
so a cell starts with no dirty pages left over from the previous cell; during the cell the
kernel's writeback and dirty throttling run as they would in production (a source of noise).

Systems (each cell in its own worker process; how each peer writes: ``bench.clients``):

- ``aionative-<backend>-<loop>``: N tasks, each ``await aionative.pwrite(fd, payload, off)``.
- ``aiofiles-<loop>`` / ``anyio-<loop>``: N tasks, each with its own ``open(path, "r+b")``
  handle doing ``await f.seek(off); await f.write(payload); await f.flush()``. Both wrap a
  buffered file object, so without ``flush`` the 4 KiB would sit in Python's buffer; the flush
  pushes it to the kernel, as ``pwrite`` does (three thread-pool hops a write).
- ``executor-<loop>``: ``await loop.run_in_executor(None, os.pwrite, fd, payload, off)``.
- ``caio-<backend>-<loop>``: ``await ctx.write(payload, fd, off)``; ``aiofile-<loop>``:
  ``await afp.write_bytes(payload, off)`` (an ``AIOFile(path, "r+b")``).
- ``sync``: ``os.pwrite`` in a loop on one thread, no event loop; N does not apply and loop
  lag is not measurable (reported as n/a). A real asyncio program doing this would block its
  loop for the whole run.
- ``fio-<engine>``: fio ``--rw=randwrite --bs=4k --iodepth=N`` on the same file (no fsync).

``W5-tmpfs`` is the same workload with the file on a tmpfs (``/dev/shm``): no filesystem
block mapping, no writeback, so it isolates each system's own cost per write.

No system calls ``fsync``/``fdatasync`` during the timed window: this measures the buffered
write path only, not durability.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from bench import clients, fio
from bench.clients import BLOCK, Client, Op, Target, default_systems, payload, prepare_file
from bench.common import JSONDict, PrepareConfig, System, Timing, Variant, Workload
from bench.meter import IDLE_S, LAG_INTERVAL, LagProbe, Pacer, lag_fields, with_lag

DEFAULT_FILE_SIZE = 256 << 20
POOL_SIZE = 1 << 18          # 2 MiB of offsets, four times the blocks of the default file


def open_target(params: JSONDict) -> Target:
    """Open the prepared file read-write and rebuild the seeded offsets and payload."""
    payload = random.Random(params["seed"] + 5).randbytes(BLOCK)
    return clients.open_target(params, os.O_RDWR, payload)


# --------------------------------------------------------------------------- the write


async def verify(client: Client, target: Target) -> None:
    """Zero a block, write it through the client, read it back with ``os.pread``."""
    off = target.offsets[0]
    os.pwrite(target.fd, bytes(BLOCK), off)
    n = await client.one(off)
    if n != BLOCK or os.pread(target.fd, BLOCK, off) != target.payload:
        raise RuntimeError(f"write at offset {off} did not land (returned {n})")


async def handle_write(f: Any, target: Target, task: int, off: int) -> int:
    await f.seek(off)
    n: int = await f.write(target.payload)
    await f.flush()
    return n


async def handle_writer(f: Any, target: Target, task: int, start: int, pacer: Pacer) -> None:
    buf, offs, mask, tick = target.payload, target.offsets, target.mask, pacer.tick
    j = start
    while True:
        await f.seek(offs[j & mask])
        await f.write(buf)
        await f.flush()
        j += 1
        if not tick():
            return


WRITE = Op(workload="W5", os_fn=os.pwrite, os_arg=payload, native_name="pwrite",
           native_arg=payload, peer_name="write", peer_arg=payload, verify=verify,
           handle_mode="r+b", handle_one=handle_write, handle_loop=handle_writer,
           handle_info={"handles": "one per writer, r+b", "per_write": "seek + write + flush"})


# --------------------------------------------------------------------------- runs


def run_cell(system: System, writers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: measure ``system`` with ``writers`` concurrent writers."""
    started = time.perf_counter()
    presync(params["path"])  # start clean: no dirty pages left by the previous cell
    synced = {"presync_s": round(time.perf_counter() - started, 3)}
    if system.kind == "fio":
        job = fio.Job([params["path"]], "randwrite", BLOCK, params["file_size"], writers)
        return fio.run(params.get("fio"), system.backend or "", job, timing) | lag_fields(
            LagProbe().summary()) | {"presync_s": synced["presync_s"]}
    target = open_target(params)
    try:
        if system.kind == "sync":
            return (WRITE.measure_sync(target, timing) | lag_fields(LagProbe().summary())
                    | {"info": {"note": "one thread, no event loop; N ignored; lag n/a"}
                       | synced})
        result = WRITE.measure_async(system, writers, target, timing, with_lag)
        result["info"] |= synced
        return result
    finally:
        target.close()


def presync(*paths: str) -> None:
    """``fdatasync`` each file: no dirty pages left over from an earlier cell."""
    for path in paths:
        fd = os.open(path, os.O_RDWR)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- parent side


def prepare(cfg: PrepareConfig) -> JSONDict:
    """Create (first run only) and warm the target file; return the workers' parameters."""
    return prepare_file(cfg, "w5-write", DEFAULT_FILE_SIZE, POOL_SIZE) | {
        "lag_interval_s": LAG_INTERVAL, "idle_lag_s": IDLE_S}


QUICK_SYSTEMS = ("sync", "aionative-io_uring", "aionative-linux_aio-asyncio",
                 "caio-linux_aio-asyncio", "fio-io_uring")

WORKLOAD = Workload(
    name="W5",
    title="random 4 KiB buffered pwrite (W5w), with event-loop lag",
    unit="writes",
    prepare=prepare,
    default_systems=default_systems,
    run_cell=run_cell,
    concurrency_free=frozenset({"sync"}) | fio.CONCURRENCY_FREE,
    default_readers=(1, 64),
    filesystems=("tmpfs",),
    variants={"quick": Variant(readers=(64,), timing=Timing(warmup=0.15, duration=0.6),
                               systems=QUICK_SYSTEMS)},
)
