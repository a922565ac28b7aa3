"""HTTP load benchmark: FileResponse under uvicorn + uvloop on 127.0.0.1.

    python -m bench.http_load                       # 3 systems x 3 scenarios, 3 repeats
    python -m bench.http_load --duration 3 --repeats 1 --systems aionative starlette
    python -m bench.http_load --systems aionative-static starlette-static   # StaticFiles

Each system runs in its own server process (``bench/http_server.py``: uvicorn, one worker,
``loop="uvloop"``, ``http="httptools"`` when installed else ``h11``, access log off) started afresh for every repeat, so
systems interleave in time and share the machine's noise. Scenarios:

* ``4k``    — ``GET /4k.bin`` (4 KiB)
* ``1m``    — ``GET /1m.bin`` (1 MiB)
* ``range`` — ``GET /1m.bin`` with a random ``Range: bytes=a-b`` of 1 B–64 KiB each request

The load generator is wrk (``-t1 -c<connections> --latency``, a Lua script for the ranges);
when wrk is absent and we are root with apt-get, Debian's ``wrk`` package is installed first
(``--no-wrk-install`` turns that off); otherwise, or with ``--load python``, the Python
generator ``bench/http_loadgen.py`` runs instead (slower: it caps lower). Per cell: requests/s,
p50 and p99 latency, the server's CPU time per request and its peak thread count (sampled
from ``/proc/<pid>/status``, so io_uring's ``iou-wrk`` kernel workers count too). Medians over
the repeats go to a markdown table on stdout and every run to ``bench/results/http.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import DATA_DIR, RESULTS_DIR
from bench.http_server import HTTP_IMPL, SYSTEMS

DEFAULT_SYSTEMS = ("aionative", "starlette", "aiofiles")
SCENARIOS = {"4k": ("4k.bin", False), "1m": ("1m.bin", False), "range": ("1m.bin", True)}
FILE_SIZES = {"4k.bin": 4096, "1m.bin": 1 << 20}
INSTALL_TIMEOUT_S = 600
RANGE_LUA = """\
math.randomseed(%(seed)d)
request = function()
  local len = math.random(1, 65536)
  local start = math.random(0, %(size)d - len)
  return wrk.format("GET", "/1m.bin", {["Range"] = "bytes=" .. start .. "-" .. (start + len - 1)})
