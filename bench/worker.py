"""Worker process: runs exactly one measurement (or probe) and prints one JSON line.

The harness starts a fresh ``python -m bench.worker`` for every cell, so each system gets a
process of its own: its thread pool, io_uring workers, engine and memory die with it. The
protocol is workload-agnostic:

    python -m bench.worker cell --workload W1 --system NAME --readers N \
        --warmup S --duration S --params JSON
    python -m bench.worker probe            # which packages/backends/loops are importable
    python -m bench.worker backend-info     # aionative.backend_info() under AIONATIVE_BACKEND

stdout carries only the final JSON object ``{"status": "ok"|"skip"|"error", ...}``; anything
else written to file descriptor 1 (by us, a library or C code) is redirected to stderr.
Exit status is 0 for ok and skip, 1 for error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import traceback
from collections.abc import Callable
from importlib import metadata
from typing import Any

from bench.common import JSONDict, Skip, Timing, import_aionative, load_workload, parse_system


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _package_probe(module: str) -> JSONDict:
    try:
        __import__(module)
    except Exception as exc:  # noqa: BLE001 - any import failure means "cannot run here"
        return {"ok": False, "error": f"{module} not importable: {exc!r}", "version": None}
    return {"ok": True, "error": None, "version": _version(module)}


def probe() -> JSONDict:
    """What this interpreter can run: aionative and its backends, uvloop, aiofiles, peers."""
    try:
        mod = import_aionative()
        native: JSONDict = {"ok": True, "error": None,
                            "backends": list(mod.available_backends()),
                            "version": getattr(mod, "__version__", None),
                            "file": getattr(mod, "__file__", None)}
    except Skip as exc:
        native = {"ok": False, "error": str(exc), "backends": [], "version": None}
    return {"python": platform.python_version(), "executable": sys.executable,
            "aionative": native, "uvloop": _package_probe("uvloop"),
            "aiofiles": _package_probe("aiofiles"),
            "peers": {"anyio": _package_probe("anyio"), "caio": _caio_probe(),
                      "aiofile": _package_probe("aiofile")}}


def _caio_probe() -> JSONDict:
    """caio, and which of its kernel backends set up a context here (None: it works)."""
    probe = _package_probe("caio")
    if not probe["ok"]:
        return probe
    backends: dict[str, str | None] = {}
    for name, module in (("io_uring", "caio.linux_uring"), ("linux_aio", "caio.linux_aio")):
        try:
            mod = __import__(module, fromlist=["Context"])
            mod.Context(max_requests=8)   # freed when collected; no close()
            backends[name] = None
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot run here"
            backends[name] = f"caio {module} unavailable: {exc!r}"
    return probe | {"backends": backends}


async def _backend_info() -> JSONDict:
    mod = import_aionative()
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(4096))
        f.flush()
        await mod.pread(f.fileno(), 4096, 0)  # creates this loop's engine
    return {"requested": os.environ.get("AIONATIVE_BACKEND"),
            "backend_info": dict(mod.backend_info())}


def backend_info() -> JSONDict:
    """``aionative.backend_info()`` of an engine created under this process's environment."""
    return asyncio.run(_backend_info())


def cell(args: argparse.Namespace) -> JSONDict:
    """Run one measurement cell of a workload."""
    workload = load_workload(args.workload)
    system = parse_system(args.system)
    if system.cpus:  # before the system starts any thread: they inherit the mask
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:system.cpus])
    timing = Timing(args.warmup, args.duration)
    result = workload.run_cell(system, args.readers, json.loads(args.params), timing)
    return {"workload": workload.name, "system": system.name, "readers": args.readers,
            "warmup_s": timing.warmup, "duration_s": timing.duration} | result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("cell")
    run.add_argument("--workload", required=True)
    run.add_argument("--system", required=True)
    run.add_argument("--readers", type=int, required=True)
    run.add_argument("--warmup", type=float, required=True)
    run.add_argument("--duration", type=float, required=True)
    run.add_argument("--params", required=True, help="workload parameters as JSON")
    sub.add_parser("probe")
    sub.add_parser("backend-info")
    return parser


def _dispatch(args: argparse.Namespace) -> Callable[[], JSONDict]:
    modes: dict[str, Callable[[], JSONDict]] = {
        "cell": lambda: cell(args), "probe": probe, "backend-info": backend_info}
    return modes[args.mode]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # keep stdout clean for the one JSON line
    status: dict[str, Any]
    try:
        status = {"status": "ok"} | _dispatch(args)()
    except Skip as exc:
        status = {"status": "skip", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - every failure must reach the harness as JSON
        traceback.print_exc()
        status = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    out.write(json.dumps(status, default=repr) + "\n")
    out.flush()
    return 1 if status["status"] == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
