"""Pieces shared by the parent harness, the workers and the pytest-benchmark tests.

Holds the workload interface (``Workload``), system names (``System``), event-loop factories,
the seeded offset pool and the hot data file. Nothing here measures anything; the point is that
every workload prepares its data and names its systems the same way, so the harness and the
report never need to know which workload they are driving.
"""

from __future__ import annotations

import array
import asyncio
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = BENCH_DIR / ".data"
RESULTS_DIR = BENCH_DIR / "results"

LOOPS = ("asyncio", "uvloop")
AIONATIVE_API = ("pread", "available_backends")
BACKEND_PEERS = ("caio",)    # peers named <kind>-<backend>-<loop>
JSONDict = dict[str, Any]
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class Skip(Exception):
    """A system cannot run here (missing package, backend, kernel feature): not a failure."""


@dataclass(frozen=True)
class Timing:
    """How long one cell runs: ``warmup`` seconds unmeasured, then ``duration`` measured."""

    warmup: float
    duration: float


@dataclass(frozen=True)
class Profile:
    """A run's length: each cell's timing, and how many times the grid runs."""

    timing: Timing
    repeats: int


PROFILES = {
    "quick": Profile(Timing(warmup=0.2, duration=1.5), repeats=1),
    "full": Profile(Timing(warmup=0.3, duration=2.0), repeats=3),
}
DEFAULT_READERS = (1, 8, 64, 256)  # concurrency levels, where a workload names none


@dataclass(frozen=True)
class System:
    """A parsed system name: ``sync`` (or ``sync.<variant>``), ``<kind>-<loop>``,
    ``aionative-<backend>-<loop>``, ``aionative.<helper>-<backend>-<loop>`` (an aionative API
    other than the workload's main one, e.g. ``aionative.read_bytes-io_uring-asyncio`` in W4),
    a peer with backends (``caio-<backend>-<loop>``) or fio (``fio-<engine>``: no event loop,
    the engine as ``backend``); ``kind`` is the first part. Any of them may end in
    ``@<n>cpu``: its worker process runs pinned to the first ``n`` CPUs it may use
    (``cpus``), e.g. ``aiofiles-asyncio@1cpu``, whose thread pool is 3–4× faster on one CPU
    than spread over two (docs/benchmarks.md, "aiofiles' two speeds")."""

    name: str
    kind: str
    loop: str | None = None
    backend: str | None = None
    cpus: int | None = None


def parse_system(name: str) -> System:
    """Split a system name into its parts; raise ValueError for a malformed one."""
    base, at, pin = name.partition("@")
    if at:
        m = re.fullmatch(r"([1-9][0-9]*)cpu", pin)
        if m is None:
            raise ValueError(f"malformed system name {name!r}: expected <system>@<n>cpu")
        return replace(parse_system(base), name=name, cpus=int(m.group(1)))
    parts = name.split("-")
    if len(parts) == 1 and (name == "sync" or name.startswith("sync.")):
        return System(name, name)
    if len(parts) == 2 and parts[0] == "fio":
        return System(name, "fio", backend=parts[1])
    native = parts[0] == "aionative" or parts[0].startswith("aionative.")
    if len(parts) == 3 and (native or parts[0] in BACKEND_PEERS) and parts[2] in LOOPS:
        return System(name, parts[0], loop=parts[2], backend=parts[1])
    if len(parts) == 2 and not native and parts[1] in LOOPS:
        return System(name, parts[0], loop=parts[1])
    raise ValueError(f"malformed system name {name!r}")


def is_native(system: System) -> bool:
    """Whether the system is aionative (its backend is chosen with AIONATIVE_BACKEND)."""
    return system.kind == "aionative" or system.kind.startswith("aionative.")


@dataclass(frozen=True)
class PrepareConfig:
    """What the parent hands to a workload's ``prepare`` step."""

    data_dir: Path
    seed: int
    file_size: int | None
    log: Callable[[str], None]


@dataclass(frozen=True)
class Variant:
    """What a workload runs in one profile instead of its defaults (``Workload.variants``).

    The quick profile is the default ``make bench``, which must stay short, so a workload whose
    full version takes minutes trims itself there: fewer concurrency levels (``readers``), a
    shorter cell (``timing``), a smaller data file (``file_size``), fewer systems (``systems``:
    names or prefixes, as ``--systems`` takes them, of the ones available). The CLI's
    ``--readers``, ``--warmup``, ``--duration``, ``--file-size`` and ``--systems`` still
    override all of them.
    """

    readers: tuple[int, ...] | None = None
    timing: Timing | None = None
    file_size: int | None = None
    systems: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Workload:
    """One benchmark workload, as a sibling module (``bench/wN.py``) exposes it.

    ``prepare`` runs once in the parent (create and warm data) and returns JSON parameters for
    the workers; ``default_systems`` picks systems from the environment probe and returns notes
    on the ones it left out; ``run_cell`` runs in the worker and returns the measured figures.
    ``default_readers``, if set, replaces the CLI's default concurrency levels; ``variants``
    maps a profile name to its ``Variant``. A workload with ``concurrency=False`` (W7: one
    iteration of one file) runs every system once, at N=1, and ignores ``--readers``.
    ``filesystems`` names the other filesystems it can run on (``W5-tmpfs``: the data in a
    tmpfs instead of the data dir); ``fs`` is set on such a copy.
    """

    name: str
    title: str
    unit: str
    prepare: Callable[[PrepareConfig], JSONDict]
    default_systems: Callable[[JSONDict], tuple[list[str], list[str]]]
    run_cell: Callable[[System, int, JSONDict, Timing], JSONDict]
    concurrency_free: frozenset[str] = field(default_factory=frozenset)
    default_readers: tuple[int, ...] | None = None
    variants: dict[str, Variant] = field(default_factory=dict)
    concurrency: bool = True
    filesystems: tuple[str, ...] = ()
    fs: str | None = None


