"""Differential test: the builtin ``open()`` (synchronously) and ``aionative.open`` (awaited)
get identical files and identical hypothesis-generated sequences of operations — every method,
every mode, buffering -1/0/1/small, several encodings, ``errors=`` and ``newline=`` settings,
``direct=True`` (O_DIRECT) on aionative's side,
content with mixed line endings, multi-byte characters and invalid bytes. Every return value,
every exception (type, errno, message) and the final file contents must be equal.

Runs on every backend × {asyncio, uvloop}; ``AIONATIVE_DIFF_EXAMPLES`` sets the number of
sequences per combination (CI: the default below), and a third of that again with the inline
fast path off, so reads go through the kernel queue too.
"""

from __future__ import annotations

import array
import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aionative

EXAMPLES = int(os.environ.get("AIONATIVE_DIFF_EXAMPLES", "500"))

TEXT_MODES = ["r", "r+", "w", "w+", "a", "a+", "x", "x+"]
BINARY_MODES = [m[0] + "b" + m[1:] for m in TEXT_MODES]
ENCODINGS = ["utf-8", "latin-1", "utf-16", "ascii", "cp1252", "utf-8-sig", "utf-32-le",
             "shift_jis"]
ERRORS = [None, "strict", "replace", "ignore", "surrogateescape", "backslashreplace"]
NEWLINES = [None, "", "\n", "\r", "\r\n"]

PIECES = ["a", "bc", "line", "\n", "\r\n", "\r", "é", "中文", "😀", " ", "x" * 50, "\n\n",
          "Ω", "tab\t"]


class Content:
    """A file's initial bytes as a short recipe (so a failing example prints compactly)."""

    def __init__(self, text: str, enc: str, raw: bytes, damage: int | None,
                 repeat: int, cut: int) -> None:
        self.text, self.enc, self.raw, self.damage = text, enc, raw, damage
        self.repeat, self.cut = repeat, cut

    def build(self) -> bytes:
        data = self.raw if self.enc == "raw" else self.text.encode(self.enc, errors="replace")
        if self.damage is not None and data:  # an invalid byte somewhere
            i = self.damage % len(data)
            data = data[:i] + b"\xff" + data[i:]
        if data:
            data = (data * self.repeat)[:self.cut] if self.cut else data * self.repeat
        return data

    def __repr__(self) -> str:
        return (f"Content({self.text[:80]!r}, {self.enc!r}, {self.raw[:40]!r}, {self.damage}, "
                f"{self.repeat}, {self.cut})")


@st.composite
def contents(draw: st.DrawFn) -> Content:
    text = "".join(draw(st.lists(st.sampled_from(PIECES), max_size=60)))
    enc = draw(st.sampled_from(["utf-8", "latin-1", "utf-16", "raw"]))
    raw = draw(st.binary(max_size=300)) if enc == "raw" else b""
    damage = draw(st.none() | st.integers(0, 10_000))
    size = draw(st.integers(0, 19))
    repeat, cut = 1, 0
    if size == 0:  # large: reads slide the window and grow the read-ahead
        repeat, cut = 1_500_000, draw(st.integers(70_000, 1_500_000))
    elif size <= 2:  # reads cross many buffers
        repeat = 200
    return Content(text, enc, raw, damage, repeat, cut)


SIZES = st.one_of(st.integers(-2, 40), st.sampled_from([None, 4096, 9000, 100000]))


