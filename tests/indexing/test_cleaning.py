"""Cleaning: normalisation keeps span maps right; headers/footers, duplicates and user filters
are removed and counted."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from indexing.cleaning import Cleaner
from indexing.config import CleaningConfig, LoaderConfig
from indexing.dedup import MinHashLSH, SimHash
from indexing.loaders import iter_documents
from indexing.types import Document, Page, Section

_VOCAB = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
          "upsilon phi chi psi omega retrieval chunk index vector sparse dense rerank answer cite")
WORDS = [w for w in _VOCAB.split(" ")]


def essay(seed: int, n: int = 300) -> str:
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) + ("." if rnd.random() < 0.1 else "") for _ in range(n))


def edit(text: str, share: float, seed: int = 0) -> str:
    """Replace about `share` of the words (a near-duplicate)."""
    rnd = random.Random(seed)
    return " ".join("CHANGED" if rnd.random() < share else w for w in text.split())


def test_normalisation_and_span_remapping():
    text = "Ｆｕｌｌ\u3000width\x07 text\r\n\r\n\r\n\r\nNext   section\ttext.\u200b"
    doc = Document("d", text, "/d", sections=[Section(0, 20, "One"), Section(20, len(text), "Two")])
    out = Cleaner(CleaningConfig())(doc)
    assert out.text == "Full width text\n\nNext section text."
    assert out.section_at(out.text.index("Full")) == "One"
    assert out.section_at(out.text.index("Next")) == "Two"
    assert out.sections[-1].end == len(out.text)


def test_pdf_headers_and_footers_removed(tmp_path: Path, two_page_pdf):
    f = two_page_pdf(tmp_path / "r.pdf")
    (doc,) = list(iter_documents([f], LoaderConfig()))
    cleaner = Cleaner(CleaningConfig())
    out = cleaner(doc)
    assert "ACME Quarterly Report" not in out.text and "Page 1 of 2" not in out.text
    assert cleaner.edits["header_footer_lines"] == 4
    assert out.page_at(out.text.index("first page")) == 1
    assert out.page_at(out.text.index("second page")) == 2
    keep = Cleaner(CleaningConfig(strip_headers_footers=False))(doc)
    assert "ACME Quarterly Report" in keep.text


def test_header_detection_ignores_unique_lines():
    pages = ["Intro line\nbody one\nend one", "Other start\nbody two\nend two"]
    text = "\n\n".join(pages)
    doc = Document(
        "d", text, "/d", pages=[Page(0, len(pages[0]) + 2, 1), Page(len(pages[0]) + 2, len(text), 2)]
    )
    cleaner = Cleaner(CleaningConfig())
    assert cleaner(doc).text.split() == text.split()
    assert cleaner.edits["header_footer_lines"] == 0


@pytest.mark.parametrize("method", ["minhash", "simhash"])
def test_exact_and_near_duplicates_counted(method):
    cleaner = Cleaner(CleaningConfig(near_dedup=method, near_dedup_threshold=0.8))
    base = essay(1)
    docs = [
        Document("a", base, "/a"),
        Document("b", "  " + base.upper() + "  ", "/b"),  # exact after case/whitespace folding
        Document("c", edit(base, 0.02, seed=3), "/c"),  # near duplicate
        Document("d", essay(2), "/d"),  # different
        Document("e", edit(base, 0.5, seed=4), "/e"),  # half rewritten: not a duplicate
        Document("f", "   \n ", "/f"),
    ]
    kept = [d.doc_id for d in docs if cleaner(d) is not None]
    assert kept == ["a", "d", "e"]
    assert cleaner.dropped == {"exact_duplicate": 1, "near_duplicate": 1, "empty": 1}
    assert cleaner.duplicate_of == {"b": "a", "c": "a"}


@pytest.mark.parametrize("index", [MinHashLSH(0.9), SimHash(0.9)])
def test_near_dedup_has_no_false_positives_on_distinct_texts(index):
    assert all(index.check_add(str(i), essay(100 + i, 200)) is None for i in range(200))


def test_user_filter_hook(tmp_path: Path, monkeypatch):
    (tmp_path / "myfilters.py").write_text(
        "def no_drafts(doc):\n    return 'DRAFT' not in doc.text\n\n"
        "def shout(doc):\n    doc.text = doc.text.upper()\n    return doc\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cleaner = Cleaner(CleaningConfig(filters=["myfilters:no_drafts", "myfilters:shout"]))
    assert cleaner(Document("1", "DRAFT text", "/1")) is None
    assert cleaner(Document("2", "final text", "/2")).text == "FINAL TEXT"
    assert cleaner.dropped == {"filter:myfilters:no_drafts": 1}
    with pytest.raises(ValueError, match="cannot import"):
        Cleaner(CleaningConfig(filters=["myfilters:missing"]))
