"""Follow a growing log file, like ``tail -F``: print its last lines, then each line as it is
written, until Ctrl-C.

    python examples/tail_log.py /var/log/app.log
    python examples/tail_log.py --lines 50 app.log

A file being written has no "end" worth waiting on: a read at the end returns nothing, so the
follower polls, a few times a second. A line is printed only once its newline is written. If
the file is truncated, or replaced (log rotation renames it and a new file takes its name), the
follower starts again at the top of whatever file has the name now.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import aionative

POLL_S = 0.2     # how long to wait after reading nothing new
BLOCK = 1 << 16  # bytes read at a time


async def last_lines(f: aionative.AsyncBufferedReader, count: int) -> list[bytes]:
    """The last ``count`` complete lines, reading backwards from the end a block at a time;
    leaves the file at its end."""
    end = await f.seek(0, os.SEEK_END)
    data, start = b"", end
    while start > 0 and data.count(b"\n") <= count:
        start = max(0, start - BLOCK)
        await f.seek(start)
        data = await f.read(end - start)
    await f.seek(end)
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):  # a line still being written: followed later
        await f.seek(end - len(lines.pop()))
    return lines[-count:] if count else []


async def replaced(path: Path, f: aionative.AsyncBufferedReader) -> bool:
    """Whether ``path`` now names another file than the open one (rotated), or none."""
    try:
        # stat on a worker thread: a slow disk or network mount does not hold up the loop.
        st = await asyncio.to_thread(os.stat, path)
    except FileNotFoundError:
        return False  # rotated away and not yet recreated: keep reading the old file
    return (st.st_dev, st.st_ino) != (os.fstat(f.fileno()).st_dev, os.fstat(f.fileno()).st_ino)


async def follow(path: Path, lines: int) -> None:
    """Print the last ``lines`` lines of ``path``, then every new line, as it is written."""
    first = True
    while True:
        async with aionative.open(path, "rb") as f:
            for line in await last_lines(f, lines) if first else []:
                _write(line)
            first = False
            partial = b""
            while True:
                chunk = await f.read(BLOCK)
                if chunk:
                    *complete, partial = (partial + chunk).split(b"\n")
                    for line in complete:
                        _write(line + b"\n")
                    continue
                position = await f.tell()
                if os.fstat(f.fileno()).st_size < position or await replaced(path, f):
                    break  # truncated or rotated: reopen the name, from the top
                await asyncio.sleep(POLL_S)


def _write(line: bytes) -> None:
    sys.stdout.buffer.write(line)
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("-n", "--lines", type=int, default=10,
                        help="how many of the last lines to print first (default 10)")
    args = parser.parse_args(argv)
    try:
        asyncio.run(follow(args.path, args.lines))
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follower ends
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
