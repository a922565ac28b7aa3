"""Fixtures for the pytest-benchmark tests in ``bench/`` (``pytest bench/ --benchmark-only``).

The hot file here is small (64 MiB, in pytest's temporary directory) so the suite is quick;
the full-size 1 GiB measurements are ``python -m bench``'s job.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import JSONDict, ensure_random_file, make_hot

HOT_FILE_SIZE = 64 << 20
SEED = 1


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
