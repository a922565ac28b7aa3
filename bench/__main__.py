"""``python -m bench``: run benchmark workloads and print markdown tables.

    python -m bench                          # W1, W4, W7 quick (~1.5 s a cell, < 3 min)
    python -m bench --profile full           # ~5 s a cell, 3 repeats, medians, full W4/W7
    python -m bench --workloads W1 --systems sync aionative --readers 1,64 --file-size 256M
    python -m bench --workloads W5           # random 4 KiB pwrite + event-loop lag (opt-in)
    python -m bench --workloads W4,W7        # small files; line iteration (aionative.open)

Workloads: W1 hot random 4 KiB reads; W4 open + read + close of 1000 small files; W7
``async for line`` over a text file; W5 random 4 KiB writes (not in the default run). In the
quick profile (the default, ``make bench``) W4 runs N=1,24 only with shorter cells and W7
iterates a 30 MiB file; ``--profile full`` runs N=1,6,12,24 and a 100 MiB file.

Progress goes to stderr (one line per finished cell), the report to stdout, and every cell
with machine information to ``bench/results/<workload>.json`` (or ``--json PATH``, with one
workload). A ``--systems`` entry is a full system name or a prefix of available ones
(``aionative``, ``aionative-io_uring``, ``aionative.read_bytes``); names outside the defaults
(e.g. ``aiofiles-uvloop`` in W1) also work.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    DATA_DIR,
    RESULTS_DIR,
    JSONDict,
    PrepareConfig,
    Timing,
    Variant,
    Workload,
    load_workload,
    parse_size,
    parse_system,
)
from bench.harness import cells_record, machine_info, probe_environment, run_grid
from bench.report import render

DEFAULT_READERS = (1, 8, 64, 256)
DEFAULT_WORKLOADS = ("W1", "W4", "W7")


@dataclass(frozen=True)
class Profile:
    timing: Timing
    repeats: int


PROFILES = {
    "quick": Profile(Timing(warmup=0.2, duration=1.5), repeats=1),
    "full": Profile(Timing(warmup=0.5, duration=5.0), repeats=3),
}


def _csv(values: Sequence[str]) -> list[str]:
    """Accept both ``a b`` and ``a,b``."""
    return [v for item in values for v in item.split(",") if v]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    p.add_argument("--workloads", nargs="+", default=list(DEFAULT_WORKLOADS), metavar="W",
                   help="default: " + ",".join(DEFAULT_WORKLOADS) + " (W5 is opt-in)")
    p.add_argument("--systems", nargs="+", metavar="SYSTEM",
                   help="default: every system available here")
    p.add_argument("--readers", nargs="+", metavar="N", help="concurrency levels (readers or "
                   "writers), default " + ",".join(map(str, DEFAULT_READERS))
                   + " unless the workload sets its own (W5: 1,64; W4: 1,6,12,24, quick 1,24;"
                   " W7 has none)")
    p.add_argument("--file-size", type=parse_size,
                   help="data file size, e.g. 1G, 256M (W1, W5, W7; W4's files are fixed)")
    p.add_argument("--duration", type=float, help="override the profile's seconds per cell")
    p.add_argument("--warmup", type=float, help="override the profile's warm-up seconds")
    p.add_argument("--repeats", type=int, help="override the profile's repeats")
    p.add_argument("--seed", type=int, default=1, help="offset RNG seed")
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--json", type=Path, metavar="PATH",
                   help="results file (one workload only); default bench/results/<w>.json")
    return p


def select_systems(requested: list[str] | None, defaults: list[str]) -> list[str]:
    """Expand prefixes against the defaults; keep other well-formed names as given."""
    if not requested:
        return defaults
    chosen: list[str] = []
    for name in requested:
        matches = [d for d in defaults if d == name or d.startswith(name + "-")]
        if not matches:
            parse_system(name)  # raises ValueError for a malformed name
            matches = [name]
        chosen += [m for m in matches if m not in chosen]
    return chosen


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_workload(workload: Workload, args: argparse.Namespace, probe: JSONDict) -> JSONDict:
    """Prepare, run and collect one workload into its results document."""
    profile = PROFILES[args.profile]
    variant = workload.variants.get(args.profile, Variant())
    base = variant.timing or profile.timing
    timing = Timing(args.warmup if args.warmup is not None else base.warmup,
                    args.duration if args.duration is not None else base.duration)
    repeats = args.repeats or profile.repeats
    if not workload.concurrency:
        readers = [1]
    elif args.readers:
        readers = [int(n) for n in _csv(args.readers)]
    else:
        readers = list(variant.readers or workload.default_readers or DEFAULT_READERS)
    params = workload.prepare(PrepareConfig(args.data_dir, args.seed,
                                            args.file_size or variant.file_size, _log))
    defaults, notes = workload.default_systems(probe)
    systems = select_systems(_csv(args.systems) if args.systems else None, defaults)
    grid = run_grid(workload, systems, readers, params, timing, repeats, _log)
    return {
        "workload": workload.name, "title": workload.title, "unit": workload.unit,
        "profile": args.profile, "timing": {"warmup": timing.warmup, "duration": timing.duration},
        "repeats": repeats, "readers": readers, "params": params,
        "machine": machine_info(Path(params["path"]) if "path" in params else None),
        "probe": probe, "systems": systems, "concurrency_free": sorted(workload.concurrency_free),
        "concurrency": workload.concurrency,
        "notes": notes if not args.systems else [], "skipped": grid.skipped,
        "errors": grid.errors, "cells": cells_record(workload, grid),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = _csv(args.workloads)
    if args.json and len(names) > 1:
        raise SystemExit("--json takes one workload; omit it to get results/<w>.json each")
    try:
        workloads = [load_workload(name) for name in names]
    except ModuleNotFoundError as exc:
        raise SystemExit(f"python -m bench: unknown workload ({exc})") from None
    started = time.monotonic()
    probe = probe_environment()
    failed = False
    for workload in workloads:
        begun = time.monotonic()
        try:
            doc = run_workload(workload, args, probe)
        except ValueError as exc:
            raise SystemExit(f"python -m bench: {exc}") from None
        print(render(doc), flush=True)
        path = args.json or RESULTS_DIR / f"{workload.name.lower()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, default=repr) + "\n")
        _log(f"{doc['workload']}: results written to {path} "
             f"({time.monotonic() - begun:.0f} s)")
        failed |= bool(doc["errors"])
    _log(f"finished in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
