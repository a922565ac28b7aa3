"""pytest-benchmark version of W3: sequential read of the 64 MiB hot test file, 1 MiB chunks.

Each round reads the whole file once (64 chunks) with one task, on a fresh event loop opened
(and one chunk verified) in the untimed setup. ``sync`` / ``aionative`` / the peers return a
new ``bytes`` per chunk; ``sync.preadinto`` and ``aionative.preadinto`` read into one reused
buffer. MB/s is in ``extra_info``.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench import w3
from bench.common import JSONDict
from bench.conftest import aionative_params, bench_op, op_params, use_system
from bench.meter import Quota

pytest.importorskip("pytest_benchmark")

SYSTEMS = [pytest.param("sync.preadinto", id="sync.preadinto"),
           *aionative_params("aionative.preadinto", "aionative.open"), *op_params()]


@pytest.mark.parametrize("name", SYSTEMS)
def test_w3_sequential_1m(benchmark: Any, monkeypatch: pytest.MonkeyPatch, hot_params: JSONDict,
                          name: str) -> None:
    system = use_system(monkeypatch, name)
    into = system.kind.endswith(".preadinto")
    op = w3.READINTO if into else w3.READ
    target = w3.open_target(hot_params, into)
    chunks = len(target.offsets)
    benchmark.group = f"W3 sequential 1 MiB reads: {chunks} MiB per round"
    benchmark.extra_info.update(system=name, chunks_per_round=chunks)
    try:
        bench_op(benchmark, op, system, target, 1, chunks,
                 sync=lambda: op.sync_loop(target, Quota(chunks)))
    finally:
        target.close()
    if benchmark.stats:
        benchmark.extra_info["mb_per_s"] = chunks * w3.CHUNK / benchmark.stats.stats.mean / 1e6
