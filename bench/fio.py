"""fio as the limit: find (or install) it, run one job the way a workload describes, parse it.

fio is C with no interpreter in the way, so its rows (``fio-io_uring``, ``fio-libaio``,
``fio-psync``) are what the kernel and the device give one thread: the ceiling the Python
systems are measured against. ``ensure`` looks for ``fio`` on ``PATH`` and, when it is absent
and we are root on a Debian-like system, installs Debian's package (``apt-get install -y
--no-install-recommends fio``, running ``apt-get update`` first if the package is not found) —
once, in the parent, before any cell runs; ``--no-fio-install`` turns that off and the fio
rows are then skipped with a note.

A job is built from a ``Job``: the file(s), ``rw`` (``randread``, ``read``, ``randwrite``,
``write``), block size, queue depth, ``direct``, and the time box (``ramp_time`` = the cell's
warm-up, ``runtime`` = its duration). Every job runs with ``--invalidate=0`` (fio would
otherwise drop the file's page cache before starting, turning a hot-read workload cold and
evicting the other systems' data), ``--norandommap`` (uniform random offsets with replacement,
like the Python systems' seeded pool; fio draws its own sequence), one job process
(``numjobs=1``: one thread doing I/O, as in every Python system) and ``--output-format=json``.
``psync`` is synchronous: its depth is 1 whatever N is, so the workloads run it once (like
``sync``).

Figures: IOPS over the timed runtime (after ramp) and the job's completion-latency
percentiles from fio's JSON; CPU µs per operation from the whole fio process tree
(``RUSAGE_CHILDREN`` around the run, divided by the I/Os of ramp + runtime at the measured
rate; it includes fio's start-up, a few ms), because fio's own ``usr_cpu``/``sys_cpu`` are its
job thread's alone and miss io_uring's kernel workers (kept in ``info`` for reference). Threads: fio's job is one process with one thread
(plus fio's idle parent); its RSS is not measured (``ru_maxrss`` of a child carries the
worker's own over ``exec``, so it would report ours).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.common import JSONDict, Skip, Timing

ENGINES = ("io_uring", "libaio", "psync")
CONCURRENCY_FREE = frozenset({"fio-psync"})
INSTALL_TIMEOUT_S = 600


def ensure(install: bool, log: Callable[[str], None]) -> tuple[str | None, str | None]:
    """Path of a usable ``fio`` (installing Debian's package if allowed), or (None, why not)."""
    path = shutil.which("fio")
    if path:
        return path, None
    if not install:
        return None, "fio not found on PATH (automatic install turned off: --no-fio-install)"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, ("fio not found on PATH, and it can only be installed automatically as "
                      "root with apt-get (install Debian's `fio` package)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "fio"]
    for attempt in ("install", "update", "install"):
        log(f"fio: not found, running apt-get {attempt} (Debian's fio package) ...")
        argv = cmd if attempt == "install" else ["apt-get", "update", "-q"]
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"apt-get {attempt} failed: {exc}"
        if attempt == "install" and proc.returncode == 0 and (path := shutil.which("fio")):
            log(f"fio: installed {path}")
            return path, None
        if attempt == "update" and proc.returncode != 0:
            break
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
    return None, f"fio could not be installed with apt-get: {tail}"


def version(path: str) -> str | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                             check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out or None


@dataclass(frozen=True)
class Job:
    """One fio job: what to read or write, how, and for how long (see the module docstring)."""

    files: Sequence[str]
    rw: str
    bs: int
    size: int                   # bytes of each file the job covers (fio: --filesize)
    depth: int
    direct: bool = False
    file_service: str | None = None   # several files: how fio moves between them

    def argv(self, fio: str, engine: str, timing: Timing) -> list[str]:
        depth = 1 if engine == "psync" else self.depth
        argv = [fio, "--name=bench", f"--ioengine={engine}", f"--rw={self.rw}",
                f"--bs={self.bs}", f"--iodepth={depth}", f"--direct={int(self.direct)}",
                f"--size={self.size * len(self.files)}", "--numjobs=1", "--invalidate=0", "--norandommap",
                "--randrepeat=0", "--allow_file_create=0", "--time_based",
                f"--ramp_time={_ms(timing.warmup)}", f"--runtime={_ms(timing.duration)}",
                "--group_reporting", "--output-format=json",
                "--filename=" + ":".join(f.replace(":", "\\:") for f in self.files)]
        if len(self.files) > 1:
            argv += [f"--nrfiles={len(self.files)}", f"--filesize={self.size}",
                     f"--file_service_type={self.file_service or 'roundrobin'}"]
        if self.rw in ("write", "randwrite"):
            argv += ["--fsync=0", "--end_fsync=0", "--overwrite=1"]
        return argv


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def run(fio: str | None, engine: str, job: Job, timing: Timing) -> JSONDict:
    """Run ``job`` on ``engine`` and return the cell's figures (ops are fio's I/Os)."""
    if fio is None:
        raise Skip("fio not available")
    if engine not in ENGINES:
        raise ValueError(f"unknown fio engine {engine!r} (have {', '.join(ENGINES)})")
    argv = job.argv(fio, engine, timing)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                          timeout=timing.warmup + timing.duration + 120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = proc.stdout.find("{")
    if proc.returncode != 0 or start < 0:
        raise RuntimeError(f"fio exited {proc.returncode}: "
                           + " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:]))
    doc = json.loads(proc.stdout[start:])
    result = figures(doc, job, engine)
    # fio's own usr_cpu/sys_cpu are its job thread's (RUSAGE_THREAD): work the kernel hands
    # to io_uring's io-wq workers (buffered writes) is not in them. The whole process tree's
    # CPU, over ramp + runtime at the measured rate, is what the Python rows report.
    tree_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tree_ops = result["ops_per_s"] * (timing.warmup + timing.duration)
    thread_us = result["cpu_us_per_op"]
    result["cpu_us_per_op"] = tree_s / tree_ops * 1e6
    result["cpu_user_s"] = after.ru_utime - before.ru_utime
    result["cpu_sys_s"] = after.ru_stime - before.ru_stime
    result["cpu_util"] = tree_s / (timing.warmup + timing.duration)
    return result | {"info": {"fio": doc.get("fio version"), "argv": " ".join(argv[1:]),
                              "cpu_us_per_op_job_thread": thread_us,
                              "cpu": "whole fio process tree (RUSAGE_CHILDREN) over ramp + "
                                     "runtime, at the timed rate"}}


def figures(doc: JSONDict, job: Job, engine: str) -> JSONDict:
    """The harness's cell figures from fio's JSON document (one job, group reporting)."""
    jd = doc["jobs"][0]
    if jd.get("error"):
        raise RuntimeError(f"fio job error {jd['error']}")
    side = jd["read"] if job.rw in ("read", "randread") else jd["write"]
    ios, runtime_s = side["total_ios"], side["runtime"] / 1e3
    if not ios or not runtime_s:
        raise RuntimeError("fio did no I/O in the timed window")
    busy = (jd["usr_cpu"] + jd["sys_cpu"]) / 100     # CPUs busy, over the job's runtime
    lat = side.get("clat_ns", {}).get("percentile", {})
    return {
        "ops": ios,
        "wall_s": runtime_s,
        "ops_per_s": side["iops"],
        "cpu_user_s": jd["usr_cpu"] / 100 * jd["job_runtime"] / 1e3,
        "cpu_sys_s": jd["sys_cpu"] / 100 * jd["job_runtime"] / 1e3,
        "cpu_us_per_op": busy / side["iops"] * 1e6,
        "cpu_util": busy,
        "threads_peak": 1,
        "iou_workers_peak": 0,
        "rss_peak_mib": None,      # not measured (see the module docstring)
        "engine_stats_delta": None,
        "fio_clat_p50_us": lat.get("50.000000", 0) / 1e3 or None,
        "fio_clat_p99_us": lat.get("99.000000", 0) / 1e3 or None,
        "fio_depth": 1 if engine == "psync" else job.depth,
    }


def system_names(available: bool) -> list[str]:
    return [f"fio-{e}" for e in ENGINES] if available else []
