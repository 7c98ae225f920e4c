"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

- ``ARCHITECTURE.md`` and ``CHANGELOG.md`` live at the repository root, where people browsing the
  source look for them; the site shows them as the pages ``architecture.md`` and ``changelog.md``.
  Their links into ``docs/`` are written from the root (``docs/internals.md``), so on the site,
  where they sit beside the other pages, ``docs/`` is taken off. The pages of ``docs/`` link them
  where they are in the repository (``../ARCHITECTURE.md``), which on the site becomes the page.
- The API reference imports the package (``force_inspection``: the model's signature and docstring
  are made from the core's tables when the class is created). Importing a ``__main__`` module runs
  its command, so each one is replaced by an empty module before the reference is read.

The tables of ``docs/training.md`` (the presets, ``transformer-cpp train``'s options) are written
into the page by ``tools/docs_tables.py``, so the page reads the same in the repository and on
the site; ``tests/repo/test_docs.py`` fails when they are stale.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
ROOT_PAGES = {"architecture.md": "ARCHITECTURE.md", "changelog.md": "CHANGELOG.md"}


def on_config(config: Any) -> Any:
    package = ROOT / "python" / "transformer_cpp"
    for main in package.rglob("__main__.py"):
        name = ".".join(main.relative_to(package.parent).with_suffix("").parts)
        sys.modules.setdefault(name, types.ModuleType(name, "a command (python -m), not documented here"))
    return config


def on_files(files: Any, config: Any) -> Any:
    for page, source in ROOT_PAGES.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri in ROOT_PAGES:
        return re.sub(r"\]\(docs/", "](", markdown)
    depth = page.file.src_uri.count("/")  # a page in docs/reference/ links ../../ARCHITECTURE.md
    for site_page, source in ROOT_PAGES.items():
        markdown = markdown.replace(f"]({'../' * (depth + 1)}{source}", f"]({'../' * depth}{site_page}")
    return markdown
