"""The one call that tells the C extension what it needs of the Python side
(``_core.configure``), made once when aionative is imported:

- the running loop's engine (``_engine.get_engine``);
- the Python paths of ``pread``, ``preadinto`` and ``pwrite`` (the threads engine's), and the
  retries the native engines leave to Python (a write refused after its turn, a read Linux AIO
  refuses);
- the size from which a read the spent budget refused waits a turn (``_threads.TURN_MIN``);
- the class a lazy ``open(path, "rb")`` makes and the coroutine of its other outcomes;
- whether the engine may use CPython's and asyncio's internals (``csrc/compat.h``): the
  environment's ``AIONATIVE_INTERNALS=0`` keeps it to public APIs (slower; the test suite runs
  once that way).

The extension imports nothing of aionative's: it calls only what it is given here.
"""

from __future__ import annotations

import asyncio

from . import _lowlevel, _open, _threads
from ._backend import _core
from ._compat import INTERNALS
from ._engine import get_engine
from ._files import AsyncBufferedReader


def configure() -> None:
    if _core is None:
        return
    _core.configure(
        get_engine=get_engine,
        pread=_lowlevel.pread_python, preadinto=_lowlevel.preadinto_python,
        pwrite=_lowlevel.pwrite_python, write_refused=_lowlevel.write_refused,
        read_refused=_lowlevel.read_refused, cancelled_error=asyncio.CancelledError,
        turn_min=_threads.TURN_MIN,
        rb_class=AsyncBufferedReader, rb_rest=_open.open_rb_rest,
        internals=INTERNALS)
