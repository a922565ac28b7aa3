"""One benchmark server: uvicorn (uvloop; httptools when installed, else h11) serving a directory with one system.

    python -m bench.http_server --system aionative --port 8001 --dir bench/.data/http

Systems: ``aionative`` (``aionative.starlette.FileResponse``), ``starlette``
(``starlette.responses.FileResponse``), ``aiofiles`` (a ``StreamingResponse`` over
``aiofiles.open``, 64 KiB chunks, single ranges parsed by hand), and the two ``StaticFiles``
mounts ``aionative-static`` / ``starlette-static``. Every route is ``GET /{name}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import AsyncIterator
from mimetypes import guess_type

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse as StarletteFileResponse
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles as StarletteStaticFiles

#: uvicorn's fast parser when installed (``uvicorn[standard]``), else its pure-Python one.
HTTP_IMPL = "httptools" if importlib.util.find_spec("httptools") else "h11"
SYSTEMS = ("aionative", "starlette", "aiofiles", "aionative-static", "starlette-static")
CHUNK = 64 * 1024


def _aiofiles_app(directory: str) -> Starlette:
    import aiofiles
    import aiofiles.os

    async def body(path: str, start: int, end: int) -> AsyncIterator[bytes]:
        async with aiofiles.open(path, "rb") as f:
            await f.seek(start)
            left = end - start
            while left > 0:
                data = await f.read(min(CHUNK, left))
                if not data:
                    return
                left -= len(data)
                yield data

    async def endpoint(request: Request) -> Response:
        path = os.path.join(directory, request.path_params["name"])
        st = await aiofiles.os.stat(path)
        size = st.st_size
        headers = {"accept-ranges": "bytes"}
        start, end, status = 0, size, 200
        rng = request.headers.get("range")
        if rng is not None and rng.startswith("bytes=") and "," not in rng:
            first, _, last = rng[6:].partition("-")
            start = int(first)
            end = min(int(last) + 1, size) if last else size
            if start >= size:
                return PlainTextResponse(status_code=416,
                                         headers={"content-range": f"bytes */{size}"})
            status = 206
            headers["content-range"] = f"bytes {start}-{end - 1}/{size}"
        headers["content-length"] = str(end - start)
        media = guess_type(path)[0] or "application/octet-stream"
        return StreamingResponse(body(path, start, end), status_code=status, headers=headers,
                                 media_type=media)

    return Starlette(routes=[Route("/{name}", endpoint)])


def build_app(system: str, directory: str) -> Starlette:
    if system == "aiofiles":
        return _aiofiles_app(directory)
    if system == "aionative-static":
        from aionative.starlette import StaticFiles
        return Starlette(routes=[Mount("/", StaticFiles(directory=directory))])
    if system == "starlette-static":
        return Starlette(routes=[Mount("/", StarletteStaticFiles(directory=directory))])
    if system == "aionative":
        from aionative.starlette import FileResponse
        response_class: type[StarletteFileResponse] = FileResponse
    elif system == "starlette":
        response_class = StarletteFileResponse
    else:
        raise SystemExit(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")

    async def endpoint(request: Request) -> Response:
        return response_class(os.path.join(directory, request.path_params["name"]))

    return Starlette(routes=[Route("/{name}", endpoint)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", required=True, choices=SYSTEMS)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    app = build_app(args.system, os.path.abspath(args.dir))
    uvicorn.run(app, host="127.0.0.1", port=args.port, loop="uvloop", http=HTTP_IMPL,
                lifespan="off", log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
