"""Engine set-up failing after the backend probed fine: ``io_uring_setup`` ENOMEM (a
locked-memory limit too small for a full-size ring) and ``io_setup`` EAGAIN (``aio-max-nr``
exhausted by other processes). Automatic choice falls back to the next backend and says why;
an explicit request raises ``BackendUnavailableError`` naming the cause."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import aionative
from aionative import _backend, _core

pytestmark = pytest.mark.asyncio


@pytest.fixture
def fresh_probes() -> Iterator[None]:
    """Probe results as they are now, restored afterwards (a failed set-up marks a backend
    unavailable for the rest of the process)."""
    for b in _backend.BACKENDS:
        _backend.probe(b)
    saved = dict(_backend._state.probes)
    try:
        yield
    finally:
        _core.clear_faults()
        _backend._state.probes.clear()
        _backend._state.probes.update(saved)


def _need(name: str) -> None:
    if not _backend.probe(name).available:  # type: ignore[arg-type]
        pytest.skip(f"{name} unavailable here")


async def test_io_uring_setup_enomem_falls_back_to_linux_aio(fresh_probes: None,
                                                             tmp_path: Path) -> None:
    _need("io_uring")
    _need("linux_aio")
    path = tmp_path / "f"
    path.write_bytes(b"data")
    _core.set_fault("io_uring_setup", errno.ENOMEM, 1)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert await aionative.pread(fd, 4, 0) == b"data"
    finally:
        os.close(fd)
    info = aionative.backend_info()
    assert info["backend"] == "linux_aio"
    assert "Cannot allocate memory" in info["rejected"]["io_uring"]


@pytest.mark.parametrize(("refusals", "flags"), [
    (1, {"COOP_TASKRUN", "TASKRUN_FLAG", "SUBMIT_ALL", "CQSIZE"}),
    (4, set()),
])
async def test_io_uring_setup_einval_tries_fewer_flags(fresh_probes: None, tmp_path: Path,
                                                       refusals: int, flags: set[str]) -> None:
    """A kernel older than a set-up flag refuses it with EINVAL: the engine tries the next
    set (docs/design.md, "io_uring specifics"), down to none, and serves on io_uring."""
    _need("io_uring")
    path = tmp_path / "f"
    path.write_bytes(b"data")
    _core.set_fault("io_uring_setup", errno.EINVAL, refusals)
    fd = os.open(path, os.O_RDONLY)
    try:
        aionative.set_inline_budget(0)  # through the ring
        assert await aionative.pread(fd, 4, 0) == b"data"
    finally:
        aionative.set_inline_budget(None)
        os.close(fd)
    info = aionative.backend_info()
    assert info["backend"] == "io_uring"
    assert set(info["setup_flags"]) == flags  # type: ignore[arg-type]


async def test_io_setup_eagain_falls_back_to_threads(fresh_probes: None, tmp_path: Path) -> None:
    _need("linux_aio")
    _backend.mark_unavailable("io_uring", "unavailable for this test")
    _core.drain_aio_pool()  # so the engine needs a new context: io_setup runs
    _core.set_fault("io_setup", errno.EAGAIN, 1)
    async with aionative.open(tmp_path / "g", "w") as f:
        await f.write("ok")
    assert (tmp_path / "g").read_text() == "ok"
    info = aionative.backend_info()
    assert info["backend"] == "threads"
    assert "Resource temporarily unavailable" in info["rejected"]["linux_aio"]


async def test_explicit_request_raises_naming_the_cause(fresh_probes: None) -> None:
    _need("io_uring")
    aionative.set_default_backend("io_uring")
    try:
        _core.set_fault("io_uring_setup", errno.ENOMEM, 1)
        with pytest.raises(aionative.BackendUnavailableError, match="Cannot allocate memory"):
            aionative.get_engine()
    finally:
        aionative.set_default_backend(None)
