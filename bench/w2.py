"""W2: O_DIRECT random 4 KiB reads, N concurrent readers, against fio at the same depth.

The page cache is out of the way (``O_DIRECT``), so every read goes to the device: this is
where a system's queue depth reaches the disk, and fio with ``--direct=1 --iodepth=N`` is the
limit. The file is W1's (``bench/.data/w1-hot-1GiB.bin``); direct reads do not use its cached
pages. O_DIRECT needs the buffer, length and offset aligned to the logical block size, so
every task reads into its own page-aligned 4 KiB buffer (an anonymous ``mmap``), at 4 KiB-
aligned offsets from W1's seeded pool.

Systems (each cell in its own worker process):

- ``aionative-<backend>-<loop>``: N tasks, each ``await aionative.preadinto(fd, buf, off)``
  on an ``O_DIRECT`` descriptor.
- ``executor-<loop>``: ``await loop.run_in_executor(None, os.preadv, fd, [buf], off)``.
- ``aiofiles-<loop>`` / ``anyio-<loop>``: a handle per task opened ``"rb"`` with
  ``buffering=0`` and an ``opener`` adding ``O_DIRECT``, then ``await f.seek(off); await
  f.readinto(buf)`` (the only way to give them an aligned buffer).
- ``caio-<backend>-<loop>``, ``aiofile-<loop>``: ``ctx.read(4096, fd, off)`` /
  ``afp.read_bytes(4096, off)`` on the ``O_DIRECT`` descriptor: caio reads into a buffer it
  allocates itself, unaligned, so the kernel answers EINVAL; they are listed as skipped with
  that error (checked, not assumed).
- ``sync``: ``os.preadv(fd, [buf], off)`` in a loop on one thread (queue depth 1).
- ``fio-<engine>``: ``--direct=1 --rw=randread --bs=4k --iodepth=N`` (``psync``: depth 1).

Before timing, each system reads one block and must return the bytes a buffered ``os.pread``
returns.
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
from bench.clients import (
    run_cell as run_cell_on,
)
from bench.common import JSONDict, PrepareConfig, Skip, System, Timing, Variant, Workload
from bench.meter import Pacer
from bench.w1 import DEFAULT_FILE_SIZE, POOL_SIZE, fio_job


def direct_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_DIRECT)


async def verify(client: Client, target: Target) -> None:
    """One direct read through the client must equal a buffered ``os.pread``."""
    off = target.offsets[0]
    target.buffers[0][:] = bytes(BLOCK)
    try:
        got = await client.one(off)
    except (OSError, SystemError) as exc:  # caio reports EINVAL as SystemError
        raise Skip(f"cannot read an O_DIRECT descriptor: {exc!r}") from exc
    data = got if isinstance(got, bytes) else bytes(target.buffers[0])
    fd = os.open(target.path, os.O_RDONLY)
    try:
        want = os.pread(fd, BLOCK, off)
    finally:
        os.close(fd)
    if data != want:
        raise RuntimeError(f"wrong data at offset {off} ({len(data)} bytes)")


async def handle_read(f: Any, target: Target, task: int, off: int) -> int:
    await f.seek(off)
    n: int = await f.readinto(target.buffers[task])
    return n


async def handle_reader(f: Any, target: Target, task: int, start: int, pacer: Pacer) -> None:
    buf, offs, mask, tick = target.buffers[task], target.offsets, target.mask, pacer.tick
    j = start
    while True:
        await f.seek(offs[j & mask])
        await f.readinto(buf)
        j += 1
        if not tick():
            return


READ = Op(workload="W2", os_fn=os.preadv, os_arg=lambda t, i: [t.buffers[i]],
          native_name="preadinto", native_arg=lambda t, i: t.buffers[i], peer_name="read",
          peer_arg=const(BLOCK), verify=verify, handle_mode="rb", handle_one=handle_read,
          handle_loop=handle_reader,
          handle_info={"handles": "one per reader, unbuffered, O_DIRECT opener",
                       "per_read": "seek + readinto"},
          handle_kwargs=lambda: {"buffering": 0, "opener": direct_opener})


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: ``readers`` concurrent direct readers of ``system``."""
    if system.kind == "fio":
        return fio.run(params.get("fio"), system.backend or "",
                       fio_job(params, readers, direct=True), timing)
    target = open_target(params, os.O_RDONLY | os.O_DIRECT, buffers=max(1, readers))
    try:
        return run_cell_on(READ, system, readers, target, timing, sync_note="; queue depth 1")
    finally:
        target.close()


def prepare(cfg: PrepareConfig) -> JSONDict:
    """W1's file (created on first use); direct reads ignore its cached pages."""
    return prepare_file(cfg, "w1-hot", DEFAULT_FILE_SIZE, POOL_SIZE) | {"direct": True}


def systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    chosen, notes = default_systems(probe)
    return [s for s in chosen if not s.startswith("caio-io_uring_nosqpoll")], notes


QUICK_SYSTEMS = ("sync", "aionative-io_uring", "aionative-linux_aio", "executor-asyncio",
                 "fio-io_uring", "fio-libaio", "fio-psync")

WORKLOAD = Workload(
    name="W2",
    title="O_DIRECT random 4 KiB reads (no page cache)",
    unit="reads",
    prepare=prepare,
    default_systems=systems,
    run_cell=run_cell,
    concurrency_free=frozenset({"sync"}) | fio.CONCURRENCY_FREE,
    default_readers=(1, 16, 64),
    variants={"quick": Variant(readers=(64,), timing=Timing(warmup=0.15, duration=0.6),
                               systems=QUICK_SYSTEMS)},
)
