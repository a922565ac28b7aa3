"""Starlette's own tests of ``FileResponse`` and ``StaticFiles``, from its sdist on PyPI, run
with aionative's classes in their place.

The sdist of the installed Starlette (1.10.x) is downloaded once per run. A plugin loaded
before the tests are collected makes ``starlette.responses.FileResponse`` and
``starlette.staticfiles.StaticFiles`` aionative's, so every ``from starlette... import`` of the
tests gets them. The tests are the ``FileResponse`` tests of ``tests/test_responses.py`` and
all of ``tests/test_staticfiles.py``, run in a child interpreter with Starlette's own
configuration — warnings are errors, and its ``blockbuster`` fixture (active when blockbuster
is installed) fails any test in which a blocking call (``os.stat``, ``os.path.abspath``,
``os.readlink``, ...) runs on the loop's thread under Starlette's code. The tests' client is
``httpx2``; where only ``httpx`` is installed, it stands in (the same API). anyio runs the async tests on asyncio (on each backend, with the default
loop and with uvloop) and, once, on trio, where aionative's classes hand the request to
Starlette's own code.

The tests that take the ``file_path`` fixture count the files ``FileResponse`` opens, and
check that each is closed, by wrapping ``anyio.open_file``, which Starlette's code calls;
aionative's opens its file through the engine instead, so the same list counts its descriptors
(one per response), each closed once the descriptor is.

Deselected (``DESELECTED``), each with its reason, listed in docs/web.md too:

* ``test_file_response_range_count_limit_exceeded``: a ``Range`` header of more than
  ``max_ranges`` (100) ranges gets 416 from aionative, on purpose (RFC 9110 §15.5.17), where
  Starlette ignores the header and sends the whole file (200).
* ``test_staticfiles_with_invalid_dir_permissions_returns_401``, as root only: it takes the
  search permission off the directory and expects a 401; root may search any directory, so
  Starlette's own ``StaticFiles`` serves the file (200) there too.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import BACKENDS, LOOP_FACTORIES, child_env, unpacked_sdist

pytest.importorskip("starlette")

VERSION = importlib.metadata.version("starlette")

# Starlette's tests that cannot pass here, when, and why (as in the docstring and in
# docs/web.md).
ASYNCIO_ONLY, AS_ROOT = "served by aionative", "as root"
DESELECTED = {
    "tests/test_responses.py::test_file_response_range_count_limit_exceeded": (
        ASYNCIO_ONLY,
        "more than max_ranges ranges get 416 on purpose, where Starlette sends the whole file"),
    "tests/test_staticfiles.py::test_staticfiles_with_invalid_dir_permissions_returns_401": (
        AS_ROOT,
        "root may search a directory without permission bits (Starlette serves the file too)"),
}


SWAP = '''\
"""aionative's FileResponse and StaticFiles in place of Starlette's, before any test module
imports them."""
import sys

try:
    import httpx2
except ImportError:  # the tests' client is httpx2; httpx has the same API
    import httpx

    sys.modules["httpx2"] = httpx

import starlette.responses
import starlette.staticfiles

import aionative.starlette

starlette.responses.FileResponse = aionative.starlette.FileResponse
starlette.staticfiles.StaticFiles = aionative.starlette.StaticFiles
'''

CONFTEST = '''

# One anyio backend per run, chosen by the suite that runs this one: asyncio (with uvloop's
# loop if asked) or trio.
_SUITE_LOOP = __import__("os").environ["SUITE_LOOP"]


@pytest.fixture(scope="module")
def anyio_backend():
    if _SUITE_LOOP == "trio":
        return "trio"
    if _SUITE_LOOP == "uvloop":
        import uvloop

        return ("asyncio", {"loop_factory": uvloop.new_event_loop})
    return ("asyncio", {})


@pytest.fixture(autouse=True)
def aionative_files_counted(request):
    """The tests that take ``file_path`` count the files FileResponse opens, and check they
    are closed, through ``anyio.open_file``, which Starlette's code calls; aionative's opens
    its file through the engine, one descriptor per response: each is counted in the same
    list, closed once the descriptor is."""
    if "file_path" not in request.fixturenames:
        yield
        return
    import aionative.starlette as ours

    files = request.getfixturevalue("file_path")[1]
    original_init, original_close = ours._Transfer.__init__, ours._Transfer.close
    records = {}

    class Descriptor:
        closed = False

    def init(self, eng, fd):
        original_init(self, eng, fd)
        records[id(self)] = record = Descriptor()
        files.append(record)

    async def close(self):
        try:
            await original_close(self)  # which closes the descriptor, even when cancelled
        finally:
            records[id(self)].closed = True

    ours._Transfer.__init__, ours._Transfer.close = init, close
    try:
        yield
    finally:
        ours._Transfer.__init__, ours._Transfer.close = original_init, original_close
'''


@pytest.fixture(scope="module")
def starlette_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not VERSION.startswith("1.10."):
        pytest.skip(f"Starlette 1.10's tests need Starlette 1.10, not {VERSION}")
    where = tmp_path_factory.mktemp("starlette-sdist")
    wanted = f"starlette=={VERSION}"
    root = unpacked_sdist(wanted, where)
    (root / "aionative_in_starlette.py").write_text(SWAP)
    conftest = root / "tests" / "conftest.py"
    conftest.write_text(conftest.read_text() + CONFTEST)
    return root


def run_suite(root: Path, backend_name: str, loop_name: str) -> subprocess.CompletedProcess[str]:
    env = child_env(SUITE_LOOP=loop_name)
    if backend_name:
        env["AIONATIVE_BACKEND"] = backend_name
    # Starlette's tests import the installed starlette and the aionative under test, never the
    # sdist's own starlette/ (the working directory is left off sys.path: -P).
    env["PYTHONPATH"] = f"{root}{os.pathsep}{env['PYTHONPATH']}"
    cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-p", "no:randomly", "-p", "no:asyncio", "-p", "aionative_in_starlette",
           "tests/test_responses.py", "-k", "file_response or staticfiles",
           "tests/test_staticfiles.py"]
    deselect = [name for name, (when, _) in DESELECTED.items()
                if when == AS_ROOT and os.geteuid() == 0
                or when == ASYNCIO_ONLY and loop_name != "trio"]
    cmd += [f"--deselect={d}" for d in deselect]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False,
                          timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("loop_name", sorted(LOOP_FACTORIES))
@pytest.mark.parametrize("backend_name", BACKENDS)
def test_starlette_own_tests_pass_with_aionative_classes(starlette_tests: Path,
                                                         backend_name: str,
                                                         loop_name: str) -> None:
    run = run_suite(starlette_tests, backend_name, loop_name)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]


@pytest.mark.slow
def test_starlette_own_tests_pass_under_trio(starlette_tests: Path) -> None:
    run = run_suite(starlette_tests, "", "trio")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]
