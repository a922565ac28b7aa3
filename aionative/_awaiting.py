"""Awaiting an engine operation whose memory the kernel may hold: the one place a cancelled
caller waits for the kernel (or the threads backend's worker) to be done with its buffer before
its ``CancelledError`` goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


async def await_op(engine: Any, fut: Awaitable[T]) -> T:
    """Await an engine operation; if the awaiting task is cancelled, cancel the operation and
    return (raising CancelledError) only once the kernel is done with its memory."""
    try:
        return await fut
    except asyncio.CancelledError:
        await settle_cancelled(engine, fut)
        raise


async def settle_cancelled(engine: Any, fut: Awaitable[Any]) -> None:
    """Cancel the operation of ``fut`` and wait until the kernel (or the threads backend's
    worker) can no longer read or write its memory: a request already running — a read the
    device is doing — lands in the caller's buffer first, and a caller free to reuse that
    buffer once its await ends would find it overwritten. Cancellations meanwhile cancel only
    this wait; the caller raises its own CancelledError afterwards."""
    while (waiter := engine.cancel_wait(fut)) is not None:
        try:
            await waiter
            return
        except asyncio.CancelledError:
            continue  # (the waiter itself was cancelled: ask again)
