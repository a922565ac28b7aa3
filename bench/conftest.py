"""Fixtures for the pytest-benchmark tests in ``bench/`` (``pytest bench/ --benchmark-only``).

The data here is small (a 64 MiB hot file for W1, 200 small files for W4, a 4 MiB text file
for W7, all in pytest's temporary directory) so the suite is quick; the full-size
measurements are ``python -m bench``'s job.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import w4, w7
from bench.common import LOOPS, JSONDict, Skip, ensure_random_file, import_aionative, make_hot

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
