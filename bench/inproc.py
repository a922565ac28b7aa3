"""In-process probes that docs/design.md cites: each measures the cost of one mechanism of
the engine or the file layer, in one process on one loop with the engine's counters at hand,
outside the worker protocol of ``python -m bench`` (the harness and its workloads).

    python -m bench.inproc w1-inline [--n 64] [--sync] [--loop asyncio|uvloop]
        W1's hot random 4 KiB reads by N tasks for 1 s, five times: CPU µs a read, reads/s
        and the share completed inline (the rest went through the kernel queue), median run.
        ``--sync``: before each run, ``os.pread``s of the same offsets in a plain loop for
        1 s (W1's synchronous loop), their median and the ratio of the two medians' reads/s.
        What parking a refused caller and sending a refused read round a turn cost.
    python -m bench.inproc w6-turns [--n 64] [--no-gc] [--backend threads]
        W1's reads by N tasks and W6's 1 ms ticker on the asyncio loop for 1 s: the loop
        iterations' durations (``_run_once`` timed), the callbacks each starts with, and the
        ticker's lateness. How long the budget, the park slice and the threads engine's
        budget let a turn grow.
    python -m bench.inproc w3-seq
        W3's sequential 1 MiB ``aionative.pread``s over the first 256 MiB of W1's (cached) file
        against ``os.pread``, and ``aionative.preadinto``s into one buffer against
        ``os.preadv``, alternating, five passes each: median µs a read, each pair's ratio, and
        how the last pass's reads went (queued, inline, retried after a turn, minor page
        faults a read); and ``os.preadv`` with the loop turned once after each read: what the
        turn costs. Why a large read the spent budget refused waits a turn, not the queue.
    python -m bench.inproc large-small [--seconds 0.7] [--backend threads]
        Two tasks streaming cached 1 MiB ``aionative.pread``s beside one task of 4 KiB ones:
        how many of each got done, and the slowest small one (whether large reads' retries
        after a turn starve the queue of refused reads).
    python -m bench.inproc w4-loop [--seconds 6] [--budget-us US] [--n 1]
        ``async with aionative.open(p, "rb")`` + ``read()`` over 300 of W4's cached files in
        passes, N tasks sharing one iterator: µs a file, how many operations went through the
        kernel queue, how many inline calls a spent budget deferred to a later turn, and how
        many of those found the next turn's budget spent past the retry's grace too (they
        wait in the queue of refused calls). What the grace saves concurrent opens.
    python -m bench.inproc log-lines [--n 20000]
        A log shipper's appends: N lines of 100 bytes written to a file opened ``"ab"``, each
        followed by ``flush()`` (then again without the flushes), by the builtin ``open``,
        ``aionative.open`` and ``aiofiles.open`` in turn: lines/s, CPU µs a line, and how
        aionative's writes went (inline, queued). Why a refused push waits a turn.
    python -m bench.inproc w3-file [--n 1024] [--direct-min BYTES] [--cold]
        W3 through file objects: ``read``s of N KiB, then ``readinto``s into one buffer, over
        the first 64 MiB of W1's (cached) file, by ``aionative.open`` and the builtin
        ``open``, alternating, five passes each: median µs a chunk and the ratios.
        ``--direct-min`` sets the size from which a file's read skips its window
        (``_files.binary._DIRECT_READ_MIN``; a huge value: never); ``--cold`` drops the file's
        pages before each pass.
    python -m bench.inproc w2-direct [--n 1 16 64] [--seconds 2] [--backend linux_aio] [--file]
        W2's O_DIRECT random 4 KiB ``aionative.preadinto``s of W1's file by N tasks: reads/s,
        CPU µs a read, and the engine's submission batches, system calls, eventfd wake-ups
        and flushes a read (how the reads reach the device, how their completions come back,
        and how many loop iterations the engine asked for). ``--file``: the same reads as
        ``await f.pread(4096, off)`` on one ``aionative.open(path, "rb", buffering=0,
        direct=True)`` file the N tasks share (the file layer aligns and copies).
    python -m bench.inproc w5-direct [--n 1 16 64] [--seconds 2] [--backend linux_aio]
        Random 4 KiB ``await f.pwrite(block, off)`` by N tasks on one ``aionative.open(path,
        "r+b", buffering=0, direct=True)`` file of 64 MiB in ``bench/.data`` (written in full
        first): writes/s, CPU µs a write and the engine's counters a write, as ``w2-direct``.

``--turn-min BYTES`` sets ``aionative.pread``'s ``TURN_MIN`` for any of them (0: every read the
spent budget refused waits a turn instead of going to the kernel queue).

Needs ``make bench`` (or ``python -m bench --workloads W1 W4``) to have created the data in
``bench/.data``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import mmap
import os
import random
import resource
import tempfile
import time
import types
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aionative
from aionative import _lowlevel
from bench.common import DATA_DIR


@types.coroutine
def _bare_turn() -> Iterator[None]:
    """Let the loop turn once, as a budget-refused large read does (a bare ``yield``)."""
    yield


async def _ticker(late: list[float], stop: list[bool]) -> None:
    """A 1 ms ticker: how late each tick woke, in seconds, appended to ``late`` until
    ``stop[0]`` (``perf_counter``: uvloop's own clock rounds timers to the millisecond)."""
    while not stop[0]:
        due = time.perf_counter() + 0.001
        await asyncio.sleep(0.001)
        late.append(time.perf_counter() - due)


def _pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (seconds), in ms."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _w4_files(count: int = 300) -> list[str]:
    roots = sorted(DATA_DIR.glob("w4-files-1000-seed*"))
    if not roots:
        raise SystemExit("no W4 files: run `python -m bench --workloads W4` first")
    files = sorted(str(p) for p in roots[0].iterdir())[:count]
    for p in files:
        Path(p).read_bytes()  # into the page cache
    return files


async def w4_loop(seconds: float, tasks: int) -> None:
    files = _w4_files()

    async def worker(it: Iterator[str]) -> None:
        for p in it:
            async with aionative.open(p, "rb") as f:
                await f.read()

    done, t0, c0 = 0, time.perf_counter(), _cpu()
    s0 = aionative.engine_stats()
    while time.perf_counter() - t0 < seconds:
        it = iter(files)
        await asyncio.gather(*(worker(it) for _ in range(tasks)))
        done += len(files)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    s1 = aionative.engine_stats()
    queued = s1["submitted"] - s0["submitted"]
    deferred = s1["inline_retries"] - s0["inline_retries"]  # one retry a deferral
    waited = s1["retries_refused"] - s0["retries_refused"]
    print(f"{done} files, N={tasks}: {wall * 1e6 / done:.1f} µs wall, "
          f"{cpu * 1e6 / done:.1f} µs CPU a file; {queued} operations through the kernel "
          f"queue; {deferred / done:.2f} inline calls a file deferred to a later turn, "
          f"{waited / done:.2f} of them on to the queue of refused calls")


_W1_SPAN = 64 << 20  # the hot region of W1's file these commands read


def _w1_hot_fd(span: int = _W1_SPAN) -> int:
    """W1's file, opened, its first `span` bytes read into the page cache."""
    paths = sorted(DATA_DIR.glob("w1-hot-*.bin"))
    if not paths:
        raise SystemExit("no W1 file: run `python -m bench --workloads W1` first")
    fd = os.open(paths[0], os.O_RDONLY)
    for off in range(0, span, 1 << 20):
        os.pread(fd, 1 << 20, off)
    return fd


_W1_POOL = 1 << 16  # offsets drawn before the readers start, as W1's (bench.w1) are


def _w1_offsets(seed: int = 1) -> list[int]:
    rnd = random.Random(seed)
    return [rnd.randrange(_W1_SPAN >> 12) << 12 for _ in range(_W1_POOL)]


async def _w1_reader(fd: int, k: int, stop: list[bool], offs: list[int]) -> None:
    """W1's reader: hot random 4 KiB ``aionative.pread``s until ``stop[0]``, each reader
    from its own place in the pool of offsets (as bench.w1's readers)."""
    j, mask = k * (_W1_POOL // 64), _W1_POOL - 1
    pread = aionative.pread
    while not stop[0]:
        await pread(fd, 4096, offs[j & mask])
        j += 1


def _w1_sync(fd: int, offs: list[int], seconds: float = 1.0) -> tuple[float, float]:
    """The synchronous loop W1 compares with: ``os.pread``s of the same offsets for
    ``seconds``; CPU µs a read and reads/s."""
    pread, mask, j = os.pread, _W1_POOL - 1, 0
    c0, t0 = _cpu(), time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        for _ in range(1024):
            pread(fd, 4096, offs[j & mask])
            j += 1
    c1, t1 = _cpu(), time.perf_counter()
    return (c1 - c0) * 1e6 / j, j / (t1 - t0)


async def w1_inline(n: int, sync: bool = False) -> None:
    fd, offs = _w1_hot_fd(), _w1_offsets()
    runs, sync_runs = [], []
    for _ in range(5):
        if sync:  # alternating with aionative's runs, in the same process
            sync_runs.append(_w1_sync(fd, offs))
        stop = [False]
        tasks = [asyncio.ensure_future(_w1_reader(fd, k, stop, offs)) for k in range(n)]
        await asyncio.sleep(0.1)
        s0, c0, t0 = aionative.engine_stats(), _cpu(), time.perf_counter()
        await asyncio.sleep(1.0)
        s1, c1, t1 = aionative.engine_stats(), _cpu(), time.perf_counter()
        stop[0] = True
        await asyncio.gather(*tasks)
        inline = s1["inline_hits"] - s0["inline_hits"]
        ops = inline + s1["completed"] - s0["completed"]
        runs.append(((c1 - c0) * 1e6 / ops, ops / (t1 - t0), inline / ops))
    os.close(fd)
    cpu, rate, share = sorted(runs)[len(runs) // 2]
    print(f"N={n}: {cpu:.2f} µs CPU a read, {rate / 1e3:.1f}k reads/s, {share:.0%} inline")
    if sync:
        sync_cpu, sync_rate = sorted(sync_runs)[len(sync_runs) // 2]
        print(f"sync: {sync_cpu:.2f} µs CPU a read, {sync_rate / 1e3:.1f}k reads/s; "
              f"N={n} ÷ sync {rate / sync_rate:.2f}×")


async def w6_turns(n: int) -> None:
    """W1's hot reads by N tasks with a 1 ms ticker alongside, for 1 s: how long the loop's
    iterations take (asyncio: ``_run_once`` timed; uvloop has no such hook), how many
    callbacks each starts with, and the ticker's lateness."""
    loop = asyncio.get_running_loop()
    run_once = getattr(loop, "_run_once", None)
    if run_once is None:
        raise SystemExit("w6-turns times asyncio's _run_once: use --loop asyncio")
    fd, offs = _w1_hot_fd(), _w1_offsets()
    stop = [False]
    turns: list[float] = []
    ready: list[int] = []
    late: list[float] = []

    def timed_run_once() -> None:
        ready.append(len(loop._ready))  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        run_once()
        turns.append(time.perf_counter() - t0)

    tasks = [asyncio.ensure_future(_w1_reader(fd, k, stop, offs)) for k in range(n)]
    tasks.append(asyncio.ensure_future(_ticker(late, stop)))
    await asyncio.sleep(0.2)
    late.clear()
    loop._run_once = timed_run_once  # type: ignore[attr-defined]
    await asyncio.sleep(1.0)
    del loop._run_once  # type: ignore[attr-defined]
    stop[0] = True
    await asyncio.gather(*tasks)
    os.close(fd)

    print(f"N={n}: {len(turns)} iterations, ms p50 {_pct(turns, .5):.3f} / p99 "
          f"{_pct(turns, .99):.3f} / max {max(turns) * 1e3:.3f}; callbacks at the start of one: "
          f"median {sorted(ready)[len(ready) // 2]}; ticker lateness ms p50 {_pct(late, .5):.3f}"
          f" / p99 {_pct(late, .99):.3f} / max {max(late) * 1e3:.3f} ({len(late)} ticks)")


async def w3_seq() -> None:
    fd = _w1_hot_fd(256 << 20)
    chunk, offs = 1 << 20, range(0, 256 << 20, 1 << 20)
    buf = mmap.mmap(-1, chunk)
    times: dict[str, list[float]] = {k: [] for k in ("os.pread", "aionative.pread",
                                                     "os.preadv", "aionative.preadinto",
                                                     "os.preadv + a turn")}
    last: dict[str, str] = {}

    async def one(name: str) -> None:
        s0, f0 = aionative.engine_stats(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        if name == "os.pread":
            for off in offs:
                os.pread(fd, chunk, off)
        elif name == "os.preadv":
            for off in offs:
                os.preadv(fd, [buf], off)
        elif name == "os.preadv + a turn":
            for off in offs:
                os.preadv(fd, [buf], off)
                await _bare_turn()
        elif name == "aionative.pread":
            for off in offs:
                await aionative.pread(fd, chunk, off)
        else:
            for off in offs:
                await aionative.preadinto(fd, buf, off)
        times[name].append((time.perf_counter() - t0) / len(offs) * 1e6)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        s1 = aionative.engine_stats()
        last[name] = ", ".join([f"{k} {s1[k] - s0[k]}" for k in
                                ("submitted", "inline_hits", "inline_retries")] +
                               [f"{faults / len(offs):.1f} minor page faults a read"])

    try:
        for _ in range(5):
            for name in times:
                await one(name)
    finally:
        os.close(fd)
        buf.close()
    med = {k: sorted(v)[2] for k, v in times.items()}
    for sync, ours in (("os.pread", "aionative.pread"), ("os.preadv", "aionative.preadinto")):
        print(f"µs a 1 MiB read: {sync} {med[sync]:.1f}, {ours} {med[ours]:.1f} = "
              f"{med[sync] / med[ours]:.3f}× the sync loop's speed; the last pass's "
              f"{len(offs)} reads: {last[ours]}")
    turn = "os.preadv + a turn"
    print(f"µs a 1 MiB read with the loop turned once after each (a bare yield): {turn} "
          f"{med[turn]:.1f} = {med['os.preadv'] / med[turn]:.3f}× os.preadv's speed")


async def large_small(seconds: float) -> None:
    """Two tasks streaming 1 MiB ``aionative.pread``s of W1's (cached) file beside one task of
    4 KiB ones: how many small reads get done, and the slowest, while large ones keep coming
    (a queue of refused reads that large reads' retries overtake every turn never moves)."""
    fd = _w1_hot_fd(2 << 20)
    stop, small, worst, large = False, 0, 0.0, 0

    async def streamer(k: int) -> None:
        nonlocal large
        while not stop:
            await aionative.pread(fd, 1 << 20, (k % 2) << 20)
            k, large = k + 1, large + 1

    async def reader() -> None:
        nonlocal small, worst
        while not stop:
            t = time.perf_counter()
            await aionative.pread(fd, 4096, (small % 64) * 4096)
            worst = max(worst, time.perf_counter() - t)
            small += 1

    tasks = [asyncio.ensure_future(streamer(0)), asyncio.ensure_future(streamer(1)),
             asyncio.ensure_future(reader())]
    await asyncio.sleep(seconds)
    stop = True
    await asyncio.gather(*tasks)
    os.close(fd)
    print(f"{seconds:g} s: {large} reads of 1 MiB, {small} of 4 KiB, the slowest of those "
          f"{worst * 1e3:.1f} ms")


async def w3_file(chunks_kib: list[int], cold: bool) -> None:
    """W3 through file objects: sequential ``read``s of each chunk size, then ``readinto``s
    into one buffer, over the first 64 MiB of W1's (cached) file, by ``aionative.open`` and
    the builtin ``open``, alternating, five passes each: median µs a chunk and the ratios.
    ``cold``: the file's pages dropped before each pass."""
    fd = _w1_hot_fd(64 << 20)
    path = min(DATA_DIR.glob("w1-hot-*.bin"))
    for kib in chunks_kib:
        chunk = kib << 10
        count = (64 << 20) // chunk
        buf = bytearray(chunk)
        times: dict[str, list[float]] = {k: [] for k in (
            "open read", "aionative.open read", "open readinto", "aionative.open readinto")}
        for _ in range(5):
            for name, runs in times.items():
                into = name.endswith("readinto")
                if cold:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                t0 = time.perf_counter()
                if name.startswith("aionative"):
                    async with aionative.open(path, "rb") as af:
                        for _ in range(count):
                            await (af.readinto(buf) if into else af.read(chunk))
                else:
                    with open(path, "rb") as f:  # noqa: ASYNC230 - the reference
                        for _ in range(count):
                            f.readinto(buf) if into else f.read(chunk)
                runs.append((time.perf_counter() - t0) / count * 1e6)
        med = {k: sorted(v)[2] for k, v in times.items()}
        for op in ("read", "readinto"):
            a, b = med[f"open {op}"], med[f"aionative.open {op}"]
            print(f"µs a {kib} KiB {op}: open {a:.1f}, aionative.open {b:.1f} = "
                  f"{a / b:.3f}× the builtin's speed")
    os.close(fd)


async def _run_tasks(work: Callable[[int, list[bool]], Awaitable[None]], n: int,
                     warmup: float, seconds: float, cpu: Callable[[], Any] = _cpu,
                     ) -> tuple[float, Any, Any, dict[str, int], dict[str, int]]:
    """N tasks running ``work(k, stop)`` until ``stop[0]``; after ``warmup``, time ``seconds``:
    the elapsed time, ``cpu()`` and the engine's stats before and after."""
    stop = [False]
    tasks = [asyncio.ensure_future(work(k, stop)) for k in range(n)]
    await asyncio.sleep(warmup)
    s0, c0, t0 = aionative.engine_stats(), cpu(), time.perf_counter()
    await asyncio.sleep(seconds)
    s1, c1, t1 = aionative.engine_stats(), cpu(), time.perf_counter()
    stop[0] = True
    await asyncio.gather(*tasks)
    return t1 - t0, c0, c1, s0, s1


async def _w2_cell(blocks: int, n: int, seconds: float,
                   one: Callable[[Any, int], Awaitable[Any]], what: str = "read") -> None:
    """N tasks, each ``await one(buf, off)`` at random 4 KiB-aligned offsets among ``blocks``
    (``buf``: the task's page-aligned 4 KiB of random bytes), for ``seconds``."""
    done = [0]
    marks: list[int] = []

    async def worker(k: int, stop: list[bool]) -> None:
        buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
        rnd = random.Random(k)
        buf[:] = rnd.randbytes(4096)
        while not stop[0]:
            await one(buf, rnd.randrange(blocks) << 12)
            done[0] += 1
        buf.close()

    def cpu_and_count() -> float:
        marks.append(done[0])
        return _cpu()

    dt, c0, c1, s0, s1 = await _run_tasks(worker, n, 0.3, seconds, cpu_and_count)
    ops = marks[1] - marks[0]
    per = "  ".join(f"{k} {(s1[k] - s0[k]) / ops:.3f}"
                    for k in ("batches", "syscalls", "wakeups", "flushes", "woken") if k in s1)
    print(f"N={n}: {ops / dt / 1e3:.1f}k {what}s/s, {(c1 - c0) * 1e6 / ops:.1f} µs CPU a "
          f"{what}; a {what}: {per}")


async def w2_direct(ns: list[int], seconds: float, through_file: bool) -> None:
    paths = sorted(DATA_DIR.glob("w1-hot-*.bin"))
    if not paths:
        raise SystemExit("no W1 file: run `python -m bench --workloads W1` first")
    fd = os.open(paths[0], os.O_RDONLY | os.O_DIRECT)
    f = (await aionative.open(paths[0], "rb", buffering=0, direct=True)
         if through_file else None)

    async def one(buf: Any, off: int) -> Any:
        if f is None:
            return await aionative.preadinto(fd, buf, off)
        return await f.pread(4096, off)

    try:
        for n in ns:
            await _w2_cell(os.fstat(fd).st_size >> 12, n, seconds, one)
    finally:
        os.close(fd)
        if f is not None:
            await f.close()


W5_DIRECT_SIZE = 64 << 20


def _w5_direct_file() -> Path:
    """A 64 MiB file in bench/.data, written in full (so no direct write allocates)."""
    path = DATA_DIR / "w5-direct-64MiB.bin"
    if not path.exists() or path.stat().st_size != W5_DIRECT_SIZE:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            out.writelines(os.urandom(1 << 20) for _ in range(W5_DIRECT_SIZE >> 20))
            os.fsync(out.fileno())
    return path


async def w5_direct(ns: list[int], seconds: float) -> None:
    """Random 4 KiB ``await f.pwrite(block, off)`` on one ``aionative.open(path, "r+b",
    buffering=0, direct=True)`` file, N tasks: O_DIRECT writes of whole blocks to the device."""
    path = _w5_direct_file()
    async with aionative.open(path, "r+b", buffering=0, direct=True) as f:
        for n in ns:
            await _w2_cell(W5_DIRECT_SIZE >> 12, n, seconds, f.pwrite, "write")


async def log_lines(count: int) -> None:
    import aiofiles

    line = b"x" * 99 + b"\n"

    def builtin(path: str, flush: bool) -> None:
        with open(path, "ab") as f:
            for _ in range(count):
                f.write(line)
                if flush:
                    f.flush()

    async def through(opener: Callable[..., Any], path: str, flush: bool) -> None:
        async with opener(path, "ab") as f:
            for _ in range(count):
                await f.write(line)
                if flush:
                    await f.flush()

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=DATA_DIR) as d:  # on the data disk (ext4 here)
        for flush in (True, False):
            for name in ("builtin", "aionative", "aiofiles"):
                path = os.path.join(d, name)
                s0, c0, t0 = aionative.engine_stats(), _cpu(), time.perf_counter()
                if name == "builtin":
                    builtin(path, flush)
                else:
                    await through(aionative.open if name == "aionative" else aiofiles.open,
                                  path, flush)
                dt, c1, s1 = time.perf_counter() - t0, _cpu(), aionative.engine_stats()
                assert os.path.getsize(path) == count * len(line)
                os.unlink(path)
                how = ""
                if name == "aionative":
                    how = ", ".join(f"{k} {s1.get(k, 0) - s0.get(k, 0)}"
                                    for k in ("inline_writes", "submitted", "inline_retries"))
                print(f"{'write+flush' if flush else 'write':11s} {name:9s} "
                      f"{count / dt / 1e3:8.1f}k lines/s {(c1 - c0) / count * 1e6:7.2f} µs CPU "
                      f"a line {how}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.inproc", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["w1-inline", "w6-turns", "w3-seq", "large-small",
                                     "w4-loop", "log-lines", "w3-file", "w2-direct",
                                     "w5-direct"])
    ap.add_argument("--backend", default=None, help="io_uring, linux_aio or threads")
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    ap.add_argument("--n", type=int, nargs="+", default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--budget-us", type=float, default=None)
    ap.add_argument("--no-gc", action="store_true", help="run with the cyclic collector off")
    ap.add_argument("--cold", action="store_true", help="w3-file: drop the file's pages first")
    ap.add_argument("--file", action="store_true",
                    help="w2-direct: read through an aionative.open(..., direct=True) file")
    ap.add_argument("--direct-min", type=int, default=None,
                    help="w3-file: the size from which a file's read(n) / readinto skips the "
                         "window (aionative._files.binary._DIRECT_READ_MIN)")
    ap.add_argument("--sync", action="store_true",
                    help="w1-inline: the synchronous loop's reads of the same offsets too")
    ap.add_argument("--turn-min", type=int, default=None,
                    help="aionative.pread's TURN_MIN: from this size a read the spent budget "
                         "refused waits a turn instead of the queue (0: every read)")
    args = ap.parse_args()
    if args.no_gc:
        gc.disable()
    if args.turn_min is not None:
        _lowlevel.set_turn_min(args.turn_min)
    if args.direct_min is not None:
        from aionative._files import binary
        binary._DIRECT_READ_MIN = args.direct_min
    if args.backend:
        aionative.set_default_backend(args.backend)
    if args.budget_us is not None:  # every measurement's engine
        aionative.set_inline_budget(args.budget_us)

    def seconds(default: float) -> float:
        return default if args.seconds is None else args.seconds

    what = args.what
    if what == "w1-inline":
        coro = w1_inline((args.n or [64])[0], args.sync)
    elif what == "w6-turns":
        coro = w6_turns((args.n or [64])[0])
    elif what == "w3-seq":
        coro = w3_seq()
    elif what == "large-small":
        coro = large_small(seconds(0.7))
    elif what == "w4-loop":
        coro = w4_loop(seconds(6.0), (args.n or [1])[0])
    elif what == "log-lines":
        coro = log_lines((args.n or [20000])[0])
    elif what == "w3-file":
        coro = w3_file(args.n or [1024], args.cold)
    elif what == "w2-direct":
        coro = w2_direct(args.n or [1, 16, 64], seconds(2.0), args.file)
    else:
        coro = w5_direct(args.n or [1, 16, 64], seconds(2.0))
    if args.loop == "uvloop":
        import uvloop
        uvloop.run(coro)
    else:
        asyncio.run(coro)


if __name__ == "__main__":
    main()
