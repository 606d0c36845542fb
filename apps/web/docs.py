"""The guides in ``docs/*.md``, served rendered at ``/docs/<name>.md`` (so their relative links
to each other and to ``img/`` keep working) with an index at ``/docs/``.

Only files directly in ``docs/`` with a safe name are served; raw HTML in a guide is escaped
(markdown-it's CommonMark preset with ``html`` off). A rendering is kept until the file changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from markdown_it import MarkdownIt

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
IMAGE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}\.png")
_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")


@dataclass(frozen=True, slots=True)
class Guide:
    name: str
    title: str
    summary: str


def docs_dir() -> Path:
    return Path(settings.BASE_DIR) / "docs"


def guide_path(name: str) -> Path | None:
    """``docs/<name>.md`` if ``name`` is a plain guide name and the file exists."""
    if not NAME.fullmatch(name):
        return None
    path = docs_dir() / f"{name}.md"
    return path if path.is_file() else None


def image_path(name: str) -> Path | None:
    if not IMAGE.fullmatch(name):
        return None
    path = docs_dir() / "img" / name
    return path if path.is_file() else None


def guides() -> list[Guide]:
    """Every guide, by name, with its first heading and first paragraph line."""
    found = []
    for path in sorted(docs_dir().glob("*.md")):
        if NAME.fullmatch(path.stem):
            title, summary = _head(path.read_text(encoding="utf-8"))
            found.append(Guide(name=path.stem, title=title or path.stem, summary=summary))
    return found


def _head(text: str) -> tuple[str, str]:
    """(first heading, first plain paragraph without its backticks)."""
    lines = text.splitlines()
    title = next((line.lstrip("#").strip() for line in lines if line.startswith("#")), "")
    blocks = [b.strip() for b in text.split("\n\n")]
    summary = next((b for b in blocks if b and not b.startswith(("#", "|", "```", "-", "!",
                                                                  "<", ">", "1.", "Code:"))), "")
    return title, " ".join(summary.replace("`", "").split())


def rendered(path: Path) -> tuple[str, str]:
    """(title, HTML body) of the guide at ``path``, rendered once per modification time."""
    return _render(path, path.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _render(path: Path, mtime_ns: int) -> tuple[str, str]:
    text = path.read_text(encoding="utf-8")
    return _head(text)[0] or path.stem, _MARKDOWN.render(text)
