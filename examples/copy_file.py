"""Copy files with aionative, like ``cp``: one file to another, or several into a directory,
copied at the same time.

    python examples/copy_file.py SOURCE DEST
    python examples/copy_file.py SOURCE... DIRECTORY

Each copy reads and writes 1 MiB chunks through ``aionative.open``, the drop-in for
``aiofiles.open``: the event loop stays free while the kernel moves the bytes, so the copies
run side by side (and a server could go on answering requests meanwhile).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import aionative

CHUNK = 1 << 20  # 1 MiB a read and a write: few calls, little memory


async def copy_file(source: Path, dest: Path) -> int:
    """Copy ``source`` to ``dest`` (created or truncated); return the number of bytes copied."""
    copied = 0
    async with aionative.open(source, "rb") as src, aionative.open(dest, "wb") as dst:
        while chunk := await src.read(CHUNK):
            await dst.write(chunk)
            copied += len(chunk)
    return copied


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", type=Path, metavar="SOURCE")
    parser.add_argument("dest", type=Path, metavar="DEST")
    args = parser.parse_args(argv)
    if len(args.sources) > 1 and not args.dest.is_dir():
        parser.error(f"copying several files: {args.dest} must be a directory")
    # Into a directory, each copy keeps its file's name, as cp does.
    targets = [args.dest / s.name if args.dest.is_dir() else args.dest for s in args.sources]
    # All the copies at once: gather runs them concurrently on the one event loop.
    sizes = await asyncio.gather(*(copy_file(s, t) for s, t in zip(args.sources, targets)),
                                 return_exceptions=True)
    failed = 0
    for source, target, size in zip(args.sources, targets, sizes):
        if isinstance(size, BaseException):
            print(f"{source}: {size}", file=sys.stderr)
            failed += 1
        else:
            print(f"{source} -> {target}: {size} bytes")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
