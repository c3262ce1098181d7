"""Fixtures for the indexing tests: the real MiniLM tokenizer and generated input files."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexing.tokens import TokenCounter

EN_TEXT = (
    "Retrieval augmented generation grounds a language model in documents. "
    "The retriever finds passages that are relevant to the question! "
    "Does the generator then cite them? It should, because citations let users check the answer. "
    "Chunking decides what a passage is, so it matters more than people expect.\n\n"
    "A second paragraph talks about indexing. Documents are loaded, cleaned and cut into chunks. "
    "Each chunk keeps its source, its page and its section. Small chunks match precisely; "
    "big chunks give the generator context. Small-to-big retrieval gets both.\n"
)
ZH_TEXT = (
    "检索增强生成把语言模型与文档联系起来。检索器找到与问题相关的段落！生成器会引用它们吗？"
    "应该会，因为引用让用户可以核对答案；分块决定了段落是什么。"
    "文档被加载、清洗并切分成块。每个块都保留来源、页码和章节。"
)


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    return TokenCounter("minilm", 256)


def _make_pdf(path: Path, pages: list[list[str]], title: str = "Test PDF") -> Path:
    """A real PDF with one text line per entry, one page per list (reportlab)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    c.setTitle(title)
    c.setCreator("tests")
    for lines in pages:
        y = 800
        for line in lines:
            c.drawString(60, y, line)
            y -= 16
        c.showPage()
    c.save()
    return path


def _two_page_pdf(path: Path) -> Path:
    return _make_pdf(path, [
        ["ACME Quarterly Report", "The first page explains the retrieval pipeline.",
         "It has two sentences about dense search.", "Page 1 of 2"],
        ["ACME Quarterly Report", "The second page is about reranking with cross-encoders.",
         "Rerankers reorder the candidates.", "Page 2 of 2"],
    ])


@pytest.fixture(scope="session")
def make_pdf():
    return _make_pdf


@pytest.fixture(scope="session")
def two_page_pdf():
    return _two_page_pdf


@pytest.fixture(scope="session")
def en_text() -> str:
    return EN_TEXT


@pytest.fixture(scope="session")
def zh_text() -> str:
    return ZH_TEXT
