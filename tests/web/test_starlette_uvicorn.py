"""aionative.starlette behind a real uvicorn server (loop="uvloop") on 127.0.0.1, one server
per test in a thread, driven over real sockets: httpx for ordinary requests, raw sockets for
paths a client would normalise and for hanging up mid-transfer."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse as StarletteFileResponse
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles as StarletteStaticFiles
from starlette.types import Message, Receive, Scope, Send

import aionative
from aionative.starlette import FileResponse, StaticFiles
from tests.support import open_fds_to
from tests.web.test_starlette import (  # noqa: F401 - tree is a fixture
    TRAVERSALS,
    append,
    normalised,
    range_cases,
    tree,
)

pytestmark = pytest.mark.usefixtures("backend")

IGNORED = {b"date", b"server"}


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """uvicorn with uvloop on a free 127.0.0.1 port, in a thread; stopped (and its loop, with
    its engine, closed) on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, loop="uvloop", ws="none", lifespan="off",
                            log_level="critical", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        assert not thread.is_alive()


async def stats(request: Request) -> Response:
    """The server loop's engine, seen from inside it."""
    return JSONResponse(aionative.engine_stats())


def file_app(directory: Path, **routes: Any) -> Starlette:
    async def ours(request: Request) -> Response:
        return FileResponse(directory / request.path_params["name"])

    async def theirs(request: Request) -> Response:
        return StarletteFileResponse(directory / request.path_params["name"])

    return Starlette(routes=[Route("/ours/{name}", ours, methods=["GET", "HEAD"]),
                             Route("/theirs/{name}", theirs, methods=["GET", "HEAD"]),
                             Route("/_stats", stats)])


def without_transport_headers(r: httpx.Response) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    status, headers, body = normalised(r)
    return status, [h for h in headers if h[0].lower() not in IGNORED], body


def raw_request(base: str, target: str, headers: str = "", read_all: bool = True
                ) -> tuple[int, bytes]:
    """Send `target` byte for byte (no client normalisation); returns status and body."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n"
                  .encode("latin-1"))
        data = b""
        while read_all and (chunk := s.recv(65536)):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head[9:12]), body


def test_real_server_matches_starlette(tmp_path: Path) -> None:
    sizes = {"empty.bin": 0, "small.txt": 777, "big.bin": 200_000}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(os.urandom(size))
    with serving(file_app(tmp_path)) as base, httpx.Client(base_url=base) as client:
        for name, size in sizes.items():
            etag = client.get(f"/theirs/{name}").headers["etag"]
            requests = [("GET", {}), ("HEAD", {}), ("HEAD", {"range": "bytes=0-9"}),
                        ("GET", {"range": "bytes=0-4", "if-range": etag}),
                        ("GET", {"range": "bytes=0-4", "if-range": '"stale"'})]
            requests += [("GET", {"range": r}) for r in range_cases(size)]
            for method, headers in requests:
                ours = client.request(method, f"/ours/{name}", headers=headers)
                theirs = client.request(method, f"/theirs/{name}", headers=headers)
                assert without_transport_headers(ours) == without_transport_headers(theirs), \
                    (name, method, headers)
            # the deliberate difference: a conditional GET is answered 304 here
            r = client.get(f"/ours/{name}", headers={"if-none-match": etag})
            assert r.status_code == 304 and r.content == b""
            assert client.get(f"/theirs/{name}",
                              headers={"if-none-match": etag}).status_code == 200
        assert client.get("/_stats").json()["in_flight"] == 0


def test_real_server_client_disconnect_mid_stream(tmp_path: Path) -> None:
    path = tmp_path / "huge.bin"
    with open(path, "wb") as f:
        f.truncate(64 << 20)  # sparse: reads cost no disk
    chunks = (64 << 20) // FileResponse.chunk_size
    finished = threading.Event()

    async def endpoint(request: Request) -> Response:
        return FileResponse(path, background=BackgroundTask(finished.set))

    app = Starlette(routes=[Route("/huge", endpoint), Route("/_stats", stats)])
    with serving(app) as base, httpx.Client(base_url=base) as client:
        before = client.get("/_stats").json()["completed"]
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET /huge HTTP/1.1\r\nHost: x\r\n\r\n")
            got = 0
            while got < 256 * 1024:
                chunk = s.recv(65536)  # raises TimeoutError rather than wait forever
                assert chunk, f"the server closed the connection after {got} bytes"
                got += len(chunk)
        # hung up after 256 KiB: the transfer stops, its descriptor closes, nothing in flight
        assert finished.wait(10), "the response did not end after the client left"
        deadline = time.monotonic() + 5
        while open_fds_to(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert open_fds_to(path) == 0
        after = client.get("/_stats").json()
        assert after["in_flight"] == 0
        assert after["completed"] - before < chunks * 0.9, (after["completed"] - before, chunks)


def test_real_server_path_traversal(tree: Path) -> None:  # noqa: F811 - the fixture
    secrets = [b"SECRET"]
    for follow in (False, True):
        app = Starlette(routes=[
            Mount("/ours", StaticFiles(directory=tree / "static", follow_symlink=follow)),
            Mount("/theirs", StarletteStaticFiles(directory=tree / "static",
                                                  follow_symlink=follow))])
        with serving(app) as base:
            assert raw_request(base, "/ours/a.txt") == (200, b"A" * 100)
            for target in TRAVERSALS:
                ours = raw_request(base, "/ours" + target)
                theirs = raw_request(base, "/theirs" + target)
                assert ours[0] == theirs[0], (follow, target, ours[0], theirs[0])
                if follow and target in ("/link_out", "/abs_link_out", "/dirlink_out/c.txt"):
                    continue  # following symlinks out is what follow_symlink=True means
                assert ours[0] in (400, 404), (follow, target)
                assert not any(s in ours[1] for s in secrets), (follow, target)


def test_real_server_range_floods(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    data = os.urandom(100_000)
    path.write_bytes(data)
    with serving(file_app(tmp_path)) as base:
        # ~12 KB: under h11's 16 KiB limit too, so the response is ours, not the parser's
        many = "bytes=" + ",".join(f"{i}-{i}" for i in range(0, 3000, 2))
        overlapping = "bytes=" + ",".join(f"{i}-{99_999 - i}" for i in range(99))
        t0 = time.perf_counter()
        status, body = raw_request(base, "/ours/f.bin", f"Range: {many}\r\n")
        assert status == 416 and body == b""
        status, body = raw_request(base, "/ours/f.bin", f"Range: {overlapping}\r\n")
        assert status == 206 and body == data
        assert time.perf_counter() - t0 < 5
@pytest.mark.blocks_the_loop("grows the file synchronously while it is served, on purpose")
def test_real_server_file_grows_while_served(tmp_path: Path) -> None:
    path = tmp_path / "log.bin"
    original = os.urandom(500_000)
    path.write_bytes(original)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        async def growing(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.start":
                append(path, b"more" * 100_000)

        await FileResponse(path)(scope, receive, growing)

    with serving(app) as base, httpx.Client(base_url=base) as client:
        r = client.get("/")
        assert r.status_code == 200 and r.content == original
        assert r.headers["content-length"] == str(len(original))
        now = path.read_bytes()
        r = client.get("/", headers={"range": "bytes=-10"})  # the last bytes, as stat-ed
        assert r.status_code == 206 and r.content == now[-10:]
        assert r.headers["content-range"] == f"bytes {len(now) - 10}-{len(now) - 1}/{len(now)}"
