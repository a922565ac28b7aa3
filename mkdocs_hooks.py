"""MkDocs hook: the site's home page is README.md.

The README links to the documentation with absolute GitHub addresses (they work on GitHub and
on PyPI); on the site those become relative links to the pages themselves, which
``mkdocs build --strict`` then checks like any other link.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent
_DOCS = re.compile(r"https://github\.com/aionative/aionative/blob/main/docs/([\w./#-]+)")
_IMG = re.compile(r"https://raw\.githubusercontent\.com/aionative/aionative/main/docs/([\w./-]+)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != "index.md":
        return markdown
    text = (_ROOT / "README.md").read_text(encoding="utf-8")
    text = _IMG.sub(r"\1", text)
    return _DOCS.sub(r"\1", text)
