"""Instructions a file call costs, counted by callgrind: repeatable where wall time on a shared
machine is not.

    python -m bench.instructions [--cases read:1000 read:4096 readline:rb afor:rb ...]
                                 [--calls 2000 12000]

Each case runs in a fresh interpreter under ``valgrind --tool=callgrind`` twice, making N1 and
then N2 calls after a warm-up of 200, once through ``aionative.open`` and once through the
builtin ``open``; (instructions(N2) − instructions(N1)) / (N2 − N1) is what one call costs in
user space. The kernel's work (the page-cache copy, the system calls) is not counted, and a
large ``memcpy`` counts as few instructions: compare the same case across versions, not across
sizes. ``PYTHONHASHSEED=0`` keeps start-up identical between the two runs, and a 1 s inline
budget keeps the fast path's behaviour what it is at full speed (valgrind runs ~50× slower).

Cases: ``read:N`` (sequential ``read(N)`` of W1's cached file, ``rb``), ``readline:MODE``
(``await f.readline()`` over W7's lines file, ``rb`` or ``r``), ``afor:MODE`` (``async for``
over it), ``pread:N`` (``await aionative.pread(fd, N, off)`` against ``os.pread``, over the
first MiB of W1's file, read once first: the inline fast path of a hot read, as W1's),
``direct:LOOP[:N]`` (``await aionative.preadinto(fd, buf, off)`` of 4 KiB by N tasks, 1 if
not given, on an O_DIRECT descriptor of W1's file, on the ``asyncio`` or ``uvloop`` loop,
against a blocking ``os.preadv``: W2 at depth N, where every read waits for the device and its
cost to the loop is the call, the wake-up and the loop iterations between them),
``w1:LOOP:N`` (W1 at N readers: ``await aionative.pread(fd, 4096, off)`` of hot random
offsets of W1's file by N tasks, the calls shared among them, against the synchronous loop's
``os.pread``s of the same offsets; its budget is 7.5 ms, the default 150 µs scaled as valgrind
slows the run, so that callers park and take turns as they do at full speed),
``write:MODE:N`` (a file's whole life, one at a time: ``open(path, MODE)`` of one of 64
files that hold N bytes, one ``write`` of N bytes, ``close``: the small-file write path, its
open and close through the kernel queue; ``wb`` truncates, ``r+b`` writes over; the files are
in a temporary directory), ``readfile:MODE:N`` (the same files' whole life read: ``open``, one
``read()`` to the end, ``close``: W4's small-file path; ``rb`` is the lazy file).
Needs ``make bench`` (or ``python -m bench --workloads W1 W7``) to have created the data in
``bench/.data``.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from bench.common import DATA_DIR, take_lines

DEFAULT_CASES = ["read:1000", "read:4096", "read:16384", "readline:rb", "readline:r",
                 "afor:rb", "afor:r"]
WARMUP = 200


def _path(case: str) -> str:
    pattern = ("w1-hot-*.bin" if case.startswith(("read:", "pread:", "direct:", "w1:"))
               else "w7-lines-*.txt")
    found = sorted(DATA_DIR.glob(pattern))
    if not found:
        raise SystemExit(f"no {pattern} in {DATA_DIR}: run `make bench` first")
    return str(found[0])


async def _child(case: str, impl: str, calls: int) -> None:
    import aionative

    kind, arg = case.split(":", 1)
    if kind in ("write", "readfile"):
        return await _whole_file_child(kind, arg, impl, WARMUP + calls)
    path, total = _path(case), WARMUP + calls
    if kind == "direct":
        depth = int(arg.partition(":")[2] or 1)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        blocks = os.fstat(fd).st_size >> 12
        left = [total]

        async def reader() -> None:
            buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
            try:
                while left[0] > 0:
                    left[0] -= 1
                    i = left[0]
                    if impl == "builtin":
                        os.preadv(fd, [buf], (i * 7919 % blocks) << 12)
                    else:
                        await aionative.preadinto(fd, buf, (i * 7919 % blocks) << 12)
            finally:
                buf.close()

        try:
            if depth == 1:  # one reader: one loop, one buffer, no gather
                buf = mmap.mmap(-1, 4096)
                if impl == "builtin":
                    for i in range(total):
                        os.preadv(fd, [buf], (i * 7919 % blocks) << 12)
                else:
                    ap = aionative.preadinto
                    for i in range(total):
                        await ap(fd, buf, (i * 7919 % blocks) << 12)
                buf.close()
            else:
                await asyncio.gather(*(reader() for _ in range(depth)))
        finally:
            os.close(fd)
        return
    if kind == "w1":
        n = int(arg.partition(":")[2] or 64)
        fd = os.open(path, os.O_RDONLY)
        blocks = os.fstat(fd).st_size >> 12
        offs = [(i * 7919 % blocks) << 12 for i in range(4096)]
        for off in offs:  # cached, as W1's file is
            os.pread(fd, 4096, off)

        async def w1_reader(k: int, count: int) -> None:
            pread, j = aionative.pread, k * 64
            for _ in range(count):
                await pread(fd, 4096, offs[j & 4095])
                j += 1

        try:
            if impl == "builtin":
                p = os.pread
                for j in range(total):
                    p(fd, 4096, offs[j & 4095])
            else:
                await asyncio.gather(*(w1_reader(k, total // n) for k in range(n)))
        finally:
            os.close(fd)
        return
    if kind == "pread":
        n, span = int(arg), 1 << 20
        fd = os.open(path, os.O_RDONLY)
        try:
            os.pread(fd, span, 0)
            if impl == "builtin":
                p = os.pread
                for i in range(total):
                    p(fd, n, (i * n) % span)
            else:
                ap = aionative.pread
                for i in range(total):
                    await ap(fd, n, (i * n) % span)
        finally:
            os.close(fd)
        return
    mode = "rb" if kind == "read" else arg
    if impl == "builtin":
        with open(path, mode) as f:  # noqa: ASYNC230 - the reference
            if kind == "read":
                n = int(arg)
                for _ in range(total):
                    f.read(n)
            else:  # readline and iteration cost the same in the builtin
                for _ in range(total):
                    f.readline()
        return
    async with aionative.open(path, mode) as af:
        if kind == "read":
            n = int(arg)
            for _ in range(total):
                await af.read(n)
        else:
            await take_lines(af, kind, total)


async def _whole_file_child(kind: str, arg: str, impl: str, total: int) -> None:
    import aionative

    mode, _, size = arg.partition(":")
    reads = kind == "readfile"
    unit = bytes(range(32, 127)) + b"\n" if reads else bytes(range(256))  # (text reads ASCII)
    data = (unit * (int(size) // len(unit) + 1))[:int(size)]
    d = tempfile.mkdtemp(prefix="aionative-instructions-")
    paths = [os.path.join(d, f"f{i}") for i in range(64)]
    try:
        for p in paths:
            with open(p, "wb") as f:  # noqa: ASYNC230 - set-up, before the calls
                f.write(data)
        if impl == "builtin":
            for i in range(total):
                with open(paths[i & 63], mode) as f:  # noqa: ASYNC230 - the reference
                    f.read() if reads else f.write(data)
        elif reads:
            for i in range(total):
                async with aionative.open(paths[i & 63], mode) as af:
                    await af.read()
        else:
            for i in range(total):
                async with aionative.open(paths[i & 63], mode) as af:
                    await af.write(data)
    finally:
        shutil.rmtree(d)


def _instructions(case: str, impl: str, calls: int) -> int:
    budget = "7500" if case.startswith("w1:") else "1000000"
    env = dict(os.environ, PYTHONHASHSEED="0", AIONATIVE_INLINE_BUDGET_US=budget)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
           "-m", "bench.instructions", "--child", case, impl, str(calls)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not m:
        raise SystemExit(f"{case} {impl}: callgrind failed:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=DEFAULT_CASES)
    ap.add_argument("--calls", type=int, nargs=2, default=[2000, 12000])
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args: Any = ap.parse_args(argv)
    if args.child:
        case, impl, calls = args.child
        if ":uvloop" in case:
            import uvloop

            uvloop.run(_child(case, impl, int(calls)))
        else:
            asyncio.run(_child(case, impl, int(calls)))
        return
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed")
    n1, n2 = args.calls
    print(f"instructions a call ({n1} and {n2} calls after {WARMUP}, callgrind):")
    for case in args.cases:
        per = {impl: (_instructions(case, impl, n2) - _instructions(case, impl, n1)) / (n2 - n1)
               for impl in ("aionative", "builtin")}
        ours, ref = (("aionative.pread", "os.pread") if case.startswith(("pread:", "w1:"))
                     else ("aionative.preadinto", "os.preadv") if case.startswith("direct:")
                     else ("aionative.open", "builtin open"))
        print(f"  {case:12} {ours} {per['aionative']:8.0f}   {ref} "
              f"{per['builtin']:6.0f}   ratio {per['aionative'] / per['builtin']:5.1f}×",
              flush=True)


if __name__ == "__main__":
    main()
