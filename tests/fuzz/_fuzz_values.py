"""Hostile argument values for the fuzz targets (tests/fuzz/test_fuzz.py).

A strategy draws a *recipe* (`V`), not the value itself: each side of a differential call
builds its own fresh object from it (buffers are mutated by reads), and a failing example
prints as a short, readable recipe.
"""

from __future__ import annotations

import array
from typing import Any

from hypothesis import strategies as st


class Boom(Exception):
    """Raised by a hostile ``__index__``: must reach the caller unchanged."""


class Idx:
    """An integer-like object (``__index__``) that is not an ``int``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"Idx({self.n})"


class BadIdx:
    def __index__(self) -> int:
        raise Boom("__index__ failed")

    def __repr__(self) -> str:
        return "BadIdx()"


class V:
    """A recipe for one argument value."""

    def __init__(self, kind: str, arg: Any = None) -> None:
        self.kind, self.arg = kind, arg

    def build(self) -> Any:
        k, a = self.kind, self.arg
        if k == "lit":          # ints, None, floats, str, bytes, bools: immutable
            return a
        if k == "bytearray":
            return bytearray(a)
        if k == "mv":           # writable, contiguous
            return memoryview(bytearray(a))
        if k == "romv":         # read-only
            return memoryview(bytes(a))
        if k == "ncmv":         # writable, not contiguous
            return memoryview(bytearray(a * 2))[::2]
        if k == "md":           # writable, 2-D, contiguous
            return memoryview(bytearray(a * 3)).cast("B", (3, a))
        if k == "arr":          # itemsize 4
            return array.array("i", range(a))
        if k == "idx":
            return Idx(a)
        if k == "badidx":
            return BadIdx()
        if k == "obj":
            return object()
        if k == "list":
            return list(a)
        raise AssertionError(k)

    def __repr__(self) -> str:
        return repr(self.arg) if self.kind == "lit" else f"{self.kind}({self.arg!r})"


def lit(x: Any) -> V:
    return V("lit", x)


#: Integers at the edges: negative, around the page and kernel limits, past 2**63 and 2**64.
EDGE_INTS = [-2**64, -2**63 - 1, -2**63, -2**31 - 1, -2**31, -4097, -2, -1, 0, 1, 2, 7,
             4095, 4096, 4097, 65536, 2**31 - 1, 2**31, 2**32 + 5, 2**40, 2**44 + 3, 2**62,
             2**63 - 1, 2**63, 2**64, 2**64 + 1, 10**30]

#: Values that are not integers at all.
NOT_INTS = [lit(None), lit(1.5), lit(2.0), lit(float("nan")), lit("3"), lit(b"3"), lit(True),
            V("obj"), V("idx", 3), V("idx", -1), V("idx", 2**63), V("badidx"), V("list", [1])]


def ints(lo: int = -3, hi: int = 5000) -> st.SearchStrategy[V]:
    """Mostly plausible integers, often edge values, sometimes not an integer at all."""
    plausible = st.integers(lo, hi).map(lit)
    return st.one_of(plausible, plausible, plausible, st.sampled_from(EDGE_INTS).map(lit),
                     st.sampled_from(NOT_INTS))


def payload() -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=40),
                     st.sampled_from([b"\n", b"ab\ncd\n", b"z" * 9000, b"\r\n" * 7]))


def bin_data() -> st.SearchStrategy[V]:
    """What a binary write is given: buffers of every shape, and things that are not."""
    return st.one_of(
        payload().map(lit),
        payload().map(lambda b: V("bytearray", b)),
        payload().map(lambda b: V("mv", b)),
        payload().map(lambda b: V("romv", b)),
        st.integers(1, 30).map(lambda n: V("ncmv", n)),
        st.integers(1, 10).map(lambda n: V("md", n)),
        st.integers(0, 10).map(lambda n: V("arr", n)),
        st.sampled_from([lit("text"), lit(""), lit(None), lit(5), lit(0), lit(1.5),
                         V("list", [65, 66]), V("obj"), V("idx", 4), lit(True)]),
    )


TEXT_PIECES = ["a", "bc", "\n", "\r\n", "\r", "é", "中文", "😀", "x" * 50, "\udc80", "\ud800",
               "\x00", "\u2028"]


def text_data() -> st.SearchStrategy[V]:
    """What a text write is given: str (with lone surrogates), and things that are not."""
    return st.one_of(
        st.lists(st.sampled_from(TEXT_PIECES), max_size=8).map(lambda x: lit("".join(x))),
        st.sampled_from([lit(b"bytes"), lit(None), lit(5), V("obj"), V("bytearray", b"x"),
                         V("list", ["a"])]),
    )


def read_buffers() -> st.SearchStrategy[V]:
    """What readinto is given: writable buffers of every shape, and things that are not."""
    return st.one_of(
        st.integers(0, 9000).map(lambda n: V("bytearray", bytes(n))),
        st.integers(0, 100).map(lambda n: V("mv", bytes(n))),
        st.integers(0, 100).map(lambda n: V("romv", bytes(n))),
        st.integers(1, 30).map(lambda n: V("ncmv", n)),
        st.integers(1, 10).map(lambda n: V("md", n)),
        st.integers(0, 10).map(lambda n: V("arr", n)),
        st.sampled_from([lit(b"ro bytes"), lit("str"), lit(None), lit(5), V("obj"),
                         V("list", [0, 0])]),
    )


def snapshot(x: Any) -> Any:
    """The contents of a (possibly mutated) argument, to compare both sides' buffers."""
    if isinstance(x, list):
        return [snapshot(y) for y in x]
    try:
        return memoryview(x).tobytes()
    except TypeError:
        return repr(x) if isinstance(x, (str, int, float, type(None))) else type(x)
