"""aionative.fastapi: the opened-file dependency, save_upload, stream_file, the lifespan, and
the example app in examples/ — through httpx's ASGI transport (and the lifespan protocol
driven by hand, which that transport does not run)."""


import asyncio
import concurrent.futures
import importlib.util
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
import starlette.datastructures
from fastapi import Depends, FastAPI, HTTPException, Request, UploadFile
from fastapi.responses import StreamingResponse
from starlette.datastructures import Headers

import aionative
from aionative import AsyncBufferedReader, _engine
from aionative.fastapi import (
    engine_lifespan,
    lifespan,
    opened_file,
    save_upload,
    stream_file,
)
from tests.support import open_fds_to
from tests.web.test_starlette import blocking_calls  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("backend")
# Upload payloads, made once at collection: drawn inside a test, a few MB of random bytes take
# 10-20 ms of the loop's thread, which the loop guard would count in one gap with the engine's
# first steps (see tests/_loop_guard.py).
PAYLOAD = os.urandom(5_000_000)
REPO = Path(__file__).resolve().parents[2]


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, counting what is handed to a worker thread."""

    submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
               ) -> concurrent.futures.Future[Any]:
        CountingExecutor.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.mark.asyncio
async def test_opened_file_dependency(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(b"alpha\n" * 50_000)
    (tmp_path / "sub").mkdir()
    seen: list[AsyncBufferedReader] = []

    def path_of(name: str, suffix: str = ".log") -> Path:  # a path parameter and a query one
        return tmp_path / f"{name}{suffix}"

    async def async_path_of(name: str) -> Path:
        await asyncio.sleep(0)
        return tmp_path / name

    app = FastAPI()

    @app.get("/head/{name}")
    async def head(name: str, f: Annotated[AsyncBufferedReader,
                                           Depends(opened_file(path_of))]) -> dict[str, Any]:
        seen.append(f)
        return {"first": (await f.read(6)).decode()}

    @app.get("/stream/{name}")
    async def stream(f: Annotated[AsyncBufferedReader, Depends(opened_file(async_path_of))]
                     ) -> StreamingResponse:
        seen.append(f)

        async def body() -> AsyncIterator[bytes]:
            while chunk := await f.read(65536):  # still open while the response is sent
                yield chunk

        return StreamingResponse(body())

    @app.get("/fixed")
    async def fixed(f: Annotated[Any, Depends(opened_file(tmp_path / "a.log", "r",
                                                          encoding="ascii"))]) -> str:
        return str(await f.readline())

    @app.get("/strict/{name}")
    async def strict(f: Annotated[Any, Depends(opened_file(async_path_of,
                                                           missing_status=None))]) -> str:
        return "unreachable"

    async with client(app) as c:
        assert (await c.get("/head/a")).json() == {"first": "alpha\n"}
        assert (await c.get("/head/a", params={"suffix": ".txt"})).status_code == 404
        r = await c.get("/stream/a.log")
        assert r.status_code == 200 and r.content == (tmp_path / "a.log").read_bytes()
        assert (await c.get("/stream/sub")).status_code == 404  # a directory
        assert (await c.get("/fixed")).json() == "alpha\n"
        with pytest.raises(FileNotFoundError):
            await c.get("/strict/nope")
    assert len(seen) == 2 and all(f.closed for f in seen)
    assert open_fds_to(tmp_path / "a.log") == 0


def _upload(data: bytes, *, spooled: bool = True) -> UploadFile:
    if spooled:
        f: Any = tempfile.SpooledTemporaryFile(max_size=1 << 20)  # noqa: SIM115 - see close()
        f.write(data)
        f.seek(0)
    else:
        f = io.BytesIO(data)
    return UploadFile(f, size=len(data), filename="x.bin", headers=Headers())


@pytest.mark.asyncio
async def test_save_upload_through_fastapi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    hops = {"threadpool": 0}
    real_run_in_threadpool = starlette.datastructures.run_in_threadpool

    async def counting_run_in_threadpool(fn: Callable[..., Any], *args: Any) -> Any:
        hops["threadpool"] += 1  # what UploadFile.read does for a file spooled to disk
        return await real_run_in_threadpool(fn, *args)

    monkeypatch.setattr(starlette.datastructures, "run_in_threadpool",
                        counting_run_in_threadpool)
    app = FastAPI()

    @app.post("/up")
    async def up(file: UploadFile) -> dict[str, Any]:
        in_memory = not getattr(file.file, "_rolled", True)
        CountingExecutor.submitted = hops["threadpool"] = 0
        before = aionative.engine_stats()["submitted"]
        n = await save_upload(file, tmp_path / "saved.bin", chunk_size=64 * 1024)
        return {"n": n, "in_memory": in_memory, "executor": CountingExecutor.submitted,
                "threadpool": hops["threadpool"],
                "engine_ops": aionative.engine_stats()["submitted"] - before}

    asyncio.get_running_loop().set_default_executor(CountingExecutor(4))
    backend = aionative.get_engine().backend
    async with client(app) as c:
        for size in (0, 1000, 900_000, 5_000_000):  # in memory up to 1 MiB, then on disk
            data = PAYLOAD[:size]
            r = await c.post("/up", files={"file": ("x.bin", data)})
            body = r.json()
            assert body["n"] == size and (tmp_path / "saved.bin").read_bytes() == data
            assert body["in_memory"] == (size <= 1024 * 1024)
            # never UploadFile.read's thread hop; an executor thread only for open, close and
            # the rename where the engine has no openat/close/renameat of its own (Linux AIO's
            # writer threads make the open; the threads backend is threads by design)
            assert body["threadpool"] == 0
            assert body["executor"] == {"io_uring": 0, "linux_aio": 2}.get(backend, 3)
            if body["in_memory"]:
                # one write (+ open, close, rename)
                assert body["engine_ops"] <= (1 if size else 0) + 3
            else:  # 77 chunks: a read and a write each, plus the final short read
                assert body["engine_ops"] >= 2 * (size // 65536)


@pytest.mark.asyncio
async def test_save_upload_sources_and_errors(tmp_path: Path) -> None:
    data = PAYLOAD[:3 * 1024 * 1024 + 7]
    dest = tmp_path / "out.bin"
    for spooled in (True, False):
        upload = _upload(data, spooled=spooled)
        upload.file.read(1000)  # already partly read: the rest is saved
        assert await save_upload(upload, dest, chunk_size=100_000, fsync=True) == len(data) - 1000
        assert dest.read_bytes() == data[1000:]
        assert upload.file.tell() == len(data) and upload.file.read() == b""
        await upload.close()
    # a file object without a descriptor or buffer: read through UploadFile.read
    class Stream(io.RawIOBase):
        def __init__(self) -> None:
            self.inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            return self.inner.readinto(b)

    upload = UploadFile(io.BufferedReader(Stream()), filename="s")  # type: ignore[arg-type]
    assert await save_upload(upload, dest, chunk_size=1 << 20) == len(data)
    assert dest.read_bytes() == data
    small = _upload(b"x")
    with pytest.raises(FileNotFoundError):
        await save_upload(small, tmp_path / "missing" / "out.bin")
    with pytest.raises(ValueError):
        await save_upload(small, dest, chunk_size=0)
    await small.close()

    # a failing source: the destination is left as it was, and no partial file anywhere
    class Broken(io.BytesIO):
        def read(self, n: int | None = -1) -> bytes:
            raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output"):
        await save_upload(UploadFile(Broken(b"abc")), dest)  # type: ignore[arg-type]
    assert dest.read_bytes() == data
    with pytest.raises(OSError, match="Input/output"):
        await save_upload(UploadFile(Broken(b"abc")), tmp_path / "new.bin")  # type: ignore[arg-type]
    assert not (tmp_path / "new.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


class _HoldingExecutor(concurrent.futures.ThreadPoolExecutor):
    """One worker; the job of the named function is held (queued behind a sleep, or its
    worker asleep before or after the call), and ``reached`` set when it is submitted."""

    def __init__(self, step: str, how: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(max_workers=1)
        self.step, self.how, self.loop = step, how, loop
        self.reached = asyncio.Event()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        name = _callee_name(fn)
        if name != self.step or self.reached.is_set():
            return super().submit(fn, *args, **kwargs)
        ev = self.reached
        if self.how == "queued":
            super().submit(time.sleep, 0.3)
            self.loop.call_soon_threadsafe(ev.set)
            return super().submit(fn, *args, **kwargs)

        def held() -> Any:
            if self.how == "after":
                res = fn(*args, **kwargs)
                self.loop.call_soon_threadsafe(ev.set)
                time.sleep(0.3)
                return res
            self.loop.call_soon_threadsafe(ev.set)
            time.sleep(0.3)
            return fn(*args, **kwargs)
        return super().submit(held)


def _callee_name(fn: Any) -> str:
    """The name of the function a job calls: through a partial, and through the wrapper the
    suite's blocking-call detector puts around os's functions (it keeps the function it
    wraps in its closure)."""
    fn = getattr(fn, "func", fn)
    if getattr(fn, "__name__", "") == "wrapper" and getattr(fn, "__closure__", None):
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__, strict=True))
        if "func" in cells:
            fn = cells["func"].cell_contents
    return str(getattr(fn, "__name__", ""))


def _fd_links() -> dict[str, str]:
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return out


@pytest.mark.parametrize(("step", "how", "cancels"), [
    ("open", "queued", 1), ("open", "running", 1), ("close", "queued", 1),
    ("close", "running", 1), ("rename", "queued", 1), ("rename", "running", 1),
    ("rename", "after", 1), ("rename", "queued", 2), ("rename", "running", 2)])
@pytest.mark.asyncio
async def test_save_upload_cancelled_at_each_step_keeps_its_promise(
        backend: str, tmp_path: Path, step: str, how: str, cancels: int) -> None:
    """``save_upload`` cancelled while its open, close or rename waits in a busy executor, or
    runs there: before the rename, the destination is as it was; the rename, once asked for
    (queued or running), finishes before the CancelledError, even if a second cancellation
    comes while it is awaited; either way no temporary file and no descriptor stay behind.
    (Before: a close cancelled before a worker took it never ran — a descriptor leaked; an
    open cancelled as it ran created its file after the removal; a rename cut short raised
    CancelledError without waiting for the replaced destination; and, in the first mend of
    that, a second cancellation cancelled a rename still queued, which then never ran.) The
    backends whose opens, closes and renames go to the executor (on io_uring they are the
    kernel's; Linux AIO's writer threads make the open, which
    tests/lowlevel/test_kernelops.py cancels at each step)."""
    if backend == "io_uring":
        pytest.skip("io_uring opens, closes and renames in the kernel, not the executor")
    if backend == "linux_aio" and step == "open":
        pytest.skip("Linux AIO's writer threads make the open, not the executor")
    loop = asyncio.get_running_loop()
    warm = _upload(b"")
    await save_upload(warm, tmp_path / "warm-up")  # the engine and its descriptors
    await warm.close()
    dest = tmp_path / "dest.bin"
    dest.write_bytes(b"OLD")
    data = os.urandom(100_000)
    executor = _HoldingExecutor(step, how, loop)
    loop.set_default_executor(executor)
    upload = _upload(data)
    before = _fd_links()
    task = asyncio.create_task(save_upload(upload, dest))
    await asyncio.wait_for(executor.reached.wait(), 10)
    task.cancel()
    for _ in range(cancels - 1):
        await asyncio.sleep(0.05)  # the task now waits for the rename's outcome
        assert not task.done()
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    want = data if step == "rename" else b"OLD"  # a rename asked for is not taken back
    assert dest.read_bytes() == want  # before the CancelledError, not some time after it
    await asyncio.sleep(0.6)  # the held job ends
    executor.shutdown(wait=True)
    await upload.close()
    assert dest.read_bytes() == want
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest.bin", "warm-up"]
    assert [v for k, v in _fd_links().items() if k not in before] == []


@pytest.fixture(scope="module")
def upload_8mib() -> bytes:
    return os.urandom(8 << 20)  # made before the loop runs: drawing it there holds the loop


@pytest.mark.asyncio
async def test_save_upload_cancelled_while_it_writes_keeps_its_promise(
        backend: str, tmp_path: Path, upload_8mib: bytes) -> None:
    """An upload held in memory is one write of all its bytes (8 MiB: a kernel worker's).
    Cancelled after each number of loop turns — during its open, its write, its close or its
    rename — ``save_upload`` either finishes (the destination whole) or raises
    CancelledError with the destination as it was, and no temporary file or descriptor stays
    behind (an open the cancellation cut short is closed and removed when it ends, as the
    docstring says: soon after)."""
    data = upload_8mib
    warm = _upload(b"")
    await save_upload(warm, tmp_path / "warm-up")  # the engine and its descriptors
    await warm.close()
    dest = tmp_path / "dest.bin"
    before = _fd_links()
    outcomes = set()
    for turns in range(12):
        dest.write_bytes(b"OLD")
        upload = _upload(data, spooled=False)
        task = asyncio.create_task(save_upload(upload, dest))
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        try:
            assert await task == len(data)
            outcomes.add("done")
            assert dest.read_bytes() == data
        except asyncio.CancelledError:
            outcomes.add("cancelled")
            assert dest.read_bytes() in (b"OLD", data)  # (the rename, once asked for, stands)
        await upload.close()
        for _ in range(500):
            left = ([p.name for p in tmp_path.iterdir() if p.name.endswith(".part")],
                    [v for k, v in _fd_links().items() if k not in before])
            if left == ([], []):
                break
            await asyncio.sleep(0.01)
        assert left == ([], [])
    assert "cancelled" in outcomes


@pytest.mark.asyncio
async def test_a_small_upload_in_memory_is_written_inline(native_backend: str,
                                                          tmp_path: Path) -> None:
    """Held in memory (Starlette spools up to 1 MiB) and small: one inline write, no kernel
    worker hand-off; large ones and copies from disk go through the kernel queue."""
    aionative.set_inline_budget(1e6)
    try:
        data = os.urandom(5000)
        for spooled in (True, False):
            upload = _upload(data, spooled=spooled)
            before = aionative.engine_stats()["inline_writes"]
            assert await save_upload(upload, tmp_path / "out.bin") == len(data)
            assert aionative.engine_stats()["inline_writes"] - before == 1
            assert (tmp_path / "out.bin").read_bytes() == data
            await upload.close()
    finally:
        aionative.set_inline_budget(None)


@pytest.mark.asyncio
async def test_save_upload_replaces_the_destination_whole(tmp_path: Path) -> None:
    """The upload is written to a temporary file beside the destination and renamed over it
    when complete: a reader of the destination never sees a part; a symlink there is replaced,
    not written through; a failure (here: the destination is a directory, so the rename fails)
    leaves no temporary file."""
    data = PAYLOAD[:2 * 1024 * 1024 + 3]  # several chunks; spooled to disk below
    other = tmp_path / "other.bin"
    other.write_bytes(b"keep me")
    dest = tmp_path / "dest.bin"
    os.symlink(other, dest)
    seen: list[bytes] = []

    class Watching(io.RawIOBase):  # no descriptor: read with UploadFile.read, chunk by chunk
        def __init__(self) -> None:
            self.inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            seen.append(dest.read_bytes())  # what a reader sees mid-upload
            return self.inner.readinto(b)

    upload = UploadFile(io.BufferedReader(Watching()), filename="w")  # type: ignore[arg-type]
    assert await save_upload(upload, dest, chunk_size=512 * 1024, fsync=True) == len(data)
    assert len(seen) > 3 and all(s == b"keep me" for s in seen)  # the old file until the end
    assert not dest.is_symlink() and dest.read_bytes() == data
    assert other.read_bytes() == b"keep me"
    await upload.close()
    for source in (_upload(data), _upload(b"small", spooled=False)):
        (tmp_path / "dir").mkdir()
        with pytest.raises(IsADirectoryError):
            await save_upload(source, tmp_path / "dir")
        (tmp_path / "dir").rmdir()
        await source.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest.bin", "other.bin"]


@pytest.mark.asyncio
async def test_stream_file(tmp_path: Path) -> None:
    data = os.urandom(300_000)
    path = tmp_path / "s.bin"
    path.write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")

    async def collect(it: AsyncIterator[bytes]) -> list[bytes]:
        return [chunk async for chunk in it]

    chunks = await collect(await stream_file(path))
    assert b"".join(chunks) == data and [len(c) for c in chunks] == [65536] * 4 + [37856]
    assert b"".join(await collect(await stream_file(path, start=70_000, end=200_001,
                                                    chunk_size=50_000))) == data[70_000:200_001]
    assert b"".join(await collect(await stream_file(path, start=299_990, end=10**9))) == \
        data[-10:]
    assert await collect(await stream_file(path, start=5, end=5)) == []
    assert await collect(await stream_file(tmp_path / "empty")) == []
    with pytest.raises(ValueError):
        await stream_file(path, start=5, end=4)
    # opened when called: a missing file or a directory fails there, before any response
    with pytest.raises(FileNotFoundError):
        await stream_file(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        await stream_file(tmp_path)
    assert open_fds_to(tmp_path) == 0
    # abandoned after one chunk, with the next read in flight: closed, nothing pending
    it = await stream_file(path)
    assert open_fds_to(path) == 1
    assert await it.__anext__() == data[:65536]
    await it.aclose()  # type: ignore[attr-defined]
    assert open_fds_to(path) == 0 and aionative.engine_stats()["in_flight"] == 0
    # returned and never iterated (the handler failed after calling it): closed when dropped
    it = await stream_file(path)
    assert open_fds_to(path) == 1
    del it
    assert open_fds_to(path) == 0

    app = FastAPI()

    @app.get("/s/{name}")
    async def s(name: str) -> StreamingResponse:
        try:
            chunks = await stream_file(tmp_path / name)
        except FileNotFoundError:
            raise HTTPException(status_code=404) from None
        return StreamingResponse(chunks, media_type="application/octet-stream")

    async with client(app) as c:
        assert (await c.get("/s/s.bin")).content == data
        r = await c.get("/s/missing.bin")  # a 404, not a 200 that ends in an error
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    assert open_fds_to(path) == 0


@asynccontextmanager
async def running_lifespan(app: Any) -> AsyncIterator[dict[str, Any]]:
    """Drive an ASGI app's lifespan: startup on enter, shutdown on exit."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    state: dict[str, Any] = {}
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": state}
    task = asyncio.ensure_future(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield state
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task


@pytest.mark.asyncio
async def test_lifespan_creates_and_closes_the_engine(backend: str) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def mine(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        events.append("start:" + aionative.backend_info()["backend"])
        yield {"answer": 42}
        events.append("stop")

    apps = [(FastAPI(lifespan=lifespan), {}), (FastAPI(lifespan=engine_lifespan(mine)),
                                               {"answer": 42}),
            (FastAPI(lifespan=engine_lifespan(backend=backend)), {})]
    for app, expected in apps:

        @app.get("/answer")
        async def answer(request: Request) -> Any:
            return getattr(request.state, "answer", None)

        assert _engine.current_entry() is None
        async with running_lifespan(app) as state:
            entry = _engine.current_entry()
            assert entry is not None and entry.engine.backend == backend
            engine = entry.engine
            # the inner lifespan's state is what the server keeps, and what requests see
            assert state == expected
            assert await _get_json(app, "/answer", state) == expected.get("answer")
        assert engine.closed and _engine.current_entry() is None
    assert events == [f"start:{backend}", "stop"]


async def _get_json(app: Any, path: str, state: dict[str, Any]) -> Any:
    """A GET through the ASGI interface with the lifespan state in the scope (as a server
    passes it; httpx's transport does not)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "headers": [], "server": ("t", 80), "client": ("t", 1),
             "state": dict(state)}
    body = b""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal body
        body += message.get("body", b"")

    await app(scope, receive, send)
    return json.loads(body)


@pytest.fixture
def example_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The example app, built before the loop starts, as an app module is imported (its
    StaticFiles checks its directory when made, as Starlette's does)."""
    monkeypatch.setenv("EXAMPLE_DATA", str(tmp_path))
    spec = importlib.util.spec_from_file_location("fastapi_example",
                                                  REPO / "examples" / "fastapi_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fastapi_example", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.asyncio
async def test_example_app(example_module: Any) -> None:
    module = example_module
    data = PAYLOAD[:2_000_000]
    async with running_lifespan(module.app), client(module.app) as c:
        assert (await c.post("/files", files={"file": ("d.bin", data)})).json() == \
            {"name": "d.bin", "bytes": len(data)}
        r = await c.get("/files/d.bin")
        assert r.content == data
        assert r.headers["content-disposition"] == 'attachment; filename="d.bin"'
        r = await c.get("/files/d.bin", headers={"range": "bytes=10-19"})
        assert r.status_code == 206 and r.content == data[10:20]
        r = await c.get("/files/d.bin", headers={"if-none-match": r.headers["etag"]})
        assert r.status_code == 304
        assert (await c.get("/stream/d.bin")).content == data
        assert (await c.get("/head/d.bin")).json()["name"] == "d.bin"
        assert (await c.get("/head/none.bin")).status_code == 404
        assert (await c.get("/files/..")).status_code in (400, 404)
        assert (await c.get("/static/hello.txt")).text == "hello from aionative\n"
        assert (await c.get("/engine")).json()["backend"] == aionative.get_engine().backend


@pytest.mark.asyncio
async def test_stream_file_survives_close_engine_between_chunks(native_backend: str,
                                                                tmp_path: Path) -> None:
    """close_engine() between two chunks of stream_file: the next read goes to the loop's new
    engine and every byte comes out ("engine is closed" before, after the second chunk)."""
    data = PAYLOAD[:1 << 20]
    path = tmp_path / "s.bin"
    path.write_bytes(data)
    got = []
    async for chunk in await stream_file(path, chunk_size=65536):
        got.append(chunk)
        if len(got) == 2:
            aionative.close_engine()
    assert b"".join(got) == data
    assert open_fds_to(tmp_path) == 0


@pytest.mark.asyncio
async def test_failed_upload_is_removed_off_the_loop_s_thread(tmp_path: Path,
                                                              blocking_calls: list[str]  # noqa: F811
                                                              ) -> None:
    """A failed upload's temporary file is removed through the engine (a worker where the
    kernel has no unlinkat), not by an ``os.unlink`` on the loop's thread; it is gone when
    ``save_upload`` raises."""
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):
        await save_upload(_upload(b"small", spooled=False), tmp_path / "dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]
    assert blocking_calls == [], "\n".join(blocking_calls)
