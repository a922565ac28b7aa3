"""The line gate: how many more lines ``async for`` (and ``readline()``) may read, and bytes
``read(n)`` may take, from a file's window without the lock, a fetch or a check — and the turn
budget those fast paths respect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backend import _core
from .._engine import get_engine

# Lines and bytes served from the window without I/O never suspend the task; a tight loop of
# them would hold the event loop for as long as the window lasts (a 16 MiB file of short
# lines: over 100 ms). So the gate hands out at most _GRANT_LINES lines at a time, and charges
# each fast read(n) at least _ROOM_CHARGE bytes of its room (read(1) loops): then the slow
# path runs, and yields a turn when the loop iteration's budget is spent (_cede). A window's
# worth of room (up to 1 MiB) is then at most 2048 fast reads, well under a millisecond;
# reads of 512 bytes and more are charged what they take, as before. The cost of each:
# python -m bench.instructions --cases afor:rb readline:rb read:1000.
_GRANT_LINES = 512
_ROOM_CHARGE = 512


def _turn_spent_py() -> bool:
    return get_engine().turn_spent()


_turn_spent: Callable[[], bool] = _core.turn_spent if _core is not None else _turn_spent_py


class _PyLineGate:
    """``_core.LineGate`` without the extension: a file's ``async for`` and ``read(n)``
    budgets."""

    __slots__ = ("budget", "read", "readline", "room")

    def __init__(self, readline: Any, read: Any = None) -> None:
        self.budget = self.room = 0
        self.readline = readline
        self.read = read


_LineGate: Any = _core.LineGate if _core is not None else _PyLineGate
_NO_GATE = _LineGate(None)  # every file's until it iterates; its budget is never raised
