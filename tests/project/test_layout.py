"""The source tree keeps the shape a newcomer can hold in their head: the package's modules
import one another one way (no cycle), and no module or C file grows past what reads in a
sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aionative"
CSRC = ROOT / "csrc"
PY_MAX_LINES = 800
C_MAX_LINES = 1200

pytestmark = pytest.mark.skipif(not (PACKAGE / "__init__.py").is_file() or not CSRC.is_dir(),
                                reason="the source tree is not here (an installed wheel's run)")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports, at any level of the
    file (inside functions too, and under ``TYPE_CHECKING``: a cycle there still ties the two
    modules together). ``from . import x`` names the submodule ``x``, not the package."""
    sources = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(sources) | {_module_name(p) for p in PACKAGE.rglob("*.pyi")}
    edges: dict[str, set[str]] = {name: set() for name in sources}
    for name, path in sources.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{target}.{a.name}" for a in node.names]
                found = [s for s in subs if s in known]
                targets = found if len(found) == len(subs) else [*found, target]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in sources and t != name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert _cycles(_imports()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_longer_than_it_can_be_read() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > PY_MAX_LINES}
    assert long == {}, f"modules over {PY_MAX_LINES} lines"


def test_no_c_file_is_longer_than_it_can_be_read() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sorted(CSRC.glob("*.[ch]"))
            if (n := len(p.read_text().splitlines())) > C_MAX_LINES}
    assert long == {}, f"C files over {C_MAX_LINES} lines"