def text_ops() -> st.SearchStrategy[tuple[Any, ...]]:
    # Beside short text, writes that encode to more than the buffer holds, which the
    # buffered layer passes straight to the raw file (from the encoded bytes, no copy).
    chars = st.text(st.sampled_from(list("ab\n\r é中😀")), max_size=30) | st.sampled_from(
        ["ab\n" * 3000, "é中\r\n😀" * 2000])
    return st.one_of(
        st.tuples(st.just("read"), SIZES),
        st.tuples(st.just("readline"), SIZES),
        st.tuples(st.just("readlines"), st.sampled_from([-1, 0, 1, 10, 100])),
        st.tuples(st.just("write"), chars),
        st.tuples(st.just("writelines"), st.lists(chars, max_size=3)),
        st.tuples(st.just("seek_cookie"), st.integers(0, 10)),
        st.tuples(st.just("seek"), st.integers(-3, 3), st.sampled_from([0, 1, 2])),
        st.tuples(st.just("tell")),
        st.tuples(st.just("truncate"), st.sampled_from([None, 0, 3, 50])),
        st.tuples(st.just("flush")),
        st.tuples(st.just("iterate"), st.integers(1, 5) | st.just(3000)),
        st.tuples(st.just("read_chunks"), st.sampled_from([1000, 8192, 70000]),
                  st.integers(2, 12)),
        st.tuples(st.sampled_from(["readable", "writable", "seekable", "isatty"])),
        st.tuples(st.just("props")),
        st.tuples(st.just("close")),
        st.tuples(st.just("detach")),
    )


