"""``python -m bench``: run benchmark workloads and print markdown tables.

    python -m bench                          # every workload, quick profile (< 3 min)
    python -m bench --profile full           # every system and N, 2 s cells, 3 repeats
    python -m bench --workloads W1 --systems sync aionative --readers 1,64 --file-size 256M
    python -m bench --workloads W5,W5-tmpfs  # random 4 KiB pwrite + loop lag, ext4 and tmpfs
    python -m bench --workloads W4,W7        # small files; line iteration (aionative.open)

Workloads: W1 hot random 4 KiB reads; W2 O_DIRECT random 4 KiB reads; W3 sequential 1 MiB
reads of a hot 1 GiB file; W4 open + read + close of 1000 small files; W5 random 4 KiB
pwrite and W5F ten 64 MiB files written in 1 MiB chunks (each with loop lag, on the data
dir's filesystem and, as ``W5-tmpfs``/``W5F-tmpfs``, on a tmpfs); W6 event-loop lag while W1
runs at N=64; W7 ``async for line`` over a text file. The quick profile (the default, ``make
bench``) trims each workload to the concurrency levels and systems its targets need, with
short cells (each workload's ``variants["quick"]``); ``--profile full`` runs every system
this machine has at every N, three times.

Peers (anyio, caio, aiofile) run where they import; fio (the C limit) is looked up on PATH
and, when absent, installed from Debian's package if we are root (``--no-fio-install`` to
skip its rows instead). Progress goes to stderr (one line per finished cell), the report to
stdout, every cell with machine information to ``bench/results/<workload>.json`` (or ``--json
PATH``, with one workload), and one PNG a workload to ``docs/img/<workload>.png`` (``--plots
DIR``, ``--no-plots``); then the targets, checked against ``bench/results/``
(``bench.targets``), and the benchmarks page, ``docs/benchmarks.md``, written again from every
saved result (``bench.report``; ``--no-page`` to leave it). A ``--systems`` entry is a full
system name or a prefix of available ones (``aionative``, ``aionative-io_uring``, ``caio``,
``fio``); names outside the defaults (e.g. ``aiofiles-uvloop`` in W1) also work.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import fio, plots, report, targets
from bench.common import (
    DATA_DIR,
    DEFAULT_READERS,
    PROFILES,
    REPO_ROOT,
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
from bench.harness import (
    cells_record,
    filesystem_of,
    machine_info,
    probe_environment,
    run_grid,
)
from bench.report import render

DEFAULT_WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W5-tmpfs", "W5F", "W5F-tmpfs", "W6", "W7",
                     "W8", "W8-tmpfs")
TMPFS_DIR = Path("/dev/shm")
PLOTS_DIR = REPO_ROOT / "docs" / "img"


def _csv(values: Sequence[str]) -> list[str]:
    """Accept both ``a b`` and ``a,b``."""
    return [v for item in values for v in item.split(",") if v]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    p.add_argument("--workloads", nargs="+", default=list(DEFAULT_WORKLOADS), metavar="W",
                   help="default: " + ",".join(DEFAULT_WORKLOADS))
    p.add_argument("--systems", nargs="+", metavar="SYSTEM",
                   help="default: every system available here")
    p.add_argument("--readers", nargs="+", metavar="N", help="concurrency levels (readers or "
                   "writers), default " + ",".join(map(str, DEFAULT_READERS))
                   + " unless the workload sets its own (W2: 1,16,64; W4: 1,6,12,24; W5: 1,64;"
                   " W5F: 10; W6: 64; W3, W7 have none; quick profile: fewer)")
    p.add_argument("--file-size", type=parse_size,
                   help="data file size, e.g. 1G, 256M (W1, W5, W7; W4's files are fixed)")
    p.add_argument("--duration", type=float, help="override the profile's seconds per cell")
    p.add_argument("--warmup", type=float, help="override the profile's warm-up seconds")
    p.add_argument("--repeats", type=int, help="override the profile's repeats")
    p.add_argument("--seed", type=int, default=1, help="offset RNG seed")
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--tmpfs-dir", type=Path, default=TMPFS_DIR,
                   help="a tmpfs mount for the -tmpfs workloads' data (in a directory of "
                   "this run's own, removed afterwards); default %(default)s")
    p.add_argument("--json", type=Path, metavar="PATH",
                   help="results file (one workload only); default bench/results/<w>.json")
    p.add_argument("--plots", type=Path, default=PLOTS_DIR, metavar="DIR",
                   help="where to draw one PNG a workload; default docs/img")
    p.add_argument("--no-plots", action="store_true", help="draw no PNG")
    p.add_argument("--no-page", action="store_true",
                   help="do not write docs/benchmarks.md again from bench/results/")
    p.add_argument("--no-fio-install", action="store_true",
                   help="do not install Debian's fio package when fio is absent")
    return p


def select_systems(requested: Sequence[str] | None, defaults: list[str],
                   only_defaults: bool = False) -> list[str]:
    """Expand prefixes against the defaults; keep other well-formed names as given (unless
    ``only_defaults``: a profile's list names what it wants of what is available)."""
    if not requested:
        return defaults
    chosen: list[str] = []
    for name in requested:
        matches = [d for d in defaults if d == name or d.startswith(name + "-")]
        if not matches and not only_defaults:
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
    data_dir = tmpfs_data(args) if workload.fs else args.data_dir
    params = workload.prepare(PrepareConfig(data_dir, args.seed,
                                            args.file_size or variant.file_size, _log))
    params["fio"] = probe["fio"]["path"]
    defaults, notes = workload.default_systems(probe)
    if args.systems:
        systems = select_systems(_csv(args.systems), defaults)
    else:
        systems = select_systems(variant.systems, defaults, only_defaults=True)
    grid = run_grid(workload, systems, readers, params, timing, repeats, _log)
    return {
        "workload": workload.name, "title": workload.title, "unit": workload.unit,
        "profile": args.profile, "timing": {"warmup": timing.warmup, "duration": timing.duration},
        "repeats": repeats, "readers": readers, "params": params,
        "machine": machine_info(Path(params["path"]) if "path" in params else None),
        "probe": probe, "systems": systems, "concurrency_free": sorted(workload.concurrency_free),
        "concurrency": workload.concurrency,
        "notes": (notes if not args.systems else []) + _profile_note(args, variant, defaults,
                                                                     systems),
        "skipped": grid.skipped,
        "errors": grid.errors, "cells": cells_record(workload, grid),
    }


def _profile_note(args: argparse.Namespace, variant: Variant, defaults: list[str],
                  systems: list[str]) -> list[str]:
    left = [s for s in defaults if s not in systems]
    if args.systems or not variant.systems or not left:
        return []
    return [f"{args.profile} profile: {len(left)} more systems run with `--profile full`: "
            + ", ".join(f"`{s}`" for s in left)]


def tmpfs_data(args: argparse.Namespace) -> Path:
    """This run's own directory on the tmpfs (removed after each -tmpfs workload)."""
    return args.tmpfs_dir / f"aionative-bench-{os.getpid()}"


def tmpfs_ready(workload: Workload, args: argparse.Namespace) -> str | None:
    """Why ``workload`` cannot run on a tmpfs here (None: it can, or needs none)."""
    if not workload.fs:
        return None
    if not args.tmpfs_dir.is_dir():
        return f"{args.tmpfs_dir} does not exist (set --tmpfs-dir to a tmpfs mount)"
    fs = filesystem_of(args.tmpfs_dir)
    if fs != workload.fs:
        return f"{args.tmpfs_dir} is on {fs}, not {workload.fs} (set --tmpfs-dir)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    names = _csv(args.workloads)
    if args.json and len(names) > 1:
        raise SystemExit("--json takes one workload; omit it to get results/<w>.json each")
    try:
        workloads = [load_workload(name) for name in names]
    except ModuleNotFoundError as exc:
        raise SystemExit(f"python -m bench: unknown workload ({exc})") from None
    except ValueError as exc:
        raise SystemExit(f"python -m bench: {exc}") from None
    started = time.monotonic()
    fio_path, fio_error = fio.ensure(not args.no_fio_install, _log)
    probe = probe_environment(fio_path, fio_error)
    failed = False
    for index, workload in enumerate(workloads):
        begun = time.monotonic()
        _log(f"== {workload.name} ({index + 1}/{len(workloads)}): {workload.title}")
        if why := tmpfs_ready(workload, args):
            _log(f"{workload.name}: skipped: {why}")
            print(f"## {workload.name}: {workload.title}\n\nSkipped: {why}\n", flush=True)
            continue
        try:
            doc = run_workload(workload, args, probe)
            doc["command"] = command   # for the benchmarks page
        except ValueError as exc:
            raise SystemExit(f"python -m bench: {exc}") from None
        finally:
            if workload.fs:
                shutil.rmtree(tmpfs_data(args), ignore_errors=True)  # it is memory
        print(render(doc), flush=True)
        if not args.no_plots:
            _log(plots.draw(doc, args.plots))
        path = args.json or RESULTS_DIR / f"{workload.name.lower()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, default=repr) + "\n")
        _log(f"{doc['workload']}: results written to {path} "
             f"({time.monotonic() - begun:.0f} s)")
        failed |= bool(doc["errors"])
    if not args.json:
        print(targets.report(RESULTS_DIR), flush=True)
        if not args.no_page:
            _log(report.write_page(RESULTS_DIR))
    _log(f"finished in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
