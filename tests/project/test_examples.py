"""The scripts in examples/ do what their docstrings say: the command-line ones run as
``python examples/<name>.py ...`` in a child process, the web apps are driven in process through
httpx's ASGI transport (with their lifespan, so the engine is created and closed as under
uvicorn). examples/fastapi_app.py is exercised in tests/web/test_fastapi.py."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

import aionative
from tests.support import child_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(script: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)], cwd=cwd,
                          env=child_env(), capture_output=True, text=True, timeout=60,
                          check=False)


def _load(script: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{Path(script).stem}",
                                                  EXAMPLES / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def _client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app started (its lifespan entered), with a client that talks to it in process."""
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                  base_url="http://example") as client):
        yield client


# --- copy_file.py ------------------------------------------------------------------------------

def test_copy_file_to_a_file(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 17)  # several chunks and a short last one
    (tmp_path / "src.bin").write_bytes(data)
    (tmp_path / "dest.bin").write_bytes(b"old content, longer than nothing" * 100)
    done = _run("copy_file.py", "src.bin", "dest.bin", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "dest.bin").read_bytes() == data
    assert f"{len(data)} bytes" in done.stdout


def test_copy_files_into_a_directory(tmp_path: Path) -> None:
    files = {"a.bin": os.urandom(2_000_000), "b.txt": b"hello\n", "empty": b""}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "out").mkdir()
    done = _run("copy_file.py", *files, "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name, data in files.items():
        assert (tmp_path / "out" / name).read_bytes() == data


def test_copy_file_errors(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    missing = _run("copy_file.py", "nowhere", "b", cwd=tmp_path)
    assert missing.returncode == 1 and "nowhere" in missing.stderr
    assert not (tmp_path / "b").exists()  # the source is opened first
    not_a_dir = _run("copy_file.py", "a", "a", "nodir", cwd=tmp_path)
    assert not_a_dir.returncode == 2 and "must be a directory" in not_a_dir.stderr


# --- tail_log.py -------------------------------------------------------------------------------

class _Lines:
    """A child's stdout, a line at a time, with a timeout."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._q: queue.Queue[bytes] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: [self._q.put(ln) for ln in stdout], daemon=True).start()

    def next(self, timeout: float = 15.0) -> bytes:
        return self._q.get(timeout=timeout)

    def none_within(self, seconds: float) -> bool:
        try:
            self._q.get(timeout=seconds)
        except queue.Empty:
            return True
        return False


# The follower starts as from a terminal: SIGINT at its default action and not blocked, then
# the script (exec keeps both). A child inherits an ignored SIGINT: a shell without job control
# starts its background commands (`make test &` in a script) with SIGINT and SIGQUIT ignored,
# Python then installs no KeyboardInterrupt handler, asyncio.run none of its own, and Ctrl-C
# never reaches the follower, which polls on.
_AS_FROM_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                       "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
                       "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def test_tail_log_follows_a_growing_file(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(1, 2001)) + b"half")
    # (PYTHONFAULTHANDLER: a follower that Ctrl-C did not end prints every thread's stack on
    # SIGABRT, and the failure shows where it was.)
    with subprocess.Popen([sys.executable, "-c", _AS_FROM_A_TERMINAL,
                           str(EXAMPLES / "tail_log.py"), "-n", "3", str(log)],
                          env=child_env(PYTHONFAULTHANDLER="1"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        try:
            _follow(proc, log, tmp_path)
        finally:
            if proc.poll() is None:
                proc.kill()


def _follow(proc: subprocess.Popen[bytes], log: Path, tmp_path: Path) -> None:
    out = _Lines(proc)
    assert [out.next() for _ in range(3)] == [b"line 1998\n", b"line 1999\n", b"line 2000\n"]
    assert out.none_within(0.5)  # "half" has no newline yet
    with log.open("ab") as f:
        f.write(b" written\nnext\n")
    assert [out.next(), out.next()] == [b"half written\n", b"next\n"]
    # Rotation: the file is renamed away and a new one takes its name.
    log.rename(tmp_path / "app.log.1")
    log.write_bytes(b"after rotation\n")
    assert out.next() == b"after rotation\n"
    # Truncation: the file shrinks under the reader, which starts again at the top.
    time.sleep(0.3)
    log.write_bytes(b"t\n")
    assert out.next() == b"t\n"
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    try:
        returncode = proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        signals = [line for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                   if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))]
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=15)
        assert proc.stderr is not None
        here = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
        pytest.fail("Ctrl-C did not end the follower in 15 s; its signal masks: "
                    + "; ".join(signals) + f" (this process: SIGINT handler, blocked: {here})"
                    + "; its threads, on SIGABRT:\n"
                    + proc.stderr.read().decode(errors="replace"), pytrace=False)
    assert returncode == 0
    assert proc.stderr is not None
    assert b"Traceback" not in proc.stderr.read()


def test_tail_log_missing_file(tmp_path: Path) -> None:
    done = _run("tail_log.py", "nothing.log", cwd=tmp_path)
    assert done.returncode == 1 and "nothing.log" in done.stderr


# --- save_uploads.py ---------------------------------------------------------------------------

@pytest.fixture
def uploads_app(tmp_path: Path) -> Any:
    """The app, made before the loop runs (as ``uvicorn.run(create_app(...))`` does)."""
    # Starlette hands a spooled upload's writes to anyio's thread pool, and anyio imports its
    # asyncio backend on first use, on the loop (~10 ms, once a process): imported here, as in
    # a server that has taken one upload, so the loop guard measures the example, not that.
    importlib.import_module("anyio._backends._asyncio")
    return _load("save_uploads.py").create_app(tmp_path / "uploads")


async def _read(path: Path) -> bytes:
    return await aionative.read_bytes(path)


@pytest.fixture(scope="module")
def large() -> bytes:
    return os.urandom(3 << 19)  # over Starlette's 1 MiB: spooled to disk


@pytest.mark.asyncio
async def test_save_uploads(uploads_app: Any, large: bytes, tmp_path: Path) -> None:
    small = b"a few bytes\n"  # kept in memory
    async with _client(uploads_app) as c:
        r = await c.post("/upload", files=[("file", ("small.txt", small)),
                                           ("file", ("large.bin", large))])
        assert r.status_code == 200, r.text
        assert r.json() == {"saved": {"small.txt": len(small), "large.bin": len(large)}}
        assert await _read(tmp_path / "uploads" / "small.txt") == small
        assert await _read(tmp_path / "uploads" / "large.bin") == large
        assert sorted(await asyncio.to_thread(os.listdir, tmp_path / "uploads")) == \
            ["large.bin", "small.txt"]  # no temporary file left
        assert (await c.get("/files/large.bin")).content == large
        r = await c.get("/files/large.bin", headers={"range": "bytes=10-19"})
        assert r.status_code == 206 and r.content == large[10:20]
        assert (await c.get("/files/none.bin")).status_code == 404
        for bad in ("../escape.txt", ".hidden"):
            r = await c.post("/upload", files={"file": (bad, b"x")})
            assert r.status_code == 400, bad
    assert not await asyncio.to_thread(os.path.exists, tmp_path / "escape.txt")


# --- serve_directory.py ------------------------------------------------------------------------

@pytest.fixture
def site(tmp_path: Path) -> tuple[Any, bytes]:
    """A directory to serve, and the app serving it, made before the loop runs."""
    site = tmp_path / "site"
    (site / "docs").mkdir(parents=True)
    (site / "index.html").write_text("<h1>home</h1>")
    (site / "docs" / "index.html").write_text("<h1>docs</h1>")
    data = os.urandom(1 << 20)
    (site / "big.bin").write_bytes(data)
    (tmp_path / "secret.txt").write_text("outside the directory")
    (site / "link.txt").symlink_to(tmp_path / "secret.txt")
    return _load("serve_directory.py").create_app(site), data


@pytest.mark.asyncio
async def test_serve_directory(site: tuple[Any, bytes]) -> None:
    app, data = site
    async with _client(app) as c:
        assert (await c.get("/")).text == "<h1>home</h1>"
        assert (await c.get("/docs/")).text == "<h1>docs</h1>"
        r = await c.get("/big.bin")
        assert r.status_code == 200 and r.content == data
        r = await c.get("/big.bin", headers={"range": "bytes=100-199"})
        assert r.status_code == 206 and r.content == data[100:200]
        r = await c.get("/big.bin", headers={"if-none-match": r.headers["etag"]})
        assert r.status_code == 304
        assert (await c.get("/missing.txt")).status_code == 404
        assert (await c.get("/link.txt")).status_code == 404  # a symlink out of it
        assert (await c.get("/..%2fsecret.txt")).status_code == 404
