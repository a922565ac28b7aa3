"""The CPython and asyncio internals the engine uses (``csrc/compat.h``), each gated by a probe:
a canary per internal that fails loudly on a Python where the assumption no longer holds, the
probes' answers on this one, and the public-API paths with the internals turned off
(``AIONATIVE_INTERNALS=0``; ``make test-portable`` runs the whole suite that way)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import aionative
from aionative._backend import _core
from tests.support import child_env

pytestmark = pytest.mark.skipif(_core is None, reason="the C engine is not built")

FORCED_OFF = os.environ.get("AIONATIVE_INTERNALS", "1") == "0"


def _future_types() -> list[Any]:
    """asyncio's Future as the engine makes it (the C one), and the pure-Python one."""
    import asyncio.futures
    return [asyncio.Future, asyncio.futures._PyFuture]  # type: ignore[attr-defined]


@pytest.mark.parametrize("future_type", _future_types(), ids=["c_future", "py_future"])
def test_canary_a_futures_callbacks_are_a_list_of_function_and_context(future_type: Any) -> None:
    """What ``future_resolve_collect`` (csrc/complete.c) takes off a future before resolving
    it: ``_callbacks`` lists (function, Context) in the order added, and
    ``remove_done_callback`` takes every entry of a function off and says how many."""
    loop = asyncio.new_event_loop()
    try:
        fut = future_type(loop=loop)

        def first(f: Any) -> None:
            pass

        def second(f: Any) -> None:
            pass

        ctx = contextvars.copy_context()
        fut.add_done_callback(first)
        fut.add_done_callback(second, context=ctx)
        cbs = fut._callbacks
        assert isinstance(cbs, list) and len(cbs) == 2
        assert all(type(c) is tuple and len(c) == 2 for c in cbs)
        assert cbs[0][0] is first and type(cbs[0][1]) is contextvars.Context
        assert cbs[1] == (second, ctx)
        assert fut.remove_done_callback(first) == 1
        assert fut.remove_done_callback(second) == 1
        assert not fut._callbacks  # (None or an empty list)
        fut.cancel()
    finally:
        loop.close()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the holder is read on 3.11 only")
@pytest.mark.uses_internals("3.11's running-loop holder")
def test_canary_the_running_loop_holder_of_3_11() -> None:
    """What ``running_loop_borrowed`` (csrc/compat.c) reads on 3.11: the thread state's dict
    holds ``_asyncio``'s ``_RunningLoopHolder`` under ``__asyncio_running_event_loop__``,
    and its answer is asyncio's whenever a loop runs, and none when none does."""
    async def inside() -> None:
        assert _core.running_loop() is asyncio.get_running_loop()
        await asyncio.sleep(0)
        assert _core.running_loop() is asyncio.get_running_loop()

    for _ in range(3):  # a new loop each time: a new holder
        asyncio.run(inside())
    assert _core.running_loop() is None


@pytest.mark.skipif(FORCED_OFF, reason="the internals are turned off (AIONATIVE_INTERNALS=0)")
def test_the_probes_allow_every_internal_on_this_python() -> None:
    async def main() -> dict[str, Any]:
        r, w = os.pipe()
        os.close(w)
        aionative.get_engine()  # the first engine probes
        os.close(r)
        return _core.internals()

    got = asyncio.run(main())
    assert got["allowed"] and got["take_callbacks"], got
    assert got["take_callbacks_probe"] == "as expected"
    if sys.version_info < (3, 12):
        assert got["loop_holder"] and got["loop_holder_probe"] == "as expected", got
    else:
        assert not got["loop_holder"]


CHILD = textwrap.dedent('''
    import asyncio, os, sys
    import aionative
    from aionative._backend import _core

    async def main():
        path = sys.argv[1]
        data = open(path, "rb").read()
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # queued reads: completions
        before = aionative.engine_stats()
        got = await asyncio.gather(*[aionative.pread(fd, 4096, i * 4096) for i in range(64)])
        assert b"".join(got) == data[:64 * 4096]
        async with aionative.open(path, "rb") as f:
            assert await f.read() == data
        async with aionative.open(path, "rb") as f:
            assert b"".join([line async for line in f]) == data
        after = aionative.engine_stats()
        os.close(fd)
        print(_core.internals()["take_callbacks"], _core.running_loop() is not None,
              after.get("woken", 0) - before.get("woken", 0))

    aionative.set_default_backend(sys.argv[2])
    asyncio.run(main())
''')


@pytest.mark.parametrize("internals", ["1", "0"])
def test_the_public_paths_serve_with_the_internals_off(native_backend: str, tmp_path: Path,
                                                       internals: str) -> None:
    """With ``AIONATIVE_INTERNALS=0`` no internal is used (the futures schedule their own
    callbacks: no wake-up is run by the engine; the running loop is asked of asyncio), and
    reads, files and line iteration give the same bytes."""
    path = tmp_path / "data"
    path.write_bytes(os.urandom(1 << 20))
    env = child_env()
    env["AIONATIVE_INTERNALS"] = internals
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), native_backend], env=env, check=False,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    taken, holder, woken = out.stdout.split()
    if internals == "0":
        assert (taken, holder, woken) == ("False", "False", "0")
    else:
        assert taken == "True" and int(woken) > 0
        assert holder == str(sys.version_info < (3, 12))


def test_canary_the_raw_layer_keeps_its_window_in_c() -> None:
    """``_core.WindowBase`` extends ``_io._RawIOBase``, io.RawIOBase's C base (a name private
    to the io module), by its struct: the extension builds it on this Python, and the raw
    layer derives from it unless the internals are off, when it keeps its state in Python."""
    import _io
    import io

    from aionative import _raw

    assert _io._RawIOBase in io.RawIOBase.__mro__
    assert issubclass(_core.WindowBase, _io._RawIOBase)
    assert issubclass(_raw.WindowRaw, _core.WindowBase) is not FORCED_OFF
    assert issubclass(_raw.WindowRaw, io.RawIOBase)
