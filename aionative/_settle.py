"""Waiting for an engine operation to be over, whatever happens to the task that waits.

The web layer closes a descriptor only once no operation on it is left with the engine: an
operation still queued for the kernel names the descriptor by number, and a number closed and
reused meanwhile would be read, written or synced instead. :func:`settle` is that wait.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["settle"]


async def settle(fut: asyncio.Future[Any]) -> None:
    """Wait until ``fut`` (an engine operation, or a task that must not be cut short) is done,
    even if the waiting task is cancelled meanwhile; its outcome is retrieved (no "exception
    never retrieved" warning), and a cancellation that arrived while waiting is raised once
    it is over."""
    cancelled = False
    while not fut.done():
        try:
            await asyncio.wait((fut,))
        except asyncio.CancelledError:
            cancelled = True
    if not fut.cancelled():
        fut.exception()
    if cancelled:
        raise asyncio.CancelledError
