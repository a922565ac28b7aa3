"""aionative.os / aionative.ospath against os / os.path (the aiofiles.os surface)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import pytest

import aionative.os as aos
import aionative.ospath as aospath
from tests.support import unwrapped

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("backend")]


async def test_module_shape() -> None:
    assert aos.path is aospath
    for name in ("stat", "rename", "renames", "replace", "remove", "unlink", "mkdir",
                 "makedirs", "rmdir", "removedirs", "symlink", "readlink", "listdir", "scandir",
                 "access", "getcwd", "link", "sendfile", "statvfs", "wrap"):
        assert callable(getattr(aos, name)), name
    for name in ("abspath", "getatime", "getctime", "getmtime", "getsize", "exists", "isdir",
                 "isfile", "islink", "ismount", "samefile", "sameopenfile"):
        assert callable(getattr(aospath, name)), name


async def test_os_functions(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"12345")
    assert await aos.stat(f) == os.stat(f)
    assert await aos.stat(str(f), loop=None, executor=None) == os.stat(f)
    await aos.rename(f, tmp_path / "g")
    await aos.replace(tmp_path / "g", tmp_path / "h")
    assert (tmp_path / "h").read_bytes() == b"12345"
    await aos.symlink(tmp_path / "h", tmp_path / "l")
    assert await aos.readlink(tmp_path / "l") == os.readlink(tmp_path / "l")
    await aos.link(tmp_path / "h", tmp_path / "hl")
    assert sorted(await aos.listdir(tmp_path)) == sorted(os.listdir(tmp_path))
    assert sorted(e.name for e in await aos.scandir(tmp_path)) == sorted(os.listdir(tmp_path))
    assert await aos.access(tmp_path / "h", os.R_OK) is True
    assert await aos.getcwd() == os.getcwd()
    assert (await aos.statvfs(tmp_path)).f_bsize == os.statvfs(tmp_path).f_bsize
    for name in ("l", "hl"):
        await aos.unlink(tmp_path / name)
    await aos.remove(tmp_path / "h")
    assert os.listdir(tmp_path) == []


async def test_makedirs_removedirs_renames(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    (tmp_path / "keep").write_bytes(b"")  # os.removedirs stops at a non-empty parent
    await aos.makedirs(deep, 0o755)
    assert deep.is_dir()
    with pytest.raises(FileExistsError):
        await aos.makedirs(deep)
    await aos.makedirs(deep, exist_ok=True)
    (deep / "f").write_bytes(b"x")
    await aos.renames(deep / "f", tmp_path / "x" / "y" / "f")
    assert (tmp_path / "x" / "y" / "f").read_bytes() == b"x"
    assert not (tmp_path / "a").exists()  # emptied parents were pruned, as os.renames does
    await aos.unlink(tmp_path / "x" / "y" / "f")
    await aos.removedirs(tmp_path / "x" / "y")
    assert not (tmp_path / "x").exists() and tmp_path.exists()


async def test_ospath(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    (tmp_path / "d").mkdir()
    os.symlink(f, tmp_path / "l")
    for p in (f, tmp_path / "d", tmp_path / "l", tmp_path / "missing", "bad\0path"):
        assert await aospath.exists(p) == os.path.exists(p)
        assert await aospath.isfile(p) == os.path.isfile(p)
        assert await aospath.isdir(p) == os.path.isdir(p)
        assert await aospath.islink(p) == os.path.islink(p)
    assert await aospath.getsize(f) == 3
    assert await aospath.getmtime(f) == os.path.getmtime(f)
    assert await aospath.getatime(f) == os.path.getatime(f)
    assert await aospath.getctime(f) == os.path.getctime(f)
    assert await aospath.abspath("x") == os.path.abspath("x")
    assert await aospath.ismount("/") is True
    assert await aospath.samefile(f, tmp_path / "l") is True
    fd1, fd2 = os.open(f, os.O_RDONLY), os.open(tmp_path / "l", os.O_RDONLY)
    try:
        assert await aospath.sameopenfile(fd1, fd2) is True
    finally:
        os.close(fd1)
        os.close(fd2)
    with pytest.raises(FileNotFoundError):
        await aospath.getsize(tmp_path / "missing")


def _parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    """Name, kind and default of each parameter, leaving out aiofiles' ``loop``/``executor``."""
    return [(p.name, p.kind, p.default)
            for p in inspect.signature(unwrapped(fn)).parameters.values()
            if p.name not in ("loop", "executor")]


@pytest.mark.parametrize(("ours", "theirs"), [(aos, os), (aospath, os.path)],
                         ids=["os", "ospath"])
