"""``aiofiles.threadpool.binary``'s names."""

from .._files import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO
from .._stdio import AsyncIndirectBufferedIOBase, AsyncIndirectBufferedReader, AsyncIndirectFileIO

__all__ = ["AsyncBufferedIOBase", "AsyncBufferedReader", "AsyncFileIO",
           "AsyncIndirectBufferedIOBase", "AsyncIndirectBufferedReader", "AsyncIndirectFileIO"]
