"""pytest-benchmark version of W4: open + read whole + close of 200 small files, N=24.

Each benchmark round is one pass over every file (24 tasks pulling paths from one iterator),
on a fresh event loop (a fresh aionative engine or thread pool). Opening the loop and one
untimed pass (the first also checks every file's contents) happen in the untimed ``setup``;
closing the loop in the untimed ``teardown``. pytest-benchmark's statistics are therefore per
pass: divide the file count by the mean for files/s (also stored in ``extra_info``).

Run from the repository root: ``pytest bench/ --benchmark-only``. Systems that cannot run
here (aionative not built, a backend, uvloop or aiofiles missing) are skipped, not failed.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench import w4
from bench.common import LOOPS, JSONDict, Skip, parse_system
from bench.conftest import aionative_params
from bench.fileapi import Rounds

pytest.importorskip("pytest_benchmark")

READERS = 24
ROUNDS = 10
WARMUP_ROUNDS = 1


SYSTEMS = [pytest.param("sync", id="sync"), *aionative_params("aionative", "aionative.read_bytes"),
           *(pytest.param(f"aiofiles-{lp}", id=f"aiofiles-{lp}") for lp in LOOPS)]


@pytest.mark.parametrize("name", SYSTEMS)
def test_w4_small_files(benchmark: Any, monkeypatch: pytest.MonkeyPatch, w4_params: JSONDict,
                        name: str) -> None:
    system = parse_system(name)
    if system.backend:
        monkeypatch.setenv("AIONATIVE_BACKEND", system.backend)
    else:
        monkeypatch.delenv("AIONATIVE_BACKEND", raising=False)
    files = w4.paths(w4_params["path"], w4_params["files"])
    total, crcs = w4_params["total_bytes"], w4_params["crc_sum"]
    benchmark.group = f"W4 small files: {len(files)} per round (open + read + close), N={READERS}"
    benchmark.extra_info.update(system=name, readers=READERS, files_per_round=len(files))
    if system.kind == "sync":
        assert w4.digest(files) == (total, crcs)
        benchmark.extra_info["readers"] = 1
        benchmark.pedantic(w4.sync_pass(files, total), rounds=ROUNDS,
                           warmup_rounds=WARMUP_ROUNDS, iterations=1)
    else:
        try:
            rounds = Rounds(system, w4.async_pass(system, READERS, files, total, crcs))
        except Skip as exc:
            pytest.skip(str(exc))
        benchmark.extra_info.update(rounds.info())
        try:
            benchmark.pedantic(rounds.batch, setup=rounds.setup, teardown=rounds.teardown,
                               rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
        finally:
            rounds.close_all()
    if benchmark.stats:
        benchmark.extra_info["files_per_s"] = len(files) / benchmark.stats.stats.mean
