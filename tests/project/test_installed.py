"""The package under test is the one users get.

``AIONATIVE_TEST_INSTALLED=1`` (``make test-installed``, CI's installed-wheel pass) means the
suite runs against an installed wheel: aionative and its C engine must then come from the
environment's site-packages, never from the checkout or unpacked sdist beside the tests."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
from pathlib import Path

import pytest

import aionative
from aionative import _backend

SOURCE = Path(__file__).resolve().parents[2]
INSTALLED = os.environ.get("AIONATIVE_TEST_INSTALLED") == "1"


def _site_dirs() -> set[Path]:
    return {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}


def _origin(module_name: str) -> Path:
    module = importlib.import_module(module_name)
    assert module.__file__ is not None
    return Path(module.__file__).resolve()


@pytest.mark.skipif(not INSTALLED, reason="the suite runs against the source tree "
                    "(AIONATIVE_TEST_INSTALLED=1 tests an installed wheel)")
@pytest.mark.parametrize("module_name", ["aionative", "aionative._core", "aionative.tempfile",
                                         "aionative.threadpool", "aionative.starlette"])
def test_the_installed_package_is_the_one_tested(module_name: str) -> None:
    path = _origin(module_name)
    tree = SOURCE / "aionative"  # (the venv itself may live in the checkout: .venv-wheel-*)
    assert not path.is_relative_to(tree), f"{module_name} came from the source tree: {path}"
    assert any(path.is_relative_to(d) for d in _site_dirs()), (
        f"{module_name} is not from site-packages ({sorted(map(str, _site_dirs()))}): {path}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C engine is Linux-only")
def test_the_c_engine_is_present_on_linux() -> None:
    if os.environ.get("AIONATIVE_ALLOW_NO_EXTENSION") == "1":
        pytest.skip("AIONATIVE_ALLOW_NO_EXTENSION=1: the threads backend alone, on purpose")
    assert _backend._core is not None, _backend._CORE_ERROR


def test_the_typing_files_ship_beside_the_package() -> None:
    package = Path(aionative.__file__).resolve().parent
    assert (package / "py.typed").is_file()
    assert (package / "_core.pyi").is_file()


def test_the_version_is_the_distributions() -> None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        assert version("aionative") == aionative.__version__
    except PackageNotFoundError:
        pytest.skip("aionative is imported but not installed as a distribution")


@pytest.mark.skipif(not sysconfig.get_config_var("Py_GIL_DISABLED"),
                    reason="not a free-threaded CPython build")
def test_a_free_threaded_interpreter_runs_the_engine_with_the_gil() -> None:
    # The extension declares no Py_mod_gil slot: its process-wide state (engine list, Linux
    # AIO context pool, call free list) is not made thread-safe, so a free-threaded CPython
    # turns the GIL on when it is imported, as documented in the README.
    import subprocess
    code = ("import sys, warnings; warnings.simplefilter('ignore'); "
            "import aionative._core; print(sys._is_gil_enabled())")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env).stdout.strip()
    assert out == "True"
