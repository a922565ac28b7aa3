"""pytest-benchmark version of W6: W1's load (2000 hot 4 KiB reads a round, N=64) with a 1 ms
ticker in the same loop; the ticker's lateness over all timed rounds (p50/p99/max, ms) is
stored in ``extra_info`` next to pytest-benchmark's round times.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from bench.clients import Client, Target, open_target, run_batch
from bench.common import JSONDict
from bench.conftest import PEERS, aionative_params, bench_op, use_system
from bench.meter import LagProbe
from bench.w1 import READ

pytest.importorskip("pytest_benchmark")

READERS = 64
READS_PER_ROUND = 2000
SYSTEMS = [*aionative_params("aionative"), *(pytest.param(p, id=p) for p in PEERS)]


@pytest.fixture
def target(hot_params: JSONDict) -> Iterator[Target]:
    tgt = open_target(hot_params)
    yield tgt
    tgt.close()


@pytest.mark.parametrize("name", SYSTEMS)
def test_w6_loop_lag(benchmark: Any, monkeypatch: pytest.MonkeyPatch, target: Target,
                     name: str) -> None:
    system = use_system(monkeypatch, name)
    probes: list[LagProbe] = []

    async def with_ticker(client: Client) -> None:
        probe = LagProbe()
        ticker = asyncio.create_task(probe.run())
        try:
            await run_batch(client, target, READERS, READS_PER_ROUND)
        finally:
            probe.stop()
            await ticker
        probes.append(probe)

    benchmark.group = f"W6 W1 load ({READS_PER_ROUND} reads, N={READERS}) with a 1 ms ticker"
    benchmark.extra_info.update(system=name, readers=READERS, reads_per_round=READS_PER_ROUND)
    bench_op(benchmark, READ, system, target, READERS, READS_PER_ROUND, run=with_ticker)
    merged = LagProbe()
    for probe in probes:
        merged.wakes.extend(probe.wakes)
        merged.late.extend(probe.late)
    benchmark.extra_info["lag_ms"] = merged.summary()
