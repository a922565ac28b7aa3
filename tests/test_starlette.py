"""aionative.starlette against Starlette itself, through httpx's ASGI transport and direct ASGI
calls: the same request to both ``FileResponse``s (and ``StaticFiles``) must give the same
status, headers and bytes, except where aionative differs on purpose (304s, too many ranges,
exact Content-Length when a file grows) — those are tested for what they are."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse as StarletteFileResponse
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles as StarletteStaticFiles

import aionative
from aionative.starlette import FileResponse, StaticFiles, _parse_range, _Unsatisfiable

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
    """CVE-2025-62727 class: no Range header costs more than time linear in its length."""
    size = 1 << 20
    shapes: dict[str, Callable[[int], str]] = {
        "many ranges": lambda n: "bytes=" + ",".join(f"{i}-{i}" for i in range(n // 8)),
        "overlapping": lambda n: "bytes=" + ",".join(["0-1048575"] * (n // 10)),
        "commas": lambda n: "bytes=0-1" + "," * n,
        "dashes": lambda n: "bytes=0" + "-" * n,
        "spaces": lambda n: "bytes=" + " " * n + "0-1",
        "digits": lambda n: "bytes=" + "1" * n + "-",
    }
    for shape, make in shapes.items():
        times = []
        for n in (100_000, 800_000):
            header = make(n)
            t0 = time.perf_counter()
            try:
                result = _parse_range(header, size, FileResponse.max_ranges)
            except _Unsatisfiable:
                result = "416"
            except Exception as exc:  # noqa: BLE001 - only the two kinds below are allowed
                assert type(exc).__name__ == "_Malformed", (shape, exc)
                result = "400"
            times.append(time.perf_counter() - t0)
            assert result in ("416", "400") or isinstance(result, list), shape
        # 8x the length: a linear parser takes ~8x; a quadratic one 64x
        assert times[1] < 0.5 and times[1] < 24 * times[0] + 0.02, (shape, times)


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


def _open_fds_to(path: Path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                n += 1
        except OSError:
            pass
    return n


@pytest.mark.asyncio
async def test_pathsend_when_the_server_offers_it(files: Path) -> None:
    scope = {"extensions": {"http.response.pathsend": {}}}
    for name in ("big.bin", "empty.bin"):
        path = files / name
        ours = await _call(FileResponse(path), scope)
        theirs = await _call(StarletteFileResponse(path), scope)
        assert ours == theirs
        assert ours[-1] == {"type": "http.response.pathsend", "path": str(path)}
        assert _open_fds_to(path) == 0
    # a range is read and sent by the response itself, as Starlette does
    ranged = {**scope, "headers": [(b"range", b"bytes=0-9")]}
    ours = await _call(FileResponse(files / "big.bin"), ranged)
    assert ours[0]["status"] == 206
    assert ours[-1]["body"] == (files / "big.bin").read_bytes()[:10]


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
    assert _open_fds_to(path) == 0
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


@pytest.mark.asyncio
async def test_cancelled_while_reading_closes_after_the_read(files: Path) -> None:
    """A task cancelled from outside (server shutdown) mid-transfer: the descriptor is closed
    only once the read in flight is over, and nothing stays with the engine."""
    path = files / "big.bin"
    started = asyncio.Event()

    async def hook(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            started.set()
            await asyncio.sleep(0)

    task = asyncio.ensure_future(_call(FileResponse(path), {"asgi": {"spec_version": "2.4"}},
                                       None, hook))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _open_fds_to(path) == 0
    assert aionative.engine_stats()["in_flight"] == 0


@pytest.mark.asyncio
async def test_file_changing_size_while_served(files: Path) -> None:
    path = files / "big.bin"
    original = path.read_bytes()

    # Grows after the headers: exactly the announced bytes go out (Starlette sends the extra
    # bytes past its Content-Length, which a server then rejects).
    async def grow(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            append(path, b"x" * 300_000)

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
    assert _open_fds_to(path) == 0
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
    cases = [(files / "missing.bin", "does not exist"), (files, "is not a file"),
             (fifo, "is not a file")]
    for path, message in cases:
        for method in ("GET", "HEAD"):
            for cls in (FileResponse, StarletteFileResponse):
                with pytest.raises(RuntimeError, match=message):
                    await _call(cls(path), {"method": method})


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
    assert isinstance(response, FileResponse) and _open_fds_to(files / "big.bin") == 1
    del response
    assert _open_fds_to(files / "big.bin") == 0


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
