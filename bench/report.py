"""Markdown report of one workload's results document (the same dict written as JSON).

One table per metric, systems as rows and N (concurrent readers) as columns: throughput, the
throughput ratio to ``sync`` (the single-thread ceiling) and to ``aiofiles-asyncio`` (what
most asyncio code uses today), event-loop lag (only for workloads that measure it, e.g. W5),
CPU microseconds per operation, peak threads and peak RSS. Fixed-work workloads (W4, W7: the
cells report ``pass_s``) add the median pass time, CPU utilisation and peak VSZ, and MB/s where
measured. A workload without concurrency (W7) gets one table instead, metrics as columns.
Rendering only reads the document, so a saved JSON file can be re-rendered later.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from bench.common import JSONDict, size_label
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
    """``commit abc1234``, naming the library's files that differed from it, if any."""
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
