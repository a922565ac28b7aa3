"""A small HTTP/1.1 keep-alive load generator: the fallback when wrk is absent.

    python -m bench.http_loadgen --url http://127.0.0.1:8001/4k.bin -c 32 -d 5 [--ranges SIZE]

Runs ``-c`` connections on uvloop, each sending one request at a time for ``-d`` seconds, and
prints one JSON line: requests, seconds, requests/s, latency p50/p99 (µs), non-2xx responses
and errors. ``--ranges SIZE`` asks for a random range of 1 B–64 KiB inside a SIZE-byte file on
every request (the same distribution as the wrk script). Slower than wrk (it is Python), so its
figures cap lower; the benchmark notes which generator ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from urllib.parse import urlsplit


async def _connection(host: str, port: int, path: str, until: float, ranges: int | None,
                      rng: random.Random, latencies: list[float], counts: dict[str, int]
                      ) -> None:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        counts["errors"] += 1
        return
    base = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
    try:
        while time.perf_counter() < until:
            extra = ""
            if ranges:
                length = rng.randint(1, 65536)
                start = rng.randint(0, ranges - length)
                extra = f"Range: bytes={start}-{start + length - 1}\r\n"
            t0 = time.perf_counter()
            writer.write((base + extra + "\r\n").encode())
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            if not 200 <= status < 300:
                counts["non2xx"] += 1
    except (OSError, asyncio.IncompleteReadError, ValueError):
        counts["errors"] += 1
    finally:
        writer.close()


async def run(url: str, connections: int, duration: float, ranges: int | None) -> dict[str, float]:
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"
    latencies: list[float] = []
    counts = {"non2xx": 0, "errors": 0}
    t0 = time.perf_counter()
    until = t0 + duration
    await asyncio.gather(*(_connection(host, port, path, until, ranges, random.Random(i),
                                       latencies, counts) for i in range(connections)))
    elapsed = time.perf_counter() - t0
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e6 if latencies \
            else float("nan")

    return {"requests": len(latencies), "seconds": elapsed, "rps": len(latencies) / elapsed,
            "p50_us": pct(0.50), "p99_us": pct(0.99), **counts}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("-c", "--connections", type=int, default=32)
    p.add_argument("-d", "--duration", type=float, default=5.0)
    p.add_argument("--ranges", type=int, default=None, metavar="SIZE")
    args = p.parse_args()
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    print(json.dumps(runner(run(args.url, args.connections, args.duration, args.ranges))))


if __name__ == "__main__":
    main()
