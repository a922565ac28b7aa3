"""A FastAPI app whose file I/O goes through aionative's engine.

Run it (from the repository root)::

    .venv/bin/python examples/fastapi_app.py            # uvicorn + uvloop on 127.0.0.1:8000
    curl -F file=@README.md localhost:8000/files         # upload  -> save_upload
    curl localhost:8000/files/README.md                  # download -> FileResponse (ranges, 304)
    curl -r 0-99 localhost:8000/files/README.md          # a range  -> 206
    curl localhost:8000/head/README.md                   # the first bytes -> opened_file
    curl localhost:8000/stream/README.md                 # StreamingResponse(await stream_file(...))
    curl localhost:8000/static/hello.txt                 # StaticFiles
    curl localhost:8000/engine                           # which backend serves it

Files live under ``$EXAMPLE_DATA`` (default: ``<tmp>/aionative-example``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, UploadFile
from fastapi.responses import StreamingResponse

import aionative
from aionative import AsyncBufferedReader
from aionative.fastapi import (
    FileResponse,
    StaticFiles,
    engine_lifespan,
    opened_file,
    save_upload,
    stream_file,
)

DATA = Path(os.environ.get("EXAMPLE_DATA", Path(tempfile.gettempdir()) / "aionative-example"))
UPLOADS = DATA / "uploads"
PUBLIC = DATA / "public"
for directory in (UPLOADS, PUBLIC):
    directory.mkdir(parents=True, exist_ok=True)


@asynccontextmanager
async def setup(app: FastAPI) -> AsyncIterator[None]:
    """Your own lifespan: runs inside engine_lifespan, so the engine already exists here."""
    await aionative.write_text(PUBLIC / "hello.txt", "hello from aionative\n")
    yield


# The engine is created at startup (a backend problem shows at boot) and drained at shutdown.
app = FastAPI(lifespan=engine_lifespan(setup))
app.mount("/static", StaticFiles(directory=PUBLIC), name="static")


def upload_path(name: str) -> Path:
    """A stored file's path; `name` is the route's path parameter (FastAPI fills it)."""
    if name in ("", ".", "..") or Path(name).name != name:
        raise HTTPException(status_code=400, detail="bad file name")
    return UPLOADS / name


@app.post("/files")
async def upload(file: UploadFile) -> dict[str, Any]:
    path = upload_path(file.filename or "upload.bin")
    size = await save_upload(file, path)  # in memory: one write; spooled to disk: pread/pwrite
    return {"name": path.name, "bytes": size}


@app.get("/files/{name}")
async def download(name: str) -> FileResponse:
    path = upload_path(name)
    if not path.is_file():
        raise HTTPException(status_code=404)
    return FileResponse(path, filename=name)  # Range, If-Range, ETag, 304, HEAD


@app.get("/head/{name}")
async def head(name: str,
               f: Annotated[AsyncBufferedReader, Depends(opened_file(upload_path))]
               ) -> dict[str, Any]:
    first = await f.read(64)  # the file is closed after the response is sent
    return {"name": name, "first_bytes": first.decode("utf-8", "replace")}


@app.get("/stream/{name}")
async def stream(name: str) -> StreamingResponse:
    try:
        chunks = await stream_file(upload_path(name))  # opened now: before the response starts
    except (FileNotFoundError, IsADirectoryError):
        raise HTTPException(status_code=404) from None
    return StreamingResponse(chunks, media_type="application/octet-stream")


@app.get("/engine")
async def engine() -> dict[str, Any]:
    return {"backend": aionative.backend_info()["backend"], "stats": aionative.engine_stats()}


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=8000, loop="uvloop")
