"""Backend fallback where the kernel refuses: io_uring -> linux_aio -> threads.

Each test runs a fresh interpreter (probes are cached per process) under a real seccomp
filter (tests/_seccomp.py) that makes ``io_uring_setup`` / ``io_setup`` fail the way container
runtimes do: Docker >= 25 and containerd 2 answer EPERM, gVisor and old kernels ENOSYS.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Any

import pytest

from aionative import _backend
from tests import _seccomp

# Child code: read a file through aionative inside asyncio.run and report what happened.
IO_CHECK = """
import asyncio, json, os, tempfile
import aionative

data = os.urandom((1 << 18) + 123)
with tempfile.NamedTemporaryFile() as f:
    f.write(data)
    f.flush()
    fd = os.open(f.name, os.O_RDONLY | os.O_CLOEXEC)

before = aionative.backend_info()
available = aionative.available_backends()

async def main():
    whole = await aionative.pread(fd, len(data) + 100, 0)
    parts = await asyncio.gather(*(aionative.pread(fd, 4096, off)
                                   for off in range(1000, len(data), 50_000)))
    ok = whole == data and all(p == data[off:off + 4096]
                               for p, off in zip(parts, range(1000, len(data), 50_000)))
    return ok, aionative.get_engine().backend, aionative.backend_info()

ok, engine_backend, during = asyncio.run(main())
os.close(fd)
print(json.dumps({"ok": ok, "engine": engine_backend, "before": before, "during": during,
                  "available": available}))
"""


def run(code: str, deny: Mapping[str, int] | None = None,
        env: Mapping[str, str] | None = None) -> Any:
    try:
        return _seccomp.run_python(code, deny=deny, env=env)
    except _seccomp.SeccompUnavailable as exc:
        pytest.skip(f"cannot install a seccomp filter here: {exc}")


def need_host(*names: str) -> None:
    """Tests expecting a fallback to ``name`` need it to work here without the filter."""
    for name in names:
        p = _backend.probe(name)  # type: ignore[arg-type]
        if not p.available:
            pytest.skip(f"{name} unavailable even without seccomp: {p.reason}")


def test_filter_denies_only_what_it_lists() -> None:
    """The helper itself: listed calls fail with their errno, the others reach the kernel
    (io_uring_setup(0, NULL) and io_setup(0, NULL) are EFAULT/EINVAL there, never EPERM)."""
    code = """
import json, sys
sys.path.insert(0, "tests")
import _seccomp as s
print(json.dumps({n: s.raw_syscall_errno(n, 0, 0) for n in ("io_uring_setup", "io_setup")}))
"""
    got = run(code, deny={"io_uring_setup": errno.EPERM})
    assert got["io_uring_setup"] == errno.EPERM
    assert got["io_setup"] not in (0, errno.EPERM)
    got = run(code, deny={"io_setup": errno.ENOSYS})
    assert got["io_setup"] == errno.ENOSYS
    assert got["io_uring_setup"] not in (0, errno.EPERM, errno.ENOSYS)


@pytest.mark.parametrize("err", [errno.EPERM, errno.ENOSYS], ids=["EPERM", "ENOSYS"])
def test_io_uring_denied_falls_back_to_linux_aio(err: int) -> None:
    need_host("linux_aio")
    got = run(IO_CHECK, deny={"io_uring_setup": err})
    name = errno.errorcode[err]
    assert got["before"]["backend"] == "linux_aio"
    assert got["before"]["requested"] == "auto"
    assert name in got["before"]["rejected"]["io_uring"]
    assert got["before"]["available"]["io_uring"][0] is False
    assert name in got["before"]["available"]["io_uring"][1]
    assert got["available"] == ["linux_aio", "threads"]
    assert got["ok"] is True
    assert got["engine"] == "linux_aio"
    assert got["during"]["active"] is True
    assert got["during"]["backend"] == "linux_aio"
    assert name in got["during"]["rejected"]["io_uring"]


def test_io_uring_and_aio_denied_falls_back_to_threads() -> None:
    got = run(IO_CHECK, deny={"io_uring_setup": errno.EPERM, "io_setup": errno.ENOSYS})
    assert got["before"]["backend"] == "threads"
    rejected = got["before"]["rejected"]
    assert set(rejected) == {"io_uring", "linux_aio"}
    assert "io_uring_setup" in rejected["io_uring"] and "EPERM" in rejected["io_uring"]
    assert "io_setup" in rejected["linux_aio"] and "ENOSYS" in rejected["linux_aio"]
    assert got["available"] == ["threads"]
    assert got["ok"] is True
    assert got["engine"] == "threads"
    assert got["during"]["backend"] == "threads"
    assert got["during"]["rejected"] == rejected


FORCED = """
import asyncio, json, os
import aionative

info = aionative.backend_info()

async def main():
    fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        await aionative.pread(fd, 10, 0)
    except aionative.BackendUnavailableError as exc:
        return {"type": type(exc).__name__, "runtime_error": isinstance(exc, RuntimeError),
                "message": str(exc)}
    finally:
        os.close(fd)
    return None

print(json.dumps({"info": info, "raised": asyncio.run(main())}))
"""


@pytest.mark.parametrize(("backend", "syscall"), [("io_uring", "io_uring_setup"),
                                                  ("linux_aio", "io_setup")])
def test_forced_backend_denied_raises(backend: str, syscall: str) -> None:
    got = run(FORCED, deny={syscall: errno.EPERM}, env={"AIONATIVE_BACKEND": backend})
    raised = got["raised"]
    assert raised is not None, "a denied backend asked for by name must not fall back silently"
    assert raised["type"] == "BackendUnavailableError" and raised["runtime_error"]
    assert backend in raised["message"] and "AIONATIVE_BACKEND" in raised["message"]
    assert syscall in raised["message"] and "EPERM" in raised["message"]
    info = got["info"]
    assert info["requested"] == backend and info["requested_by"] == "AIONATIVE_BACKEND"
    assert info["backend"] is None and info["active"] is False
    assert backend in info["error"] and "EPERM" in info["error"]


def test_forced_threads_under_full_denial() -> None:
    got = run(IO_CHECK, deny={"io_uring_setup": errno.EPERM, "io_setup": errno.EPERM},
              env={"AIONATIVE_BACKEND": "threads"})
    assert got["ok"] is True and got["engine"] == "threads"
    assert got["before"]["requested_by"] == "AIONATIVE_BACKEND"


def test_fault_switch_falls_back_to_linux_aio() -> None:
    """The test-only switch (no seccomp): ``_core.set_fault("io_uring_setup", EPERM, -1)``
    before the first probe makes io_uring look blocked, as tests on any machine can use."""
    need_host("linux_aio")
    code = "import errno\nfrom aionative import _core\n" \
           "_core.set_fault('io_uring_setup', errno.EPERM, -1)\n" + IO_CHECK
    got = run(code)
    assert got["before"]["backend"] == "linux_aio"
    assert "EPERM" in got["before"]["rejected"]["io_uring"]
    assert got["ok"] is True and got["engine"] == "linux_aio"
