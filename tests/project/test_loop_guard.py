"""The suite's loop guards (tests/_loop_guard.py) can fail: a test that holds its loop past the
bound fails and is told what held it, an exempt one passes, and a blocking call aionative would
make on the loop's thread is blockbuster's error."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

import aionative
from tests import _loop_guard
from tests.support import child_env

TESTS = Path(__file__).resolve().parents[1]  # tests/, where the conftest and its helpers are

PROBE = '''
import asyncio, time
import pytest
import aionative

pytestmark = pytest.mark.asyncio


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_holds_the_loop(monkeypatch, tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    from aionative import _files
    run = _files.AsyncBase._run
    monkeypatch.setattr(_files.AsyncBase, "_run",
                        lambda self, fn, *a: (spin(0.15), run(self, fn, *a))[1])
    async with aionative.open(tmp_path / "f", "rb") as f:
        await f.read(4096)


# (The holds last 150 ms: the watchdog, polling every few milliseconds, samples such a hold
# even while other processes keep it off a CPU for tens of milliseconds.)
async def test_own_body_holds_the_loop():
    await asyncio.sleep(0)
    spin(0.15)


@pytest.mark.blocks_the_loop("holds the loop to show the exemption")
async def test_holds_the_loop_exempt():
    spin(0.05)


async def test_yields():
    for _ in range(50):
        spin(0.001)
        await asyncio.sleep(0)


async def test_aionative_blocks(monkeypatch, tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    from aionative import _files
    monkeypatch.setattr(_files.AsyncBase, "_run", lambda self, fn, *a: time.sleep(0.001))
    async with aionative.open(tmp_path / "f", "rb") as f:
        await f.read(4096)
'''


def _run_probe(tmp_path: Path, **env: str) -> str:
    """The probe tests, run by pytest under this suite's conftest (copied beside them)."""
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "conftest.py", "support.py", "_loop_guard.py", "_seccomp.py"):
        if (TESTS / name).exists():
            (tmp_path / "tests" / name).write_bytes((TESTS / name).read_bytes())
    (tmp_path / "tests" / "test_probe.py").write_text(textwrap.dedent(PROBE))
    root = TESTS.parent
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-c", str(root / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-o", "asyncio_mode=strict", str(tmp_path / "tests" / "test_probe.py")],
        cwd=tmp_path, env=child_env(AIONATIVE_TEST_BACKENDS="io_uring,linux_aio,threads",
                                    AIONATIVE_TEST_LOOPS="asyncio,uvloop", **env),
        capture_output=True, text=True, timeout=300, check=False)
    return out.stdout + out.stderr


def test_the_guards_fail_a_test_that_holds_its_loop_and_name_what_did(tmp_path: Path) -> None:
    out = _run_probe(tmp_path)
    assert "FAILED tests/test_probe.py::test_holds_the_loop[" in out, out
    assert "held the event loop for" in out and "aionative was running" in out, out
    # A test's own work (its set-up, a gather it makes) is not aionative's: not failed.
    assert "test_own_body_holds_the_loop" not in out.split("short test summary")[-1], out
    assert "test_holds_the_loop_exempt" not in out.split("short test summary")[-1], out
    assert "test_yields[" not in out.split("short test summary")[-1], out
    assert "Blocking call to time.sleep" in out or "time.sleep from" in out, out
    assert "test_aionative_blocks[" in out.split("short test summary")[-1], out


def test_the_responsiveness_guard_turns_off(tmp_path: Path) -> None:
    out = _run_probe(tmp_path, AIONATIVE_LOOP_GUARD="0")
    assert "held the event loop" not in out, out
    assert "8 passed" in out, out  # (the holding, exempt and yielding tests, on both loops)
    assert "FAILED tests/test_probe.py::test_holds_the_loop[" not in out, out


# Whose hold a sampled stack shows, decided without any timing: the same rules the guard
# applies to a sample, on stacks written out here (outermost frame first).
def _stack(*frames: tuple[str, str]) -> list[traceback.FrameSummary]:
    return [traceback.FrameSummary(path, 1, name, lookup_line=False) for path, name in frames]


_ASYNCIO = (str(Path(asyncio.__file__).parent / "events.py"), "_run")
_GUARDED = (_loop_guard.__file__, "guarded")
_TEST = (str(TESTS / "files" / "test_x.py"), "test_x")
_OURS = (str(Path(aionative.__file__).parent / "_files" / "binary.py"), "read")
_LIB = ("/venv/lib/python3.12/site-packages/somelib/__init__.py", "work")
_IMPORT = ("<frozen importlib._bootstrap>", "_find_and_load")


@pytest.mark.parametrize(("stack", "the_tests"), [
    pytest.param(_stack(_ASYNCIO, _GUARDED, _TEST), True, id="the-tests-own-code"),
    pytest.param(_stack(_ASYNCIO, _GUARDED, _TEST, _LIB, (asyncio.__file__, "gather")), True,
                 id="a-library-the-test-called"),
    pytest.param(_stack(_ASYNCIO, _GUARDED, _TEST, (_loop_guard.__file__, "check")), True,
                 id="the-detectors-check-wrapped-in-the-guard"),
    pytest.param(_stack(_ASYNCIO, _GUARDED, _TEST, _OURS), False, id="aionative-innermost"),
    pytest.param(_stack(_ASYNCIO, _GUARDED, _OURS, _TEST), False, id="aionative-calling-back"),
    pytest.param(_stack(_ASYNCIO, _GUARDED, _TEST, _IMPORT, _LIB), True, id="a-lazy-import"),
    pytest.param(_stack(_ASYNCIO, _GUARDED, _OURS, _IMPORT), False, id="aionative-importing"),
    pytest.param(_stack(_ASYNCIO, (asyncio.__file__, "call_soon")), False,
                 id="the-loop-running-a-callback"),
    pytest.param(_stack(_ASYNCIO, _GUARDED), False, id="the-guarded-wrapper"),
    pytest.param([], False, id="no-sample"),
])
def test_a_sample_is_the_tests_only_without_aionative_on_it(
        stack: list[traceback.FrameSummary], the_tests: bool) -> None:
    assert _loop_guard._held_by_the_test(stack) is the_tests


# A hold the watchdog could not sample, judged by its figures alone (the bound is 20 ms): held
# by the thread in a system call or while memory was faulted in, it fails; nothing but user
# time, past what C code of aionative computes (the virtual machine's host holding the vCPU),
# it is listed in the session's summary instead.
@pytest.mark.parametrize(("usage", "fails"), [
    pytest.param((0.135, 0.0, 0, 0), False, id="user-time-alone"),
    pytest.param((0.100, 0.035, 0, 0), True, id="a-system-call"),
    pytest.param((0.135, 0.0, 40, 0), True, id="fresh-memory-touched"),
    pytest.param((0.060, 0.0, 0, 0), True, id="less-user-time-than-held"),
])
def test_an_unsampled_hold_fails_unless_it_is_user_time_alone(
        usage: tuple[float, float, int, int], fails: bool) -> None:
    guard = _loop_guard._Guard(asyncio.new_event_loop())
    guard.loop.close()
    guard.worst, guard.worst_wall, guard.worst_usage = 0.135, 0.136, usage
    before = len(_loop_guard._unattributed)
    message = guard.report("the probe", "tests/test_probe.py::test_x")
    assert (message is not None) is fails
    if fails:
        assert "no stack sample" in message  # type: ignore[operator]
        assert len(_loop_guard._unattributed) == before
    else:
        assert _loop_guard._unattributed[-1].startswith("tests/test_probe.py::test_x: 135.0 ms")
        del _loop_guard._unattributed[-1]
