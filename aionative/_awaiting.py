"""Awaiting engine operations whose memory the kernel may hold, so that a cancelled caller's
``CancelledError`` goes on only once the kernel (or the threads backend's worker) is done.

:func:`await_op` and :func:`settle_cancelled` serve a caller whose buffer the operation reads or
fills. :func:`settle` serves the web layer, which closes a descriptor only once no operation on
it is left with the engine: an operation still queued for the kernel names the descriptor by
number, and a number closed and reused meanwhile would be read, written or synced instead."""

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
