"""The async file classes of ``aionative.open`` (aiofiles' names and members).

Each wraps a synchronous file object ``_file``. For a file ``aionative.open`` made, that object
is CPython's own io stack over a :class:`~aionative._raw.WindowRaw`, and a call runs in three
steps on the loop's thread:

1. **fetch** — make the raw window hold what the synchronous call will read, through the engine
   (``pread`` at offsets for regular files; reads at the descriptor's position for pipes, FIFOs,
   sockets and character devices). How much is "enough" is exact where it must be (a stream never
   waits for data the builtin would not wait for) and generous where over-reading is invisible
   (regular files read ahead in large chunks, so line iteration does not make a kernel round
   trip per line);
2. **run** the builtin's synchronous method: same results, same exceptions;
3. **push** what it staged — writes and truncations — to the engine, and await them, so an error
   is raised by the call that caused it.

Binary reads that still find the window short continue where they stopped (the raw layer answers
"would block", which the buffered layer turns into a partial result), so they never need an
exact bound. Text reads cannot be resumed that way, so the few text reads whose need cannot be
bounded up front — reads from a stream, ``read(n)`` with ``errors="ignore"``, codecs whose
newline is not an ASCII byte or a UTF-16/32 unit — run the same synchronous call in the loop's
executor, where the raw layer reads the descriptor directly (what aiofiles does for every call).

Calls on one file are serialised: a second task's call waits for the first to finish. A task
cancelled while its call is fetching leaves the file unchanged; one cancelled while its writes
are in the kernel leaves them to finish, and the next call on the file reports their outcome.

A regular file opened ``rb`` by path starts *lazy*: its ``_lazy`` (``_core.LazyReader``,
csrc/lazy.c) holds the descriptor, the position and the size, and serves ``read()`` to the end
and ``close()`` with one call each into the engine's inline path. The stack above is built the
first time anything else needs it, at the position the lazy calls reached — the state the stack
would have had.

Objects that ``threadpool.wrap`` wraps (any synchronous file) run every call in the executor,
as aiofiles does.

The modules, bottom up (each class adds to the one below it):

- ``gate``: the line gate — the lines and bytes a file serves from its window without the
  lock — and the turn budget those fast paths respect;
- ``core`` (``_Core``): a file's state, the lock that serialises its calls, the caller's
  descriptor offset it follows, running the synchronous stack;
- ``direct`` (``_DirectIO``): O_DIRECT reads, and writes under the lock of their blocks
  (read-modify-write of partial ones);
- ``writes`` (``_Writes``): the push of staged writes and truncations, large writes passed
  through from the caller's object, the outcome of writes a cancelled call left;
- ``reads`` (``_Reads``): the fetch into the window (read-ahead) and ``async for``'s steps;
- ``base`` (``AsyncBase``): the members every file has;
- ``binary``, ``buffered``, ``text``: the classes ``aionative.open`` returns.
"""

from __future__ import annotations

# The private names are read by tests and tools. A name bound here is a copy: set or patch it
# in the module that looks it up (binary's read and readinto, reads' _line_gate).
from .base import AsyncBase as AsyncBase
from .binary import _DIRECT_READ_MIN as _DIRECT_READ_MIN
from .binary import AsyncFileIO as AsyncFileIO
from .buffered import AsyncBufferedIOBase as AsyncBufferedIOBase
from .buffered import AsyncBufferedReader as AsyncBufferedReader
from .gate import _LineGate as _LineGate
from .gate import _PyLineGate as _PyLineGate
from .text import AsyncTextIOWrapper as AsyncTextIOWrapper
