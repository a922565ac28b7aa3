"""``aiofiles.base``'s names: ``AsyncBase``, ``AsyncIndirectBase``, the context manager, and
``wrap`` (a synchronous function made a coroutine function that runs it in the executor)."""

from ._files import AsyncBase
from ._open import AiofilesContextManager
from ._stdio import AsyncIndirectBase
from .ospath import wrap

__all__ = ["AiofilesContextManager", "AsyncBase", "AsyncIndirectBase", "wrap"]
