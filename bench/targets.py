"""The performance targets, checked against saved results (``bench/results/*.json``).

``python -m bench`` prints this after its workloads; ``python -m bench.targets [DIR]`` reads
the results of an earlier run. Each line names the target, the aionative system, what was
measured (and what it was compared with, from the same workload's run) and whether it is met.
A target whose rows were not measured (a workload or system not run) says so. ``summary``
gives one verdict a target, for the benchmarks page (``bench.report``).

What each target means, made checkable (the thresholds are the constants below):

- W1 N=64: ≥ ``HOT_READS_PER_S`` reads/s or ≥ ``HOT_READS_NEAR_SYNC`` × the synchronous
  loop; ≥ ``HOT_READS_OVER_CAIO`` × the faster of caio's two io_uring configurations
  (``caio-io_uring``: its defaults, SQPOLL on here; ``caio-io_uring_nosqpoll``);
  ≤ ``HOT_READ_CPU_US`` µs of CPU a read; N=1: ≤ ``SINGLE_READ_CPU_US``. Checked for io_uring
  and linux_aio.
- W2: ≥ ``DIRECT_READS_NEAR_FIO`` × fio-io_uring's IOPS at each N measured.
- W3: ``aionative`` (``pread``, a new ``bytes`` a chunk) ≥ ``SEQUENTIAL_READS_NEAR_SYNC`` ×
  ``sync`` (``os.pread``, the same), ``aionative.preadinto`` the same against
  ``sync.preadinto``.
- W4 at N=24: a pass within ``SMALL_FILES_NEAR_SYNC`` × the ideal wall time, the synchronous
  loop's pass (page-cached files: nothing to overlap, so the single thread's time is the
  floor); ``SMALL_FILES_THREADS`` thread; peak RSS ≤ ``SMALL_FILES_RSS_MB`` MB (10⁶ bytes).
- W5 (random 4 KiB pwrite) N=64: ≥ ``RANDOM_WRITES_PER_S`` writes/s or
  ≥ ``RANDOM_WRITES_NEAR_SYNC`` × sync, on ext4 and on tmpfs.
- W6: ticker lag p99 ≤ ``LOOP_LAG_P99_MS`` ms at N=64, every aionative backend and loop;
  "while W1 runs at full speed": its reads/s in W6 ÷ the same system's W1 N=64 reads/s is
  shown.
- W8 (ten large files written at once), on ext4 and tmpfs, every aionative backend and loop:
  the writes' wall time ≤ ``aiofiles-asyncio``'s, and on tmpfs ≤ ``LARGE_WRITES_OVER_SYNC`` ×
  the synchronous loop's; beside the CPU work, ≤ aiofiles-asyncio's, and on io_uring within
  ``OVERLAP_SLACK`` × the longer of the writes alone and the sums alone; peak RSS ≤ the
  payload + ``LARGE_WRITES_RSS_MIB`` MiB; the ticker's lag p99 ≤ ``LOOP_LAG_P99_MS`` ms, shown
  beside what an idle loop in another process saw during ``sync.threads``' writes (the
  machine's own share, the floor under any writer's lag).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import RESULTS_DIR, JSONDict

Cells = dict[tuple[str, int], JSONDict]
Check = Callable[[str, JSONDict], tuple[str, bool | None]]
NATIVE = [f"aionative-{b}-{lp}" for b in ("io_uring", "linux_aio", "threads")
          for lp in ("asyncio", "uvloop")]
MB = 1e6 / (1 << 20)   # MiB -> 10⁶ bytes

# Hot (page-cached) random 4 KiB reads, W1.
HOT_READS_PER_S = 400e3        # reads/s at N=64 that count as fast whatever sync does
HOT_READS_NEAR_SYNC = 0.8      # else this fraction of the synchronous loop's reads/s
HOT_READS_OVER_CAIO = 2.5      # × the faster caio io_uring configuration, N=64
HOT_READ_CPU_US = 2.5          # µs of CPU a read at N=64
SINGLE_READ_CPU_US = 3.0       # µs of CPU a read at N=1
# O_DIRECT random reads, W2: this fraction of fio io_uring's IOPS at the same depth.
DIRECT_READS_NEAR_FIO = 0.95
# Sequential 1 MiB reads, W3: this fraction of the synchronous loop doing the same work.
SEQUENTIAL_READS_NEAR_SYNC = 0.9
# Small files, W4 N=24: pass time over the synchronous loop's, threads, peak RSS.
SMALL_FILES_NEAR_SYNC = 1.1
SMALL_FILES_THREADS = 1
SMALL_FILES_RSS_MB = 60
# Random 4 KiB buffered writes, W5 N=64: writes/s, else this fraction of sync's.
RANDOM_WRITES_PER_S = 250e3
RANDOM_WRITES_NEAR_SYNC = 0.7
# Event-loop lag while W1's load runs, W6 N=64: the 1 ms ticker's p99 lateness.
LOOP_LAG_P99_MS = 1.0
# Ten large files written at once, W8: wall time over the synchronous loop's on tmpfs (the
# writes run in parallel there), the slack of writes beside CPU work over the longer of the two
# alone (io_uring), and the memory beyond the caller's payload (no copy of the data).
LARGE_WRITES_OVER_SYNC = 0.6
OVERLAP_SLACK = 1.2
LARGE_WRITES_RSS_MIB = 64


@dataclass(frozen=True)
class Target:
    """One target: a name, the workload it reads and what it checks (for the page)."""

    name: str
    workload: str
    checks: str


def _n(v: float) -> str:
    return f"{v / 1e3:.0f}k" if v >= 1e3 else f"{v:g}"


HOT_READS = Target("hot reads keep up", "W1", f"N=64: ≥ {_n(HOT_READS_PER_S)} reads/s or "
                   f"≥ {HOT_READS_NEAR_SYNC}× the synchronous loop")
HOT_READS_CAIO = Target("hot reads beat caio", "W1",
                        f"N=64: ≥ {HOT_READS_OVER_CAIO}× caio's faster io_uring configuration")
HOT_READ_CPU = Target("hot-read CPU, many readers", "W1",
                      f"N=64: ≤ {HOT_READ_CPU_US} µs CPU a read")
SINGLE_READ_CPU = Target("hot-read CPU, one reader", "W1",
                         f"N=1: ≤ {SINGLE_READ_CPU_US:g} µs CPU a read")
DIRECT_READS = Target("direct reads match fio", "W2",
                      f"≥ {DIRECT_READS_NEAR_FIO}× fio io_uring's IOPS at the same depth")
SEQUENTIAL_READS = Target("sequential reads near memory speed", "W3",
                          f"≥ {SEQUENTIAL_READS_NEAR_SYNC}× the synchronous loop's GB/s, "
                          "same operation")
SMALL_FILES = Target("small files at the ideal wall time", "W4",
                     f"N=24: a pass ≤ {SMALL_FILES_NEAR_SYNC}× the synchronous loop's, "
                     f"{SMALL_FILES_THREADS} thread, peak RSS ≤ {SMALL_FILES_RSS_MB} MB")
RANDOM_WRITES = Target("random writes keep up", "W5",
                       f"N=64, ext4 and tmpfs: ≥ {_n(RANDOM_WRITES_PER_S)} writes/s or "
                       f"≥ {RANDOM_WRITES_NEAR_SYNC}× sync")
LOOP_LAG = Target("the loop stays responsive", "W6",
                  f"N=64: 1 ms ticker lag p99 ≤ {LOOP_LAG_P99_MS:g} ms, every backend and loop")
LARGE_WRITES = Target("large writes keep up", "W8",
                      f"ext4 and tmpfs: wall ≤ aiofiles-asyncio's; tmpfs ≤ "
                      f"{LARGE_WRITES_OVER_SYNC}× the synchronous loop's")
LARGE_WRITES_CPU = Target("large writes overlap CPU work", "W8",
                          f"beside three sums: ≤ aiofiles-asyncio's wall; io_uring ≤ "
                          f"{OVERLAP_SLACK}× the longer of the writes or the sums alone")
LARGE_WRITES_RSS = Target("large writes are not copied", "W8",
                          f"peak RSS ≤ the payload + {LARGE_WRITES_RSS_MIB} MiB")
LARGE_WRITES_LAG = Target("the loop stays responsive while writing", "W8",
                          f"1 ms ticker lag p99 ≤ {LOOP_LAG_P99_MS:g} ms (an idle loop's in "
                          "another process shown beside it)")
TARGETS = (HOT_READS, HOT_READS_CAIO, HOT_READ_CPU, SINGLE_READ_CPU, DIRECT_READS,
           SEQUENTIAL_READS, SMALL_FILES, RANDOM_WRITES, LOOP_LAG, LARGE_WRITES,
           LARGE_WRITES_CPU, LARGE_WRITES_RSS, LARGE_WRITES_LAG)


def load(root: Path) -> dict[str, Cells]:
    docs: dict[str, Cells] = {}
    for path in sorted(root.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if "cells" not in doc or "workload" not in doc:
            continue
        free = set(doc.get("concurrency_free", []))
        cells: Cells = {}
        for c in doc["cells"]:
            cells[(c["system"], c["readers"])] = c
        for (system, _), c in list(cells.items()):
            if system in free:
                for n in doc["readers"]:
                    cells.setdefault((system, n), c)
        docs[doc["workload"]] = cells
    return docs


def _k(v: float) -> str:
    return f"{v / 1e3:.1f}k" if v < 1e6 else f"{v / 1e6:.2f}M"


def _verdict(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "**missed**")


@dataclass(frozen=True)
class Row:
    target: Target
    label: str
    system: str
    measured: str
    ok: bool | None
    measured_at_all: bool = True


class Report:
    def __init__(self, docs: dict[str, Cells]) -> None:
        self.docs = docs
        self.rows: list[Row] = []

    def cell(self, workload: str, system: str, n: int) -> JSONDict | None:
        return self.docs.get(workload, {}).get((system, n))

    def add(self, target: Target, label: str, system: str, measured: str,
            ok: bool | None) -> None:
        self.rows.append(Row(target, label, system, measured, ok))

    def missing(self, target: Target, label: str, what: str) -> None:
        self.rows.append(Row(target, label, what, "not measured in these results", None,
                             measured_at_all=False))

    def each(self, target: Target, label: str, workload: str, systems: list[str], n: int,
             check: Check) -> None:
        found = False
        for system in systems:
            if (c := self.cell(workload, system, n)) is not None:
                found = True
                text, ok = check(system, c)
                self.add(target, label, system, text, ok)
        if not found:
            self.missing(target, label, f"{workload} N={n}")

    def markdown(self) -> str:
        lines = ["| target | system | measured (same run) | verdict |", "|---|---|---|---|"]
        lines += [f"| {r.label} | {r.system} | {r.measured} | {_verdict(r.ok)} |"
                  for r in self.rows]
        return "\n".join(lines)

    def summary(self) -> list[tuple[Target, str]]:
        """One verdict a target: met, missed (naming the rows), or not measured."""
        out = []
        for target in TARGETS:
            rows = [r for r in self.rows if r.target is target and r.measured_at_all]
            judged = [r for r in rows if r.ok is not None]
            missed = [r for r in judged if not r.ok]
            if not judged:
                out.append((target, "not measured in these results" if not rows
                            else "no reference row to compare with"))
            elif missed:
                several = len({r.label for r in rows}) > 1   # per N, per filesystem
                names = ", ".join(f"`{r.system}`" + (f" ({r.label.split(':')[0]})"
                                                     if several else "") for r in missed)
                out.append((target, f"**missed** by {len(missed)} of {len(judged)} rows: "
                            + names))
            else:
                out.append((target, f"met ({len(judged)} of {len(judged)} rows)"))
        return out


def w1(r: Report) -> None:
    rows = NATIVE[:4]
    sync = r.cell("W1", "sync", 64)
    caio = [c for s in ("caio-io_uring-asyncio", "caio-io_uring_nosqpoll-asyncio")
            if (c := r.cell("W1", s, 64)) is not None]
    best_caio = max(caio, key=lambda c: c["ops_per_s"]) if caio else None

    def speed(system: str, c: JSONDict) -> tuple[str, bool | None]:
        fast = c["ops_per_s"] >= HOT_READS_PER_S
        if sync is None:
            return f"{_k(c['ops_per_s'])}/s (no sync row)", fast
        ratio = c["ops_per_s"] / sync["ops_per_s"]
        return (f"{_k(c['ops_per_s'])}/s = {ratio:.2f}× sync ({_k(sync['ops_per_s'])}/s)",
                fast or ratio >= HOT_READS_NEAR_SYNC)

    def vs_caio(system: str, c: JSONDict) -> tuple[str, bool | None]:
        if best_caio is None:
            return "no caio io_uring row", None
        ratio = c["ops_per_s"] / best_caio["ops_per_s"]
        return (f"{ratio:.2f}× {best_caio['system']} ({_k(best_caio['ops_per_s'])}/s)",
                ratio >= HOT_READS_OVER_CAIO)

    def cpu(limit: float) -> Check:
        def check(system: str, c: JSONDict) -> tuple[str, bool | None]:
            v = c["cpu_us_per_op"]
            return f"{v:.2f} µs CPU/read", v <= limit
        return check

    r.each(HOT_READS, f"W1 N=64: ≥ {_n(HOT_READS_PER_S)} reads/s or ≥ {HOT_READS_NEAR_SYNC}× "
           "sync", "W1", rows, 64, speed)
    r.each(HOT_READS_CAIO, f"W1 N=64: ≥ {HOT_READS_OVER_CAIO}× caio io_uring", "W1", rows, 64,
           vs_caio)
    r.each(HOT_READ_CPU, f"W1 N=64: ≤ {HOT_READ_CPU_US} µs CPU/read", "W1", rows, 64,
           cpu(HOT_READ_CPU_US))
    r.each(SINGLE_READ_CPU, f"W1 N=1: ≤ {SINGLE_READ_CPU_US:g} µs CPU/read", "W1", rows, 1,
           cpu(SINGLE_READ_CPU_US))


def w2(r: Report) -> None:
    ns = sorted({n for (s, n) in r.docs.get("W2", {}) if s.startswith("aionative-")})
    if not ns:
        r.missing(DIRECT_READS, f"W2: ≥ {DIRECT_READS_NEAR_FIO}× fio io_uring at the same depth",
                  "W2")
    for n in ns:
        fio = r.cell("W2", "fio-io_uring", n)

        def check(system: str, c: JSONDict, fio: JSONDict | None = fio) -> tuple[str, bool | None]:
            if fio is None:
                return f"{_k(c['ops_per_s'])}/s (no fio row)", None
            ratio = c["ops_per_s"] / fio["ops_per_s"]
            text = (f"{_k(c['ops_per_s'])}/s = {ratio:.2f}× fio-io_uring "
                    f"({_k(fio['ops_per_s'])}/s)")
            return text, ratio >= DIRECT_READS_NEAR_FIO

        r.each(DIRECT_READS, f"W2 N={n}: ≥ {DIRECT_READS_NEAR_FIO}× fio io_uring", "W2",
               NATIVE[:4], n, check)


def w3(r: Report) -> None:
    for kind, base in (("aionative", "sync"), ("aionative.preadinto", "sync.preadinto")):
        ref = r.cell("W3", base, 1)

        def check(system: str, c: JSONDict, ref: JSONDict | None = ref,
                  base: str = base) -> tuple[str, bool | None]:
            gb = c["mb_per_s"] / 1e3
            if ref is None:
                return f"{gb:.2f} GB/s (no {base} row)", None
            ratio = c["mb_per_s"] / ref["mb_per_s"]
            return (f"{gb:.2f} GB/s = {ratio:.2f}× {base} ({ref['mb_per_s'] / 1e3:.2f} GB/s)",
                    ratio >= SEQUENTIAL_READS_NEAR_SYNC)

        systems = [s.replace("aionative", kind, 1) for s in NATIVE[:4]]
        r.each(SEQUENTIAL_READS, f"W3: ≥ {SEQUENTIAL_READS_NEAR_SYNC}× {base}", "W3", systems,
               1, check)


def w4(r: Report) -> None:
    sync = r.cell("W4", "sync", 24)
    systems = [s.replace("aionative", k, 1) for k in ("aionative", "aionative.read_bytes")
               for s in NATIVE[:4]]

    def check(system: str, c: JSONDict) -> tuple[str, bool | None]:
        rss = c["rss_peak_mib"] * MB
        threads_ok = c["threads_peak"] <= SMALL_FILES_THREADS
        text = f"{c['threads_peak']} thread(s), RSS {rss:.0f} MB"
        if sync is None:
            return text + " (no sync row)", None
        ratio = c["pass_s"] / sync["pass_s"]
        return (f"pass {c['pass_s'] * 1e3:.1f} ms = {ratio:.2f}× sync's "
                f"{sync['pass_s'] * 1e3:.1f} ms; " + text,
                ratio <= SMALL_FILES_NEAR_SYNC and threads_ok and rss <= SMALL_FILES_RSS_MB)

    r.each(SMALL_FILES, f"W4 N=24: ≤ {SMALL_FILES_NEAR_SYNC}× ideal wall, "
           f"{SMALL_FILES_THREADS} thread, RSS ≤ {SMALL_FILES_RSS_MB} MB", "W4", systems, 24,
           check)


def w5(r: Report) -> None:
    for workload in ("W5", "W5-tmpfs"):
        sync = r.cell(workload, "sync", 64)

        def check(system: str, c: JSONDict, sync: JSONDict | None = sync
                  ) -> tuple[str, bool | None]:
            v = c["ops_per_s"]
            fast = v >= RANDOM_WRITES_PER_S
            if sync is None:
                return f"{_k(v)}/s (no sync row)", fast
            ratio = v / sync["ops_per_s"]
            return (f"{_k(v)}/s = {ratio:.2f}× sync ({_k(sync['ops_per_s'])}/s)",
                    fast or ratio >= RANDOM_WRITES_NEAR_SYNC)

        fs = "tmpfs" if workload.endswith("tmpfs") else "ext4"
        r.each(RANDOM_WRITES, f"W5 ({fs}) random pwrite N=64: ≥ {_n(RANDOM_WRITES_PER_S)}/s or "
               f"≥ {RANDOM_WRITES_NEAR_SYNC}× sync", workload, NATIVE[:4], 64, check)


def w6(r: Report) -> None:
    def check(system: str, c: JSONDict) -> tuple[str, bool | None]:
        p99 = c.get("lag_p99_ms")
        if p99 is None:
            return "no lag samples", None
        text = f"p50 {c['lag_p50_ms']:.2f} / p99 {p99:.2f} / max {c['lag_max_ms']:.1f} ms"
        if (full := r.cell("W1", system, 64)) is not None:
            text += (f"; {_k(c['ops_per_s'])}/s = {c['ops_per_s'] / full['ops_per_s']:.2f}× "
                     "its W1 N=64")
        return text, p99 <= LOOP_LAG_P99_MS

    r.each(LOOP_LAG, f"W6: lag p99 ≤ {LOOP_LAG_P99_MS:g} ms at N=64", "W6", NATIVE, 64, check)


def _run_figure(c: JSONDict, key: str) -> float | None:
    """A figure a W8 cell keeps per run (the CPU-work passes): the median over its runs."""
    values = sorted(run[key] for run in c.get("runs", [c]) if run.get(key) is not None)
    return values[len(values) // 2] if values else None


def w8(r: Report) -> None:
    for workload in ("W8", "W8-tmpfs"):
        fs = "tmpfs" if workload.endswith("tmpfs") else "ext4"
        peer = r.cell(workload, "aiofiles-asyncio", 1)
        sync = r.cell(workload, "sync", 1)
        floor = r.cell(workload, "sync.threads", 1)

        def wall(system: str, c: JSONDict, peer: JSONDict | None = peer,
                 sync: JSONDict | None = sync, fs: str = fs) -> tuple[str, bool | None]:
            text = f"{c['pass_s'] * 1e3:.0f} ms"
            if peer is None:
                return text + " (no aiofiles-asyncio row)", None
            ok = c["pass_s"] <= peer["pass_s"]
            text += f" = {c['pass_s'] / peer['pass_s']:.2f}× aiofiles-asyncio's"
            if fs == "tmpfs":
                if sync is None:
                    return text + " (no sync row)", None
                ratio = c["pass_s"] / sync["pass_s"]
                text += f", {ratio:.2f}× sync's"
                ok = ok and ratio <= LARGE_WRITES_OVER_SYNC
            return text, ok

        def overlap(system: str, c: JSONDict, peer: JSONDict | None = peer
                    ) -> tuple[str, bool | None]:
            both, sums = _run_figure(c, "cpu_pass_s"), _run_figure(c, "sums_s")
            theirs = _run_figure(peer, "cpu_pass_s") if peer is not None else None
            if both is None or sums is None or theirs is None:
                return "no CPU-work figures", None
            text = f"{both * 1e3:.0f} ms = {both / theirs:.2f}× aiofiles-asyncio's"
            ok = both <= theirs
            if "io_uring" in system:
                longer = max(c["pass_s"], sums)
                text += f", {both / longer:.2f}× the longer alone ({longer * 1e3:.0f} ms)"
                ok = ok and both <= OVERLAP_SLACK * longer
            return text, ok

        def memory(system: str, c: JSONDict) -> tuple[str, bool | None]:
            payload = _run_figure(c, "data_mib")
            if payload is None:
                return f"{c['rss_peak_mib']:.0f} MiB (payload unknown)", None
            return (f"{c['rss_peak_mib']:.0f} MiB, payload {payload:.0f} MiB",
                    c["rss_peak_mib"] <= payload + LARGE_WRITES_RSS_MIB)

        def lag(system: str, c: JSONDict, floor: JSONDict | None = floor
                ) -> tuple[str, bool | None]:
            p99 = c.get("lag_p99_ms")
            if p99 is None:
                return "no lag samples", None
            text = f"p99 {p99:.2f} ms"
            if floor is not None and floor.get("lag_p99_ms") is not None:
                text += f" (an idle loop in another process: {floor['lag_p99_ms']:.2f} ms)"
            return text, p99 <= LOOP_LAG_P99_MS

        sync_bound = f"; ≤ {LARGE_WRITES_OVER_SYNC}× sync" if fs == "tmpfs" else ""
        for target, label, check in (
                (LARGE_WRITES, f"wall ≤ aiofiles-asyncio's{sync_bound}", wall),
                (LARGE_WRITES_CPU, ("beside the sums: ≤ aiofiles-asyncio's; io_uring ≤ "
                                    f"{OVERLAP_SLACK}× the longer alone"), overlap),
                (LARGE_WRITES_RSS, f"peak RSS ≤ payload + {LARGE_WRITES_RSS_MIB} MiB", memory),
                (LARGE_WRITES_LAG, f"lag p99 ≤ {LOOP_LAG_P99_MS:g} ms", lag)):
            r.each(target, f"{workload} ({fs}): {label}", workload, NATIVE, 1, check)


def check_all(root: Path = RESULTS_DIR) -> Report:
    """Every target checked against the results in ``root``."""
    r = Report(load(root))
    for part in (w1, w2, w3, w4, w5, w6, w8):
        part(r)
    return r


def report(root: Path = RESULTS_DIR) -> str:
    return f"## Targets (from {root})\n\n" + check_all(root).markdown() + "\n"


def main(argv: list[str]) -> int:
    print(report(Path(argv[0]) if argv else RESULTS_DIR))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
