"""W7: line iteration: ``async for line in f`` over a page-cached UTF-8 text file.

The file (100 MiB, 30 MiB in the quick profile; ``bench/.data/w7-lines-<size>-seed<seed>.txt``)
is generated once from a seeded RNG: lines of 20–200 characters, printable ASCII with, in about
one line in four, one to three multi-byte UTF-8 characters (2, 3 and 4 bytes) in place of ASCII
ones, each ended by ``\\n``; the last line is cut to make the size exact. ``prepare`` reads it
with the builtin (which warms the page cache) and counts its lines and characters.

One pass opens the file in text mode (``"r"``, ``encoding="utf-8"``), iterates every line
counting lines and characters (the same two additions per line in every system), and closes
it. Every pass must find the line and character counts of the builtin's reading. The figure
is lines/s of the median pass (also MB/s, 10⁶ bytes of the file a second); there is no
concurrency (N=1).

Systems (each cell in its own worker process, see ``bench.fileapi``):

- ``aionative-<backend>-<loop>``: ``async with aionative.open(path, "r", encoding="utf-8") as
  f: async for line in f``;
- ``aiofiles-<loop>``: the same with ``aiofiles.open``. aiofiles runs ``readline`` in a thread
  for every line (tens of µs a line, minutes a pass), so it iterates only the first
  ``AIOFILES_LINES`` lines a pass and its lines/s and MB/s are extrapolated from that prefix
  (marked in the report; the JSON cell has ``partial`` and ``extrapolated``);
- ``sync``: ``with open(path, encoding="utf-8") as f: for line in f``, one thread, no event
  loop: the limit.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from bench import fileapi
from bench.common import JSONDict, PrepareConfig, System, Timing, Variant, Workload, size_label

DEFAULT_FILE_SIZE = 100 << 20
QUICK_FILE_SIZE = 30 << 20
AIOFILES_LINES = 20_000
MIN_CHARS, MAX_CHARS = 20, 200
ENCODING = "utf-8"
KINDS = ("sync", "aionative", "aiofiles")
ALPHABET = (b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
            b"          .,;:-_()'\"!?/+*=#")
MULTIBYTE = [c.encode() for c in "éèüößñçøåλπΩжЖ€✓→∑中文日本語한국😀🚀𝄞"]


# --------------------------------------------------------------------------- the file


def ensure_text_file(path: Path, size: int, seed: int, log: Callable[[str], None]) -> bool:
    """Create the text file unless it already has ``size`` bytes; True if it was created.

    Written to a temporary name and renamed, as ``ensure_random_file`` does. The last line
    takes exactly the bytes left (ASCII, 20 to ~230 characters).
    """
    if path.exists() and path.stat().st_size == size:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    log(f"creating {path} ({size_label(size)} of seeded UTF-8 text)")
    rng = random.Random(seed)
    table = bytes(ALPHABET[i % len(ALPHABET)] for i in range(256))
    randint, randbytes, rand, choice = rng.randint, rng.randbytes, rng.random, rng.choice
    left = size
    with open(tmp, "wb") as out:
        while True:
            n = randint(MIN_CHARS, MAX_CHARS)
            line = randbytes(n).translate(table)
            if rand() < 0.25:
                for at in sorted(rng.sample(range(n), randint(1, 3)), reverse=True):
                    line = line[:at] + choice(MULTIBYTE) + line[at + 1:]
            if left - len(line) - 1 < MIN_CHARS + 1:
                out.write(randbytes(left - 1).translate(table) + b"\n")
                break
            left -= out.write(line + b"\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return True


def count(path: str, limit: int | None = None) -> tuple[int, int, int]:
    """(lines, characters, bytes) of the file, or of its first ``limit`` lines."""
    lines = chars = size = 0
    with open(path, encoding=ENCODING) as f:
        for line in f:
            lines += 1
            chars += len(line)
            size += len(line.encode(ENCODING))
            if lines == limit:
                break
    return lines, chars, size


def _n(count: int) -> str:
    return f"{count:,}".replace(",", " ")


def check(got: tuple[int, int], want: tuple[int, int]) -> None:
    if got != want:
        raise RuntimeError(f"(lines, characters) of a pass: got {got}, expected {want}")


# --------------------------------------------------------------------------- the passes


def sync_pass(path: str, want: tuple[int, int]) -> Callable[[], int]:
    def one_pass() -> int:
        lines = chars = 0
        with open(path, encoding=ENCODING) as f:
            for line in f:
                lines += 1
                chars += len(line)
        check((lines, chars), want)
        return lines
    return one_pass


def async_pass(path: str, want: tuple[int, int],
               limit: int | None) -> Callable[[ModuleType], fileapi.AsyncPass]:
    """``make_pass`` for ``fileapi.measure_async``: every line, or the first ``limit``."""
    def make(mod: ModuleType) -> fileapi.AsyncPass:
        open_ = mod.open

        async def one_pass() -> int:
            lines = chars = 0
            async with open_(path, "r", encoding=ENCODING) as f:
                async for line in f:
                    lines += 1
                    chars += len(line)
                    if lines == limit:
                        break
            check((lines, chars), want)
            return lines
        return one_pass

    return make


# --------------------------------------------------------------------------- runs


def share(system: System, params: JSONDict) -> tuple[int | None, tuple[int, int], int]:
    """What a pass of ``system`` covers: (line limit or None, (lines, chars), bytes)."""
    if system.kind == "aiofiles":
        return (params["aiofiles_lines"], (params["prefix_lines"], params["prefix_chars"]),
                params["prefix_bytes"])
    return None, (params["lines"], params["chars"]), params["file_size"]


def run_cell(system: System, readers: int, params: JSONDict, timing: Timing) -> JSONDict:
    """Worker entry: iterate the file's lines (aiofiles: the first ``AIOFILES_LINES``)."""
    if system.kind not in KINDS:
        raise ValueError(f"W7 has no system {system.name!r} (kinds: {', '.join(KINDS)})")
    path = params["path"]
    limit, want, size = share(system, params)
    if system.kind == "sync":
        result = fileapi.measure_sync(sync_pass(path, want), timing)
    else:
        result = fileapi.measure_async(system, async_pass(path, want, limit), timing)
    result["mb_per_s"] = size / result["pass_s"] / 1e6
    if limit is None:
        return result
    return result | {
        "extrapolated": True, "ops_full_pass": params["lines"],
        "est_full_pass_s": params["lines"] / result["ops_per_s"],
        "partial": (f"iterates only the first {_n(limit)} of {_n(params['lines'])} lines a "
                    "pass (one thread hop a line); its lines/s, MB/s and ratios are "
                    "extrapolated from that prefix, and its median pass is the prefix's")}


