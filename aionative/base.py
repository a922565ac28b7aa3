"""``aiofiles.base``'s names."""

from ._files import AsyncBase
from ._open import AiofilesContextManager
from ._stdio import AsyncIndirectBase
from .threadpool import wrap

__all__ = ["AiofilesContextManager", "AsyncBase", "AsyncIndirectBase", "wrap"]
