"""The benchmarks page, ``docs/benchmarks.md``, from the saved results (``bench/results/*.json``).

``python -m bench.report`` (and ``make bench``, at its end) writes the whole page: the machine,
how to reproduce, what the targets check and whether the results meet them, then one section a
workload: what it measures (the first paragraph of its module's docstring), the command of its
last run, one table of that run's medians and ratios, and its plot (``docs/img/<w>.png``) where
one exists. A workload with no saved results gets its description and the command to run it.
Rendering reads only the JSON documents and the workloads' docstrings, so the same results give
the same page.

``render`` is the detailed report of one workload that ``python -m bench`` prints as it runs
(``python -m bench.report --detail results/w1.json`` prints it again): one table per metric,
systems as rows and N (concurrent readers) as columns: throughput, the throughput ratio to
``sync`` (the single-thread ceiling) and to ``aiofiles-asyncio`` (what most asyncio code uses
today), event-loop lag (only for workloads that measure it, e.g. W5), CPU microseconds per
operation, peak threads and peak RSS. Fixed-work workloads (W4, W7: the cells report
``pass_s``) add the median pass time, CPU utilisation and peak VSZ, and MB/s where measured. A
workload without concurrency (W7) gets one table instead, metrics as columns.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import targets
from bench.common import BENCH_DIR, REPO_ROOT, RESULTS_DIR, JSONDict, load_workload, size_label
from bench.meter import MIN_PASSES

Cell = JSONDict
Fmt = Callable[[Cell, int], str]
DASH = "—"
RATIO_BASES = ("sync", "aiofiles-asyncio", "aiofiles-asyncio@1cpu", "fio-io_uring")
INFO_COMMON = {"kernel", "available", "requested", "requested_by", "active", "rejected"}


def _ops(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    return f"{v / 1e3:.1f}k" if v >= 1e3 else f"{v:.0f}"


def _cpu(c: Cell, n: int) -> str:
    return DASH if c["cpu_us_per_op"] is None else f"{c['cpu_us_per_op']:.1f}"


def _threads(c: Cell, n: int) -> str:
    iou = c["iou_workers_peak"]
    return f"{c['threads_peak']} ({iou} iou)" if iou else str(c["threads_peak"])


def _lookup(doc: JSONDict) -> Callable[[str, int], Cell | None]:
    """Cell finder; concurrency-free systems were measured once, at N=1."""
    by_key = {(c["system"], c["readers"]): c for c in doc["cells"]}
    free = set(doc["concurrency_free"])
    return lambda system, n: by_key.get((system, 1 if system in free else n))


def _measured(doc: JSONDict) -> list[str]:
    have = {c["system"] for c in doc["cells"]}
    return [s for s in doc["systems"] if s in have]


def _partial(doc: JSONDict) -> dict[str, str]:
    """Systems measured on part of the work only (W7's aiofiles), with what they measured and
    how long a whole pass would take at the cell's (median) rate."""
    notes: dict[str, str] = {}
    for c in doc["cells"]:
        run = c["runs"][0]
        if note := run.get("partial"):
            if whole := run.get("ops_full_pass"):
                note += f" (a whole pass would take ~{whole / c['ops_per_s']:.0f} s)"
            notes.setdefault(c["system"], note)
    return notes


def _label(doc: JSONDict, system: str) -> str:
    marks = ("¹" if system in doc["concurrency_free"] else "") + (
        "²" if system in _partial(doc) else "")
    return f"{system} {marks}" if marks else system


def _table(doc: JSONDict, title: str, fmt: Fmt, rows: list[str] | None = None) -> list[str]:
    """Systems as rows, N as columns; ``fmt(cell, n)`` renders one entry."""
    find, readers = _lookup(doc), doc["readers"]
    lines = [f"### {title}", "", "| system | " + " | ".join(f"N={n}" for n in readers) + " |",
             "|---|" + "---:|" * len(readers)]
    for system in _measured(doc) if rows is None else rows:
        row = [fmt(c, n) if (c := find(system, n)) else DASH for n in readers]
        lines.append(f"| {_label(doc, system)} | " + " | ".join(row) + " |")
    return [*lines, ""]


def _ratio_to(doc: JSONDict, base: str) -> Fmt:
    find = _lookup(doc)

    def fmt(c: Cell, n: int) -> str:
        ref = find(base, n)
        return _ratio(c["ops_per_s"] / ref["ops_per_s"]) if ref else DASH
    return fmt


def _passes(doc: JSONDict) -> bool:
    """Whether the cells are fixed-work passes (``bench.meter.Passes``), not a time box."""
    return any("pass_s" in c for c in doc["cells"])


def _pass_ms(c: Cell, n: int) -> str:
    ms = c["pass_s"] * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}"


