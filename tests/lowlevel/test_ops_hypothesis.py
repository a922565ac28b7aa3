"""Hypothesis: random interleavings of pwrite/pread against os.pwrite/os.pread."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aionative
from tests.support import LOOP_FACTORIES

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


@pytest.fixture(params=sorted(LOOP_FACTORIES))
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    return LOOP_FACTORIES[request.param]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 70000), st.integers(0, 9000)),
                    min_size=1, max_size=30))
def test_random_sequences_match_os(tmp_path: Path, backend: str, loop_factory: LoopFactory,
                                   ops: list[tuple[bool, int, int]]) -> None:
    """Hypothesis: interleaved pwrite/pread sequences behave as os.pwrite/os.pread do."""
    ours_path, theirs_path = tmp_path / "h_ours", tmp_path / "h_theirs"

    async def run() -> None:
        ours = os.open(ours_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        theirs = os.open(theirs_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            for is_write, offset, n in ops:
                if is_write:
                    chunk = os.urandom(n)
                    assert await aionative.pwrite(ours, chunk, offset) == os.pwrite(theirs, chunk, offset)
                else:
                    assert await aionative.pread(ours, n, offset) == os.pread(theirs, n, offset)
        finally:
            os.close(ours)
            os.close(theirs)

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run())
    assert ours_path.read_bytes() == theirs_path.read_bytes()
