"""``aiofiles.threadpool.text``'s names."""

from .._files import AsyncTextIOWrapper
from .._stdio import AsyncTextIndirectIOWrapper

__all__ = ["AsyncTextIOWrapper", "AsyncTextIndirectIOWrapper"]
