"""Awaiting engine operations, so that a cancelled caller's ``CancelledError`` goes on only once
the kernel (or the threads backend's worker) is done with the caller's memory. A cancelled
await of an engine operation ends here, in one of two ways. The exceptions: the file layer's
writes, which a cancelled call leaves to finish and the next call reports
(``_files/writes.py``), the threads engine's ``pread``, :func:`await_owned` inlined for
speed (``_lowlevel.pread_python``), and ``_kernelops.open_fd``'s kernel open, awaited without
the shield ``on_cancel`` would put in its way (one turn of the loop sooner).

- :func:`await_op`: the operation reads or fills memory of the caller's (a buffer read into, a
  write from the caller's object, a path or descriptor number it names): cancelled, the
  caller waits until the operation has let go of it (:func:`settle_cancelled`);
- :func:`await_owned`: the engine owns all the memory the operation uses (a read into the
  engine's own buffer, returned as ``bytes``; a sync; an open, whose late descriptor the
  engine closes): cancelled, the operation is abandoned and the caller goes on at once.

Either takes ``on_cancel``, for an operation whose outcome must not be dropped when its caller
gives up (a descriptor to close): the operation is then awaited through a shield, and
``on_cancel`` gets its future once it is done. :func:`finished_anyway` serves work that cannot
be cancelled at all (a worker's call), :func:`until_done` a caller that must wait one out
before it raises its own CancelledError. :func:`settle` serves the web layer, which closes a
descriptor only once no operation on it is left with the engine: an operation still queued
for the kernel names the descriptor by number, and a number closed and reused meanwhile would
be read, written or synced instead."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def await_op(engine: Any, fut: Awaitable[T], *,
                   on_cancel: Callable[[asyncio.Future[T]], object] | None = None) -> T:
    """Await an engine operation that uses the caller's memory; if the awaiting task is
    cancelled, cancel the operation and return (raising CancelledError) only once the kernel
    is done with that memory. ``on_cancel``: see the module's docstring."""
    if on_cancel is None:
        try:
            return await fut
        except asyncio.CancelledError:
            await settle_cancelled(engine, fut)
            raise
    op = asyncio.ensure_future(fut)
    try:
        return await asyncio.shield(op)
    except asyncio.CancelledError:
        op.add_done_callback(on_cancel)
        await settle_cancelled(engine, op)
        raise


async def await_owned(engine: Any, fut: Awaitable[T], *,
                      on_cancel: Callable[[asyncio.Future[T]], object] | None = None) -> T:
    """Await an engine operation whose memory the engine owns (nothing of the caller's is left
    for the kernel to touch); if the awaiting task is cancelled, abandon the operation
    (``engine.cancel``) and raise CancelledError at once. ``on_cancel``: see the module's
    docstring."""
    if on_cancel is None:
        try:
            return await fut
        except asyncio.CancelledError:
            engine.cancel(fut)
            raise
    op = asyncio.ensure_future(fut)
    try:
        return await asyncio.shield(op)
    except asyncio.CancelledError:
        engine.cancel(op)
        op.add_done_callback(on_cancel)
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
        except Exception:  # noqa: BLE001 - a worker's call that failed once it ran on: the
            return  # operation's outcome, nobody's to see; the caller raises CancelledError


async def finished_anyway(aw: Awaitable[T], on_cancel: Callable[[asyncio.Future[T]], Any]
                          ) -> T:
    """Await ``aw``; cancelled meanwhile, it goes on, and ``on_cancel`` gets its future when it
    ends (a worker's close or open, or the kernel's open, cannot be called back)."""
    fut = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(on_cancel)
        raise


async def until_done(fut: asyncio.Future[Any]) -> None:
    """Wait for ``fut`` whatever cancels the waiting task meanwhile (the caller raises its
    own CancelledError afterwards)."""
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except BaseException:  # noqa: BLE001, S110 - the outcome is fut's, read later
            pass


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
