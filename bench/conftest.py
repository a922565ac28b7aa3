"""Fixtures for the pytest-benchmark tests in ``bench/`` (``pytest bench/ --benchmark-only``).

The data here is small (a 64 MiB hot file for W1/W2/W3/W6, a 64 MiB file to overwrite for W5,
ten 4 MiB files for W5F, 200 small files for W4, a 4 MiB text file for W7, all in pytest's
temporary directory) so the suite is quick; the full-size measurements are ``python -m
bench``'s job, and fio rows exist only there. ``OpRounds`` and ``bench_op`` run any
positional-I/O workload (``bench.clients.Op``) one batch a round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import w4, w7
from bench.clients import Client, Op, Target, run_batch
from bench.common import (
    LOOPS,
    JSONDict,
    Skip,
    System,
    ensure_random_file,
    import_aionative,
    loop_factory,
    make_hot,
    parse_system,
)

HOT_FILE_SIZE = 64 << 20
SEED = 1
W4_FILES = 200
W7_FILE_SIZE = 4 << 20
W7_AIOFILES_LINES = 2000


@pytest.fixture(scope="session")
def hot_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 64 MiB file of random bytes, read once so it sits in the page cache."""
    path = tmp_path_factory.mktemp("bench") / "hot-64MiB.bin"
    ensure_random_file(path, HOT_FILE_SIZE, lambda _: None)
    make_hot(path)
    yield path
    path.unlink()


@pytest.fixture(scope="session")
def hot_params(hot_file: Path) -> JSONDict:
    """Worker-style W1 parameters for the hot file."""
    return {"path": str(hot_file), "file_size": HOT_FILE_SIZE, "seed": SEED, "pool": 1 << 16}


@pytest.fixture(scope="session")
def w4_params(tmp_path_factory: pytest.TempPathFactory) -> JSONDict:
    """W4's worker parameters for 200 small files, warmed into the page cache."""
    root = tmp_path_factory.mktemp("bench") / "w4-files"
    return w4.prepare_files(root, SEED, W4_FILES, lambda _: None)


@pytest.fixture(scope="session")
def w7_params(tmp_path_factory: pytest.TempPathFactory) -> JSONDict:
    """W7's worker parameters for a 4 MiB text file (aiofiles: its first 2000 lines)."""
    path = tmp_path_factory.mktemp("bench") / "w7-lines.txt"
    return w7.prepare_text(path, W7_FILE_SIZE, SEED, lambda _: None, W7_AIOFILES_LINES)


def aionative_params(*kinds: str) -> list[Any]:
    """pytest parameters: each of ``kinds`` on every available backend and loop (one skipped
    parameter naming the reason when aionative cannot run here)."""
    try:
        backends = list(import_aionative().available_backends())
    except Skip as exc:
        return [pytest.param("aionative", id="aionative", marks=pytest.mark.skip(reason=str(exc)))]
    return [pytest.param(f"{k}-{b}-{lp}", id=f"{k}-{b}-{lp}")
            for k in kinds for b in backends for lp in LOOPS]


PEERS = ["executor-asyncio", "aiofiles-asyncio", "anyio-asyncio", "caio-io_uring-asyncio",
         "caio-io_uring_nosqpoll-asyncio", "caio-linux_aio-asyncio", "aiofile-asyncio"]


def op_params(*extra: str) -> list[Any]:
    """pytest parameters of an ``Op`` workload: sync, aionative everywhere, the peers."""
    return [pytest.param("sync", id="sync"), *aionative_params("aionative"),
            *(pytest.param(name, id=name) for name in (*PEERS, *extra))]


def use_system(monkeypatch: pytest.MonkeyPatch, name: str) -> System:
    """Parse ``name`` and point ``AIONATIVE_BACKEND`` at its backend (aionative only)."""
    system = parse_system(name)
    if system.backend and system.kind.startswith("aionative"):
        monkeypatch.setenv("AIONATIVE_BACKEND", system.backend)
    else:
        monkeypatch.delenv("AIONATIVE_BACKEND", raising=False)
    return system


Batch = Callable[[Client], Awaitable[None]]


class OpRounds:
    """setup/batch/teardown for ``benchmark.pedantic`` on an async system of an ``Op``.

    ``setup`` opens a fresh event loop with the system opened on it (which verifies one
    operation) and runs one untimed batch; ``batch`` runs ``run(client)``; ``teardown``
    closes both. Open rounds are tracked and ``close_all`` closes leftovers: with
    ``--benchmark-disable`` pytest-benchmark runs setup and target once but never teardown.
    """

    def __init__(self, op: Op, system: System, target: Target, tasks: int, run: Batch) -> None:
        self.op, self.system, self.target, self.tasks, self.run = op, system, target, tasks, run
        self.open: list[tuple[asyncio.Runner, Client]] = []

    def _open(self) -> tuple[asyncio.Runner, Client]:
        assert self.system.loop is not None
        runner = asyncio.Runner(loop_factory=loop_factory(self.system.loop))
        try:
            client = runner.run(self.op.open_client(self.system, self.tasks, self.target))
            runner.run(self.run(client))
        except BaseException:
            runner.close()
            raise
        return runner, client

    def setup(self) -> tuple[tuple[asyncio.Runner, Client], dict[str, Any]]:
        pair = self._open()
        self.open.append(pair)
        return pair, {}

    def batch(self, runner: asyncio.Runner, client: Client) -> None:
        runner.run(self.run(client))

    def teardown(self, runner: asyncio.Runner, client: Client) -> None:
        self.open.remove((runner, client))
        try:
            runner.run(client.aclose())
        finally:
            runner.close()

    def close_all(self) -> None:
        while self.open:
            self.teardown(*self.open[-1])

    def info(self) -> JSONDict:
        """Open once up front (a system missing here skips), and return its ``info()``."""
        try:
            runner, client = self._open()
        except Skip as exc:
            pytest.skip(str(exc))
        try:
            return client.info()
        finally:
            self.open.append((runner, client))
            self.teardown(runner, client)


def bench_op(benchmark: Any, op: Op, system: System, target: Target, tasks: int, ops: int,
             rounds: int = 10, sync: Callable[[], None] | None = None,
             run: Batch | None = None) -> None:
    """Benchmark ``ops`` operations a round over ``tasks`` tasks (sync: ``sync()``)."""
    if system.kind.startswith("sync"):
        assert sync is not None
        benchmark.extra_info["tasks"] = 1
        benchmark.pedantic(sync, rounds=rounds, warmup_rounds=1, iterations=1)
        return

    async def batch(client: Client) -> None:
        await run_batch(client, target, tasks, ops)

    op_rounds = OpRounds(op, system, target, tasks, run or batch)
    benchmark.extra_info.update(op_rounds.info())
    try:
        benchmark.pedantic(op_rounds.batch, setup=op_rounds.setup, teardown=op_rounds.teardown,
                           rounds=rounds, warmup_rounds=1, iterations=1)
    finally:
        op_rounds.close_all()