end
"""


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def ensure_wrk(install: bool, log: Callable[[str], None]) -> tuple[str | None, str]:
    """Path of wrk (installing Debian's package if allowed and needed), or (None, why not)."""
    path = shutil.which("wrk")
    if path:
        return path, ""
    if not install:
        return None, "wrk not found (automatic install turned off)"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "wrk not found, and only root with apt-get installs it automatically"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "install", "-y", "-q", "wrk"], ["apt-get", "update", "-q"],
                 ["apt-get", "install", "-y", "-q", "wrk"]):
        log(f"wrk: not found, running {' '.join(argv[:2])} (Debian's wrk package) ...")
        try:
            subprocess.run(argv, env=env, capture_output=True, timeout=INSTALL_TIMEOUT_S,
                           check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{' '.join(argv[:2])} failed: {exc}"
        if (path := shutil.which("wrk")) is not None:
            return path, ""
    return None, "wrk could not be installed with apt-get"


def prepare(data_dir: Path, seed: int) -> Path:
    directory = data_dir / "http"
    directory.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    for name, size in FILE_SIZES.items():
        path = directory / name
        if not path.exists() or path.stat().st_size != size:
            path.write_bytes(rnd.randbytes(size))
    (directory / "range.lua").write_text(RANGE_LUA % {"seed": seed, "size": FILE_SIZES["1m.bin"]})
    return directory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One system's uvicorn process."""

    def __init__(self, system: str, directory: Path) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.http_server", "--system", system, "--port",
             str(self.port), "--dir", str(directory)],
            cwd=Path(__file__).resolve().parent.parent)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/4k.bin", timeout=2) as r:
                    r.read()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{system}: server did not start") from None
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def threads(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def _us(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if m is None:
        raise ValueError(f"unparsable wrk latency {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_wrk(out: str) -> dict[str, float]:
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.MULTILINE)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"rps": rps, "p50_us": _us(p50.group(1)) if p50 else float("nan"),
            "p99_us": _us(p99.group(1)) if p99 else float("nan"),
            "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "errors": sum(int(g) for g in errors.groups()) if errors else 0}


def drive(load: str, wrk: str | None, url: str, scenario: str, directory: Path,
          connections: int, duration: float) -> dict[str, float]:
    name, ranges = SCENARIOS[scenario]
    if load == "wrk":
        assert wrk is not None
        argv = [wrk, "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency"]
        if ranges:
            argv += ["-s", str(directory / "range.lua")]
        out = subprocess.run(argv + [f"{url}/{name}"], capture_output=True, text=True,
                             check=True, timeout=duration + 60).stdout
        return parse_wrk(out)
    argv = [sys.executable, "-m", "bench.http_loadgen", "--url", f"{url}/{name}", "-c",
            str(connections), "-d", str(duration)]
    if ranges:
        argv += ["--ranges", str(FILE_SIZES[name])]
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         timeout=duration + 60, cwd=Path(__file__).resolve().parent.parent).stdout
    result: dict[str, float] = json.loads(out)
    return result


def measure(server: Server, load: str, wrk: str | None, scenario: str, directory: Path,
            connections: int, duration: float, warmup: float) -> dict[str, float]:
    if warmup > 0:
        drive(load, wrk, server.url, scenario, directory, connections, warmup)
    peak = [server.threads()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peak[0] = max(peak[0], server.threads())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu0 = server.cpu_seconds()
    try:
        cell = drive(load, wrk, server.url, scenario, directory, connections, duration)
    finally:
        stop.set()
        sampler.join()
    cpu = server.cpu_seconds() - cpu0
    cell["threads"] = peak[0]
    cell["cpu_us_per_req"] = cpu / max(cell["rps"] * duration, 1) * 1e6
    return cell


def _fmt_us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def report(cells: dict[str, dict[str, list[dict[str, float]]]], systems: list[str],
           scenarios: list[str], baseline: str) -> str:
    lines = []
    for scenario in scenarios:
        name, ranges = SCENARIOS[scenario]
        title = f"{name}, random 1 B–64 KiB ranges" if ranges else name
        lines += [f"### {scenario}: {title}", "",
                  f"| system | requests/s | ÷ {baseline} | p50 | p99 | CPU µs/req | threads |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        base = cells.get(baseline, {}).get(scenario)
        base_rps = statistics.median(c["rps"] for c in base) if base else None
        for system in systems:
            runs = cells.get(system, {}).get(scenario)
            if not runs:
                continue
            rps = statistics.median(c["rps"] for c in runs)
            ratio = f"{rps / base_rps:.2f}×" if base_rps else "—"
            bad = sum(c["non2xx"] + c["errors"] for c in runs)
            lines.append(
                f"| {system} | {rps:,.0f} | {ratio} "
                f"| {_fmt_us(statistics.median(c['p50_us'] for c in runs))} "
                f"| {_fmt_us(statistics.median(c['p99_us'] for c in runs))} "
                f"| {statistics.median(c['cpu_us_per_req'] for c in runs):.0f} "
                f"| {max(int(c['threads']) for c in runs)} |"
                + (f" ⚠ {bad} non-2xx/errors" if bad else ""))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.http_load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", nargs="+", default=list(DEFAULT_SYSTEMS), choices=SYSTEMS)
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    p.add_argument("--connections", "-c", type=int, default=32)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds before each cell")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--load", choices=("auto", "wrk", "python"), default="auto")
    p.add_argument("--no-wrk-install", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "http.json")
    args = p.parse_args(argv)

    wrk = None
    load = args.load
    if load in ("auto", "wrk"):
        wrk, why = ensure_wrk(not args.no_wrk_install, _log)
        if wrk is None:
            if load == "wrk":
                raise SystemExit(why)
            _log(f"{why}: using the Python load generator")
            load = "python"
        else:
            load = "wrk"
    directory = prepare(args.data_dir, args.seed)
    baseline = "starlette-static" if "starlette-static" in args.systems and \
        "starlette" not in args.systems else "starlette"
    cells: dict[str, dict[str, list[dict[str, float]]]] = {}
    for repeat in range(args.repeats):
        for system in args.systems:
            server = Server(system, directory)
            try:
                for scenario in args.scenarios:
                    cell = measure(server, load, wrk, scenario, directory, args.connections,
                                   args.duration, args.warmup)
                    cells.setdefault(system, {}).setdefault(scenario, []).append(cell)
                    _log(f"[{repeat + 1}/{args.repeats}] {system:17} {scenario:5} "
                         f"{cell['rps']:9,.0f} req/s  p50 {_fmt_us(cell['p50_us']):>9}  "
                         f"p99 {_fmt_us(cell['p99_us']):>9}  threads {cell['threads']}")
            finally:
                server.stop()
    print(f"uvicorn (uvloop, {HTTP_IMPL}), {load} with {args.connections} connections, "
          f"{args.duration:g} s cells, median of {args.repeats}\n")
    print(report(cells, args.systems, args.scenarios, baseline))
    record: dict[str, Any] = {
        "load": load, "wrk": wrk, "http_impl": HTTP_IMPL, "connections": args.connections, "duration": args.duration,
        "warmup": args.warmup, "repeats": args.repeats, "cpus": os.cpu_count(),
        "kernel": os.uname().release, "python": sys.version.split()[0],
        "command": "python -m bench.http_load " + " ".join(argv or sys.argv[1:]),
        "cells": cells}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
