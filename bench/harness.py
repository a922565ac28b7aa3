"""Parent side: probe the environment, run every cell in a fresh worker, aggregate repeats.

A cell is (system, N readers). With several repeats the whole grid is run once per repeat
(rather than each cell three times in a row), so slow drift of a noisy VM spreads over all
systems instead of biasing one. A repeated cell reports the median of its throughput, CPU per
operation, CPU utilisation and loop-lag p50/p99 (where measured), and the maximum of its
thread, RSS and loop-lag peaks. Fixed-work cells (W4, W7) add the median pass time and MB/s
(medians again) and peak VSZ (maximum). A system whose first cell is skipped (missing package
or backend) is not tried again.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import fio
from bench.common import REPO_ROOT, JSONDict, Timing, Workload, is_native, parse_system

Log = Callable[[str], None]
WORKER_SLACK_S = 120.0   # process start, setup and teardown beyond warm-up + duration
MEDIAN_KEYS = ("ops_per_s", "cpu_us_per_op", "cpu_util", "lag_p50_ms", "lag_p99_ms", "pass_s",
               "mb_per_s")
MAX_KEYS = ("threads_peak", "iou_workers_peak", "rss_peak_mib", "vsz_peak_mib", "lag_max_ms")


def worker_env(system: str | None = None) -> dict[str, str]:
    """Environment for a worker: repo on PYTHONPATH, AIONATIVE_BACKEND only for aionative."""
    env = dict(os.environ)
    paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("AIONATIVE_BACKEND", None)
    if system and is_native(parsed := parse_system(system)) and parsed.backend:
        env["AIONATIVE_BACKEND"] = parsed.backend
    return env


def call_worker(argv: Sequence[str], env: dict[str, str], timeout: float) -> JSONDict:
    """Run ``python -m bench.worker ARGV`` and return its JSON line (or an error record)."""
    cmd = [sys.executable, "-m", "bench.worker", *argv]
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"worker timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = proc.stderr.strip().splitlines()[-5:]
        return {"status": "error",
                "error": f"worker exited {proc.returncode} without a result: {' | '.join(tail)}"}
    result: JSONDict = json.loads(lines[-1])
    if result["status"] == "error":
        result["stderr_tail"] = proc.stderr.strip().splitlines()[-15:]
    return result


def probe_environment(fio_path: str | None = None, fio_error: str | None = None) -> JSONDict:
    """Which systems can run, plus ``backend_info()`` of an engine on every aionative backend
    and the fio found by ``bench.fio.ensure`` (or why there is none)."""
    probe = call_worker(["probe"], worker_env(), 60)
    if probe["status"] != "ok":
        raise RuntimeError(f"environment probe failed: {probe}")
    infos: JSONDict = {}
    for backend in probe["aionative"]["backends"]:
        info = call_worker(["backend-info"], worker_env(f"aionative-{backend}-asyncio"), 60)
        infos[backend] = info.get("backend_info", info)
    probe["aionative"]["backend_info"] = infos
    probe["fio"] = {"path": fio_path, "error": fio_error,
                    "version": fio.version(fio_path) if fio_path else None}
    return probe


def _read_first(path: str, prefix: str) -> str | None:
    try:
        with open(path) as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith(prefix)), None)
    except OSError:
        return None


def filesystem_of(path: Path) -> str | None:
    """Filesystem type of the mount holding ``path`` (longest matching mount point)."""
    best, fstype = "", None
    target = str(path.resolve())
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            mount, fs = fields[4], fields[fields.index("-") + 1]
            inside = target == mount or target.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best):
                best, fstype = mount, fs
    return fstype


def git_state() -> JSONDict:
    """The commit measured, and which tracked files differ from it (None outside a checkout)."""
    def git(*argv: str) -> str | None:
        try:
            proc = subprocess.run(["git", *argv], cwd=REPO_ROOT, capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.rstrip() if proc.returncode == 0 else None

    changed = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"),
            "modified": None if changed is None else [ln[3:] for ln in changed.splitlines()]}


def machine_info(data_path: Path | None) -> JSONDict:
    """Kernel, CPUs, memory, Python, date, load and the commit, for the JSON record."""
    return {
        "kernel": os.uname().release,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": _read_first("/proc/cpuinfo", "model name"),
        "mem_total": _read_first("/proc/meminfo", "MemTotal"),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "executable": sys.executable,
        "filesystem": filesystem_of(data_path) if data_path else None,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "git": git_state(),
    }


@dataclass
class Grid:
    """Every cell's runs, plus the systems skipped and the cells that failed."""

    runs: dict[tuple[str, int], list[JSONDict]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    errors: list[JSONDict] = field(default_factory=list)


def plan(workload: Workload, systems: Sequence[str],
         readers: Sequence[int]) -> list[tuple[str, int]]:
    """The cells of one repeat; concurrency-free systems (``sync``, every system of a workload
    without concurrency) run once, at N=1."""
    return [(s, n) for s in systems
            for n in ([1] if s in workload.concurrency_free or not workload.concurrency
                      else readers)]


def _cell_argv(workload: Workload, system: str, n: int, params: JSONDict,
               timing: Timing) -> list[str]:
    return ["cell", "--workload", workload.name, "--system", system, "--readers", str(n),
            "--warmup", str(timing.warmup), "--duration", str(timing.duration),
            "--params", json.dumps(params)]


def _progress(workload: Workload, label: str, system: str, n: int, res: JSONDict,
              seconds: float) -> str:
    head = f"{label} {system:<38} N={n:<4}"
    if res["status"] == "ok":
        cpu = res["cpu_us_per_op"]
        lag = (f"  lag p99 {res['lag_p99_ms']:.2f} ms" if res.get("lag_p99_ms") is not None
               else "")
        passes = (f"  pass {res['pass_s'] * 1e3:7.1f} ms (median of {res['passes']})"
                  if "pass_s" in res else "")
        return (f"{head} {res['ops_per_s'] / 1e3:8.1f}k {workload.unit}/s"
                f"  {cpu:7.1f} µs CPU/op  {res['threads_peak']:3d} thr{lag}{passes}"
                f"  ({seconds:.1f} s)")
    return f"{head} {res['status'].upper()}: {res.get('reason') or res.get('error')}"


def run_grid(workload: Workload, systems: Sequence[str], readers: Sequence[int],
             params: JSONDict, timing: Timing, repeats: int, log: Log) -> Grid:
    """Run every cell ``repeats`` times, each in a fresh worker process."""
    grid, cells = Grid(), plan(workload, systems, readers)
    total, done = len(cells) * repeats, 0
    for rep in range(repeats):
        for system, n in cells:
            done += 1
            if system in grid.skipped:
                continue
            started = time.monotonic()
            res = call_worker(_cell_argv(workload, system, n, params, timing),
                              worker_env(system), timing.warmup + timing.duration
                              + WORKER_SLACK_S)
            rep_label = f" rep {rep + 1}/{repeats}" if repeats > 1 else ""
            label = f"[{done:>{len(str(total))}}/{total}{rep_label}]"
            log(_progress(workload, label, system, n, res, time.monotonic() - started))
            if res["status"] == "ok":
                grid.runs.setdefault((system, n), []).append(res)
            elif res["status"] == "skip":
                grid.skipped[system] = res["reason"]
            else:
                grid.errors.append({"system": system, "readers": n, "repeat": rep} | res)
    return grid


def summarize(runs: list[JSONDict]) -> JSONDict:
    """Median of throughput/CPU/lag percentiles, maximum of peaks, over a cell's repeats.

    Keys no run reports (loop lag in W1) are left out; ones reported as None stay None.
    """
    summary: dict[str, Any] = {}
    for keys, agg in ((MEDIAN_KEYS, statistics.median), (MAX_KEYS, max)):
        for key in keys:
            if any(key in r for r in runs):
                values = [r[key] for r in runs if r.get(key) is not None]
                summary[key] = agg(values) if values else None
    return summary


def cells_record(workload: Workload, grid: Grid) -> list[JSONDict]:
    """One JSON record per measured cell: summary plus every run."""
    return [{"system": system, "readers": n,
             "concurrency_free": system in workload.concurrency_free,
             "repeats": len(runs), **summarize(runs), "runs": runs}
            for (system, n), runs in grid.runs.items()]
