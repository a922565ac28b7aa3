"""What the file-object workloads (W4 many small files, W7 line iteration) share.

Both time whole passes over a fixed amount of work (``bench.meter.Passes``: warm-up passes,
then timed ones, the median pass counts) through an ``open()``:

- ``sync``: the builtin ``open``, one thread, no event loop: the limit (it blocks the loop);
- ``aionative-<backend>-<loop>``: ``aionative.open``, the backend chosen by
  ``AIONATIVE_BACKEND`` (the harness sets it from the name);
- ``aionative.<helper>-<backend>-<loop>``: an aionative one-call helper a workload adds
  (W4: ``aionative.read_bytes``);
- ``aiofiles-<loop>``: ``aiofiles.open``, the same calls as aionative's (a drop-in).

This module picks the default systems, imports what a system calls (Skip when it cannot run
here), runs a pass function under ``Passes`` with or without an event loop, and checks that an
aionative engine really runs on the backend its name asks for; ``Rounds`` does the same for
the pytest-benchmark tests, one pass a round. The pass functions themselves — the loops being
measured — are written out in each workload, names bound to locals first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any

from bench.common import (
    JSONDict,
    Skip,
    System,
    Timing,
    import_aionative,
    loop_factory,
    native_systems,
)
from bench.meter import Passes

AsyncPass = Callable[[], Coroutine[Any, Any, int]]


def default_systems(probe: JSONDict,
                    helpers: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """sync, aionative (and ``aionative.<helper>``) on every backend and loop, aiofiles on
    every loop; notes on what this environment cannot run."""
    systems, notes, loops = native_systems(
        probe, ("aionative", *(f"aionative.{h}" for h in helpers)))
    if probe["aiofiles"]["ok"]:
        systems += [f"aiofiles-{lp}" for lp in loops]
    else:
        notes.append(f"aiofiles-* skipped: {probe['aiofiles']['error']}")
    return systems, notes


def import_system(system: System) -> ModuleType:
    """The module ``system`` calls (``aionative`` or ``aiofiles``); Skip if it cannot run."""
    if system.kind == "aiofiles":
        try:
            import aiofiles  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise Skip(f"aiofiles not importable: {exc}") from exc
        mod: ModuleType = aiofiles
        return mod
    if not system.kind.startswith("aionative"):
        raise ValueError(f"no async system {system.name!r} here")
    mod = import_aionative()
    helper = system.kind.partition(".")[2] or "open"
    if not hasattr(mod, helper):
        raise Skip(f"aionative has no {helper}")
    available = list(mod.available_backends())
    if system.backend not in available:
        raise Skip(f"aionative backend {system.backend} not available here (have {available})")
    return mod


def info(system: System, mod: ModuleType) -> JSONDict:
    """What served the cell: aionative's ``backend_info()`` (inside the loop) or versions."""
    if system.kind == "aiofiles":
        return {"aiofiles_version": getattr(mod, "__version__", None)}
    backend_info = dict(mod.backend_info())
    if backend_info.get("backend") != system.backend:
        raise RuntimeError(f"asked for backend {system.backend}, engine reports "
                           f"{backend_info.get('backend')}; is AIONATIVE_BACKEND honoured?")
    return {"backend_info": backend_info, "version": getattr(mod, "__version__", None)}


def measure_sync(one_pass: Callable[[], int], timing: Timing) -> JSONDict:
    """The ``sync`` cell: passes on this thread, no event loop."""
    passes = Passes(timing)
    while passes.begin():
        passes.end(one_pass())
    return passes.result() | {"info": {"note": "builtin open(), one thread, no event loop"}}


def measure_async(system: System, make_pass: Callable[[ModuleType], AsyncPass],
                  timing: Timing) -> JSONDict:
    """An async cell on a fresh event loop of ``system``'s kind; ``make_pass(module)`` returns
    the pass coroutine function (built before the loop starts)."""
    assert system.loop is not None
    mod = import_system(system)
    one_pass = make_pass(mod)
    with asyncio.Runner(loop_factory=loop_factory(system.loop)) as runner:
        return runner.run(_timed(system, mod, one_pass, timing))


async def _timed(system: System, mod: ModuleType, one_pass: AsyncPass,
                 timing: Timing) -> JSONDict:
    stats = getattr(mod, "engine_stats", None) if system.backend else None
    passes = Passes(timing, stats)
    passes.census.attach(asyncio.get_running_loop())
    try:
        while passes.begin():
            passes.end(await one_pass())
    finally:
        passes.census.detach()
    return passes.result() | {"info": info(system, mod)}


class Rounds:
    """setup/batch/teardown for ``benchmark.pedantic``: one pass of an async system a round.

    ``setup`` opens a fresh event loop and runs one untimed pass on it (the first also verifies
    the contents; every pass checks its counts), ``batch`` runs one pass, ``teardown`` closes
    the loop. Open loops are tracked and ``close_all`` closes leftovers: with
    ``--benchmark-disable`` pytest-benchmark runs setup and target once but never teardown.
    """

    def __init__(self, system: System, make_pass: Callable[[ModuleType], AsyncPass]) -> None:
        assert system.loop is not None
        self.system = system
        self.mod = import_system(system)
        self.one_pass = make_pass(self.mod)
        self.factory = loop_factory(system.loop)
        self.open: list[asyncio.Runner] = []

    def setup(self) -> tuple[tuple[asyncio.Runner], dict[str, Any]]:
        runner = asyncio.Runner(loop_factory=self.factory)
        try:
            runner.run(self.one_pass())
        except BaseException:
            runner.close()
            raise
        self.open.append(runner)
        return (runner,), {}

    def batch(self, runner: asyncio.Runner) -> None:
        runner.run(self.one_pass())

    def teardown(self, runner: asyncio.Runner) -> None:
        self.open.remove(runner)
        runner.close()

    def close_all(self) -> None:
        while self.open:
            self.teardown(self.open[-1])

    def info(self) -> JSONDict:
        """One round's setup, then ``info()`` from inside its loop (the backend check)."""
        (runner,), _ = self.setup()
        try:
            async def probe() -> JSONDict:
                return info(self.system, self.mod)
            return runner.run(probe())
        finally:
            self.teardown(runner)
