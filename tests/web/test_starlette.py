"""aionative.starlette against Starlette itself, through httpx's ASGI transport and direct ASGI
calls: the same request to both ``FileResponse``s (and ``StaticFiles``) must give the same
status, headers and bytes, except where aionative differs on purpose (304s, too many ranges,
exact Content-Length when a file grows) — those are tested for what they are."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse as StarletteFileResponse
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles as StarletteStaticFiles

import aionative
import aionative.starlette
from aionative import _kernelops, _static_lookup
from aionative._http_ranges import MalformedRange, UnsatisfiableRange, parse_range
from aionative.starlette import FileResponse, StaticFiles
from tests.support import child_env, open_fds_to

pytestmark = pytest.mark.usefixtures("backend")

CHUNK = FileResponse.chunk_size
SIZES = {"empty.bin": 0, "one.bin": 1, "small.txt": 1000, "exact.bin": 2 * CHUNK,
         "big.bin": 3 * CHUNK + 1234}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    directory = tmp_path / "files"
    directory.mkdir()
    for name, size in SIZES.items():
        (directory / name).write_bytes(os.urandom(size))
    return directory


def _options(request: Request, path: Path) -> dict[str, Any]:
    mode = request.query_params.get("mode", "")
    if mode == "stat":
        return {"stat_result": os.stat(path)}
    if mode == "filename":
        return {"filename": "naïve résumé.txt"}
    if mode == "ascii-name":
        return {"filename": "report.txt", "content_disposition_type": "inline"}
    if mode == "media":
        return {"media_type": "application/x-custom", "headers": {"cache-control": "no-store"}}
    if mode == "404":
        return {"status_code": 404}
    return {}


def differential_app(directory: Path) -> Starlette:
    def route(cls: type[StarletteFileResponse]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            path = directory / request.path_params["name"]
            return cls(path, **_options(request, path))
        return endpoint

    methods = ["GET", "HEAD", "POST"]
    return Starlette(routes=[Route("/ours/{name}", route(FileResponse), methods=methods),
                             Route("/theirs/{name}", route(StarletteFileResponse),
                                   methods=methods)])


def normalised(response: httpx.Response) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, raw headers and body with a multipart boundary replaced by a fixed one."""
    headers = list(response.headers.raw)
    body = response.content
    m = re.search(rb"boundary=([0-9a-f]+)", response.headers.get("content-type", "").encode())
    if m:
        boundary = m.group(1)
        headers = [(k, v.replace(boundary, b"B" * len(boundary))) for k, v in headers]
        body = body.replace(boundary, b"B" * len(boundary))
    return response.status_code, headers, body


def range_cases(size: int) -> list[str]:
    last = max(size - 1, 0)
    return [
        "bytes=0-0", "bytes=0-9", "bytes=10-", "bytes=-10", "bytes=-0", "bytes=0-",
        f"bytes={last}-", f"bytes={last}-{size + 100}", f"bytes=-{size + 5}", f"bytes={size}-",
        f"bytes={size + 10}-{size + 20}", "bytes=0-9,20-29", "bytes=0-9,5-15", "bytes=0-9,10-19",
        "bytes=50-60,0-9,100-", "bytes=9-5", "bytes=abc", "bytes=", "bytes=,", "bytes=-",
        "items=0-9", "bytes0-9", "BYTES = 0-4", "bytes=0-9, -5", "bytes=1-1,3-3,5-5,7-7",
        f"bytes={CHUNK - 6}-{CHUNK + 5}", f"bytes=0-{CHUNK - 1},{CHUNK}-{2 * CHUNK - 1}",
        f"bytes={CHUNK}-,0-{CHUNK - 1}", "bytes=0-9,x-y", "bytes=0-9-12",
        ",".join(["bytes=0-0"] + [f"{i}-{i}" for i in range(2, 198, 2)]),  # 99 ranges
    ]


@pytest.mark.asyncio
async def test_same_status_headers_and_bytes_as_starlette(files: Path) -> None:
    app = differential_app(files)
    compared = 0
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://test") as client:
        for name, size in SIZES.items():
            etag = last_modified = None
            requests: list[tuple[str, str, dict[str, str]]] = [
                ("GET", "", {}), ("HEAD", "", {}), ("POST", "", {"range": "bytes=0-9"}),
                ("GET", "?mode=404", {"range": "bytes=0-9"})]
            requests += [("GET", "", {"range": r}) for r in range_cases(size)]
            requests += [("HEAD", "", {"range": r}) for r in ("bytes=0-9", "bytes=0-1,5-6",
                                                              f"bytes={size}-")]
            for mode in ("stat", "filename", "ascii-name", "media"):
                requests += [("GET", f"?mode={mode}", {}),
                             ("GET", f"?mode={mode}", {"range": "bytes=1-2,4-"})]
            probe = await client.get(f"/theirs/{name}")
            etag, last_modified = probe.headers["etag"], probe.headers["last-modified"]
            for if_range in (etag, last_modified, '"other"', "W/" + etag,
                             formatdate(0, usegmt=True)):
                requests.append(("GET", "", {"range": "bytes=0-4", "if-range": if_range}))
            for method, query, headers in requests:
                ours = await client.request(method, f"/ours/{name}{query}", headers=headers)
                theirs = await client.request(method, f"/theirs/{name}{query}", headers=headers)
                assert normalised(ours) == normalised(theirs), (name, method, query, headers)
                compared += 1
    assert compared > 250


@pytest.mark.asyncio
async def test_conditional_requests_get_304(files: Path) -> None:
    """Beyond Starlette's FileResponse (which sends 200): 304 for If-None-Match and
    If-Modified-Since, with the headers Starlette's StaticFiles puts on its 304."""
    app = differential_app(files)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://test") as client:
        first = await client.get("/ours/small.txt")
        etag, modified = first.headers["etag"], first.headers["last-modified"]
        mtime = os.stat(files / "small.txt").st_mtime
        cases = [
            ({"if-none-match": etag}, 304), ({"if-none-match": f'"x", W/{etag}'}, 304),
            ({"if-none-match": "*"}, 304), ({"if-none-match": '"x"'}, 200),
            ({"if-modified-since": modified}, 304),
            ({"if-modified-since": formatdate(mtime + 3600, usegmt=True)}, 304),
            ({"if-modified-since": formatdate(mtime - 3600, usegmt=True)}, 200),
            # the same instant one hour east: Starlette's StaticFiles compares the clock
            # fields and misses it; RFC 9110 compares instants
            ({"if-modified-since": formatdate(mtime + 3600, localtime=False)
              .replace("-0000", "+0100")}, 304),
            ({"if-modified-since": "not a date"}, 200),
            # dates calendar.timegm refuses (years past 9999) are invalid, so ignored
            ({"if-modified-since": "Mon, 01 Jan 99999 00:00:00 GMT"}, 200),
            ({"if-modified-since": "01 Jan 10000 00:00:00"}, 200),
            ({"if-modified-since": "Mon, 01 Jan 2020 00:00:00 +99999999999999999999"}, 200),
            # If-None-Match decides when present (RFC 9110 §13.1.3)
            ({"if-none-match": '"x"', "if-modified-since": modified}, 200),
            ({"if-none-match": etag, "range": "bytes=0-4"}, 304),
        ]
        for headers, status in cases:
            for method in ("GET", "HEAD"):
                r = await client.request(method, "/ours/small.txt", headers=headers)
                assert r.status_code == status, (method, headers)
                if status == 304:
                    assert r.content == b""
                    assert r.headers["etag"] == etag
                    assert "content-length" not in r.headers
                    assert "last-modified" not in r.headers
                theirs = await client.request(method, "/theirs/small.txt", headers=headers)
                assert theirs.status_code == (206 if "range" in headers else 200)
        # not for other methods, nor for a response that is not a 200
        r = await client.post("/ours/small.txt", headers={"if-none-match": etag})
        assert r.status_code == 200
        r = await client.get("/ours/small.txt?mode=404", headers={"if-none-match": etag})
        assert r.status_code == 404 and len(r.content) == 1000


