"""Issue 4's targets, checked against saved results (``bench/results/*.json``).

``python -m bench`` prints this after its workloads; ``python -m bench.targets [DIR]`` reads
the results of an earlier run. Each line names the target, the aionative system, what was
measured (and what it was compared with, from the same workload's run) and whether it is met.
A target whose rows were not measured (a workload or system not run) says so.

Interpretations (the issue's wording, made checkable):

- W1 N=64: "≥ 400k ops/s or ≥ 0.8× the synchronous loop", "≥ 2.5× caio io_uring" against the
  faster of caio's two io_uring configurations (``caio-io_uring``: its defaults, SQPOLL on
  here; ``caio-io_uring_nosqpoll``), "≤ 2.5 µs CPU/op"; N=1: "≤ 3 µs CPU/op". Checked for
  io_uring (the target) and reported for linux_aio.
- W2: ≥ 0.95× fio-io_uring's IOPS at each N measured.
- W3: ``aionative`` (``pread``, a new ``bytes`` a chunk) ≥ 0.9× ``sync`` (``os.pread``, the
  same), ``aionative.preadinto`` ≥ 0.9× ``sync.preadinto``.
- W4 at N=24: "within 10 % of the ideal wall time": the ideal is the synchronous loop's pass
  (page-cached files: nothing to overlap, so the single thread's time is the floor); one
  thread; peak RSS ≤ 60 MB (10⁶ bytes).
- W5 (random 4 KiB pwrite) N=64: ≥ 250k writes/s or ≥ 0.7× sync, on ext4 and on tmpfs.
- W6: ticker lag p99 ≤ 1 ms at N=64, every aionative backend and loop; "while W1 runs at full
  speed": its reads/s in W6 ÷ the same system's W1 N=64 reads/s is shown.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from bench.common import RESULTS_DIR, JSONDict

Cells = dict[tuple[str, int], JSONDict]
NATIVE = [f"aionative-{b}-{lp}" for b in ("io_uring", "linux_aio", "threads")
          for lp in ("asyncio", "uvloop")]
MB = 1e6 / (1 << 20)   # MiB -> 10⁶ bytes


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


class Report:
    def __init__(self, docs: dict[str, Cells]) -> None:
        self.docs = docs
        self.rows: list[tuple[str, str, str, str]] = []

    def cell(self, workload: str, system: str, n: int) -> JSONDict | None:
        return self.docs.get(workload, {}).get((system, n))

    def add(self, target: str, system: str, measured: str, ok: bool | None) -> None:
        self.rows.append((target, system, measured, _verdict(ok)))

    def missing(self, target: str, what: str) -> None:
        self.rows.append((target, what, "not measured in these results", "—"))

    def each(self, workload: str, systems: list[str], n: int, target: str,
             check: Callable[[str, JSONDict], tuple[str, bool | None]]) -> None:
        found = False
        for system in systems:
            if (c := self.cell(workload, system, n)) is not None:
                found = True
                text, ok = check(system, c)
                self.add(target, system, text, ok)
        if not found:
            self.missing(target, f"{workload} N={n}")

    def markdown(self) -> str:
        lines = ["| target | system | measured (same run) | verdict |", "|---|---|---|---|"]
        lines += [f"| {t} | {s} | {m} | {v} |" for t, s, m, v in self.rows]
        return "\n".join(lines)


def w1(r: Report) -> None:
    rows = NATIVE[:4]
    sync = r.cell("W1", "sync", 64)
    caio = [c for s in ("caio-io_uring-asyncio", "caio-io_uring_nosqpoll-asyncio")
            if (c := r.cell("W1", s, 64)) is not None]
    best_caio = max(caio, key=lambda c: c["ops_per_s"]) if caio else None

    def speed(system: str, c: JSONDict) -> tuple[str, bool | None]:
        if sync is None:
            return f"{_k(c['ops_per_s'])}/s (no sync row)", c["ops_per_s"] >= 400e3
        ratio = c["ops_per_s"] / sync["ops_per_s"]
        return (f"{_k(c['ops_per_s'])}/s = {ratio:.2f}× sync ({_k(sync['ops_per_s'])}/s)",
                c["ops_per_s"] >= 400e3 or ratio >= 0.8)

    def vs_caio(system: str, c: JSONDict) -> tuple[str, bool | None]:
        if best_caio is None:
            return "no caio io_uring row", None
        ratio = c["ops_per_s"] / best_caio["ops_per_s"]
        return (f"{ratio:.2f}× {best_caio['system']} ({_k(best_caio['ops_per_s'])}/s)",
                ratio >= 2.5)

    def cpu(limit: float) -> Callable[[str, JSONDict], tuple[str, bool | None]]:
        def check(system: str, c: JSONDict) -> tuple[str, bool | None]:
            v = c["cpu_us_per_op"]
            return f"{v:.2f} µs CPU/read", v <= limit
        return check

    r.each("W1", rows, 64, "W1 N=64: ≥ 400k reads/s or ≥ 0.8× sync", speed)
    r.each("W1", rows, 64, "W1 N=64: ≥ 2.5× caio io_uring", vs_caio)
    r.each("W1", rows, 64, "W1 N=64: ≤ 2.5 µs CPU/read", cpu(2.5))
    r.each("W1", rows, 1, "W1 N=1: ≤ 3 µs CPU/read", cpu(3.0))


def w2(r: Report) -> None:
    ns = sorted({n for (s, n) in r.docs.get("W2", {}) if s.startswith("aionative-")})
    if not ns:
        r.missing("W2: ≥ 0.95× fio io_uring at the same depth", "W2")
    for n in ns:
        fio = r.cell("W2", "fio-io_uring", n)

        def check(system: str, c: JSONDict, fio: JSONDict | None = fio) -> tuple[str, bool | None]:
            if fio is None:
                return f"{_k(c['ops_per_s'])}/s (no fio row)", None
            ratio = c["ops_per_s"] / fio["ops_per_s"]
            text = (f"{_k(c['ops_per_s'])}/s = {ratio:.2f}× fio-io_uring "
                    f"({_k(fio['ops_per_s'])}/s)")
            return text, ratio >= 0.95

        r.each("W2", NATIVE[:4], n, f"W2 N={n}: ≥ 0.95× fio io_uring", check)


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
                    ratio >= 0.9)

        systems = [s.replace("aionative", kind, 1) for s in NATIVE[:4]]
        r.each("W3", systems, 1, f"W3: ≥ 0.9× {base}", check)


def w4(r: Report) -> None:
    sync = r.cell("W4", "sync", 24)
    systems = [s.replace("aionative", k, 1) for k in ("aionative", "aionative.read_bytes")
               for s in NATIVE[:4]]

    def check(system: str, c: JSONDict) -> tuple[str, bool | None]:
        rss = c["rss_peak_mib"] * MB
        one = c["threads_peak"] == 1
        text = f"{c['threads_peak']} thread(s), RSS {rss:.0f} MB"
        if sync is None:
            return text + " (no sync row)", None
        ratio = c["pass_s"] / sync["pass_s"]
        return (f"pass {c['pass_s'] * 1e3:.1f} ms = {ratio:.2f}× sync's "
                f"{sync['pass_s'] * 1e3:.1f} ms; " + text, ratio <= 1.1 and one and rss <= 60)

    r.each("W4", systems, 24, "W4 N=24: ≤ 1.1× ideal wall, 1 thread, RSS ≤ 60 MB", check)


def w5(r: Report) -> None:
    for workload in ("W5", "W5-tmpfs"):
        sync = r.cell(workload, "sync", 64)

        def check(system: str, c: JSONDict, sync: JSONDict | None = sync
                  ) -> tuple[str, bool | None]:
            v = c["ops_per_s"]
            if sync is None:
                return f"{_k(v)}/s (no sync row)", v >= 250e3
            ratio = v / sync["ops_per_s"]
            return (f"{_k(v)}/s = {ratio:.2f}× sync ({_k(sync['ops_per_s'])}/s)",
                    v >= 250e3 or ratio >= 0.7)

        fs = "tmpfs" if workload.endswith("tmpfs") else "ext4"
        r.each(workload, NATIVE[:4], 64,
               f"W5 ({fs}) random pwrite N=64: ≥ 250k/s or ≥ 0.7× sync", check)


def w6(r: Report) -> None:
    def check(system: str, c: JSONDict) -> tuple[str, bool | None]:
        p99 = c.get("lag_p99_ms")
        if p99 is None:
            return "no lag samples", None
        text = f"p50 {c['lag_p50_ms']:.2f} / p99 {p99:.2f} / max {c['lag_max_ms']:.1f} ms"
        if (full := r.cell("W1", system, 64)) is not None:
            text += (f"; {_k(c['ops_per_s'])}/s = {c['ops_per_s'] / full['ops_per_s']:.2f}× "
                     "its W1 N=64")
        return text, p99 <= 1.0

    r.each("W6", NATIVE, 64, "W6: lag p99 ≤ 1 ms at N=64", check)


def report(root: Path = RESULTS_DIR) -> str:
    r = Report(load(root))
    for part in (w1, w2, w3, w4, w5, w6):
        part(r)
    return "## Issue 4 targets (from " + str(root) + ")\n\n" + r.markdown() + "\n"


def main(argv: list[str]) -> int:
    print(report(Path(argv[0]) if argv else RESULTS_DIR))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
