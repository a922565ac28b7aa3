"""Engine set-up failing after the backend probed fine: ``io_uring_setup`` ENOMEM (a
locked-memory limit too small for a full-size ring) and ``io_setup`` EAGAIN (``aio-max-nr``
exhausted by other processes). Automatic choice falls back to the next backend and says why;
an explicit request raises ``BackendUnavailableError`` naming the cause. A passing failure
(out of descriptors) is not remembered: the next engine gets the best backend again, and an
explicit request raises the ``OSError`` itself."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
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


_OUT_OF_DESCRIPTORS = r"""
import asyncio, errno, os, resource, sys
import aionative
make_loop = asyncio.new_event_loop  # (uvloop cannot run at all with no descriptor left)

async def backend():
    aionative.get_engine()
    return aionative.backend_info()["backend"]

def run(loop):
    try:
        return loop.run_until_complete(backend())
    except OSError as exc:
        return f"OSError {errno.errorcode[exc.errno]}"
    except Exception as exc:
        return f"{type(exc).__name__} {exc}"
    finally:
        loop.close()

resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
loop = make_loop()  # (its own descriptors first)
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError as exc:
    assert exc.errno == errno.EMFILE
print(run(loop))
for fd in held:
    os.close(fd)
print(run(make_loop()))
"""


@pytest.mark.parametrize("requested", ["auto", "io_uring", "linux_aio"])
async def test_running_out_of_descriptors_is_not_remembered(requested: str) -> None:
    """The first engine of a process made with no descriptor left: automatic choice serves
    that loop from the threads backend; a backend asked for raises OSError(EMFILE), as the
    system call did. Once descriptors are free, the next loop's engine is the native one."""
    _need("io_uring" if requested == "auto" else requested)
    env = dict(os.environ, AIONATIVE_BACKEND=requested)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _OUT_OF_DESCRIPTORS, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()
    first, second = out.decode().split("\n")[:2]
    assert first == ("threads" if requested == "auto" else "OSError EMFILE")
    assert second == ("io_uring" if requested == "auto" else requested)