FILESYSTEMS = {"tmpfs": "tmpfs"}   # workload-name suffix -> filesystem type it runs on


def load_workload(name: str) -> Workload:
    """Import ``bench.<name>`` and return its ``WORKLOAD``; ``<name>-tmpfs`` is the same
    workload run with its data on a tmpfs (for workloads that declare ``filesystems``)."""
    import importlib

    base, _, fs = name.partition("-")
    module = importlib.import_module(f"bench.{base.lower()}")
    workload: Workload = module.WORKLOAD
    if not fs:
        return workload
    if fs not in workload.filesystems:
        raise ValueError(f"{workload.name} does not run on {fs!r} "
                         f"(have: {', '.join(workload.filesystems) or 'its data dir only'})")
    return replace(workload, name=f"{workload.name}-{fs}", title=f"{workload.title}, on {fs}",
                   fs=fs)


def loop_factory(loop: str) -> LoopFactory:
    """Return a new-event-loop callable for ``asyncio`` or ``uvloop``; Skip if unavailable."""
    if loop == "asyncio":
        return asyncio.new_event_loop
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError as exc:
            raise Skip(f"uvloop not importable: {exc}") from exc
        return uvloop.new_event_loop
    raise ValueError(f"unknown loop {loop!r}")


def import_aionative() -> ModuleType:
    """Import aionative, raising Skip with the reason if it is missing or incomplete."""
    try:
        import aionative
    except Exception as exc:  # an extension import can fail in many ways
        raise Skip(f"aionative not importable: {exc!r}") from exc
    missing = [name for name in AIONATIVE_API if not hasattr(aionative, name)]
    if missing:
        where = sorted(set(getattr(aionative, "__path__", [])))
        raise Skip(f"aionative not importable: package at {where} lacks {missing} "
                   "(extension not built?)")
    return aionative


def native_systems(probe: JSONDict, kinds: tuple[str, ...] = ("aionative",)
                   ) -> tuple[list[str], list[str], list[str]]:
    """What every workload offers: ``sync`` and each of ``kinds`` (``aionative``,
    ``aionative.read_bytes`` …) on every available backend and loop. Returns (systems, notes on
    what this environment cannot run, the loops available)."""
    systems, notes = ["sync"], []
    loops = ["asyncio"]
    if probe["uvloop"]["ok"]:
        loops.append("uvloop")
    else:
        notes.append(f"uvloop variants skipped: {probe['uvloop']['error']}")
    native = probe["aionative"]
    if native["ok"]:
        for kind in kinds:
            systems += [f"{kind}-{b}-{lp}" for b in native["backends"] for lp in loops]
    else:
        notes.append(f"aionative-* skipped: {native['error']}")
    return systems, notes, loops


def parse_size(text: str) -> int:
    """Parse ``1G``, ``64M``, ``512KiB`` or a plain byte count (binary units)."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)(i?b)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"bad size {text!r}")
    scale = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}[match.group(2).lower()]
    return int(match.group(1)) << (10 * scale)


def size_label(size: int) -> str:
    """Render a byte count as the largest exact binary unit, e.g. ``1GiB``."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size}B"


def offset_pool(seed: int, file_size: int, block: int, count: int) -> array.array[int]:
    """Pre-generate ``count`` random ``block``-aligned offsets (``count`` a power of two).

    An ``array`` keeps the pool at 8 bytes an offset, so it barely moves peak RSS.
    """
    if count & (count - 1):
        raise ValueError("offset pool size must be a power of two")
    rng = random.Random(seed)
    blocks = file_size // block
    return array.array("q", (rng.randrange(blocks) * block for _ in range(count)))


def ensure_random_file(path: Path, size: int, log: Callable[[str], None]) -> bool:
    """Create ``path`` with ``size`` random bytes unless it already has that size.

    Written to a temporary name and renamed, so an interrupted run never leaves a short file
    that a later run would reuse. Returns True if the file was created.
    """
    if path.exists() and path.stat().st_size == size:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    log(f"creating {path} ({size_label(size)} of random data)")
    chunk = 8 << 20
    with open(tmp, "wb") as out:
        left = size
        while left:
            left -= out.write(os.urandom(min(chunk, left)))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return True


def make_hot(path: Path) -> None:
    """Read the whole file once so every later read is served from the page cache."""
    buf = bytearray(8 << 20)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        while os.readv(fd, [buf]):
            pass
    finally:
        os.close(fd)


async def take_lines(f: Any, how: str, count: int) -> None:
    """``count`` lines of an async file: ``await f.readline()`` calls (``how`` "readline") or
    ``async for`` steps (anything else)."""
    if how == "readline":
        for _ in range(count):
            await f.readline()
        return
    i = 0
    async for _line in f:
        i += 1
        if i == count:
            break
