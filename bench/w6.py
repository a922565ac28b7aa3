"""W6: event-loop lag while W1 runs at full speed: a 1 ms ticker's lateness, N=64 readers.

W1's load (hot random 4 KiB reads, ``bench.w1.READ``, the same file, offsets and systems) with
a ticker task in the same loop that awaits ``asyncio.sleep(0.001)`` over and over; lateness =
measured interval - 1 ms, p50 / p99 / max over the timed window (``bench.meter.with_lag``,
idle baseline first). A system that completes reads inline without ever yielding to the loop
reaches high reads/s here while starving every other task: the lag shows it, and the
throughput column shows the load really ran at full speed while it was measured.

Only async systems: ``sync`` and fio have no event loop to measure.
"""

from __future__ import annotations

from bench import w1
from bench.clients import open_target
from bench.clients import run_cell as run_cell_on
from bench.common import JSONDict, PrepareConfig, System, Timing, Variant, Workload
from bench.meter import with_lag

READERS = 64


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: W1's readers plus the ticker."""
    if system.kind in ("sync", "fio"):
        raise ValueError(f"W6 measures an event loop; {system.name} has none")
    target = open_target(params)
    try:
        return run_cell_on(w1.READ, system, readers, target, timing, with_lag)
    finally:
        target.close()


def prepare(cfg: PrepareConfig) -> JSONDict:
    return w1.prepare(cfg)


def systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    chosen, notes = w1.default_systems(probe)
    return [s for s in chosen if s != "sync" and not s.startswith("fio-")], notes


QUICK_SYSTEMS = ("aionative", "caio-io_uring-asyncio", "caio-io_uring_nosqpoll-asyncio",
                 "caio-linux_aio-asyncio")

WORKLOAD = Workload(
    name="W6",
    title="event-loop lag of a 1 ms ticker while W1 runs (hot random 4 KiB reads)",
    unit="reads",
    prepare=prepare,
    default_systems=systems,
    run_cell=run_cell,
    default_readers=(READERS,),
    variants={"quick": Variant(timing=Timing(warmup=0.15, duration=0.6),
                               systems=QUICK_SYSTEMS)},
)
