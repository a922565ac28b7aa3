"""A FastAPI service that saves uploaded files with aionative.

    python examples/save_uploads.py --dir uploads            # on 127.0.0.1:8000
    curl -F file=@photo.jpg -F file=@notes.txt localhost:8000/upload
    curl localhost:8000/files/photo.jpg -o photo.jpg

``save_upload`` writes each upload through the engine: Starlette keeps an upload of up to 1 MiB
in memory (one write) and spools a larger one to a temporary file, which is then copied
descriptor to descriptor with no worker thread a chunk. The bytes go to a hidden temporary file
beside the destination, renamed over it once complete: a reader never sees half an upload, and
a failed or cancelled upload leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, UploadFile

from aionative.fastapi import FileResponse, engine_lifespan, save_upload


def create_app(directory: Path) -> FastAPI:
    # engine_lifespan creates the engine at startup (a backend problem shows at boot, not on
    # the first upload) and drains and closes it at shutdown.
    app = FastAPI(lifespan=engine_lifespan())
    directory.mkdir(parents=True, exist_ok=True)

    def stored(name: str | None) -> Path:
        """Where an upload named ``name`` is stored: a plain name, never a path elsewhere."""
        if not name or name.startswith(".") or os.path.basename(name) != name:
            raise HTTPException(status_code=400, detail=f"bad file name: {name!r}")
        return directory / name

    @app.post("/upload")
    async def upload(file: list[UploadFile]) -> dict[str, Any]:
        saved = {}
        for f in file:
            saved[f.filename] = await save_upload(f, stored(f.filename))  # bytes written
        return {"saved": saved}

    @app.get("/files/{name}")
    async def download(name: str) -> FileResponse:
        path = stored(name)
        if not path.is_file():
            raise HTTPException(status_code=404)
        return FileResponse(path)  # ranges, ETag and 304, as Starlette's FileResponse

    return app


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("uploads"),
                        help="where uploads are saved (default ./uploads)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(create_app(args.dir), host=args.host, port=args.port)
