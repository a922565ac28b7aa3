"""A file that cannot take all of a write (the file-size limit, a full filesystem): the file
object answers as the builtin's — a buffered write's OSError says nothing of how much was
written and ``tell()`` is where the builtin's is; an unbuffered write returns the count
write(2) took, as ``FileIO.write`` does, and only a write that took nothing raises."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import child_env

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend")]

# Runs in a child: RLIMIT_FSIZE is the whole process's (SIGXFSZ ignored, so write(2) says
# EFBIG past the limit after a short write up to it, as a full filesystem says ENOSPC).
_CHILD = textwrap.dedent("""
    import asyncio, json, os, resource, signal, sys
    import aionative

    path, buffering, loop_name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    sizes = json.loads(sys.argv[4])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))

    def outcome(exc):
        return ["err", type(exc).__name__, exc.errno,
                getattr(exc, "characters_written", None)]

    def builtin():
        out = []
        with open(path, "wb", buffering=buffering) as f:
            for n in sizes:
                try:
                    out.append(["ok", f.write(b"x" * n), f.tell()])
                except OSError as exc:
                    out.append(outcome(exc) + [f.tell()])
            try:
                f.flush()
                out.append(["flushed", f.tell()])
            except OSError as exc:
                out.append(outcome(exc) + [f.tell()])
        return out + [os.path.getsize(path)]

    async def ours():
        out = []
        async with aionative.open(path, "wb", buffering=buffering) as f:
            for n in sizes:
                try:
                    out.append(["ok", await f.write(b"x" * n), await f.tell()])
                except OSError as exc:
                    out.append(outcome(exc) + [await f.tell()])
            try:
                await f.flush()
                out.append(["flushed", await f.tell()])
            except OSError as exc:
                out.append(outcome(exc) + [await f.tell()])
        return out + [os.path.getsize(path)]

    if loop_name == "uvloop":
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    print(json.dumps([builtin(), asyncio.run(ours())]))
""")


@pytest.mark.parametrize("buffering", [-1, 0], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("sizes", [[5000] * 20, [30000] * 4, [100000], [7000] * 12],
                         ids=["5000s", "30000s", "one-larger", "7000s"])
async def test_a_write_the_file_cannot_take_answers_as_the_builtins(
        tmp_path: Path, backend: str, buffering: int, sizes: list[int]) -> None:
    loop_name = "uvloop" if "uvloop" in type(asyncio.get_running_loop()).__module__ \
        else "asyncio"
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-P", "-c", _CHILD, str(tmp_path / "f"), str(buffering), loop_name,
         json.dumps(sizes)], env=child_env(AIONATIVE_BACKEND=backend),
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    builtin, ours = json.loads(out.stdout)
    assert ours == builtin
