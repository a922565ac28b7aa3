"""pytest-benchmark version of W8: ten 16 MiB files written at once, one ``write()`` each.

Each round deletes the ten files (untimed ``setup``), then writes them: ten tasks gathered on an
event loop opened for the benchmark (the builtin: one after the other, on this thread). The
files are in pytest's temporary directory; the full-size measurement (256 MiB files, on a tmpfs
and on the data directory, with CPU work beside, memory and loop lag) is ``python -m bench
--workloads W8 W8-tmpfs``.

Run from the repository root: ``pytest bench/ --benchmark-only``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from bench import w8
from bench.common import LOOPS, Skip, loop_factory, parse_system
from bench.conftest import aionative_params

pytest.importorskip("pytest_benchmark")

FILE_SIZE = 16 << 20
ROUNDS = 5

SYSTEMS = [pytest.param("sync", id="sync"), *aionative_params("aionative"),
           *(pytest.param(f"aiofiles-{lp}", id=f"aiofiles-{lp}") for lp in LOOPS)]


@pytest.mark.parametrize("name", SYSTEMS)
def test_w8_ten_large_writes(benchmark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                             name: str) -> None:
    system = parse_system(name)
    if system.backend:
        monkeypatch.setenv("AIONATIVE_BACKEND", system.backend)
    else:
        monkeypatch.delenv("AIONATIVE_BACKEND", raising=False)
    paths = [str(tmp_path / f"w8-{i}.bin") for i in range(w8.FILES)]
    data = os.urandom(FILE_SIZE)
    benchmark.group = f"W8 ten {FILE_SIZE >> 20} MiB files written at once, one write() each"
    benchmark.extra_info.update(system=name, bytes_per_round=w8.FILES * FILE_SIZE)

    def fresh() -> tuple[tuple[()], dict[str, Any]]:
        w8._fresh(paths, disk=False)
        return (), {}

    if system.kind == "sync":
        def writes() -> None:
            for p in paths:
                with open(p, "wb") as f:
                    f.write(data)
        benchmark.pedantic(writes, setup=fresh, rounds=ROUNDS, iterations=1)
    else:
        try:
            open_ = w8._opener(system)
            factory = loop_factory(system.loop or "asyncio")
        except Skip as exc:
            pytest.skip(str(exc))

        async def one(path: str) -> None:
            async with open_(path) as f:
                await f.write(data)

        async def gathered() -> None:
            await asyncio.gather(*(one(p) for p in paths))

        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(gathered())  # untimed: the engine, the pool, the imports
            benchmark.pedantic(lambda: runner.run(gathered()), setup=fresh, rounds=ROUNDS,
                               iterations=1)
    w8._check(paths, FILE_SIZE)
    w8._fresh(paths, disk=False)
    if benchmark.stats:
        benchmark.extra_info["mb_per_s"] = w8.FILES * FILE_SIZE / benchmark.stats.stats.mean / 1e6