def binary_ops() -> st.SearchStrategy[tuple[Any, ...]]:
    # Writes larger than the buffer go to the kernel from the caller's object: bytes, and
    # other buffers (exported until the write is done).
    data = st.binary(max_size=40) | st.sampled_from(
        [b"\n", b"ab\ncd\n", b"z" * 9000, bytearray(b"q" * 70000), memoryview(b"w\n" * 10000),
         array.array("i", range(3000))])
    return st.one_of(
        st.tuples(st.just("read"), SIZES),
        st.tuples(st.just("read1"), SIZES),
        st.tuples(st.just("readline"), SIZES),
        st.tuples(st.just("readlines"), st.sampled_from([-1, 0, 1, 10, 100])),
        st.tuples(st.just("readinto"), st.integers(0, 9000)),
        st.tuples(st.just("readinto1"), st.integers(0, 9000)),
        st.tuples(st.just("peek"), st.integers(-1, 20)),
        st.tuples(st.just("readall")),
        st.tuples(st.just("write"), data),
        st.tuples(st.just("writelines"), st.lists(data, max_size=3)),
        st.tuples(st.just("seek"), st.integers(-5, 200), st.sampled_from([0, 1, 2])),
        st.tuples(st.just("tell")),
        st.tuples(st.just("truncate"), st.sampled_from([None, 0, 3, 50, 10000])),
        st.tuples(st.just("flush")),
        st.tuples(st.just("iterate"), st.integers(1, 5) | st.just(3000)),
        st.tuples(st.just("read_chunks"), st.sampled_from([1000, 8192, 70000]),
                  st.integers(2, 12)),
        st.tuples(st.sampled_from(["readable", "writable", "seekable", "isatty"])),
        st.tuples(st.just("props")),
        st.tuples(st.just("close")),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    binary = draw(st.booleans())
    mode = draw(st.sampled_from(BINARY_MODES if binary else TEXT_MODES))
    kw: dict[str, Any] = {}
    if binary:
        kw["buffering"] = draw(st.sampled_from([-1, 0, 0, 2, 7, 64, 1]))
        ops = draw(st.lists(binary_ops(), max_size=25))
    else:
        kw["buffering"] = draw(st.sampled_from([-1, -1, 1, 2, 7, 64]))
        kw["encoding"] = draw(st.sampled_from(ENCODINGS))
        kw["errors"] = draw(st.sampled_from(ERRORS))
        kw["newline"] = draw(st.sampled_from(NEWLINES))
        ops = draw(st.lists(text_ops(), max_size=25))
    exists = draw(st.booleans()) if mode[0] == "x" else True
    # aionative's direct=True (O_DIRECT, alignment handled) must not change any result
    # (append modes excepted: direct=True refuses them, test_direct_writers.py).
    direct = draw(st.integers(0, 4)) == 0 and "a" not in mode
    return {"mode": mode, "kw": kw, "ops": ops, "content": draw(contents()),
            "exists": exists, "direct": direct}


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the point is to compare them
        return ("raise", describe(exc))


async def aoutcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", await fn())
    except Exception as exc:  # noqa: BLE001
        return ("raise", describe(exc))


def describe(exc: BaseException) -> tuple[Any, ...]:
    return (type(exc).__name__, getattr(exc, "errno", None),
            str(exc).replace(os.sep + "b.", os.sep + "a."))


def props(f: Any) -> tuple[Any, ...]:
    names = ["closed", "mode", "encoding", "errors", "line_buffering", "newlines"]
    out = []
    for n in names:
        try:
            out.append((n, getattr(f, n)))
        except (AttributeError, ValueError) as exc:
            out.append((n, type(exc).__name__))
    return tuple(out)


class Replay:
    """Applies one op to the builtin file (sync) and to ours (async); returns both outcomes."""

    def __init__(self, sync: Any, ours: Any, binary: bool) -> None:
        self.sync = sync
        self.ours = ours
        self.binary = binary
        self.cookies: list[int] = [0]
        self.detached: list[Any] = []

    async def step(self, op: tuple[Any, ...]) -> tuple[Any, Any]:
        name, *args = op
        s, a = self.sync, self.ours
        if name == "seek_cookie":
            cookie = self.cookies[args[0] % len(self.cookies)]
            return outcome(lambda: s.seek(cookie)), await aoutcome(lambda: a.seek(cookie))
        if name == "tell":
            r1 = outcome(s.tell)
            r2 = await aoutcome(a.tell)
            if r1[0] == "ok" and isinstance(r1[1], int):
                self.cookies.append(r1[1])
            return r1, r2
        if name in ("readinto", "readinto1"):
            if not hasattr(s, name):
                return ("missing", name), ("missing" if not hasattr(a, name) else "present",
                                           name)
            b1, b2 = bytearray(args[0]), bytearray(args[0])
            r1 = outcome(lambda: getattr(s, name)(b1))
            r2 = await aoutcome(lambda: getattr(a, name)(b2))
            n1 = r1[1] if r1[0] == "ok" and isinstance(r1[1], int) else 0
            n2 = r2[1] if r2[0] == "ok" and isinstance(r2[1], int) else 0
            return (r1, bytes(b1[:n1])), (r2, bytes(b2[:n2]))
        if name == "iterate":
            def sync_iter() -> list[Any]:
                out = []
                for _ in range(args[0]):
                    line = s.readline()
                    if not line:
                        break
                    out.append(line)
                return out

            async def async_iter() -> list[Any]:
                out = []
                async for line in a:
                    out.append(line)
                    if len(out) == args[0]:
                        break
                return out
            return outcome(sync_iter), await aoutcome(async_iter)
        if name == "read_chunks":
            size, count = args
            r1 = outcome(lambda: [s.read(size) for _ in range(count)])

            async def chunks() -> list[Any]:
                return [await a.read(size) for _ in range(count)]
            return r1, await aoutcome(chunks)
        if name == "props":
            return props(s), props(a)
        if name == "detach":
            r1 = outcome(s.detach)
            r2 = outcome(a.detach)
            self.detached += [r[1] for r in (r1, r2) if r[0] == "ok"]
            return (r1[0], type(r1[1]).__name__), (r2[0], type(r2[1]).__name__)
        if name in ("readable", "writable", "seekable", "isatty"):
            r1 = outcome(getattr(s, name))
            fn = getattr(a, name)

            async def call() -> Any:
                res = fn()
                return await res if asyncio.iscoroutine(res) else res
            return r1, await aoutcome(call)
        if not hasattr(s, name):
            return ("missing", name), ("missing" if not hasattr(a, name) else "present", name)
        r1 = outcome(lambda: getattr(s, name)(*args))
        r2 = await aoutcome(lambda: getattr(a, name)(*args))
        if name == "read" and r1[0] == "ok" and r1[1] is None:
            r1 = ("ok", b"")  # FileIO on a would-block raw; never for files on disk
        return r1, r2


def close_sync(f: Any) -> None:
    try:
        f.close()
    except ValueError:  # detached
        pass


async def close_async(f: Any) -> None:
    try:
        await f.close()
    except ValueError:
        pass


def _telling_reenabled(r1: Any, r2: Any, log: list[Any]) -> bool:
    """The documented difference (docs/migration.md, append modes; docs/reliability.md, "Left
    as it is"): after ``next()``/``readlines()`` and a write, a text ``seek(0, 1)`` or
    ``tell()`` succeeds where CPython's raises "telling position disabled by next() call"."""
    return (r1[0] == "raise" and r1[1][2] == "telling position disabled by next() call"
            and r2[0] == "ok" and any(op[0] in ("readlines", "iterate") for op, _ in log)
            and any(op[0] in ("write", "writelines") for op, _ in log))


async def run_scenario(tmp: Path, sc: dict[str, Any]) -> None:
    pa, pb = tmp / "a.dat", tmp / "b.dat"
    for p in (pa, pb):
        if p.exists():
            p.unlink()
        if sc["exists"]:
            p.write_bytes(sc["content"].build())
    mode, kw = sc["mode"], sc["kw"]
    with_warnings = kw.get("buffering") == 1 and "b" in mode
    import warnings
    with warnings.catch_warnings():
        if with_warnings:
            warnings.simplefilter("ignore", RuntimeWarning)
        o1 = outcome(lambda: open(pa, mode, **kw))  # noqa: SIM115 - closed below
        o2 = await aoutcome(lambda: aionative.open(pb, mode, **kw, direct=sc["direct"]))
    if o1[0] != "ok" or o2[0] != "ok":
        if o1[0] == "ok":
            o1[1].close()
        if o2[0] == "ok":
            await o2[1].close()
        assert o1 == o2
        assert pa.exists() == pb.exists()
        return
    sync, ours = o1[1], o2[1]
    replay = Replay(sync, ours, "b" in mode)
    log = []
    try:
        for op in sc["ops"]:
            r1, r2 = await replay.step(op)
            log.append((op, r1))
            if _telling_reenabled(r1, r2, log):
                break  # the builtin's position stays disabled from here on: nothing to compare
            assert r1 == r2, f"op {op} after {log[:-1]}"
    finally:
        close_sync(sync)
        await close_async(ours)
        for buf in replay.detached:  # closed synchronously, as a caller of detach() would
            buf.close()
    assert pa.read_bytes() == pb.read_bytes(), f"contents differ after {log}"


@pytest.mark.blocks_the_loop("each example runs the builtin's file beside aionative's, "
                              "in one coroutine: the builtin's I/O blocks, on purpose")
@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(sc=scenarios())
def test_same_as_builtin_open(backend: str, loop: asyncio.AbstractEventLoop, tmp_path: Path,
                              sc: dict[str, Any]) -> None:
    loop.run_until_complete(run_scenario(tmp_path, sc))


@pytest.mark.blocks_the_loop("each example runs the builtin's file beside aionative's, "
                              "in one coroutine: the builtin's I/O blocks, on purpose")
@settings(max_examples=max(EXAMPLES // 3, 1), deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(sc=scenarios())
def test_same_as_builtin_open_through_the_kernel_queue(
        backend: str, ring_only: None, loop: asyncio.AbstractEventLoop, tmp_path: Path,
        sc: dict[str, Any]) -> None:
    """The same, with the inline fast path off: every read goes through the kernel queue (the
    test above mostly reads hot files, which complete inline)."""
    loop.run_until_complete(run_scenario(tmp_path, sc))


@pytest.mark.asyncio
@pytest.mark.parametrize("mode, seek", [
    ("a+", (1, 1)), ("a+", (2, 2)), ("a", (0, 7)), ("a+", (-1, 0)), ("a", (0, "x")),
    ("ab", (0, 7)), ("ab", (1.5, 0)), ("ab", ("x", 1)),
])
async def test_a_seek_refused_for_its_arguments_flushes_nothing(
        backend: str, tmp_path: Path, mode: str, seek: tuple[Any, Any]) -> None:
    """The builtin's text seek() and write-only binary seek() check their arguments before
    they flush: a refused seek leaves an appending file's buffered write where it was (not
    landed at the end; in "a+" the next read then finds the logical position the builtin
    keeps). Found by the test above: aionative landed the write first."""
    pa, pb = tmp_path / "a", tmp_path / "b"
    for p in (pa, pb):
        p.write_bytes(b"abcdefgh" * 8)
    binary = "b" in mode
    kw: dict[str, Any] = {} if binary else {"encoding": "latin-1"}
    data: Any = b"Z" if binary else "Z"
    sync = open(pa, mode, **kw)  # noqa: SIM115, ASYNC230 - closed below; the reference
    ours = await aionative.open(pb, mode, **kw)
    try:
        steps = [outcome(lambda: sync.seek(0)), await aoutcome(lambda: ours.seek(0))]
        steps += [outcome(lambda: sync.write(data)), await aoutcome(lambda: ours.write(data))]
        r1 = outcome(lambda: sync.seek(*seek))
        r2 = await aoutcome(lambda: ours.seek(*seek))
        assert r1[0] == "raise" and r1 == r2
        assert pa.stat().st_size == pb.stat().st_size == 64  # still buffered, both
        if "+" in mode:
            assert outcome(lambda: sync.read(3)) == await aoutcome(lambda: ours.read(3))
            assert outcome(sync.tell) == await aoutcome(ours.tell)
        assert steps[0] == steps[1] and steps[2] == steps[3]
    finally:
        sync.close()
        await ours.close()
    assert pa.read_bytes() == pb.read_bytes()


@pytest.mark.asyncio
@pytest.mark.blocks_the_loop("the builtin's file is written and read beside aionative's, "
                              "in one coroutine")
@pytest.mark.parametrize("size", [100, 70000])
@pytest.mark.parametrize("then", ["readlines", "readline", "read", "read_chunk", "tell"])
@pytest.mark.parametrize("mode", ["r+", "rb+"])
async def test_a_writelines_refused_part_way_leaves_its_first_items_where_the_builtins_are(
        backend: str, tmp_path: Path, mode: str, then: str, size: int) -> None:
    """``writelines`` stops at an item the file cannot take (text: one the encoding cannot
    encode; binary: a ``str``); the items before it stay in the text or buffered layer, as
    in the builtin's, and the next call finds them there — before 3.13 a text
    ``readlines()``/``readline()`` reads on without flushing them, and they land later.
    Found by the test above: aionative counted nothing held after the error."""
    pa, pb = tmp_path / "a", tmp_path / "b"
    for p in (pa, pb):
        p.write_bytes(b"b" * size)
    binary = "b" in mode
    kw: dict[str, Any] = {} if binary else {"encoding": "ascii"}
    items: list[Any] = [b"a", b"cd\n", "str"] if binary else ["a", "cd\n", "é"]
    sync = open(pa, mode, **kw)  # noqa: SIM115, ASYNC230 - closed below; the reference
    ours = await aionative.open(pb, mode, **kw)
    try:
        r1 = outcome(lambda: sync.writelines(items))
        r2 = await aoutcome(lambda: ours.writelines(items))
        assert r1[0] == "raise" and r1 == r2
        calls: dict[str, tuple[str, tuple[Any, ...]]] = {
            "readlines": ("readlines", ()), "readline": ("readline", ()),
            "read": ("read", ()), "read_chunk": ("read", (5,)), "tell": ("tell", ())}
        name, args = calls[then]
        r1 = outcome(lambda: getattr(sync, name)(*args))
        r2 = await aoutcome(lambda: getattr(ours, name)(*args))
        assert r1 == r2
        assert outcome(sync.tell) == await aoutcome(ours.tell)
    finally:
        sync.close()
        await ours.close()
    assert pa.read_bytes() == pb.read_bytes()
