"""Arguments converted, and refused, as CPython's ``FileIO`` and ``os`` functions convert and
refuse them: the same conversions (``__index__``), the same ranges and the same words in the
errors.
"""

from __future__ import annotations

import io
import os
from operator import index
from typing import Any

from ._compat import KERNEL_RW_MAX


def off_t(x: Any) -> int:
    """An offset or size argument converted as ``FileIO`` converts it to ``off_t`` or
    ``Py_ssize_t``: ``__index__`` (TypeError for floats, ``None``, …; an ``__index__`` that
    raises lets its error through), OverflowError outside 64 bits. Callers test
    ``type(x) is int`` and the range inline first: the common case costs no call."""
    n = index(x)
    if -(1 << 63) <= n < 1 << 63:
        return n
    raise OverflowError("Python int too large to convert to C long")


def ssize_t(x: Any) -> int:
    """A size argument as ``os.pread`` converts it: ``__index__``, a ``Py_ssize_t``."""
    n = index(x)
    if -(1 << 63) <= n < 1 << 63:
        return n
    raise OverflowError("Python int too large to convert to C ssize_t")


_HEAPTYPE, _IMMUTABLETYPE = 1 << 9, 1 << 8  # Py_TPFLAGS_*


def type_name(x: Any) -> str:
    """The name CPython's messages give ``x``'s type (``Py_TYPE(x)->tp_name``): a class defined
    in Python by its name, a C type by its dotted name (``collections.deque``) unless it is a
    builtin."""
    t = type(x)
    if (t.__flags__ & _HEAPTYPE and not t.__flags__ & _IMMUTABLETYPE) or t.__module__ == "builtins":
        return t.__name__
    return f"{t.__module__}.{t.__name__}"


def arg_type_name(x: Any) -> str:
    """How CPython's argument errors name ``x`` ("... must be str, not None"): ``type_name``,
    but ``None`` for None."""
    return "None" if x is None else type_name(x)


def optional_size(x: Any) -> int:
    """``FileIO.read``'s size as CPython converts it (``_Py_convert_optional_to_ssize_t``):
    None is -1; what has no ``__index__`` and an int past ``Py_ssize_t`` raise its words."""
    if x is None:
        return -1
    if not hasattr(type(x), "__index__"):
        raise TypeError(f"argument should be integer or None, not '{type_name(x)}'")
    n = index(x)
    if -(1 << 63) <= n < 1 << 63:
        return n
    raise OverflowError(f"cannot fit '{type_name(x)}' into an index-sized integer")


def bytes_like(b: Any) -> memoryview:
    """``memoryview(b)``, and what is no buffer raises the TypeError ``os.pwrite`` and
    ``FileIO.write`` raise (``PyObject_GetBuffer``'s, without memoryview's name in front)."""
    try:
        return memoryview(b)
    except TypeError as exc:
        if str(exc).startswith("memoryview: a bytes-like object is required"):
            raise TypeError("a bytes-like object is required, not "
                            f"'{type_name(b)}'") from None
        raise


def _closed_fileio() -> io.FileIO:
    f = io.FileIO(os.devnull, "rb")
    f.close()
    return f


# FileIO.readinto converts its argument before it checks that the file is open, so a closed
# one raises the TypeError an open one would, in the running Python's words (3.12 says
# "argument 1", 3.11 and 3.13 "argument").
_CLOSED_FILEIO = _closed_fileio()


def not_writable(b: Any) -> TypeError:
    try:
        _CLOSED_FILEIO.readinto(b)
    except TypeError as exc:
        return TypeError(*exc.args)
    except ValueError:  # (b is a writable buffer after all: the file's closed-ness spoke)
        pass
    return TypeError("readinto() argument must be read-write bytes-like object, not "
                     f"{arg_type_name(b)}")


def c_int(x: Any) -> int:
    """A C ``int`` argument (``whence``): ``__index__``, OverflowError outside 32 bits."""
    n = index(x)
    if -(1 << 31) <= n < 1 << 31:
        return n
    raise OverflowError("Python int too large to convert to C int")


def check_read_alloc(size: int) -> None:
    """``os.pread`` (and the native engine) allocate the whole result before reading: a size
    that cannot be allocated is a MemoryError, however little the file holds. Reads made in
    pieces (past one system call's limit) check it here: calloc touches no page."""
    if size > KERNEL_RW_MAX:
        bytes(size)

