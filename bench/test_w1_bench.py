"""pytest-benchmark version of W1: hot random 4 KiB reads, 64 concurrent readers.

Each benchmark round is one batch of 2000 reads spread over 64 tasks, on a fresh event loop
(a fresh aionative engine, thread pool or set of aiofiles handles). Opening the loop and its
handles, and one warm-up read per task, happen in the untimed ``setup``; closing them in the
untimed ``teardown``. pytest-benchmark's statistics are therefore per 2000-read batch:
divide 2000 by the mean for reads/s (also stored in ``extra_info``).

Systems: sync, aionative on every backend and loop, and the peers (executor, aiofiles, anyio,
caio, aiofile; see ``bench.clients``). Run from the repository root: ``pytest bench/
--benchmark-only``. Systems that cannot run here (aionative not built, a backend, uvloop or a
peer missing) are skipped, not failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from bench.clients import Client, Target, open_target, run_batch
from bench.common import (
    JSONDict,
    Skip,
    System,
    loop_factory,
    parse_system,
)
from bench.conftest import op_params
from bench.meter import Quota
from bench.w1 import READ

pytest.importorskip("pytest_benchmark")

READERS = 64
READS_PER_ROUND = 2000
ROUNDS = 20
WARMUP_ROUNDS = 2


SYSTEMS = op_params()


@pytest.fixture
def target(hot_params: JSONDict) -> Iterator[Target]:
    """The open hot file and its offset pool; closed after the test."""
    tgt = open_target(hot_params)
    yield tgt
    tgt.close()


def _open_round(system: System, target: Target) -> tuple[asyncio.Runner, Client]:
    """A fresh loop with the system opened on it and every reader warmed once."""
    assert system.loop is not None
    runner = asyncio.Runner(loop_factory=loop_factory(system.loop))
    try:
        client = runner.run(READ.open_client(system, READERS, target))
        runner.run(run_batch(client, target, READERS, READERS))
    except BaseException:
        runner.close()
        raise
    return runner, client


def _close_round(runner: asyncio.Runner, client: Client) -> None:
    try:
        runner.run(client.aclose())
    finally:
        runner.close()


class AsyncRounds:
    """setup/batch/teardown for ``benchmark.pedantic`` on an async system.

    Open rounds are tracked and ``close_all`` closes leftovers: with ``--benchmark-disable``
    pytest-benchmark runs setup and target once but never calls teardown.
    """

    def __init__(self, system: System, target: Target) -> None:
        self.system, self.target = system, target
        self.open: list[tuple[asyncio.Runner, Client]] = []

    def setup(self) -> tuple[tuple[asyncio.Runner, Client], dict[str, Any]]:
        pair = _open_round(self.system, self.target)
        self.open.append(pair)
        return pair, {}

    def batch(self, runner: asyncio.Runner, client: Client) -> None:
        runner.run(run_batch(client, self.target, READERS, READS_PER_ROUND))

    def teardown(self, runner: asyncio.Runner, client: Client) -> None:
        self.open.remove((runner, client))
        _close_round(runner, client)

    def close_all(self) -> None:
        while self.open:
            self.teardown(*self.open[-1])


def _probe_system(system: System, target: Target, extra: JSONDict) -> None:
    """Open the system once up front, so a missing one skips instead of failing mid-run."""
    try:
        runner, client = _open_round(system, target)
    except Skip as exc:
        pytest.skip(str(exc))
    extra.update(client.info())
    _close_round(runner, client)


@pytest.mark.parametrize("name", SYSTEMS)
def test_w1_hot_random_4k(benchmark: Any, monkeypatch: pytest.MonkeyPatch, target: Target,
                          name: str) -> None:
    system = parse_system(name)
    if system.backend:
        monkeypatch.setenv("AIONATIVE_BACKEND", system.backend)
    else:
        monkeypatch.delenv("AIONATIVE_BACKEND", raising=False)
    benchmark.group = f"W1 hot 4 KiB random reads: {READS_PER_ROUND} per round, N={READERS}"
    benchmark.extra_info.update(system=name, readers=READERS, reads_per_round=READS_PER_ROUND)
    if system.kind == "sync":
        benchmark.extra_info["readers"] = 1
        benchmark.pedantic(lambda: READ.sync_loop(target, Quota(READS_PER_ROUND)),
                           rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
    else:
        _probe_system(system, target, benchmark.extra_info)
        rounds = AsyncRounds(system, target)
        try:
            benchmark.pedantic(rounds.batch, setup=rounds.setup, teardown=rounds.teardown,
                               rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
        finally:
            rounds.close_all()
    if benchmark.stats:
        benchmark.extra_info["reads_per_s"] = READS_PER_ROUND / benchmark.stats.stats.mean
