"""The user documentation: every public name has a docstring, and the mkdocs site builds
(``--strict``) with its pages, headings and the API reference listing every public name."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The modules a user imports, as the API reference lists them.
PUBLIC_MODULES = [
    "aionative",
    "aionative.os",
    "aionative.ospath",
    "aionative.tempfile",
    "aionative.threadpool",
    "aionative.threadpool.binary",
    "aionative.threadpool.text",
    "aionative.base",
    "aionative.starlette",
    "aionative.fastapi",
]

# Imported while the test modules are collected, before any test's blockbuster fixture wraps
# `os` functions: `aionative.os.listdir` and the like copy `os.listdir`'s docstring when the
# module is imported (functools.wraps), and would copy a wrapper's instead.
for _name in PUBLIC_MODULES:
    importlib.import_module(_name)

def _exported(modname: str) -> list[tuple[str, Any]]:
    mod = importlib.import_module(modname)
    names = getattr(mod, "__all__", None)
    assert names is not None, f"{modname} has no __all__"
    return [(n, getattr(mod, n)) for n in names]


def _public_members(cls: type) -> list[tuple[str, Any, type]]:
    """(name, attribute, defining class) of every public member the class has, inherited
    ones included, whose defining class is aionative's own."""
    out = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        for owner in cls.__mro__:
            if name in vars(owner):
                break
        else:  # pragma: no cover - dir() found it somewhere
            continue
        if not owner.__module__.startswith("aionative"):
            continue
        out.append((name, vars(owner)[name], owner))
    return out


def _doc_of(attr: Any) -> str | None:
    if isinstance(attr, (staticmethod, classmethod)):
        attr = attr.__func__
    if isinstance(attr, property):
        return attr.__doc__ or (attr.fget.__doc__ if attr.fget else None)
    return getattr(attr, "__doc__", None)


def _undocumented() -> list[str]:
    missing: list[str] = []
    seen: set[int] = set()
    for modname in PUBLIC_MODULES:
        mod = importlib.import_module(modname)
        if not (mod.__doc__ or "").strip():
            missing.append(modname)
        for name, obj in _exported(modname):
            if inspect.ismodule(obj):
                continue
            where = f"{modname}.{name}"
            if not (inspect.isclass(obj) or callable(obj)):
                obj = type(obj)  # stdin, stdout, ...: documented by their class
            if inspect.isclass(obj):
                if not (vars(obj).get("__doc__") or "").strip():
                    missing.append(where)
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                for mname, attr, _owner in _public_members(obj):
                    if not inspect.isroutine(attr) and not isinstance(
                            attr, (property, staticmethod, classmethod)):
                        continue  # a plain class attribute
                    if not (_doc_of(attr) or "").strip():
                        missing.append(f"{where}.{mname}")
            elif not (getattr(obj, "__doc__", None) or "").strip():
                missing.append(where)
    return sorted(set(missing))


def test_every_public_name_has_a_docstring() -> None:
    missing = _undocumented()
    assert not missing, "public names without a docstring:\n  " + "\n  ".join(missing)


def test_docstrings_of_the_native_calls_match_the_stub() -> None:
    """``pread``, ``preadinto`` and ``pwrite`` are C functions: their docstrings carry the
    signature ``_core.pyi`` declares (positional-only), which ``inspect`` and the API
    reference show."""
    aionative = importlib.import_module("aionative")
    stub = (ROOT / "aionative" / "_core.pyi").read_text()
    for name in ("pread", "preadinto", "pwrite"):
        m = re.search(rf"^def {name}\((.*?)\) -> ", stub, re.MULTILINE | re.DOTALL)
        assert m, name
        params = [p.split(":")[0].strip() for p in m.group(1).split(",")]
        params = [p for p in params if p and p != "/"]
        sig = inspect.signature(getattr(aionative, name))
        assert list(sig.parameters) == params, name
        assert all(p.kind is inspect.Parameter.POSITIONAL_ONLY
                   for p in sig.parameters.values()), name
        assert (getattr(aionative, name).__doc__ or "").strip(), name


# --- the site ---------------------------------------------------------------------------------

class _Page(HTMLParser):
    """The headings and the text of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.ids: set[str] = set()
        self.text: list[str] = []
        self._in_heading = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if k == "id" and v:
                self.ids.add(v)
        if re.fullmatch(r"h[1-6]", tag):
            self._in_heading += 1
            self.headings.append("")

    def handle_endtag(self, tag: str) -> None:
        if re.fullmatch(r"h[1-6]", tag) and self._in_heading:
            self._in_heading -= 1
            self.headings[-1] = self.headings[-1].replace("\u00b6", "").strip()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_heading:
            self.headings[-1] += data


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install '.[docs]')")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed "
                        "(pip install '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.mark.slow
def test_site_index_page(site: Path) -> None:
    page = _parse(site / "index.html")
    for heading in ("aionative", "Install", "Example", "Replacing aiofiles",
                    "FastAPI and Starlette", "Performance", "Backends", "Guarantees",
                    "Limitations"):
        assert any(h.strip().startswith(heading) for h in page.headings), (heading,
                                                                          page.headings)
    text = "".join(page.text)
    assert "make bench" in text and "make test" in text


@pytest.mark.slow
def test_site_pages_exist(site: Path) -> None:
    for rel, heading in [("getting-started/index.html", "Getting started"),
                         ("migration/index.html", "Migrating from aiofiles"),
                         ("web/index.html", "FastAPI and Starlette"),
                         ("lowlevel/index.html", "Low-level API"),
                         ("design/index.html", "How it works"),
                         ("benchmarks/index.html", None),
                         ("reliability/index.html", None),
                         ("faq/index.html", "FAQ")]:
        path = site / rel
        assert path.is_file(), rel
        if heading is not None:
            assert any(h.strip().startswith(heading) for h in _parse(path).headings), rel
    design = _parse(site / "design" / "index.html")
    assert any(h.strip() == "Glossary" for h in design.headings)


@pytest.mark.slow
def test_site_api_reference_lists_every_public_name(site: Path) -> None:
    page = _parse(site / "api" / "index.html")
    assert any(h.strip().startswith("API reference") for h in page.headings), page.headings
    absent = []
    for modname in PUBLIC_MODULES:
        if modname not in page.ids:
            absent.append(modname)
        for name, obj in _exported(modname):
            if inspect.ismodule(obj):
                target = obj.__name__
            else:
                target = f"{modname}.{name}"
            if target not in page.ids:
                absent.append(target)
    assert not absent, "not in the API reference:\n  " + "\n  ".join(absent)
