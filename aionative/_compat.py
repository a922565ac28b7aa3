"""Constants shared by the native and pure-Python paths."""

import os
from typing import Final

#: Whether the extension may use CPython's and asyncio's internals (csrc/compat.h, and the raw
#: layer's C base, _core.WindowBase): the environment's AIONATIVE_INTERNALS=0 keeps it to
#: public APIs (slower; the test suite runs once that way).
INTERNALS: Final = os.environ.get("AIONATIVE_INTERNALS", "1") != "0"

#: The most one read/write system call transfers on Linux (MAX_RW_COUNT); larger operations are
#: split into pieces of this size.
KERNEL_RW_MAX: Final = 0x7FFFF000
#: A write of this many bytes or more is never copied on the loop's thread and starts at once
#: (csrc/engine.h, WRITE_ASYNC_MIN); the threads backend gives it to its writer threads.
WRITE_ASYNC_MIN: Final = 256 << 10
#: How much nicer than the loop's thread the writer threads run (csrc/engine.h).
WRITER_NICE: Final = 10
