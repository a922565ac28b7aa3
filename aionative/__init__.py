"""aionative: native asynchronous file I/O for asyncio on Linux.

Reads and writes are submitted to the kernel (io_uring, or Linux AIO where io_uring is
blocked), completions arrive on an eventfd watched by the running loop, and one wake-up
resolves a whole batch of futures. A thread-pool backend serves other platforms.
"""

from __future__ import annotations

from typing import Any

from . import (  # `import aiofiles` brings tempfile, threadpool and base too
    _backend,
    _configure,
    _engine,
    base,
    tempfile,
    threadpool,
)
from ._backend import BackendUnavailableError, available_backends, set_default_backend
from ._engine import close_engine, get_engine, inline_budget, set_inline_budget
from ._files import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO, AsyncTextIOWrapper
from ._helpers import read_bytes, read_text, write_bytes, write_text
from ._lowlevel import fdatasync, fsync, pread, preadinto, pwrite
from ._open import AiofilesContextManager, open
from ._stdio import stderr, stderr_bytes, stdin, stdin_bytes, stdout, stdout_bytes

_configure.configure()  # (every module above imported: the extension is handed its paths)

__all__ = [
    "AiofilesContextManager",
    "AsyncBufferedIOBase",
    "AsyncBufferedReader",
    "AsyncFileIO",
    "AsyncTextIOWrapper",
    "BackendUnavailableError",
    "available_backends",
    "backend_info",
    "base",
    "close_engine",
    "engine_stats",
    "fdatasync",
    "fsync",
    "get_engine",
    "inline_budget",
    "open",
    "pread",
    "preadinto",
    "pwrite",
    "read_bytes",
    "read_text",
    "set_default_backend",
    "set_inline_budget",
    "stderr",
    "stderr_bytes",
    "stdin",
    "stdin_bytes",
    "stdout",
    "stdout_bytes",
    "tempfile",
    "threadpool",
    "write_bytes",
    "write_text",
]

__version__ = "0.1.0.dev0"


def backend_info() -> dict[str, Any]:
    """What serves I/O here and why.

    Inside a running loop that has an engine: that engine's backend and details (setup flags
    obtained, sizes). Otherwise: the backend a new engine would get. Always: the kernel, what
    was requested and by whom, and why each better backend was rejected.
    """
    requested, source = _backend.requested_backend()
    entry = _engine.current_entry()
    info: dict[str, Any] = {"kernel": _backend.kernel_release(),
                            "requested": requested or "auto", "requested_by": source}
    if entry is not None:
        info.update(entry.engine.info())
        info["rejected"] = dict(entry.rejected)
        info["active"] = True
    else:
        try:
            name, rejected = _backend.choose()
        except BackendUnavailableError as exc:
            info.update(backend=None, rejected={}, error=str(exc), active=False)
        else:
            info.update(backend=name, rejected=rejected, active=False)
            if name == "io_uring":
                info["setup_flags_value"] = _backend.probe("io_uring").setup_flags
    info["available"] = {b: (p.available, p.reason) for b in _backend.BACKENDS
                         for p in [_backend.probe(b)]}
    return info


def engine_stats() -> dict[str, int]:
    """Counters of the running loop's engine (created if needed): submissions, completions,
    batches, system calls, wake-ups, NOWAIT re-issues, fallbacks, operations in flight."""
    return get_engine().stats()
