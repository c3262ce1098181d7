"""HTML: the <title> and the visible text; script, style, nav, header, footer are dropped.

Headings (h1-h6) become section paths like the Markdown loader's, so chunk citations can
name the part of the page they came from.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from ..config import LoaderConfig
from ..types import Section
from .base import LoaderError, LoadResult, file_document, read_text

_SKIP = {"script", "style", "nav", "header", "footer", "noscript", "template", "svg", "aside", "form"}
_BLOCK = {
    "p", "div", "section", "article", "main", "li", "ul", "ol", "table", "tr", "br", "hr", "pre",
    "blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "dt", "dd", "figcaption", "td", "th",
}


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.size = 0
        self.skip_depth = 0
        self.in_title = False
        self.in_head = False  # </head> is optional in HTML5: <body> also ends it
        self.title = ""
        self.heading: tuple[int, int, list[str]] | None = None  # (level, start offset, words)
        self.stack: list[tuple[int, str]] = []
        self.marks: list[tuple[int, str]] = []  # (offset where a heading starts, its section path)

    def _emit(self, s: str) -> None:
        self.parts.append(s)
        self.size += len(s)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "title":
            self.in_title = True
        if tag == "head":
            self.in_head = True
        elif tag == "body":
            self.in_head = False
        if tag in _SKIP:
            self.skip_depth += 1
            return
        if tag in _BLOCK:
            self._emit("\n")
        if len(tag) == 2 and tag[0] == "h" and tag[1] in "123456" and not self.skip_depth:
            self.heading = (int(tag[1]), self.size, [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag == "head":
            self.in_head = False
        if tag in _SKIP:
            self.skip_depth = max(0, self.skip_depth - 1)
            return
        if self.heading and tag == f"h{self.heading[0]}":
            level, start, words = self.heading
            title = " ".join("".join(words).split())
            while self.stack and self.stack[-1][0] >= level:
                self.stack.pop()
            if title:
                self.stack.append((level, title))
                self.marks.append((start, " > ".join(t for _, t in self.stack)))
            self.heading = None
        if tag in _BLOCK:
            self._emit("\n")

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        if tag in _BLOCK:
            self._emit("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title += data
            return
        if self.skip_depth or self.in_head:
            return
        if self.heading is not None:
            self.heading[2].append(data)
        self._emit(data)


def load_html(path: Path, cfg: LoaderConfig) -> LoadResult:
    raw = read_text(path, cfg)
    p = _Extractor()
    try:
        p.feed(raw)
        p.close()
    except Exception as e:  # html.parser is lenient; anything raised means truly broken input
        raise LoaderError(path, f"cannot parse HTML: {e}") from e
    text = "".join(p.parts)
    sections = [
        Section(start, p.marks[i + 1][0] if i + 1 < len(p.marks) else len(text), path_)
        for i, (start, path_) in enumerate(p.marks)
    ]
    title = " ".join(p.title.split())
    yield file_document(path, text, cfg, title=title or path.stem, sections=sections)