def test_range_parser_is_linear_and_bounded() -> None:
    """CVE-2025-62727 class: no Range header costs more than time linear in its length.

    Through the 100-range cap (what a request meets), and with the cap lifted, so that the
    per-range work — split, strip, convert, sort, merge — runs on 12,500-100,000 ranges; and
    under the cap with each of 99 ranges made long by whitespace or digits."""
    size = 1 << 20
    cap, uncapped = FileResponse.max_ranges, sys.maxsize

    def padded(n: int) -> str:  # 99 ranges of about n/99 characters each, mostly spaces
        pad = " " * (n // 200)
        return "bytes=" + ",".join(f"{pad}{i * 10}-{i * 10 + 5}{pad}" for i in range(99))

    def long_numbers(n: int) -> str:  # 99 ranges of 500- to 4,000-digit numbers (int() works)
        digits = "0" * (n // 200)
        return "bytes=" + ",".join(f"{digits}{i}-{digits}{i + 1}" for i in range(99))

    shapes: list[tuple[str, Callable[[int], str], int, str | None]] = [
        ("many ranges", lambda n: "bytes=" + ",".join(f"{i}-{i}" for i in range(n // 8)),
         cap, "416"),
        ("overlapping", lambda n: "bytes=" + ",".join(["0-1048575"] * (n // 10)), cap, "416"),
        ("commas", lambda n: "bytes=0-1" + "," * n, cap, "416"),
        ("dashes", lambda n: "bytes=0" + "-" * n, cap, "400"),
        ("spaces", lambda n: "bytes=" + " " * n + "0-1", cap, None),
        ("digits", lambda n: "bytes=" + "1" * n + "-", cap, "400"),
        ("99 padded ranges", padded, cap, "ranges"),
        ("99 long numbers", long_numbers, cap, "ranges"),
        # the cap lifted: the loop, the sort and the merge at scale
        ("many ranges, uncapped",
         lambda n: "bytes=" + ",".join(f"{i}-{i}" for i in range(n // 8)), uncapped, "ranges"),
        ("reversed, uncapped", lambda n: "bytes=" + ",".join(
            f"{2 * i}-{2 * i}" for i in range(n // 12, 0, -1)), uncapped, "ranges"),
        ("overlapping, uncapped", lambda n: "bytes=" + ",".join(["0-1048575"] * (n // 10)),
         uncapped, "ranges"),
        ("commas, uncapped", lambda n: "bytes=0-1" + "," * n, uncapped, "ranges"),
    ]
    def parse(header: str, max_ranges: int) -> tuple[Any, float]:
        t0 = time.perf_counter()
        try:
            result: Any = parse_range(header, size, max_ranges)
        except UnsatisfiableRange:
            result = "416"
        except Exception as exc:  # noqa: BLE001 - only the two kinds below are allowed
            assert type(exc) is MalformedRange, (shape, exc)
            result = "400"
        return result, time.perf_counter() - t0

    for shape, make, max_ranges, expected in shapes:
        small, large = make(100_000), make(800_000)
        for _ in range(3):  # a busy machine: the best of up to three measurements
            (r1, t1), (r2, t2) = parse(small, max_ranges), parse(large, max_ranges)
            # 8x the length: a linear parser takes ~8x (a sort, n log n, ~9x); a quadratic 64x.
            # Under the cap it is also what a request meets: bounded in absolute terms.
            fast = max_ranges == uncapped or t2 < 0.5
            if fast and t2 < 24 * t1 + 0.02:
                break
        else:
            raise AssertionError((shape, t1, t2))
        for result in (r1, r2):
            assert result in ("416", "400") or isinstance(result, list), shape
            if expected == "ranges":  # the per-range work really ran
                assert isinstance(result, list), (shape, result)
            elif expected is not None:
                assert result == expected, (shape, result)
    # the shapes' results, as a check that they parse as intended
    assert len(parse_range(padded(1000), size, cap)) == 99
    assert parse_range("bytes=" + ",".join(f"{i}-{i}" for i in range(5000)), size,
                       uncapped) == [(0, 5000)]
    assert len(parse_range("bytes=" + ",".join(f"{2 * i}-{2 * i}" for i in range(5000, 0, -1)),
                           size, uncapped)) == 5000


@pytest.mark.asyncio
async def test_range_floods_are_4xx_or_206_never_500(files: Path) -> None:
    app = differential_app(files)
    size = SIZES["big.bin"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://test") as client:
        many = "bytes=" + ",".join(f"{i}-{i}" for i in range(0, 20_000, 2))  # 10,000 ranges
        t0 = time.perf_counter()
        r = await client.get("/ours/big.bin", headers={"range": many})
        assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{size}"
        # Starlette ignores the header and sends the whole file (200) — RFC 9110 §15.5.17
        # allows rejecting "an excessive number of small or overlapping ranges": we do.
        theirs = await client.get("/theirs/big.bin", headers={"range": many})
        assert theirs.status_code == 200 and len(theirs.content) == size
        overlapping = "bytes=" + ",".join(f"{i}-{size - 1}" for i in range(99))
        r = await client.get("/ours/big.bin", headers={"range": overlapping})
        assert r.status_code == 206 and r.content == (files / "big.bin").read_bytes()
        assert r.headers["content-range"] == f"bytes 0-{size - 1}/{size}"
        huge = "bytes=" + " ," * 400_000 + "0-1"
        r = await client.get("/ours/big.bin", headers={"range": huge})
        assert r.status_code == 416
        assert time.perf_counter() - t0 < 5


async def _call(app: Any, scope_extra: dict[str, Any], receive: Any = None,
                send_hook: Callable[[dict[str, Any]], Any] | None = None
                ) -> list[dict[str, Any]]:
    """Call an ASGI app directly; returns the messages it sent."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": "GET", "scheme": "http", "path": "/",
             "raw_path": b"/", "root_path": "", "query_string": b"", "headers": [],
             "server": ("test", 80), "client": ("test", 1)}
    scope.update(scope_extra)
    messages: list[dict[str, Any]] = []

    async def default_receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)
        if send_hook is not None:
            await send_hook(message)

    await app(scope, receive or default_receive, send)
    return messages


def append(path: Path, data: bytes) -> None:
    """Synchronously, so the file has changed before the response's next step."""
    with open(path, "ab") as f:
        f.write(data)


@pytest.mark.asyncio
async def test_pathsend_when_the_server_offers_it(files: Path) -> None:
    scope = {"extensions": {"http.response.pathsend": {}}}
    for name in ("big.bin", "empty.bin"):
        path = files / name
        ours = await _call(FileResponse(path), scope)
        theirs = await _call(StarletteFileResponse(path), scope)
        assert ours == theirs
        assert ours[-1] == {"type": "http.response.pathsend", "path": str(path)}
        assert open_fds_to(path) == 0
    # a range is read and sent by the response itself, as Starlette does
    ranged = {**scope, "headers": [(b"range", b"bytes=0-9")]}
    ours = await _call(FileResponse(files / "big.bin"), ranged)
    assert ours[0]["status"] == 206
    assert ours[-1]["body"] == (files / "big.bin").read_bytes()[:10]
    # StaticFiles' response serves the descriptor it checked, never the path by name
    for name in ("big.bin", "small.txt"):
        ours = await _call(StaticFiles(directory=files), {**scope, "path": f"/{name}"})
        assert all(m["type"] != "http.response.pathsend" for m in ours)
        body = b"".join(m["body"] for m in ours if m["type"] == "http.response.body")
        assert body == (files / name).read_bytes()
        assert open_fds_to(files / name) == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("spec", ["2.3", "2.4"])
async def test_client_disconnect_mid_stream(files: Path, spec: str) -> None:
    """The client goes away after two chunks while send() blocks (ASGI 2.3: the server reports
    http.disconnect) or raises (2.4): the response stops, its descriptor is closed and the
    engine has nothing left in flight."""
    path = files / "big.bin"
    gone = asyncio.Event()
    bodies: list[bytes] = []
    ran: list[bool] = []

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def hook(message: dict[str, Any]) -> None:
        if message["type"] != "http.response.body":
            return
        bodies.append(message["body"])
        if len(bodies) == 2:
            gone.set()
            if spec == "2.4":
                raise OSError("client disconnected")
            await asyncio.Event().wait()  # a send stuck on a dead socket

    async def done() -> None:
        ran.append(True)

    response = FileResponse(path, background=BackgroundTask(done))
    scope = {"asgi": {"version": "3.0", "spec_version": spec}}
    if spec == "2.4":
        with pytest.raises(OSError, match="client disconnected"):
            await asyncio.wait_for(_call(response, scope, receive, hook), 5)
    else:
        await asyncio.wait_for(_call(response, scope, receive, hook), 5)
        assert ran == [True]  # Starlette runs the background task after a disconnect too
    assert len(bodies) == 2 and b"".join(bodies) == path.read_bytes()[:2 * CHUNK]
    assert open_fds_to(path) == 0
    assert aionative.engine_stats()["in_flight"] == 0


@pytest.mark.asyncio
async def test_next_chunk_is_read_while_one_is_sent(files: Path) -> None:
    path = files / "big.bin"
    in_flight: list[int] = []

    async def hook(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            in_flight.append(aionative.engine_stats()["in_flight"])

    messages = await _call(FileResponse(path), {}, None, hook)
    body = b"".join(m["body"] for m in messages if m["type"] == "http.response.body")
    assert body == path.read_bytes()
    # four chunks: while each of the first three is sent, the next one's read is in flight
    assert in_flight == [1, 1, 1, 0]


class _GatedEngine:
    """The loop's engine, with every read after the first held (not yet given to the real
    engine) until ``gate`` is set: a read that takes as long as the test wants."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.gate = asyncio.Event()
        self.reads: list[asyncio.Future[bytes]] = []
        self.tasks: list[asyncio.Task[None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def pread(self, fd: int, size: int, offset: int) -> asyncio.Future[bytes]:
        if not self.reads:
            fut = self.real.pread(fd, size, offset)
        else:
            fut = asyncio.get_running_loop().create_future()

            async def later() -> None:
                await self.gate.wait()
                try:
                    fut.set_result(await self.real.pread(fd, size, offset))
                except Exception as exc:  # noqa: BLE001 - handed to the reader
                    fut.set_exception(exc)

            self.tasks.append(asyncio.ensure_future(later()))
        self.reads.append(fut)
        return fut


@pytest.mark.asyncio
async def test_cancelled_while_reading_closes_after_the_read(files: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """A task cancelled from outside (server shutdown) mid-transfer: the descriptor stays open
    while the read in flight is not over (a read names it by number: closed, the number could
    be reused and another file read), and is closed once it is; nothing stays with the
    engine."""
    path = files / "big.bin"
    gated = _GatedEngine(aionative.get_engine())
    monkeypatch.setattr(aionative.starlette, "get_engine", lambda: gated)
    response = FileResponse(path, stat_result=os.stat(path))
    response._adopt(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
    sending = asyncio.Event()

    async def hook(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sending.set()
            await asyncio.Event().wait()  # a send stuck on a slow client

    task = asyncio.ensure_future(_call(response, {"asgi": {"spec_version": "2.4"}}, None, hook))
    await sending.wait()
    assert len(gated.reads) == 2 and not gated.reads[1].done()  # chunk 2 read while 1 is sent
    task.cancel()
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done() and open_fds_to(path) == 1  # waiting for the read, still open
    gated.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(gated.reads[1].result()) == CHUNK  # the read saw the file, not a closed number
    assert open_fds_to(path) == 0
    await asyncio.gather(*gated.tasks)
    assert aionative.engine_stats()["in_flight"] == 0


@pytest.mark.asyncio
async def test_file_changing_size_while_served(files: Path) -> None:
    path = files / "big.bin"
    original = path.read_bytes()

    # Grows after the headers: exactly the announced bytes go out (Starlette sends the extra
    # bytes past its Content-Length, which a server then rejects).
    async def grow(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":  # (the server's own work: off the loop)
            await asyncio.to_thread(append, path, b"x" * 300_000)

    messages = await _call(FileResponse(path), {}, None, grow)
    body = b"".join(m["body"] for m in messages if m["type"] == "http.response.body")
    assert dict(messages[0]["headers"])[b"content-length"] == str(len(original)).encode()
    assert body == original and messages[-1]["more_body"] is False

    # Shrinks after the headers: the response cannot keep its promise and fails loudly (the
    # server closes the connection) rather than end short or pad.
    path.write_bytes(original)

    async def shrink(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            os.truncate(path, 10_000)

    with pytest.raises(RuntimeError, match="shorter than expected"):
        await _call(FileResponse(path), {}, None, shrink)
    assert open_fds_to(path) == 0
    assert aionative.engine_stats()["in_flight"] == 0

    # Shrunk between the stat and the first read: nothing was sent, so it is a plain error
    # (the server answers 500)
    path.write_bytes(original)
    st = os.stat(path)
    os.truncate(path, 100)
    sent: list[dict[str, Any]] = []
    with pytest.raises(RuntimeError, match="shorter than expected"):
        await _call(FileResponse(path, stat_result=st), {}, None,
                    lambda m: asyncio.sleep(0, sent.append(m)))  # type: ignore[func-returns-value]
    assert sent == []


@pytest.mark.asyncio
async def test_errors_match_starlette(files: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock = _unix_socket(tmp_path / "sock")
    cases = [(files / "missing.bin", "does not exist"), (files, "is not a file"),
             (fifo, "is not a file"), (tmp_path / "sock", "is not a file")]
    try:
        for path, message in cases:
            for method in ("GET", "HEAD"):
                for cls in (FileResponse, StarletteFileResponse):
                    with pytest.raises(RuntimeError, match=message):
                        await _call(cls(path), {"method": method})
            # a conditional GET opens too, and a GET offered pathsend with a range
            for extra in ({"headers": [(b"if-none-match", b'"x"')]},
                          {"headers": [(b"range", b"bytes=0-1")],
                           "extensions": {"http.response.pathsend": {}}}):
                with pytest.raises(RuntimeError, match=message):
                    await _call(FileResponse(path), extra)
    finally:
        sock.close()
    # With stat_result= given, the file is opened when the body is sent: a FIFO is refused
    # there too, not waited on (Starlette would wait for a writer).
    with pytest.raises(RuntimeError, match="is not a file"):
        await asyncio.wait_for(_call(FileResponse(fifo, stat_result=os.stat(files / "one.bin")),
                                     {}), 5)


def _unix_socket(path: Path) -> socket.socket:
    """A listening Unix socket at `path` (bound relative to its directory: tmp_path may be
    longer than sun_path's 108 bytes)."""
    sock = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        sock.bind(path.name)
    finally:
        os.chdir(cwd)
    return sock


@pytest.mark.asyncio
async def test_fifo_whose_open_goes_to_a_kernel_worker(tmp_path: Path) -> None:
    """io_uring tries an openat inline with O_NONBLOCK and, when the name is not in the dentry
    cache, retries it in an io-wq worker — without O_NONBLOCK unless it was asked for, so a
    FIFO without a writer would hold the request forever. A name through /proc/self/fd/N
    cannot be resolved from the cache alone (procfs revalidates it), which forces that retry
    without having to drop the caches. Both responses must answer at once."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "f.txt").write_bytes(b"plain")
    dir_fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    via_proc = f"/proc/self/fd/{dir_fd}"
    try:
        with pytest.raises(RuntimeError, match="is not a file"):
            await asyncio.wait_for(_call(FileResponse(f"{via_proc}/fifo"), {}), 5)
        for follow in (False, True):
            static = StaticFiles(directory=via_proc, follow_symlink=follow)
            with pytest.raises(HTTPException) as info:
                await asyncio.wait_for(_call(static, {"path": "/fifo"}), 5)
            assert info.value.status_code == 404
            messages = await _call(static, {"path": "/f.txt"})
            assert messages[0]["status"] == 200 and messages[-1]["body"] == b"plain"
    finally:
        # If an open is stuck waiting for a writer, be one: the test fails, and ends.
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        os.close(dir_fd)


@pytest.mark.blocks_the_loop("its server side or hook, called back from the response, "
                              "touches files synchronously, on purpose")
@pytest.mark.asyncio
async def test_conditional_get_validators_and_body_of_one_file(files: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """A conditional GET that is not a 304 sends the file its validators (ETag, Length,
    Last-Modified) describe: the file is replaced right after whatever looked at it first
    (a stat of the path, or the open) — the bytes sent are still the old file's."""
    path = files / "small.txt"
    old, new = path.read_bytes(), b"n" * 3000
    swapped: list[bool] = []

    def swap() -> None:
        if not swapped:
            swapped.append(True)
            (files / ".next").write_bytes(new)
            os.replace(files / ".next", path)

    real_stat, real_open_stat = _kernelops.stat, aionative.starlette.open_stat

    async def stat_then_swap(*args: Any, **kwargs: Any) -> os.stat_result:
        result = await real_stat(*args, **kwargs)
        swap()
        return result

    async def open_then_swap(*args: Any, **kwargs: Any) -> tuple[int, os.stat_result]:
        result = await real_open_stat(*args, **kwargs)
        swap()
        return result

    monkeypatch.setattr(_kernelops, "stat", stat_then_swap)
    monkeypatch.setattr(aionative.starlette, "open_stat", open_then_swap)
    for conditional in ((b"if-none-match", b'"other"'),
                        (b"if-modified-since", formatdate(0, usegmt=True).encode())):
        swapped.clear()
        path.write_bytes(old)
        os.utime(path, (1_000_000_000, 1_000_000_000))
        expected = StarletteFileResponse(path, stat_result=os.stat(path)).headers["etag"]
        messages = await _call(FileResponse(path), {"headers": [conditional]})
        headers = dict(messages[0]["headers"])
        body = b"".join(m["body"] for m in messages if m["type"] == "http.response.body")
        assert swapped and messages[0]["status"] == 200
        assert body == old and headers[b"content-length"] == str(len(old)).encode()
        assert headers[b"etag"].decode() == expected


@pytest.mark.asyncio
async def test_background_runs_and_method_head_is_accepted(files: Path) -> None:
    ran: list[str] = []

    async def note(what: str) -> None:
        ran.append(what)

    path = files / "small.txt"
    await _call(FileResponse(path, background=BackgroundTask(note, "get")), {})
    # Starlette skips the background task of a 416 (it returns another response): we run it
    await _call(FileResponse(path, background=BackgroundTask(note, "416")),
                {"headers": [(b"range", b"bytes=5000-")]})
    messages = await _call(FileResponse(path, method="HEAD"), {})
    assert ran == ["get", "416"]
    assert messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert dict(messages[0]["headers"])[b"content-length"] == b"1000"


@pytest.mark.asyncio
async def test_unsent_response_closes_its_descriptor(files: Path) -> None:
    """StaticFiles hands the descriptor it opened to the response; a response never sent
    (dropped by a middleware) closes it when collected."""
    static = StaticFiles(directory=files)
    scope = {"type": "http", "method": "GET", "headers": [], "path": "/big.bin"}
    response = await static.get_response("big.bin", scope)
    assert isinstance(response, FileResponse) and open_fds_to(files / "big.bin") == 1
    del response
    assert open_fds_to(files / "big.bin") == 0


# ---------------------------------------------------------------- StaticFiles


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/static (served) with an index, a subdirectory, symlinks in and out; secrets
    beside it."""
    root = tmp_path / "root"
    static = root / "static"
    (static / "sub").mkdir(parents=True)
    (static / "index.html").write_text("<h1>index</h1>")
    (static / "404.html").write_text("not here")
    (static / "a.txt").write_text("A" * 100)
    (static / "sub" / "b.txt").write_text("B")
    (static / "sub" / "index.html").write_text("sub index")
    (root / "secret.txt").write_text("SECRET")
    (root / "outside").mkdir()
    (root / "outside" / "c.txt").write_text("SECRET-C")
    (root / "static-private").mkdir()
    (root / "static-private" / "key.txt").write_text("SECRET-KEY")
    os.symlink("a.txt", static / "link_in")
    os.symlink("../secret.txt", static / "link_out")
    os.symlink(root / "secret.txt", static / "abs_link_out")
    os.symlink("../outside", static / "dirlink_out")
    os.symlink(root / "static" / "sub", static / "dirlink_in")
    return root


TRAVERSALS = [
    "/../secret.txt", "/sub/../../secret.txt", "/..%2fsecret.txt", "/%2e%2e/secret.txt",
    "/%2e%2e%2fsecret.txt", "/..%5csecret.txt", "//etc/passwd", "/%2fetc/passwd",
    "/../static-private/key.txt", "/..", "/link_out", "/abs_link_out", "/dirlink_out/c.txt",
    "/a.txt%00.html", "/%252e%252e/secret.txt", "/....//secret.txt", "/./../secret.txt",
    "/sub/%2e%2e/%2e%2e/secret.txt", "/" + "a" * 5000,
]


def _decoded(raw: str) -> str:
    """What a server puts in scope["path"]: the percent-decoded path (uvicorn, hypercorn)."""
    from urllib.parse import unquote
    return unquote(raw)


@pytest.mark.asyncio
@pytest.mark.parametrize("follow_symlink", [False, True])
async def test_static_files_never_escape(tree: Path, follow_symlink: bool) -> None:
    secrets = [p.read_bytes() for p in (tree / "secret.txt", tree / "outside" / "c.txt",
                                        tree / "static-private" / "key.txt")]
    ours = StaticFiles(directory=tree / "static", follow_symlink=follow_symlink)
    theirs = StarletteStaticFiles(directory=tree / "static", follow_symlink=follow_symlink)
    for raw in TRAVERSALS:
        results = []
        for app in (ours, theirs):
            try:
                messages = await _call(app, {"path": _decoded(raw), "raw_path": raw.encode()})
            except Exception as exc:  # noqa: BLE001 - HTTPException is how StaticFiles says 404
                results.append(getattr(exc, "status_code", type(exc).__name__))
                continue
            body = b"".join(m.get("body", b"") for m in messages)
            results.append(messages[0]["status"])
            if follow_symlink and raw in ("/link_out", "/abs_link_out", "/dirlink_out/c.txt"):
                continue  # following symlinks out is what follow_symlink=True means
            assert not any(s in body for s in secrets), raw
        assert results[0] == results[1], (raw, results)
        if not follow_symlink:
            assert results[0] == 404, raw


@pytest.mark.asyncio
async def test_static_files_same_as_starlette(tree: Path) -> None:
    def app(cls: Any, **kw: Any) -> Starlette:
        return Starlette(routes=[Mount("/s", cls(directory=tree / "static", **kw))])

    for html in (False, True):
        ours, theirs = app(StaticFiles, html=html), app(StarletteStaticFiles, html=html)
        async with (httpx.AsyncClient(transport=httpx.ASGITransport(ours),
                                      base_url="http://t") as a,
                    httpx.AsyncClient(transport=httpx.ASGITransport(theirs),
                                      base_url="http://t") as b):
            etag = (await b.get("/s/a.txt")).headers["etag"]
            requests: list[tuple[str, str, dict[str, str]]] = [
                ("GET", "/s/a.txt", {}), ("HEAD", "/s/a.txt", {}), ("POST", "/s/a.txt", {}),
                ("GET", "/s/a.txt", {"range": "bytes=5-9,20-"}),
                ("GET", "/s/a.txt", {"if-none-match": etag}),
                ("HEAD", "/s/a.txt", {"if-none-match": etag}),
                ("GET", "/s/a.txt", {"if-modified-since": formatdate(time.time() + 60,
                                                                     usegmt=True)}),
                ("GET", "/s/link_in", {}), ("GET", "/s/dirlink_in/b.txt", {}),
                ("GET", "/s/sub/b.txt", {}), ("GET", "/s/missing", {}), ("GET", "/s/", {}),
                ("GET", "/s/sub", {}), ("GET", "/s/sub/", {}), ("GET", "/s", {}),
                ("GET", "/s/sub/missing.txt", {}), ("GET", "/s/a.txt/x", {}),
            ]
            for method, url, headers in requests:
                r1 = await a.request(method, url, headers=headers)
                r2 = await b.request(method, url, headers=headers)
                assert normalised(r1) == normalised(r2), (html, method, url, headers)


@pytest.mark.blocks_the_loop("its server side or hook, called back from the response, "
                              "touches files synchronously, on purpose")
@pytest.mark.asyncio
async def test_static_subclass_serving_another_file_sends_that_file(tmp_path: Path) -> None:
    """A subclass's ``file_response`` (Starlette's override point) that serves a
    precompressed sibling: the body is the sibling's, as with Starlette's class (before: the
    descriptor opened for the name asked went to the new response, which sent the first
    bytes of the uncompressed file labelled gzip)."""
    (tmp_path / "app.js").write_bytes(b"console.log('hello');\n" * 2000)
    gz = gzip.compress((tmp_path / "app.js").read_bytes())
    (tmp_path / "app.js.gz").write_bytes(gz)

    def app(static: Any, response: Any) -> Starlette:
        class Precompressed(static):  # type: ignore[misc, valid-type]
            def file_response(self, full_path: Any, stat_result: os.stat_result, scope: Any,
                              status_code: int = 200) -> Any:
                other = f"{full_path}.gz"
                return response(other, stat_result=os.stat(other),
                                headers={"content-encoding": "gzip"})
        return Starlette(routes=[Mount("/s", Precompressed(directory=tmp_path))])

    bodies = []
    for static, response in ((StaticFiles, FileResponse),
                             (StarletteStaticFiles, StarletteFileResponse)):
        async with (httpx.AsyncClient(transport=httpx.ASGITransport(app(static, response)),
                                      base_url="http://t") as client,
                    client.stream("GET", "/s/app.js") as r):
            bodies.append(b"".join([c async for c in r.aiter_raw()]))
    assert bodies[0] == bodies[1] == gz
    assert open_fds_to(tmp_path / "app.js") == 0


@pytest.mark.asyncio
async def test_static_subclass_lookup_path_is_honoured(tmp_path: Path) -> None:
    """A subclass's ``lookup_path`` (Starlette's override point for where a path leads) decides
    what is served, as with Starlette's class: here every ``*.txt`` path leads to one file
    outside the directory, and every other path to nothing (before: the override was never
    called, and the directory's own files were served)."""
    static_dir = tmp_path / "static"
    static_dir.mkdir()
    (static_dir / "a.txt").write_bytes(b"the directory's own file")
    (static_dir / "b.css").write_bytes(b"body {}")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(b"chosen by lookup_path" * 100)

    def app(static: Any) -> Starlette:
        class Remapped(static):  # type: ignore[misc, valid-type]
            def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
                if path.endswith(".txt"):
                    return str(elsewhere), os.stat(elsewhere)
                return "", None
        return Starlette(routes=[Mount("/s", Remapped(directory=static_dir))])

    results = []
    for static in (StaticFiles, StarletteStaticFiles):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app(static)),
                                     base_url="http://t") as client:
            results.append([(r.status_code, r.content) for r in
                            [await client.get(u) for u in ("/s/a.txt", "/s/b.css")]])
    assert results[0] == results[1] == [(200, elsewhere.read_bytes()), (404, b"Not Found")]
    assert open_fds_to(elsewhere) == 0


@pytest.mark.asyncio
async def test_static_subclass_response_without_a_stat_closes_every_descriptor(
        tmp_path: Path) -> None:
    """A subclass's ``file_response`` that builds ``FileResponse(full_path)`` without the
    stat: each GET closes what it opened (before: the response opened the file again and the
    descriptor StaticFiles had handed it stayed open, one a GET)."""
    page = tmp_path / "page.html"
    page.write_bytes(b"<p>hi</p>" * 10)

    class Cached(StaticFiles):
        def file_response(self, full_path: Any, stat_result: os.stat_result, scope: Any,
                          status_code: int = 200) -> Any:
            return FileResponse(full_path, status_code=status_code,
                                headers={"cache-control": "max-age=60"})

    app = Starlette(routes=[Mount("/s", Cached(directory=tmp_path))])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://t") as client:
        for _ in range(20):
            r = await client.get("/s/page.html")
            assert r.status_code == 200 and r.content == page.read_bytes()
            assert r.headers["cache-control"] == "max-age=60"
        await client.head("/s/page.html")
    gc.collect()
    assert open_fds_to(page) == 0


@pytest.mark.asyncio
async def test_static_directory_retargeted(tmp_path: Path) -> None:
    """The served directory is a symlink ("current" → a release) that a deploy retargets:
    the new target is served, and a narrower new target cannot be escaped through the old
    one's cached real path."""
    rel1, rel2 = tmp_path / "rel1", tmp_path / "rel2"
    (rel1 / "narrow").mkdir(parents=True)
    rel2.mkdir()
    (rel1 / "f.txt").write_text("one")
    (rel1 / "secret.txt").write_text("SECRET")
    (rel2 / "f.txt").write_text("two")
    os.symlink("../secret.txt", rel1 / "narrow" / "secret.txt")
    current = tmp_path / "current"
    os.symlink(rel1, current)
    static = Starlette(routes=[Mount("/", StaticFiles(directory=current))])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(static),
                                 base_url="http://t") as client:
        assert (await client.get("/f.txt")).text == "one"
        assert (await client.get("/secret.txt")).text == "SECRET"
        for target in (rel2, rel1 / "narrow"):
            tmp_link = tmp_path / "next"
            os.symlink(target, tmp_link)
            os.replace(tmp_link, current)
            if target == rel2:
                assert (await client.get("/f.txt")).text == "two"
            else:
                r = await client.get("/secret.txt")
                assert r.status_code == 404 and b"SECRET" not in r.content


async def _static_status(app: Any, path: str, scope_extra: dict[str, Any] | None = None
                         ) -> int | str:
    """The status a StaticFiles app answers `path` with (HTTPException included), or the name
    of the exception it raises (a server's 500)."""
    try:
        messages = await _call(app, {"path": path, "raw_path": path.encode(),
                                     **(scope_extra or {})})
    except HTTPException as exc:
        return exc.status_code
    except Exception as exc:  # noqa: BLE001 - compared between the two implementations
        return type(exc).__name__
    return int(messages[0]["status"])


@pytest.mark.asyncio
async def test_static_special_files_as_starlette(tree: Path) -> None:
    """What is not a regular file: a Unix socket (open fails with ENXIO), a FIFO (opened
    without waiting for a writer, then refused), a symlink loop (ELOOP: Starlette's stat
    raises it, a 500 — so here), a directory — the same answer as Starlette's, with html on
    and off and with follow_symlink on and off."""
    static = tree / "static"
    sock = _unix_socket(static / "sock")
    os.mkfifo(static / "fifo")
    os.symlink("loop", static / "loop")
    os.symlink("sock", static / "link_to_sock")
    paths = ["/sock", "/fifo", "/loop", "/loop/x", "/link_to_sock", "/sub", "/sub/", "/a.txt"]
    try:
        for html in (False, True):
            for follow in (False, True):
                ours = StaticFiles(directory=static, html=html, follow_symlink=follow)
                theirs = StarletteStaticFiles(directory=static, html=html, follow_symlink=follow)
                for path in paths:
                    expected = await _static_status(theirs, path)
                    assert await _static_status(ours, path) == expected, (html, follow, path)
                    if path in ("/sock", "/fifo", "/link_to_sock"):
                        assert expected == 404  # 404.html's status in html mode
                assert open_fds_to(static / "fifo") == 0
    finally:
        sock.close()


@pytest.mark.asyncio
async def test_static_unencodable_path_leaves_no_descriptor(tree: Path) -> None:
    """A path that cannot be encoded for the kernel (a lone surrogate) is a 404 — and nothing
    is opened for it: the directory's open is not submitted before the file's name fails."""
    static = tree / "static"
    for follow in (False, True):
        app = StaticFiles(directory=static, follow_symlink=follow)
        for path in ("/\ud800", "/a.txt/\udfff", "/sub/\ud800b"):
            scope = {"path": path, "raw_path": path.encode("utf-8", "surrogatepass")}
            with pytest.raises(HTTPException) as info:
                await _call(app, scope)
            assert info.value.status_code == 404
        await asyncio.sleep(0.05)  # anything submitted has completed by now
        assert open_fds_to(static) == 0 and open_fds_to(static / "sub") == 0


@pytest.mark.blocks_the_loop("its server side or hook, called back from the response, "
                              "touches files synchronously, on purpose")
@pytest.mark.asyncio
async def test_static_symlink_swapped_in_during_the_request(tree: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """The claim of StaticFiles (follow_symlink=False): a file replaced by a symlink out of the
    directory at any moment of a request never serves what the symlink points to.

    * before-open: after the path was checked and before it is opened — Starlette's window
      (it checks ``realpath``, then stats and opens the name): here the file is opened
      relative to its directory's descriptor without following a symlink, and a symlink met
      is checked as Starlette checks it, on the descriptor then opened, so it is refused (404);
    * after-open: between the open and the check: the descriptor is the file, served (200);
    * before-send: after the lookup, before the response runs, with the server offering
      ``http.response.pathsend`` — the checked descriptor is served, the path never handed to
      the server (which would open whatever the name means by then).

    Under the same swaps Starlette's StaticFiles serves the secret in the first and last."""
    static = tree / "static"
    target = static / "a.txt"
    original = target.read_bytes()
    secret = (tree / "secret.txt").read_bytes()
    swapped: list[bool] = []

    def swap() -> None:
        if not swapped:
            swapped.append(True)
            os.symlink(tree / "secret.txt", static / ".swap")
            os.replace(static / ".swap", target)

    real_realpath = os.path.realpath

    def realpath_then_swap(path: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_realpath(path, *args, **kwargs)
        if str(path).endswith("a.txt"):  # Starlette's (and the blocking lookup's) check
            swap()
        return result

    real_open_at = _static_lookup._open_at
    real_open_stat_blocking = _static_lookup.open_stat_blocking

    async def swap_then_open_at(eng: Any, dir_fd: int, name: bytes, *args: Any) -> Any:
        if name == b"a.txt":  # the engine's lookup opens the file by its name in the directory
            swap()
        return await real_open_at(eng, dir_fd, name, *args)

    async def open_at_then_swap(eng: Any, dir_fd: int, name: bytes, *args: Any) -> Any:
        result = await real_open_at(eng, dir_fd, name, *args)
        if name == b"a.txt":
            swap()
        return result

    def open_stat_blocking_then_swap(path: str) -> Any:
        result = real_open_stat_blocking(path)
        swap()
        return result

    scope: dict[str, Any] = {"type": "http", "method": "GET", "headers": [], "path": "/a.txt",
                             "extensions": {"http.response.pathsend": {}}}
    for moment in ("before-open", "after-open", "before-send"):
        swapped.clear()
        (static / ".fresh").write_bytes(original)
        os.replace(static / ".fresh", target)
        with monkeypatch.context() as patch:
            if moment == "before-open":
                patch.setattr(os.path, "realpath", realpath_then_swap)
                patch.setattr(_static_lookup, "_open_at", swap_then_open_at)
            elif moment == "after-open":
                patch.setattr(_static_lookup, "_open_at", open_at_then_swap)
                patch.setattr(_static_lookup, "open_stat_blocking",
                              open_stat_blocking_then_swap)
            status: int | str
            try:
                response = await StaticFiles(directory=static).get_response("a.txt", scope)
            except HTTPException as exc:
                status, body = exc.status_code, b""
            else:
                if moment == "before-send":
                    swap()
                messages = await _call(response, scope)
                status = int(messages[0]["status"])
                body = b""
                for m in messages[1:]:
                    if m["type"] == "http.response.pathsend":  # what the server would send
                        body += Path(m["path"]).read_bytes()
                    else:
                        body += m["body"]
        assert swapped, (moment, "the swap did not happen")
        assert secret not in body, moment
        if moment == "before-open":
            assert status == 404
        else:
            assert (status, body) == (200, original), moment
        assert open_fds_to(tree / "secret.txt") == 0


_AS_ANOTHER_USER = r"""
import asyncio, json, sys
import aionative
from starlette.exceptions import HTTPException
from starlette.staticfiles import StaticFiles as Theirs
from aionative.starlette import StaticFiles as Ours

root, backend = sys.argv[1], sys.argv[2]
aionative.set_default_backend(backend)
PATHS = ["/closed_dir", "/closed_dir/", "/closed_dir/index.html", "/unreadable.txt",
         "/unreadable_fifo", "/open_dir", "/open_dir/", "/ok.txt"]

async def status(app, path):
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "headers": []}
    messages = []
    async def send(m): messages.append(m)
    async def receive():
        await asyncio.Event().wait()
    try:
        await app(scope, receive, send)
    except HTTPException as exc:
        return exc.status_code
    except Exception as exc:
        return type(exc).__name__
    return messages[0]["status"]

async def main():
    assert aionative.get_engine().backend == backend
    out = {}
    for html in (False, True):
        for follow in (False, True):
            for name, cls in (("ours", Ours), ("theirs", Theirs)):
                app = cls(directory=root, html=html, follow_symlink=follow)
                out[f"{name} html={html} follow={follow}"] = {p: await status(app, p)
                                                              for p in PATHS}
    print(json.dumps(out))

asyncio.run(main())
"""


def _without_permission_override() -> None:
    """In the child, before exec: as root, drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from
    the bounding set, so the program run has file permissions checked (it is still root, the
    owner of the interpreter and the files); otherwise nothing to do."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(97)


def test_static_permission_errors(backend: str) -> None:
    """What the server may not read, in a process without root's permission override (a
    subprocess): a directory without read permission is 404 as in
    Starlette (it is stat-ed, not read), a FIFO likewise; an unreadable file is 401 (Starlette:
    found by stat, then a 500 opening it — the documented difference); no search permission on
    the way is 401 in both; index.html in a closed directory is an error (a 500) in both."""
    root = Path(tempfile.mkdtemp(prefix="aionative-perm-"))
    try:
        (root / "closed_dir").mkdir()
        (root / "closed_dir" / "index.html").write_text("closed index")
        (root / "open_dir").mkdir()
        (root / "open_dir" / "index.html").write_text("open index")
        (root / "unreadable.txt").write_text("unreadable")
        (root / "ok.txt").write_text("ok")
        os.mkfifo(root / "unreadable_fifo")
        for name in ("closed_dir", "unreadable.txt", "unreadable_fifo"):
            os.chmod(root / name, 0)
        os.chmod(root, 0o755)

        env = {**child_env(), "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([sys.executable, "-c", _AS_ANOTHER_USER, str(root), backend],
                              capture_output=True, text=True, env=env, cwd=root, timeout=60,
                              preexec_fn=_without_permission_override, check=False)
        if done.returncode == 97:
            pytest.skip("cannot drop CAP_DAC_OVERRIDE here")
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout)
    finally:
        for name in ("closed_dir", "unreadable.txt", "unreadable_fifo"):
            os.chmod(root / name, 0o755)
        shutil.rmtree(root)
    for html in (False, True):
        for follow in (False, True):
            ours = results[f"ours html={html} follow={follow}"]
            theirs = results[f"theirs html={html} follow={follow}"]
            assert ours["/unreadable.txt"] == 401
            assert theirs["/unreadable.txt"] == "PermissionError"
            del ours["/unreadable.txt"], theirs["/unreadable.txt"]
            assert ours == theirs, (html, follow, ours, theirs)
            assert ours["/closed_dir/index.html"] == 401
            assert ours["/unreadable_fifo"] == 404 and ours["/ok.txt"] == 200
            assert ours["/closed_dir"] == (404 if not html else "PermissionError")


@pytest.mark.asyncio
async def test_close_engine_between_chunks_of_a_response(native_backend: str,
                                                          files: Path) -> None:
    """close_engine() while a FileResponse is being sent (between two chunks): the next
    chunk's read goes to the loop's new engine and the body is whole ("engine is closed"
    before: the response failed after its first chunks)."""
    data = (files / "big.bin").read_bytes()
    assert len(data) > 3 * CHUNK
    sent = 0

    async def hook(message: dict[str, Any]) -> None:
        nonlocal sent
        if message.get("type") == "http.response.body":
            sent += 1
            if sent == 2:
                aionative.close_engine()

    messages = await _call(FileResponse(files / "big.bin"), {}, send_hook=hook)
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    assert body == data
    assert open_fds_to(files / "big.bin") == 0


def test_under_anyio_s_trio_backend_starlette_s_own_code_serves(tmp_path: Path) -> None:
    """The engine serves asyncio (and uvloop) only. Under another async library (trio,
    through anyio) FileResponse and StaticFiles run Starlette's own code: the same responses
    as Starlette's classes, never an error from inside the engine."""
    trio = pytest.importorskip("trio")
    (tmp_path / "a.txt").write_bytes(b"served under trio" * 500)

    def app(response: Any, static: Any) -> Starlette:
        return Starlette(routes=[
            Route("/f", lambda request: response(tmp_path / "a.txt")),
            Mount("/s", static(directory=tmp_path)),
        ])

    async def fetch(application: Starlette) -> list[tuple[int, bytes]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(application),
                                     base_url="http://t") as client:
            return [(r.status_code, r.content) for r in
                    [await client.get(u) for u in ("/f", "/s/a.txt", "/s/missing")]]

    ours = trio.run(fetch, app(FileResponse, StaticFiles))
    theirs = trio.run(fetch, app(StarletteFileResponse, StarletteStaticFiles))
    assert ours == theirs
    assert ours[0] == (200, (tmp_path / "a.txt").read_bytes()) and ours[2][0] == 404
    assert open_fds_to(tmp_path / "a.txt") == 0


# ---------------------------------------------------------------- the loop's thread

# What a blocking-call detector (blockbuster, which Starlette's own suite runs) flags among the
# calls a file lookup could make: each may wait for the disk, or ask the kernel for a path.
_BLOCKING = [(os, "stat"), (os, "lstat"), (os, "getcwd"), (os, "readlink"), (os, "listdir"),
             (os, "scandir"), (os, "access"), (os, "unlink"), (os.path, "abspath"),
             (os.path, "realpath"), (os.path, "islink"), (os.path, "exists"),
             (os.path, "isdir"), (os.path, "isfile")]
# aionative.starlette, aionative.fastapi and the modules they are built from.
_WEB_LAYER = tuple(str(Path(aionative.starlette.__file__).with_name(name)) for name in (
    "starlette.py", "fastapi.py", "_http_ranges.py", "_open_readonly.py", "_awaiting.py",
    "_static_lookup.py"))


def _on_the_loop_from_the_web_layer() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False  # a worker thread
    frame = sys._getframe(2)
    from_us = False
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith("mimetypes.py"):  # Starlette's constructor's first guess_type
            return False
        from_us = from_us or name in _WEB_LAYER
        frame = frame.f_back
    return from_us


@pytest.fixture
def blocking_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The blocking calls aionative.starlette and aionative.fastapi make on the loop's thread
    (as a detector sees them: through the module attribute)."""
    seen: list[str] = []
    for module, name in _BLOCKING:
        original = getattr(module, name)

        def watched(*args: Any, _original: Any = original,
                    _name: str = f"{module.__name__}.{name}", **kwargs: Any) -> Any:
            if _on_the_loop_from_the_web_layer():
                seen.append(f"{_name}{args!r}")
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, watched)
    return seen


@pytest.fixture
def static_app(tree: Path, monkeypatch: pytest.MonkeyPatch) -> Starlette:
    """StaticFiles (a relative directory, an absolute one, following symlinks) and a
    FileResponse route, constructed as an application is, before its loop runs."""
    monkeypatch.chdir(tree)
    static = tree / "static"
    return Starlette(routes=[
        Mount("/rel", StaticFiles(directory="static", html=True)),
        Mount("/abs", StaticFiles(directory=static, html=True)),
        Mount("/follow", StaticFiles(directory=static, html=True, follow_symlink=True)),
        Route("/file", lambda request: FileResponse(static / "a.txt"), methods=["GET", "HEAD"]),
    ])


@pytest.mark.asyncio
async def test_no_blocking_call_on_the_loop_s_thread(tree: Path, static_app: Starlette,
                                                     blocking_calls: list[str]) -> None:
    """A lookup and a response make no call that waits for the disk or asks the kernel for a
    path on the loop's thread — no ``abspath``/``getcwd``, no ``readlink`` of
    ``/proc/self/fd``, no ``stat``: the engine's operations, or a worker thread (a symlink met
    on the way is checked there, as Starlette checks it)."""
    app = static_app
    paths = ["/", "/sub", "/sub/", "/a.txt", "/sub/b.txt", "/missing", "/link_in",
             "/link_out", "/dirlink_in/b.txt", "/dirlink_out/c.txt", "/sub/b.txt/x", "/.."]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://test") as client:
        for mount in ("/rel", "/abs", "/follow"):
            for path in paths:
                for method in ("GET", "HEAD"):
                    response = await client.request(method, mount + path)
                    assert response.status_code in (200, 307, 404), (mount, path)
            assert (await client.get(mount + "/a.txt")).content == b"A" * 100
        for headers in ({}, {"range": "bytes=0-9"}, {"range": "bytes=0-9,20-29"},
                        {"if-none-match": "*"}):
            assert (await client.get("/file", headers=headers)).status_code in (200, 206, 304)
        assert (await client.head("/file")).status_code == 200
    assert blocking_calls == [], "\n".join(blocking_calls)


@pytest.mark.asyncio
@pytest.mark.parametrize("request_range", [None, "bytes=0-9", "bytes=5-",
                                           "bytes=0-15,20-35,35-50", "bytes=-5,0-0,100-"])
@pytest.mark.parametrize("size", [0, 1, 100, 256, 301])
async def test_messages_framed_as_starlette_s(tmp_path: Path, request_range: str | None,
                                              size: int) -> None:
    """The same ASGI messages as Starlette's FileResponse — each multipart part's headers,
    each chunk, the CRLF after a part and the closing boundary in messages of their own, and
    the empty last message after a whole file of a multiple of the chunk size — not only the
    same bytes."""
    path = tmp_path / "file.txt"
    path.write_bytes(os.urandom(size))

    class Ours(FileResponse):
        chunk_size = 64

    class Theirs(StarletteFileResponse):
        chunk_size = 64

    headers = [] if request_range is None else [(b"range", request_range.encode())]
    framed = []
    for cls in (Ours, Theirs):
        messages = await _call(cls(path), {"headers": headers})
        start = messages[0]
        boundary = re.search(rb"boundary=([0-9a-f]+)",
                             dict(start["headers"]).get(b"content-type", b""))
        body = [(m["body"], m.get("more_body", False)) for m in messages[1:]]
        if boundary:
            body = [(b.replace(boundary.group(1), b"B"), more) for b, more in body]
        framed.append((start["status"], body))
    assert framed[0] == framed[1]
