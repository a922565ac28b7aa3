"""W5F: ten 64 MiB files written concurrently in 1 MiB chunks (buffered), with loop lag.

Ten preallocated files of 64 MiB (``bench/.data/w5f-<i>-64MiB.bin``; ``W5F-tmpfs``: in
``/dev/shm``), page-cached. Task i writes file i from start to end in 1 MiB ``pwrite``s of a
fixed random payload, then again from the start, until the cell's time is up (N is the number
of files written at once, 10; with another N task i writes file ``i % 10``). The figure is
MB/s (10⁶ bytes) over the timed window, and the ticker's lateness in the same loop (as in W5).
Every write overwrites allocated blocks, so this measures the buffered write path (page-cache
copies, and on ext4 the block mapping and writeback the kernel does meanwhile), not
allocation or durability: no ``fsync`` in the timed window. Each worker ``fdatasync``s the ten
files before measuring (untimed), so a cell does not inherit the previous one's dirty pages.

Systems (each cell in its own worker process; see ``bench.clients``):

- ``aionative-<backend>-<loop>``: ``await aionative.pwrite(fd_i, chunk, off)``;
- ``executor-<loop>``: ``os.pwrite`` in the loop's thread pool;
- ``aiofiles-<loop>`` / ``anyio-<loop>``: ``f_i = open(path_i, "r+b")``, ``await
  f.write(chunk)`` chunk after chunk (a 1 MiB write bypasses the 8 KiB buffer), ``seek(0)``
  and ``flush()`` at the end of the file;
- ``caio-<backend>-<loop>``: ``ctx.write(chunk, fd_i, off)``; ``aiofile-<loop>``:
  ``afp_i.write_bytes(chunk, off)`` (closing an ``AIOFile`` fdatasyncs it: after the cell);
- ``sync``: ``os.pwrite`` in a loop on one thread, each file whole in turn;
- ``fio-<engine>``: one job over the ten files (``--nrfiles=10
  --file_service_type=roundrobin --rw=write --bs=1M --iodepth=10``; psync depth 1).
"""

from __future__ import annotations

import array
import os
import random
import time
from typing import Any

from bench import fio
from bench.clients import Client, Op, Target, default_systems, payload
from bench.clients import run_cell as run_cell_on
from bench.common import (
    JSONDict,
    PrepareConfig,
    System,
    Timing,
    Variant,
    Workload,
    ensure_random_file,
    make_hot,
    size_label,
)
from bench.meter import LagProbe, Pacer, lag_fields, with_lag
from bench.w5 import presync

FILES = 10
FILE_SIZE = 64 << 20
CHUNK = 1 << 20


def open_target(params: JSONDict) -> Target:
    """The ten files, open read-write; their chunks in order; the payload."""
    payload = random.Random(params["seed"] + 7).randbytes(CHUNK)
    offsets = array.array("q", range(0, params["file_size"], CHUNK))
    paths = tuple(params["paths"])
    return Target(paths, tuple(os.open(p, os.O_RDWR) for p in paths), offsets, payload,
                  spread=False)


async def verify(client: Client, target: Target) -> None:
    """Zero the first chunk of file 0, write it through the client, read it back."""
    os.pwrite(target.fd, bytes(CHUNK), 0)
    n = await client.one(0)
    if n not in (CHUNK, None) or os.pread(target.fd, CHUNK, 0) != target.payload:
        raise RuntimeError(f"write of file 0's first chunk did not land (returned {n})")


async def handle_write(f: Any, target: Target, task: int, off: int) -> int:
    await f.seek(off)
    n: int = await f.write(target.payload)
    await f.flush()
    return n


async def handle_writer(f: Any, target: Target, task: int, start: int, pacer: Pacer) -> None:
    write, buf, tick, chunks = f.write, target.payload, pacer.tick, len(target.offsets)
    while True:
        await f.seek(0)
        for _ in range(chunks):
            await write(buf)
            if not tick():
                await f.flush()
                return
        await f.flush()


WRITE = Op(workload="W5F", os_fn=os.pwrite, os_arg=payload, native_name="pwrite",
           native_arg=payload, peer_name="write", peer_arg=payload, verify=verify,
           handle_mode="r+b", handle_one=handle_write, handle_loop=handle_writer,
           handle_info={"handles": "one per file, r+b", "per_chunk": "write(1 MiB)"})


def run_cell(system: System, writers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: ``writers`` tasks writing the ten files."""
    started = time.perf_counter()
    presync(*params["paths"])
    synced = {"presync_s": round(time.perf_counter() - started, 3)}
    if system.kind == "fio":
        job = fio.Job(params["paths"], "write", CHUNK, params["file_size"], writers)
        result = fio.run(params.get("fio"), system.backend or "", job, timing) | lag_fields(
            LagProbe().summary())
        result["info"] |= synced
    else:
        target = open_target(params)
        try:
            if system.kind == "sync":
                result = run_cell_on(WRITE, system, writers, target, timing,
                                     sync_note="; each file whole in turn; lag n/a") | (
                    lag_fields(LagProbe().summary()))
            else:
                result = run_cell_on(WRITE, system, writers, target, timing, with_lag)
            result["info"] |= synced
        finally:
            target.close()
    return result | {"mb_per_s": result["ops_per_s"] * CHUNK / 1e6}


def prepare(cfg: PrepareConfig) -> JSONDict:
    """Create (first use) and warm the ten files; return the workers' parameters."""
    if cfg.file_size:
        cfg.log("W5F: --file-size does not apply (ten files of 64 MiB); ignored")
    paths = [cfg.data_dir / f"w5f-{i}-{size_label(FILE_SIZE)}.bin" for i in range(FILES)]
    for path in paths:
        ensure_random_file(path, FILE_SIZE, cfg.log)
        make_hot(path)
    cfg.log(f"warmed {FILES} files of {size_label(FILE_SIZE)} in {cfg.data_dir}")
    return {"path": str(paths[0]), "paths": [str(p) for p in paths], "files": FILES,
            "file_size": FILE_SIZE, "chunk": CHUNK, "seed": cfg.seed,
            "data": f"{FILES} files of {size_label(FILE_SIZE)}, 1 MiB writes"}


def systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    chosen, notes = default_systems(probe)
    return [s for s in chosen if not s.startswith("caio-io_uring_nosqpoll")], notes


QUICK_SYSTEMS = ("sync", "aionative-io_uring-asyncio", "aionative-linux_aio-asyncio",
                 "aiofiles-asyncio", "fio-io_uring")

WORKLOAD = Workload(
    name="W5F",
    title="10 files × 64 MiB written concurrently in 1 MiB chunks, with event-loop lag",
    unit="chunks",
    prepare=prepare,
    default_systems=systems,
    run_cell=run_cell,
    concurrency_free=frozenset({"sync"}) | fio.CONCURRENCY_FREE,
    default_readers=(FILES,),
    filesystems=("tmpfs",),
    variants={"quick": Variant(timing=Timing(warmup=0.15, duration=0.6),
                               systems=QUICK_SYSTEMS)},
)
