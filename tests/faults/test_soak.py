"""Stress and soak: mixed operations with random cancellation over 64 files, every result
checked against an in-memory model, with descriptors, engine resources and memory flat.

CI runs a short version (``AIONATIVE_SOAK_OPS``, default 20 000 operations per backend and
loop); ``make soak`` runs one million.

Each of 16 workers owns 4 files, so the model is exact: a read must return the model's bytes; a
write cancelled mid-flight may land partly or not at all, so the worker writes the same bytes
again (uncancelled) and the model takes them; a cancelled read is simply not checked.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import resource
import time
from pathlib import Path

import pytest

import aionative
from aionative import _core

pytestmark = pytest.mark.asyncio

OPS = int(os.environ.get("AIONATIVE_SOAK_OPS", "20000"))
FILES, WORKERS, SIZE = 64, 16, 64 * 1024


def aio_nr() -> int:
    with open("/proc/sys/fs/aio-nr") as f:
        return int(f.read())


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


async def maybe_cancelled(rng: random.Random, coro: object) -> tuple[bool, object]:
    """Run ``coro`` as a task; one time in eight cancel it after 0–2 loop iterations.
    Returns (completed, result)."""
    task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
    if rng.random() < 0.125:
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        task.cancel()
    try:
        return True, await task
    except asyncio.CancelledError:
        return False, None


async def worker(wid: int, paths: list[Path], model: list[bytearray], ops: int,
                 counts: dict[str, int]) -> None:
    rng = random.Random(wid)
    mine = list(range(wid * (FILES // WORKERS), (wid + 1) * (FILES // WORKERS)))
    fds = {i: os.open(paths[i], os.O_RDWR) for i in mine}
    try:
        for n in range(ops):
            i = rng.choice(mine)
            m = model[i]
            kind = rng.random()
            off = rng.randrange(len(m) + 1)
            if kind < 0.45:                                   # positional read
                size = rng.choice((1, 100, 4096, 10000, 70000))
                done, got = await maybe_cancelled(rng, aionative.pread(fds[i], size, off))
                if done:
                    assert got == bytes(m[off:off + size]), (i, off, size)
                counts["read" if done else "cancelled"] += 1
            elif kind < 0.8:                                  # positional write
                data = rng.randbytes(rng.choice((1, 512, 4096, 9000)))
                off = min(off, len(m))
                done, _ = await maybe_cancelled(rng, aionative.pwrite(fds[i], data, off))
                if not done:  # it may have landed in part: make it land whole
                    await aionative.pwrite(fds[i], data, off)
                    counts["cancelled"] += 1
                end = off + len(data)
                if end > len(m):
                    m.extend(bytes(end - len(m)))
                m[off:end] = data
                counts["write"] += 1
            elif kind < 0.97:                                 # the file API: open, seek, read
                async with aionative.open(paths[i], "rb") as f:
                    await f.seek(off)
                    size = rng.choice((10, 5000, -1))
                    got = await f.read(size)
                    want = bytes(m[off:] if size < 0 else m[off:off + size])
                    assert got == want, (i, off, size)
                counts["file"] += 1
            else:                                             # truncate and regrow
                new = rng.randrange(SIZE // 2, SIZE * 2)
                os.ftruncate(fds[i], new)
                del m[new:]
                m.extend(bytes(new - len(m)))
                counts["truncate"] += 1
            if n % 512 == 0:
                await asyncio.sleep(0)
    finally:
        for fd in fds.values():
            os.close(fd)


@pytest.mark.slow
async def test_soak_mixed_operations_with_cancellation(backend: str, tmp_path: Path) -> None:
    rng = random.Random(1)
    paths = [tmp_path / f"f{i:02d}" for i in range(FILES)]
    model = [bytearray(rng.randbytes(SIZE)) for _ in range(FILES)]
    for p, m in zip(paths, model):
        p.write_bytes(m)
    gc.collect()
    # Descriptors are compared with no engine open at either end: an engine holds its ring,
    # eventfd and (linux_aio) a bounded cache of O_DIRECT descriptors until it closes.
    fds0, rss0, aio0 = len(os.listdir("/proc/self/fd")), rss_kib(), aio_nr()
    counters0 = _core.debug_counters()
    counts = {"read": 0, "write": 0, "file": 0, "truncate": 0, "cancelled": 0}
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w, paths, model, OPS // WORKERS, counts)
                           for w in range(WORKERS)))
    elapsed = time.perf_counter() - t0
    for p, m in zip(paths, model):
        assert p.read_bytes() == bytes(m)
    aionative.close_engine()
    gc.collect()
    await asyncio.sleep(0)
    assert len(os.listdir("/proc/self/fd")) == fds0
    counters = _core.debug_counters()
    # AIO contexts in use (not those pooled for the next engine: the pool is per process).
    in_use = counters["aio_contexts"] - counters["aio_pooled"]
    assert in_use == counters0["aio_contexts"] - counters0["aio_pooled"]
    for key in ("live_ops", "pinned_buffers", "engines", "rings", "eventfds", "direct_fds"):
        assert counters[key] == counters0[key], key
    grown = rss_kib() - rss0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    total = OPS // WORKERS * WORKERS
    print(f"\nsoak {backend}: {total} operations ({counts}) in {elapsed:.1f} s, "
          f"RSS {rss0} -> {rss0 + grown} KiB, peak {peak} KiB, "
          f"fds {fds0} -> {len(os.listdir('/proc/self/fd'))}, "
          f"aio-nr (system-wide) {aio0} -> {aio_nr()}")
    assert grown < 64 * 1024, f"RSS grew by {grown} KiB"