def _cpu_util(c: Cell, n: int) -> str:
    return f"{c['cpu_util'] * 100:.0f} %"


def _mib(key: str) -> Fmt:
    return lambda c, n: DASH if c.get(key) is None else f"{c[key]:.0f}"


def _mb_s(c: Cell, n: int) -> str:
    return f"{c['mb_per_s']:.1f}" if c["mb_per_s"] < 100 else f"{c['mb_per_s']:.0f}"


def _ratio(r: float) -> str:
    digits = 0 if r >= 100 else 1 if r >= 10 else 2 if r >= 0.1 else 3
    return f"{r:.{digits}f}×"


def _syscalls_per_op(c: Cell, n: int) -> str:
    """Engine system calls per operation, summed over the cell's runs."""
    runs = [r for r in c["runs"] if "syscalls" in (r.get("engine_stats_delta") or {})]
    ops = sum(r["ops"] for r in runs)
    calls = sum(r["engine_stats_delta"]["syscalls"] for r in runs)
    return f"{calls / ops:.3f}" if runs and ops else DASH


def _has_lag(doc: JSONDict) -> bool:
    return any("lag_p99_ms" in c for c in doc["cells"])


def _lag(c: Cell, n: int) -> str:
    if c.get("lag_p99_ms") is None:
        return "n/a"
    samples = [r["lag_samples"] for r in c["runs"] if r.get("lag_samples")]
    ticks = f" ({statistics.median(samples):.0f})" if samples else ""
    return " / ".join(_ms(c[k]) for k in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms")) + ticks


def _ms(v: float) -> str:
    if abs(v) < 0.005:  # a wake-up a few µs early by the loop's clock reads as 0, not -0.00
        v = 0.0
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _lag_notes(doc: JSONDict) -> list[str]:
    """How loop lag is measured, and the idle baseline of each event loop."""
    notes = [("Loop lag: a ticker task in the same event loop repeatedly awaits "
              "`asyncio.sleep(0.001)`; lag is each measured interval minus 1 ms, over the timed "
              "window (p50 / p99 / max, ms; max is the largest over repeats; in brackets the "
              "ticks measured, median over repeats: a starved loop ticks rarely). `n/a`: no "
              "event loop to measure.")]
    idle: dict[str, list[JSONDict]] = {}
    for c in doc["cells"]:
        for r in c["runs"]:
            if r.get("lag_idle"):
                idle.setdefault(c["system"].rsplit("-", 1)[-1], []).append(r["lag_idle"])
    for loop, runs in idle.items():
        p50 = statistics.median(r["p50_ms"] for r in runs)
        p99 = statistics.median(r["p99_ms"] for r in runs)
        worst = max(r["max_ms"] for r in runs)
        notes.append(f"Idle baseline, `{loop}` (ticker alone for {runs[0]['seconds']} s before "
                     f"each cell's load, {len(runs)} cells): p50 {_ms(p50)} / p99 {_ms(p99)} / "
                     f"max {_ms(worst)} ms (median, median, max over cells): the loop's timer and "
                     "wake-up granularity at rest, for reference (a busy loop that never sleeps "
                     "in epoll can show less).")
    return notes


def _engine_rows(doc: JSONDict) -> list[str]:
    return [c["system"] for c in doc["cells"]
            if "syscalls" in (c["runs"][0].get("engine_stats_delta") or {})]


def _header(doc: JSONDict) -> list[str]:
    m, t = doc["machine"], doc["timing"]
    size, data = doc["params"].get("file_size"), doc["params"].get("data")
    runs = f"median of {doc['repeats']} runs" if doc["repeats"] > 1 else "1 run"
    cell = (f"warm-up passes for {t['warmup']} s (at least one), then timed passes for "
            f"{t['duration']} s (at least {MIN_PASSES}) a cell, median pass" if _passes(doc)
            else f"{t['warmup']} s warm-up + {t['duration']} s a cell")
    facts = [f"{data} on {m['filesystem']}" if data else
             f"{size_label(size)} file on {m['filesystem']}" if size else None,
             f"kernel {m['kernel']}", f"{m['cpu_count']} CPUs", f"Python {m['python']}",
             f"{doc['profile']} profile: {cell}, {runs}", m["date"], _commit(m.get("git"))]
    return [f"## {doc['workload']}: {doc['title']}", "",
            " · ".join(f for f in facts if f), ""]


def _commit(git: JSONDict | None) -> str | None:
    """The commit measured (short form), naming the library's files that differed from it."""
    if not git or not git.get("commit"):
        return None
    dirty = [f for f in git.get("modified") or [] if f.startswith(("aionative/", "csrc/"))]
    return f"commit {git['commit'][:7]}" + (
        f" with uncommitted changes to {', '.join(dirty)}" if dirty else "")


def _notes(doc: JSONDict) -> list[str]:
    notes = [f"¹ `{s}`: " + ("fio's psync engine is synchronous (one I/O at a time) whatever "
                             "N" if s.startswith("fio-") else "one thread and no event loop, so "
                             "N does not apply") + ": measured once, shown in every column."
             for s in doc["concurrency_free"] if s in _measured(doc)]
    notes += [f"² `{s}`: {note}" for s, note in _partial(doc).items()]
    if _passes(doc):
        notes.append("CPU is process user+sys time over the timed passes, all threads "
                     "included; CPU % is that over wall time (200 % = two CPUs busy). Threads are "
                     "the peak of /proc/self/task sampled at pass boundaries and, in an event "
                     "loop, every ~50 ms; `iou` counts kernel io_uring workers among them. RSS "
                     "and VSZ are the worker's peaks (VmHWM, VmPeak).")
    else:
        notes.append("CPU is process user+sys time over the timed window, all threads "
                     "included. Threads are the peak of /proc/self/task sampled every ~50 ms; "
                     "`iou` counts kernel io_uring workers among them. RSS is the worker's "
                     "peak (VmHWM).")
    fio_cells = [c for c in doc["cells"] if c["system"].startswith("fio-")]
    if fio_cells and "cpu" not in (fio_cells[0]["runs"][0].get("info") or {}):
        notes.append("fio rows: IOPS and CPU (usr+sys) from fio's own JSON over its timed "
                     "runtime (after a ramp as long as the cells' warm-up), `--invalidate=0 "
                     "--norandommap`, one job. fio's CPU is its job thread's (RUSAGE_THREAD): "
                     "it misses work io_uring hands to its kernel workers (buffered writes). "
                     "Threads: the job's one; RSS not measured.")
    elif fio_cells:
        notes.append("fio rows: IOPS from fio's JSON over its timed runtime (after a ramp as "
                     "long as the cells' warm-up), `--invalidate=0 --norandommap`, one job; CPU: "
                     "the fio process tree's over ramp + runtime (fio's own figure, its job "
                     "thread's, misses io_uring's kernel workers); threads: the job's one; RSS "
                     "not measured.")
    for backend, info in doc["probe"]["aionative"].get("backend_info", {}).items():
        notes.append(f"aionative `{backend}` backend_info: `{_compact(info)}`")
    if _has_lag(doc):
        notes += _lag_notes(doc)
    notes += doc["notes"]
    notes += [f"skipped `{s}`: {reason}" for s, reason in doc["skipped"].items()]
    notes += [f"ERROR `{e['system']}` N={e['readers']}: {e['error']}" for e in doc["errors"]]
    return [f"- {n}" for n in notes] + [""]


def _compact(info: Any) -> str:
    """backend_info without the fields every backend shares (all of it is in the JSON)."""
    if isinstance(info, dict):
        return ", ".join(f"{k}={v}" for k, v in info.items()
                         if k not in INFO_COMMON and v not in ({}, None))
    return str(info)


def _columns(doc: JSONDict) -> list[tuple[str, Fmt]]:
    """The metric columns of the one-table layout (a workload without concurrency)."""
    unit, one = doc["unit"], doc["unit"].rstrip("s")
    cols: list[tuple[str, Fmt]] = [(f"{unit}/s", lambda c, n: _ops(c["ops_per_s"]))]
    if any("mb_per_s" in c for c in doc["cells"]):
        cols.append(("MB/s", _mb_s))
    cols += [(f"÷ {base}", _ratio_to(doc, base)) for base in RATIO_BASES
             if base in _measured(doc)]
    if _passes(doc):
        cols.append(("median pass (ms)", _pass_ms))
    cols += [(f"CPU µs per {one}", _cpu)]
    if _passes(doc):
        cols.append(("CPU %", _cpu_util))
    cols += [("peak threads", _threads), ("peak RSS (MiB)", _mib("rss_peak_mib"))]
    if any("vsz_peak_mib" in c for c in doc["cells"]):
        cols.append(("peak VSZ (MiB)", _mib("vsz_peak_mib")))
    if _engine_rows(doc):
        cols.append((f"engine syscalls per {one}", _syscalls_per_op))
    return cols


def _one_table(doc: JSONDict) -> list[str]:
    """Systems as rows, metrics as columns (every cell at N=1)."""
    find, cols = _lookup(doc), _columns(doc)
    lines = ["| system | " + " | ".join(name for name, _ in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for system in _measured(doc):
        c = find(system, 1)
        row = [fmt(c, 1) if c else DASH for _, fmt in cols]
        lines.append(f"| {_label(doc, system)} | " + " | ".join(row) + " |")
    return [*lines, ""]


def render(doc: JSONDict) -> str:
    """The whole markdown report for one workload."""
    unit = doc["unit"]
    lines = _header(doc)
    if not doc["cells"]:
        return "\n".join([*lines, "No cell was measured.", "", *_notes(doc)])
    if not doc.get("concurrency", True):
        return "\n".join(lines + _one_table(doc) + _notes(doc))
    lines += _table(doc, f"Throughput ({unit}/s)", lambda c, n: _ops(c["ops_per_s"]))
    for base in RATIO_BASES:
        if base in _measured(doc):
            lines += _table(doc, f"{unit}/s ÷ {base} (same N)", _ratio_to(doc, base))
    if _passes(doc):
        lines += _table(doc, "Median pass (ms)", _pass_ms)
    if any("mb_per_s" in c for c in doc["cells"]):
        lines += _table(doc, "MB/s (10⁶ bytes)", _mb_s)
    if _has_lag(doc):
        lines += _table(doc, "Event-loop lag during the load (ms over a 1 ms sleep): "
                        "p50 / p99 / max", _lag)
    lines += _table(doc, f"CPU µs per {unit.rstrip('s')}", _cpu)
    if _passes(doc):
        lines += _table(doc, "CPU utilisation (% of one CPU)", _cpu_util)
    lines += _table(doc, "Peak threads (of which kernel io_uring workers)", _threads)
    lines += _table(doc, "Peak RSS (MiB)", _mib("rss_peak_mib"))
    if any("vsz_peak_mib" in c for c in doc["cells"]):
        lines += _table(doc, "Peak VSZ (MiB)", _mib("vsz_peak_mib"))
    if engine_rows := [s for s in _measured(doc) if s in _engine_rows(doc)]:
        lines += _table(doc, f"aionative engine system calls per {unit.rstrip('s')}",
                        _syscalls_per_op, engine_rows)
    return "\n".join(lines + _notes(doc))


# --- the benchmarks page ---------------------------------------------------------------------

PAGE = REPO_ROOT / "docs" / "benchmarks.md"
IMG_DIR = REPO_ROOT / "docs" / "img"
MAX_LINES = 400     # the page is a summary; every figure is in the JSON
Column = tuple[str, Callable[[str], str]]

PAGE_INTRO = """\
# Benchmarks

The last results of each workload on one machine: aionative against the synchronous loop
(`sync`, the single-thread ceiling), `aiofiles` (what most asyncio code uses), the other asyncio
file libraries and fio (the C limit). This page is generated: `make bench` measures and rewrites
it, and `python -m bench.report` rewrites it from the saved results (`bench/results/*.json`,
where every cell, run and setting is kept). Do not edit it by hand."""

READING = """\
## Reading the tables

- Each cell (a system at a concurrency N) runs in a fresh worker process: its thread pool,
  io_uring workers and memory die with it. A cell is a timed window after a warm-up, or for
  fixed-work workloads (W4, W7, W8) the median of timed passes; with several runs, the median
  of the runs.
- System names: `aionative-<backend>-<loop>` (backend `io_uring`, `linux_aio` or `threads`,
  loop `asyncio` or `uvloop`); peers as `<library>-<loop>`; `sync`: the plain blocking call in
  a loop on one thread, no event loop (it would block a real program's loop, but nothing
  asynchronous can beat it by much on cached data); `fio-<engine>`: fio on the same file.
- `÷ X`: the row's throughput over X's, same run, same N.
- CPU is the process's user + system time over the timed window, all threads included, per
  operation. Threads: the peak of `/proc/self/task` (`iou`: kernel io_uring workers among them).
  RSS: the worker's peak resident memory (`VmHWM`).
- Loop lag: a task in the same event loop awaits `asyncio.sleep(0.001)` over and over; its
  lateness (the measured interval minus 1 ms) is what any other coroutine of the program waits.
- A small or shared machine is noisy (see its CPUs above): compare rows within one run,
  not figures across runs."""

REPRODUCE = """\
## Reproduce

```sh
make bench                              # every workload, quick profile: results, plots, this page
python -m bench --profile full          # every system at every N, longer cells, three runs
python -m bench --workloads W8,W8-tmpfs # some workloads (the page keeps the others' last results)
python -m bench.report                  # this page again from bench/results/*.json
python -m bench.targets                 # every target row, with the figures compared
make bench-http && python -m bench.report   # the HTTP section (wrk against uvicorn)
```

`make bench` installs what it needs into `.venv` (the `bench` extras: aiofiles, anyio, caio,
aiofile, uvloop, matplotlib). fio is taken from `PATH`, or installed from Debian's package when
run as root (`--no-fio-install` skips its rows). Data files go to `bench/.data/` (a few GiB
for every workload); the `-tmpfs` workloads write to `/dev/shm`. `python -m bench --help` lists
every option."""


def _unwrap(text: str) -> str:
    """The fixed texts as one line a paragraph or list item (markdown renders them the same;
    the page stays short), code blocks as they are."""
    out: list[str] = []
    code = False
    for line in text.split("\n"):
        if line.startswith("```"):
            code = not code
        elif (not code and line and out and out[-1] and not line.startswith(("- ", "#", "|"))
              and not out[-1].startswith(("#", "|", "```"))):
            out[-1] += " " + line.strip()
            continue
        out.append(line)
    return "\n".join(out)


def load_results(root: Path = RESULTS_DIR) -> list[JSONDict]:
    """Every results document in ``root``, in workload order."""
    docs = []
    for path in sorted(root.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and "cells" in doc and "workload" in doc:
            docs.append(doc)
    return sorted(docs, key=lambda d: _order(d["workload"]))


def _order(name: str) -> tuple[int, str, str]:
    m = re.fullmatch(r"W(\d+)([A-Z]*)(?:-(.+))?", name, re.IGNORECASE)
    return (int(m[1]), m[2].upper(), m[3] or "") if m else (1 << 30, name, "")


def workload_names() -> list[str]:
    """Every workload ``python -m bench`` knows: each ``bench/wN.py`` and its filesystems."""
    names = []
    for path in BENCH_DIR.glob("w*.py"):
        if not re.fullmatch(r"w\d+[a-z]*", path.stem):
            continue
        workload = load_workload(path.stem.upper())
        names += [workload.name] + [f"{workload.name}-{fs}" for fs in workload.filesystems]
    return sorted(names, key=_order)


def description(name: str) -> str:
    """What a workload measures: the first paragraph after its module docstring's summary."""
    base, _, fs = name.partition("-")
    if fs:
        return f"{base} with its data on a {fs} (`/dev/shm`) instead of the data directory's " \
               "filesystem: no block mapping and no writeback, so each system's own cost shows."
    path = BENCH_DIR / f"{base.lower()}.py"
    try:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    except (OSError, SyntaxError):
        return ""
    paragraphs = [p for p in doc.split("\n\n") if p.strip()]
    text = paragraphs[1] if len(paragraphs) > 1 else ""
    text = " ".join(re.sub(r"(\S)-\n\s*", r"\1-", text).split())   # "4 KiB-\naligned"
    return text.replace("``", "`")


def _title(name: str) -> str:
    try:
        return load_workload(name).title
    except (ModuleNotFoundError, ValueError):
        return ""


def _date(doc: JSONDict) -> str:
    return doc["machine"]["date"].replace("T", " ")[:16] + " UTC"


def command(doc: JSONDict) -> str:
    """The command of the run (recorded by ``python -m bench``; for older results, rebuilt from
    the settings the results record: profile, timing, runs, concurrency levels)."""
    if doc.get("command"):
        return str(doc["command"])
    from bench.common import DEFAULT_READERS, PROFILES, Variant

    name, profile = doc["workload"], doc["profile"]
    parts = ["python -m bench", "--workloads", name]
    if profile != "quick":
        parts += ["--profile", profile]
    try:
        workload = load_workload(name)
    except (ModuleNotFoundError, ValueError):
        return " ".join(parts)
    variant = workload.variants.get(profile, Variant())
    base = variant.timing or PROFILES[profile].timing if profile in PROFILES else None
    if base is not None and doc["timing"]["warmup"] != base.warmup:
        parts += ["--warmup", f"{doc['timing']['warmup']:g}"]
    if base is not None and doc["timing"]["duration"] != base.duration:
        parts += ["--duration", f"{doc['timing']['duration']:g}"]
    if profile in PROFILES and doc["repeats"] != PROFILES[profile].repeats:
        parts += ["--repeats", str(doc["repeats"])]
    readers = list(variant.readers or workload.default_readers or DEFAULT_READERS)
    if workload.concurrency and doc["readers"] != readers:
        parts += ["--readers", ",".join(map(str, doc["readers"]))]
    return " ".join(parts)


def _filesystem(doc: JSONDict) -> str | None:
    fs = doc["machine"].get("filesystem") or doc["params"].get("fs")
    return str(fs) if fs else None


def _run_line(doc: JSONDict) -> str:
    t, size = doc["timing"], doc["params"].get("file_size")
    data = doc["params"].get("data") or (f"a {size_label(size)} file" if size else None)
    fs = _filesystem(doc)
    rounds = {r["rounds"] for c in doc["cells"] for r in c["runs"] if "rounds" in r}
    cell = (f"{'/'.join(map(str, sorted(rounds)))} rounds" if rounds
            else f"passes for {t['duration']:g} s after {t['warmup']:g} s of warm-up"
            if _passes(doc) else f"{t['duration']:g} s after {t['warmup']:g} s of warm-up")
    runs = f"median of {doc['repeats']} runs" if doc["repeats"] > 1 else "one run"
    where = ", ".join(x for x in (data, f"on {fs}" if fs else None) if x)
    return (f"Last run {_date(doc)}: `{command(doc)}` ({doc['profile']} profile: {cell} a "
            f"cell, {runs}{'; ' + where if where else ''}).")


def _run_median(c: Cell, key: str) -> float | None:
    values = [r[key] for r in c["runs"] if r.get(key) is not None]
    return statistics.median(values) if values else None


def _page_columns(doc: JSONDict) -> list[Column]:
    """The one table of a workload: throughput at each N, then the rest at the largest N."""
    find, unit = _lookup(doc), doc["unit"]
    one = unit.rstrip("s")
    concurrent = doc.get("concurrency", True)
    readers = doc["readers"] if concurrent else [1]
    top = max(readers)
    at = f" N={top}" if len(readers) > 1 else ""

    def cell_fmt(fmt: Fmt, n: int = top) -> Callable[[str], str]:
        return lambda s: fmt(c, n) if (c := find(s, n)) is not None else DASH

    def ms(key: str) -> Fmt:
        def fmt(c: Cell, n: int) -> str:
            v = _run_median(c, key)
            return DASH if v is None else _pass_ms({"pass_s": v}, n)
        return fmt

    cells = doc["cells"]
    runs = [r for c in cells for r in c["runs"]]
    cols: list[Column] = [(f"{unit}/s" + (f" N={n}" if concurrent else ""),
                           cell_fmt(lambda c, n: _ops(c["ops_per_s"]), n)) for n in readers]
    if any("mb_per_s" in c for c in cells):
        cols.append((f"MB/s{at}", cell_fmt(_mb_s)))
    if _passes(doc):
        cols.append((f"median pass (ms){at}", cell_fmt(_pass_ms)))
    if any("cpu_pass_s" in r for r in runs):
        cols.append(("with the CPU work (ms)", cell_fmt(ms("cpu_pass_s"))))
    if any("sums_s" in r for r in runs):
        cols.append(("CPU work alone (ms)", cell_fmt(ms("sums_s"))))
    cols += [(f"÷ {base}{at}", cell_fmt(_ratio_to(doc, base))) for base in RATIO_BASES
             if base in _measured(doc)]
    if _has_lag(doc):
        cols.append((f"loop lag p99 (ms){at}", cell_fmt(
            lambda c, n: "n/a" if c.get("lag_p99_ms") is None else _ms(c["lag_p99_ms"]))))
    cols += [(f"CPU µs per {one}{at}", cell_fmt(
        lambda c, n: DASH if c["cpu_us_per_op"] is None else _num(c["cpu_us_per_op"]))),
             (f"threads{at}", cell_fmt(_threads)),
             (f"RSS (MiB){at}", cell_fmt(_mib("rss_peak_mib")))]
    return cols


def _num(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _page_table(doc: JSONDict) -> list[str]:
    cols = _page_columns(doc)
    lines = ["| system | " + " | ".join(name for name, _ in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for system in _measured(doc):
        lines.append(f"| {_label(doc, system)} | " + " | ".join(f(system) for _, f in cols)
                     + " |")
    return lines


def _page_notes(doc: JSONDict) -> list[str]:
    measured = _measured(doc)
    notes = []
    if doc.get("concurrency", True) and len(doc["readers"]) > 1 and any(
            s in measured for s in doc["concurrency_free"]):
        notes.append("¹ runs once whatever N (one thread; fio's `psync`: one I/O at a time): "
                     "the same figure in every column.")
    notes += [f"² `{s}`: {note}." for s, note in _partial(doc).items()]
    notes += [str(n) for n in doc["notes"]]
    notes += [f"`{s}` skipped: {reason}" for s, reason in doc["skipped"].items()]
    notes += [f"`{e['system']}` N={e['readers']} failed: {e['error']}" for e in doc["errors"]]
    return [f"- {n}" for n in notes]


def _section(name: str, doc: JSONDict | None, img_dir: Path) -> list[str]:
    title = doc["title"] if doc else _title(name)
    lines = [f"## {name}: {title}" if title else f"## {name}", ""]
    if text := description(name):
        lines += [text, ""]
    if doc is None:
        return [*lines, f"No results saved yet: `python -m bench --workloads {name}`.", ""]
    lines += [_run_line(doc), ""]
    if not doc["cells"]:
        lines += ["No cell was measured.", ""]
    else:
        lines += [*_page_table(doc), ""]
    if notes := _page_notes(doc):
        lines += [*notes, ""]
    png = f"{name.lower()}.png"
    if (img_dir / png).is_file():
        lines += [f"![{name}: {title}](img/{png})", ""]
    return lines


def _varying(docs: list[JSONDict], get: Callable[[JSONDict], Any]) -> str:
    """One value, or each value with the workloads it was measured with."""
    seen: dict[str, list[str]] = {}
    for doc in docs:
        if (value := get(doc)) not in (None, ""):
            seen.setdefault(str(value), []).append(doc["workload"])
    if len(seen) <= 1:
        return next(iter(seen), DASH)
    return "; ".join(f"{v} ({', '.join(ws)})" for v, ws in seen.items())


def _memory(m: JSONDict) -> str | None:
    kb = str(m.get("mem_total") or "").split()
    return f"{int(kb[0]) / (1 << 20):.1f} GiB" if kb and kb[0].isdigit() else None


def _versions(doc: JSONDict) -> str:
    p = doc["probe"]
    found = [("aionative", p["aionative"]), ("uvloop", p["uvloop"]), ("aiofiles", p["aiofiles"]),
             *p.get("peers", {}).items()]
    out = [f"{name} {info['version']}" for name, info in found
           if info.get("ok") and info.get("version")]
    if p.get("fio", {}).get("version"):
        out.append(p["fio"]["version"])
    return ", ".join(out)


def _machine(docs: list[JSONDict]) -> list[str]:
    rows = [
        ("CPU", lambda d: f"{d['machine']['cpu_model']} ({d['machine']['machine']}), "
                          f"{d['machine']['cpu_affinity']} of {d['machine']['cpu_count']} CPUs "
                          "usable"),
        ("memory", lambda d: _memory(d["machine"])),
        ("kernel", lambda d: f"Linux {d['machine']['kernel']}"),
        ("Python", lambda d: f"{d['machine']['python_impl']} {d['machine']['python']}"),
        ("filesystem of the data", _filesystem),
        ("aionative backends", lambda d: ", ".join(d["probe"]["aionative"].get("backends", []))),
        ("versions", _versions),
    ]
    dates = sorted(d["machine"]["date"] for d in docs)
    when = dates[0].replace("T", " ")[:10]
    if dates[-1][:10] != dates[0][:10]:
        when += " to " + dates[-1][:10]
    lines = ["## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {label} | {_varying(docs, get)} |" for label, get in rows]
    return [*lines, f"| measured | {when} |", ""]


def _targets(root: Path) -> list[str]:
    lines = ["## What the targets check", "",
             ("Each target is checked on the aionative rows of the named workload's last run, "
              "against the other rows of the same run (`python -m bench.targets` prints every "
              "row with its figures)."), "",
             "| target | workload | checks | in these results |", "|---|---|---|---|"]
    for target, verdict in targets.check_all(root).summary():
        lines.append(f"| {target.name} | {target.workload} | {target.checks} | {verdict} |")
    return [*lines, ""]


HTTP_TEXT = """\
Files served over HTTP on 127.0.0.1 by uvicorn (one worker, uvloop): aionative's `FileResponse`
and `StaticFiles` against Starlette's own and a response streaming through aiofiles, under wrk's
load: a 4 KiB file, a 1 MiB file, and random 1 B–64 KiB ranges of the 1 MiB file. Requests/s,
latency, the server's CPU time a request and its peak threads (`bench/http_load.py`)."""


def _http(root: Path) -> list[str]:
    """The HTTP load section, from ``http.json`` (``make bench-http``) when it exists."""
    lines = ["## HTTP: file responses under load", "", _unwrap(HTTP_TEXT), ""]
    try:
        record = json.loads((root / "http.json").read_text())
        cells = record["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return [*lines, "No results saved yet: `make bench-http`.", ""]
    from bench.http_load import SCENARIOS
    from bench.http_load import report as http_tables

    systems = list(cells)
    scenarios = [s for s in SCENARIOS if any(s in by_scenario for by_scenario in cells.values())]
    baseline = "starlette" if "starlette" in cells else "starlette-static"
    runs = f"median of {record['repeats']} runs" if record.get("repeats", 1) > 1 else "one run"
    cmd = str(record.get("command") or "python -m bench.http_load").strip()
    lines += [(f"Last run: `{cmd}` (uvicorn with uvloop and {record.get('http_impl')}, "
               f"{record.get('load')} with {record.get('connections')} connections, "
               f"{record.get('duration'):g} s a cell, {runs}; {record.get('cpus')} CPUs, "
               f"kernel {record.get('kernel')})."), ""]
    tables = http_tables(cells, systems, scenarios, baseline).replace("### ", "### HTTP ")
    return [*lines, *tables.rstrip("\n").splitlines(), ""]


def page(root: Path = RESULTS_DIR, img_dir: Path = IMG_DIR) -> str:
    """The whole benchmarks page from the results in ``root``."""
    docs = load_results(root)
    by_name = {d["workload"]: d for d in docs}
    names = sorted(set(workload_names()) | set(by_name), key=_order)
    lines = [_unwrap(PAGE_INTRO), ""]
    lines += _machine(docs) if docs else ["No results saved yet: run `make bench`.", ""]
    lines += [_unwrap(READING), "", *_targets(root), _unwrap(REPRODUCE), ""]
    for name in names:
        lines += _section(name, by_name.get(name), img_dir)
    lines += _http(root)
    return "\n".join(lines).rstrip("\n") + "\n"


def write_page(root: Path = RESULTS_DIR, path: Path = PAGE, img_dir: Path = IMG_DIR) -> str:
    """Write the page; return a line saying where, and how long it is."""
    text = page(root, img_dir)
    path.write_text(text)
    n = text.count("\n")
    warn = f" (over {MAX_LINES}: trim the tables)" if n >= MAX_LINES else ""
    return f"benchmarks page written to {path} ({n} lines{warn})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS_DIR, metavar="DIR",
                   help="the results documents; default %(default)s")
    p.add_argument("--output", type=Path, default=PAGE, metavar="PATH",
                   help="the page to write ('-': stdout); default %(default)s")
    p.add_argument("--img-dir", type=Path, default=IMG_DIR, metavar="DIR",
                   help="where the plots are (linked as img/<w>.png); default %(default)s")
    p.add_argument("--detail", type=Path, metavar="JSON",
                   help="print one workload's detailed tables instead")
    args = p.parse_args(argv)
    if args.detail:
        print(render(json.loads(args.detail.read_text())))
    elif str(args.output) == "-":
        sys.stdout.write(page(args.results, args.img_dir))
    else:
        print(write_page(args.results, args.output, args.img_dir), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
