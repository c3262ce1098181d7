"""Markdown: YAML front matter gives title/date/metadata; headings become section paths."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ..config import LoaderConfig
from ..types import Section
from .base import LoaderError, LoadResult, file_document, read_text, to_iso

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_FENCE = re.compile(r"^(```|~~~)")


def split_front_matter(text: str, path: Path) -> tuple[dict, str]:
    m = _FRONT.match(text)
    if not m:
        return {}, text
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        raise LoaderError(path, f"bad YAML front matter: {e}") from e
    if not isinstance(meta, dict):
        return {}, text
    return meta, text[m.end():]


def heading_sections(text: str) -> tuple[list[Section], str]:
    """Spans per heading path ("A > B"), skipping '#' lines inside code fences; plus the first H1."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    first_h1 = ""
    in_fence = False
    cur_start, cur_path = 0, ""
    pos = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if _FENCE.match(stripped):
            in_fence = not in_fence
        m = None if in_fence else _HEADING.match(stripped)
        if m:
            level, title = len(m.group(1)), m.group(2).strip()
            if level == 1 and not first_h1:
                first_h1 = title
            if pos > cur_start and cur_path:
                sections.append(Section(cur_start, pos, cur_path))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            cur_start, cur_path = pos, " > ".join(t for _, t in stack)
        pos += len(line)
    if pos > cur_start and cur_path:
        sections.append(Section(cur_start, pos, cur_path))
    return sections, first_h1


def load_markdown(path: Path, cfg: LoaderConfig) -> LoadResult:
    meta, body = split_front_matter(read_text(path, cfg), path)
    sections, h1 = heading_sections(body)
    title = str(meta.pop("title", "") or h1 or path.stem)
    date = to_iso(meta.pop("date", None))
    extra = {k: v for k, v in meta.items() if isinstance(k, str)}
    yield file_document(path, body, cfg, title=title, date=date, sections=sections, metadata=extra)
