"""Serve a directory over HTTP, like ``python -m http.server``, with aionative's StaticFiles.

    python examples/serve_directory.py                 # the current directory, on :8000
    python examples/serve_directory.py site/ --port 8080
    curl -r 0-99 localhost:8000/big.iso                # a range: 206 Partial Content

``aionative.starlette.StaticFiles`` takes Starlette's arguments and answers as Starlette's does
(ranges, ETag and Last-Modified, 304, ``index.html`` with ``html=True``), but opens and reads
the files through the engine, the next chunk's read in flight while one is sent. Each name in
the request path is opened below the directory without following symlinks out of it, so
neither ``..`` nor a symlink can serve a file outside it.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount

import aionative
from aionative.starlette import StaticFiles


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    aionative.get_engine()  # created at startup: a backend problem shows at boot
    try:
        yield
    finally:
        aionative.close_engine()  # lets the reads in flight finish, then closes the engine


def create_app(directory: Path) -> Starlette:
    # html=True: a directory's index.html answers for it, as a web server's would.
    return Starlette(routes=[Mount("/", StaticFiles(directory=directory, html=True))],
                     lifespan=lifespan)


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, nargs="?", default=Path("."))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    print(f"serving {args.directory.resolve()} on http://{args.host}:{args.port}/")
    uvicorn.run(create_app(args.directory), host=args.host, port=args.port)
