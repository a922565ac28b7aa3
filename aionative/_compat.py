"""Constants shared by the native and pure-Python paths."""

from typing import Final

#: The most one read/write system call transfers on Linux (MAX_RW_COUNT); larger operations are
#: split into pieces of this size.
KERNEL_RW_MAX: Final = 0x7FFFF000