async def test_parameters_are_named_as_os_names_them(ours: Any, theirs: Any) -> None:
    """aiofiles passes keywords through to ``os``, so ``getsize(filename=p)`` or
    ``isdir(s=p)`` works there; each function here takes the same parameters, by the same
    names, as the ``os`` / ``os.path`` function of this Python. (``isdir`` and the four
    ``get*`` took ``path`` before.)"""
    names = [n for n in ours.__all__ if n not in ("wrap", "path")]
    assert names
    assert {n: _parameters(getattr(ours, n)) for n in names} == {
        n: _parameters(getattr(theirs, n)) for n in names}


async def test_the_ospath_functions_take_their_argument_by_name(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    for name in ("exists", "isfile", "isdir", "islink", "getsize", "getmtime", "getatime",
                 "getctime", "abspath", "ismount"):
        (param,) = inspect.signature(unwrapped(getattr(os.path, name))).parameters
        for arg in (f, tmp_path):
            assert await getattr(aospath, name)(**{param: arg}) == getattr(os.path, name)(
                **{param: arg}), (name, arg)
    assert await aospath.samefile(f1=f, f2=f) is True
    fd = os.open(f, os.O_RDONLY)
    try:
        assert await aospath.sameopenfile(fp1=fd, fp2=fd) is True
    finally:
        os.close(fd)


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """A call's result, or its exception as (type, errno, filename, message)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception is the result compared
        return (type(exc), getattr(exc, "errno", None), getattr(exc, "filename", None),
                str(exc))


async def _aoutcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return await fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        return (type(exc), getattr(exc, "errno", None), getattr(exc, "filename", None),
                str(exc))


async def test_descriptors_where_os_takes_them(tmp_path: Path) -> None:
    """``stat``, the ``os.path`` predicates and ``samefile`` take a descriptor as ``os``
    does, with its checks: no ``dir_fd`` beside one, no ``follow_symlinks=False`` beside one
    above 0, ``islink`` refuses one (TypeError), and a negative one is EBADF. (Before, on
    io_uring, ``stat(-100)`` — ``AT_FDCWD`` — answered the working directory's stat, and the
    predicates raised TypeError for any descriptor; on every backend ``stat(fd,
    follow_symlinks=False)`` answered and ``islink(fd)`` said False.)"""
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    fd = os.open(f, os.O_RDONLY)
    try:
        for args, kwargs in [((fd,), {}), ((-100,), {}), ((-1,), {}), ((12345,), {}),
                             ((fd,), {"follow_symlinks": False}), ((fd,), {"dir_fd": fd}),
                             ((0,), {"follow_symlinks": False})]:
            assert await _aoutcome(aos.stat, *args, **kwargs) == _outcome(
                os.stat, *args, **kwargs), (args, kwargs)
        for name in ("exists", "isfile", "isdir", "islink", "getsize", "getmtime",
                     "getatime", "getctime"):
            for arg in (fd, -100, 12345):
                assert await _aoutcome(getattr(aospath, name), arg) == _outcome(
                    getattr(os.path, name), arg), (name, arg)
        assert await aospath.samefile(fd, f) is True
        assert await _aoutcome(aospath.sameopenfile, -100, -100) == _outcome(
            os.path.sameopenfile, -100, -100)
    finally:
        os.close(fd)


async def test_link_of_a_symlink_links_the_symlink(tmp_path: Path) -> None:
    """``os.link`` calls link(2), which does not follow a symbolic link (linkat with
    ``AT_SYMLINK_FOLLOW`` only when a directory descriptor is given). Before, on io_uring,
    the new name was a second link to the target, and a dangling symlink could not be
    linked (FileNotFoundError)."""
    (tmp_path / "t").write_bytes(b"x")
    os.symlink("t", tmp_path / "s")
    os.symlink("missing", tmp_path / "d")
    await aos.link(tmp_path / "s", tmp_path / "h1")
    await aos.link(tmp_path / "d", tmp_path / "h2")
    assert os.path.islink(tmp_path / "h1") and os.path.islink(tmp_path / "h2")
    assert os.stat(tmp_path / "t").st_nlink == 1
    dfd = os.open(tmp_path, os.O_RDONLY)
    try:
        await aos.link("s", "h3", src_dir_fd=dfd, dst_dir_fd=dfd)
        await aos.link("s", "h4", src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(dfd)
    assert not os.path.islink(tmp_path / "h3") and os.path.islink(tmp_path / "h4")
    assert os.stat(tmp_path / "t").st_nlink == 2


async def test_samefile_names_the_first_path_that_fails(tmp_path: Path) -> None:
    """``os.path.samefile`` stats its first argument first: when both fail, the error is
    the first one's (before: whichever stat came back first, or on io_uring the one the
    engine refused before submitting)."""
    first = tmp_path / "nx_first"
    for second in (tmp_path / "nx_second", "", "a\0b", "x" * 5000):
        for _ in range(20):
            assert await _aoutcome(aospath.samefile, first, second) == _outcome(
                os.path.samefile, first, second), second
