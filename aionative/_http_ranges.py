"""HTTP range and conditional requests for a file response, as pure functions.

What :class:`aionative.starlette.FileResponse` decides from a request's headers before it
reads anything: the ``Range`` header parsed as Starlette parses it (in time linear in the
header's length), whether ``If-Range`` lets the range through, whether ``If-None-Match`` /
``If-Modified-Since`` make the answer a 304 (RFC 9110 §13.1.2–3), and how a body is cut into
reads — one part after another for ``multipart/byteranges``, framed as Starlette frames it.
Nothing here does I/O or imports Starlette.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator, Mapping
from email.utils import parsedate_tz
from secrets import token_hex
from typing import Any

__all__ = [
    "BodyPlan",
    "MalformedRange",
    "UnsatisfiableRange",
    "chunked_reads",
    "http_date",
    "if_range_matches",
    "multipart_byteranges",
    "not_modified",
    "parse_range",
    "range_and_conditions",
]

#: A response body as the messages that carry it: bytes sent as they are, or an
#: ``(offset, size)`` read of the file.
BodyPlan = list[bytes | tuple[int, int]]


def range_and_conditions(scope: Mapping[str, Any]
                         ) -> tuple[str | None, str | None, str | None, str | None]:
    """The first ``Range``, ``If-Range``, ``If-None-Match`` and ``If-Modified-Since`` of an
    ASGI scope (what Starlette's ``Headers.get`` returns), in one pass over the raw list."""
    rng = if_range = inm = ims = None
    for key, value in scope.get("headers", ()):
        if key == b"range":
            if rng is None:
                rng = value.decode("latin-1")
        elif key == b"if-range":
            if if_range is None:
                if_range = value.decode("latin-1")
        elif key == b"if-none-match":
            if inm is None:
                inm = value.decode("latin-1")
        elif key == b"if-modified-since" and ims is None:
            ims = value.decode("latin-1")
    return rng, if_range, inm, ims


def http_date(value: str) -> int | None:
    """Seconds since the epoch of an HTTP date (any zone), or None if it is not one."""
    parts = parsedate_tz(value)
    if parts is None:
        return None
    try:
        return calendar.timegm(parts[:6]) - (parts[9] or 0)
    except (ValueError, OverflowError):  # a year past 9999, or numbers too large for a date
        return None


# ---------------------------------------------------------------- conditional requests


def if_range_matches(if_range: str, last_modified: str | None, etag: str | None) -> bool:
    """Whether an ``If-Range`` value lets a range through, as Starlette decides it: it equals
    the response's ``Last-Modified`` or (strong) ``ETag``; a weak validator never does."""
    if if_range.startswith("W/"):
        return False
    return if_range in (last_modified, etag)


def not_modified(if_none_match: str | None, if_modified_since: str | None,
                 etag: str | None, last_modified: str | None) -> bool:
    """Whether the response's validators make the answer a 304 (RFC 9110 §13.1.2–3):
    ``If-None-Match`` (weak comparison) decides when present, else ``If-Modified-Since``
    against ``Last-Modified`` (any zone; invalid dates ignored)."""
    if if_none_match:
        if if_none_match.strip() == "*":
            return True
        if etag is None:
            return False
        return etag.removeprefix("W/") in [tag.strip().removeprefix("W/")
                                           for tag in if_none_match.split(",")]
    if if_modified_since:
        since = http_date(if_modified_since)
        modified = None if last_modified is None else http_date(last_modified)
        return since is not None and modified is not None and modified <= since
    return False


# ---------------------------------------------------------------- the Range header


class MalformedRange(Exception):
    """A ``Range`` header Starlette answers with 400; ``content`` is the body it sends."""

    def __init__(self, content: str = "Malformed range header.") -> None:
        super().__init__(content)
        self.content = content


class UnsatisfiableRange(Exception):
    """A ``Range`` header answered with 416: a range starting past the end of the file, or
    more ranges than allowed."""


def _number(text: str) -> int | None:
    # RFC 9110's 1*DIGIT: no sign, underscore or non-ASCII digit, all of which int() accepts.
    if text.isascii() and text.isdigit():
        try:
            return int(text)
        except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
            return None
    return None


def parse_range(value: str, size: int, max_ranges: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` byte ranges a ``Range`` header asks of a ``size``-byte file, sorted
    and merged when there are several — Starlette's rules, in time linear in the header's
    length. Raises ``MalformedRange`` (400) or ``UnsatisfiableRange`` (416)."""
    units, sep, spec = value.partition("=")
    if not sep:
        raise MalformedRange
    if units.strip().lower() != "bytes":
        raise MalformedRange("Only support bytes range")
    if spec.count(",") >= max_ranges:
        raise UnsatisfiableRange  # an excessive number of ranges (RFC 9110 §15.5.17)
    ranges: list[tuple[int, int]] = []
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        if not dash:
            continue
        first, last = first.strip(), last.strip()
        if first:
            start = _number(first)
            stop = _number(last) if last else None
            if start is None or (last and stop is None):
                continue
            end = stop + 1 if stop is not None and stop < size else size
        else:
            suffix = _number(last) if last else None
            if suffix is None:
                continue
            start, end = max(size - suffix, 0), size
        ranges.append((start, end))
    if not ranges:
        raise MalformedRange("Range header: range must be requested")
    if any(not 0 <= start < size for start, _ in ranges):
        raise UnsatisfiableRange
    if any(start >= end for start, end in ranges):
        raise MalformedRange("Range header: start must be less than end")
    if len(ranges) == 1:
        return ranges
    ranges.sort()
    merged = [ranges[0]]
    for start, end in ranges[1:]:
        last_start, last_end = merged[-1]
        if start <= last_end:
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


# ---------------------------------------------------------------- the body's reads and framing


def chunked_reads(start: int, end: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` in reads of ``chunk_size`` (offset, size): Starlette's chunks."""
    for offset in range(start, end, chunk_size):
        yield offset, min(chunk_size, end - offset)


def multipart_byteranges(ranges: list[tuple[int, int]], size: int, content_type: str,
                         chunk_size: int) -> tuple[str, int, BodyPlan]:
    """The boundary, the length and the messages of a ``multipart/byteranges`` body, framed
    as Starlette frames it: each part's headers, each chunk of its bytes, the ``CRLF`` after
    them, each in a message of its own, then the closing boundary."""
    boundary = token_hex(13)
    plan: BodyPlan = []
    length = 0
    for start, end in ranges:
        head = (f"--{boundary}\r\n"
                f"Content-Type: {content_type}\r\n"
                f"Content-Range: bytes {start}-{end - 1}/{size}\r\n\r\n").encode("latin-1")
        plan.append(head)
        plan.extend(chunked_reads(start, end, chunk_size))
        plan.append(b"\r\n")
        length += len(head) + end - start + 2
    tail = f"--{boundary}--".encode("latin-1")
    plan.append(tail)
    return boundary, length + len(tail), plan
