"""pytest-benchmark versions of W5 (random 4 KiB pwrite, N=64) and W5F (ten files written
concurrently in 1 MiB chunks), in pytest's temporary directory.

W5: each round is 2000 writes of the fixed 4 KiB payload at random aligned offsets of a 64 MiB
page-cached file. W5F: each round writes ten 4 MiB files whole (40 chunks, a task a file). A
fresh event loop is opened (and one write verified) in each round's untimed setup; no fsync.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import w5, w5f
from bench.clients import Target
from bench.common import JSONDict, ensure_random_file, make_hot
from bench.conftest import HOT_FILE_SIZE, SEED, bench_op, op_params, use_system
from bench.meter import Quota

pytest.importorskip("pytest_benchmark")

WRITERS = 64
WRITES_PER_ROUND = 2000
W5F_FILE_SIZE = 4 << 20


@pytest.fixture(scope="module")
def write_params(tmp_path_factory: pytest.TempPathFactory) -> JSONDict:
    path = tmp_path_factory.mktemp("bench") / "w5-64MiB.bin"
    ensure_random_file(path, HOT_FILE_SIZE, lambda _: None)
    make_hot(path)
    return {"path": str(path), "file_size": HOT_FILE_SIZE, "seed": SEED, "pool": 1 << 16}


@pytest.fixture(scope="module")
def files_params(tmp_path_factory: pytest.TempPathFactory) -> JSONDict:
    root = tmp_path_factory.mktemp("bench")
    paths = [root / f"w5f-{i}.bin" for i in range(w5f.FILES)]
    for path in paths:
        ensure_random_file(path, W5F_FILE_SIZE, lambda _: None)
    return {"path": str(paths[0]), "paths": [str(p) for p in paths], "seed": SEED,
            "file_size": W5F_FILE_SIZE}


@pytest.fixture
def write_target(write_params: JSONDict) -> Iterator[Target]:
    tgt = w5.open_target(write_params)
    yield tgt
    tgt.close()


@pytest.mark.parametrize("name", op_params())
def test_w5_random_pwrite_4k(benchmark: Any, monkeypatch: pytest.MonkeyPatch,
                             write_target: Target, name: str) -> None:
    system = use_system(monkeypatch, name)
    benchmark.group = f"W5 random 4 KiB pwrite: {WRITES_PER_ROUND} per round, N={WRITERS}"
    benchmark.extra_info.update(system=name, writers=WRITERS, writes_per_round=WRITES_PER_ROUND)
    bench_op(benchmark, w5.WRITE, system, write_target, WRITERS, WRITES_PER_ROUND,
             sync=lambda: w5.WRITE.sync_loop(write_target, Quota(WRITES_PER_ROUND)))
    if benchmark.stats:
        benchmark.extra_info["writes_per_s"] = WRITES_PER_ROUND / benchmark.stats.stats.mean


@pytest.mark.parametrize("name", op_params())
def test_w5f_ten_files(benchmark: Any, monkeypatch: pytest.MonkeyPatch, files_params: JSONDict,
                       name: str) -> None:
    system = use_system(monkeypatch, name)
    target = w5f.open_target(files_params)
    chunks = len(target.offsets) * w5f.FILES
    benchmark.group = f"W5F ten {W5F_FILE_SIZE >> 20} MiB files, 1 MiB writes: {chunks} a round"
    benchmark.extra_info.update(system=name, files=w5f.FILES, chunks_per_round=chunks)
    try:
        bench_op(benchmark, w5f.WRITE, system, target, w5f.FILES, chunks,
                 sync=lambda: w5f.WRITE.sync_loop(target, Quota(chunks)))
    finally:
        target.close()
    if benchmark.stats:
        benchmark.extra_info["mb_per_s"] = chunks * w5f.CHUNK / benchmark.stats.stats.mean / 1e6
    assert Path(files_params["path"]).stat().st_size == os.path.getsize(files_params["paths"][1])
