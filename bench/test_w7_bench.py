"""pytest-benchmark version of W7: ``async for line`` over a 4 MiB UTF-8 text file.

Each benchmark round is one pass (open, iterate, close) on a fresh event loop; aiofiles
iterates only the first 2000 lines a round (one thread hop a line), so compare its lines/s
(``extra_info``), not its round time. Opening the loop and one untimed pass happen in the
untimed ``setup``; closing the loop in the untimed ``teardown``. Every pass checks its line
and character counts against the builtin's.

Run from the repository root: ``pytest bench/ --benchmark-only``. Systems that cannot run
here (aionative not built, a backend, uvloop or aiofiles missing) are skipped, not failed.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench import w7
from bench.common import LOOPS, JSONDict, Skip, parse_system
from bench.conftest import aionative_params
from bench.fileapi import Rounds

pytest.importorskip("pytest_benchmark")

ROUNDS = 10
WARMUP_ROUNDS = 1


SYSTEMS = [pytest.param("sync", id="sync"), *aionative_params("aionative"),
           *(pytest.param(f"aiofiles-{lp}", id=f"aiofiles-{lp}") for lp in LOOPS)]


@pytest.mark.parametrize("name", SYSTEMS)
def test_w7_line_iteration(benchmark: Any, monkeypatch: pytest.MonkeyPatch,
                           w7_params: JSONDict, name: str) -> None:
    system = parse_system(name)
    if system.backend:
        monkeypatch.setenv("AIONATIVE_BACKEND", system.backend)
    else:
        monkeypatch.delenv("AIONATIVE_BACKEND", raising=False)
    path = w7_params["path"]
    limit, want, size = w7.share(system, w7_params)
    benchmark.group = f"W7 line iteration: {w7_params['data']}, one pass per round"
    benchmark.extra_info.update(system=name, lines_per_round=want[0], bytes_per_round=size,
                                partial=limit is not None)
    if system.kind == "sync":
        benchmark.pedantic(w7.sync_pass(path, want), rounds=ROUNDS,
                           warmup_rounds=WARMUP_ROUNDS, iterations=1)
    else:
        try:
            rounds = Rounds(system, w7.async_pass(path, want, limit))
        except Skip as exc:
            pytest.skip(str(exc))
        benchmark.extra_info.update(rounds.info())
        try:
            benchmark.pedantic(rounds.batch, setup=rounds.setup, teardown=rounds.teardown,
                               rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
        finally:
            rounds.close_all()
    if benchmark.stats:
        benchmark.extra_info["lines_per_s"] = want[0] / benchmark.stats.stats.mean
        benchmark.extra_info["mb_per_s"] = size / benchmark.stats.stats.mean / 1e6
