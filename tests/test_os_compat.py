"""aionative.os / aionative.ospath against os / os.path (the aiofiles.os surface)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import aionative.os as aos
import aionative.ospath as aospath

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
