"""pytest-benchmark version of W2: O_DIRECT random 4 KiB reads, 16 concurrent readers.

Each round is 500 reads into page-aligned buffers (one per task) over an ``O_DIRECT``
descriptor of the 64 MiB test file, on a fresh event loop opened (and one read verified) in
the untimed setup. ``sync`` is ``os.preadv`` at queue depth 1. Systems that cannot read an
``O_DIRECT`` descriptor (caio and aiofile: unaligned buffers; any system where the test
directory's filesystem refuses ``O_DIRECT``) are skipped with the kernel's error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from bench import w2
from bench.clients import Target, open_target
from bench.common import JSONDict
from bench.conftest import bench_op, op_params, use_system
from bench.meter import Quota

pytest.importorskip("pytest_benchmark")

READERS = 16
READS_PER_ROUND = 500


@pytest.fixture
def target(hot_params: JSONDict) -> Iterator[Target]:
    try:
        tgt = open_target(hot_params, os.O_RDONLY | os.O_DIRECT, buffers=READERS)
    except OSError as exc:
        pytest.skip(f"O_DIRECT not supported here: {exc}")
    yield tgt
    tgt.close()


@pytest.mark.parametrize("name", op_params())
def test_w2_direct_random_4k(benchmark: Any, monkeypatch: pytest.MonkeyPatch, target: Target,
                             name: str) -> None:
    system = use_system(monkeypatch, name)
    benchmark.group = f"W2 O_DIRECT 4 KiB random reads: {READS_PER_ROUND} per round, N={READERS}"
    benchmark.extra_info.update(system=name, readers=READERS, reads_per_round=READS_PER_ROUND)
    bench_op(benchmark, w2.READ, system, target, READERS, READS_PER_ROUND,
             sync=lambda: w2.READ.sync_loop(target, Quota(READS_PER_ROUND)))
    if benchmark.stats:
        benchmark.extra_info["reads_per_s"] = READS_PER_ROUND / benchmark.stats.stats.mean