# --------------------------------------------------------------------------- parent side


def prepare_text(path: Path, size: int, seed: int, log: Callable[[str], None],
                 aiofiles_lines: int = AIOFILES_LINES) -> JSONDict:
    """Create (first time only), warm and count the text file; the workers' parameters (also
    the pytest-benchmark tests' fixture, with a smaller file and prefix)."""
    ensure_text_file(path, size, seed, log)
    log(f"warming and counting {path.name}")
    lines, chars, _ = count(str(path))
    head = count(str(path), aiofiles_lines)
    return {"path": str(path), "file_size": size, "seed": seed, "encoding": ENCODING,
            "lines": lines, "chars": chars, "aiofiles_lines": aiofiles_lines,
            "prefix_lines": head[0], "prefix_chars": head[1], "prefix_bytes": head[2],
            "data": f"{size_label(size)} UTF-8 text file ({lines / 1e6:.2f} M lines)"}


def prepare(cfg: PrepareConfig) -> JSONDict:
    size = cfg.file_size or DEFAULT_FILE_SIZE
    if size < 1 << 20:
        raise ValueError("W7's file must be at least 1 MiB")
    path = cfg.data_dir / f"w7-lines-{size_label(size)}-seed{cfg.seed}.txt"
    return prepare_text(path, size, cfg.seed, cfg.log)


def default_systems(probe: JSONDict) -> tuple[list[str], list[str]]:
    return fileapi.default_systems(probe)


WORKLOAD = Workload(
    name="W7",
    title="line iteration: async for line in a UTF-8 text file (page-cached)",
    unit="lines",
    prepare=prepare,
    default_systems=default_systems,
    run_cell=run_cell,
    concurrency=False,
    variants={"quick": Variant(file_size=QUICK_FILE_SIZE,
                               timing=Timing(warmup=0.1, duration=0.6),
                               systems=("sync", "aionative-io_uring", "aionative-linux_aio",
                                        "aiofiles-asyncio"))},
)
