"""Each loader on files generated here (a real two-page PDF included), and bad inputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

from indexing.config import LoaderConfig
from indexing.loaders import LoaderError, iter_documents
from indexing.loaders.base import path_doc_id
from indexing.types import Document


def load(paths, **cfg) -> tuple[list[Document], list[LoaderError]]:
    items = list(iter_documents(paths, LoaderConfig(**cfg)))
    return [d for d in items if isinstance(d, Document)], [e for e in items if isinstance(e, LoaderError)]


def test_txt(tmp_path: Path):
    f = tmp_path / "notes.txt"
    f.write_text("Plain text.\nSecond line.", encoding="utf-8")
    os.utime(f, (1_700_000_000, 1_700_000_000))
    (doc,), errors = load([f])
    assert not errors
    assert doc.text == "Plain text.\nSecond line."
    assert doc.title == "notes" and doc.source == str(f.resolve())
    assert doc.doc_id == path_doc_id(f) and len(doc.doc_id) == 16
    assert doc.date == "2023-11-14T22:13:20+00:00"  # file mtime, ISO 8601


def test_markdown_front_matter_and_sections(tmp_path: Path):
    f = tmp_path / "guide.md"
    f.write_text(
        "---\ntitle: User Guide\ndate: 2024-03-01\ntags: [rag]\n---\n"
        "# Install\nRun make.\n\n## Linux\nUse apt.\n\n```\n# not a heading\n```\n"
        "## macOS\nUse brew.\n\n# Usage\nAsk questions.\n",
        encoding="utf-8",
    )
    (doc,), _ = load([f])
    assert doc.title == "User Guide" and doc.date == "2024-03-01"
    assert doc.metadata["tags"] == ["rag"]
    assert not doc.text.startswith("---")
    assert doc.section_at(doc.text.index("Run make")) == "Install"
    assert doc.section_at(doc.text.index("Use apt")) == "Install > Linux"
    assert doc.section_at(doc.text.index("# not a heading")) == "Install > Linux"
    assert doc.section_at(doc.text.index("Use brew")) == "Install > macOS"
    assert doc.section_at(doc.text.index("Ask questions")) == "Usage"


def test_html_strips_scripts_and_navigation(tmp_path: Path):
    f = tmp_path / "page.html"
    f.write_text(
        "<html><head><title>The  Page</title><style>p{color:red}</style></head><body>"
        "<nav>Home | About</nav><header>Site header</header>"
        "<h1>Main</h1><p>Visible &amp; useful text.</p><script>var x = 'hidden';</script>"
        "<h2>Details</h2><p>More text.</p><footer>Copyright</footer></body></html>",
        encoding="utf-8",
    )
    (doc,), _ = load([f])
    assert doc.title == "The Page"
    assert "Visible & useful text." in doc.text and "More text." in doc.text
    for hidden in ("hidden", "Home | About", "Site header", "Copyright", "color:red"):
        assert hidden not in doc.text
    assert doc.section_at(doc.text.index("Visible")) == "Main"
    assert doc.section_at(doc.text.index("More text")) == "Main > Details"


def test_html_without_closing_head_and_bom_jsonl(tmp_path: Path):
    f = tmp_path / "loose.htm"
    f.write_text("<html><head><title>Loose</title><meta charset=utf-8><body><p>Body text stays.</p>",
                 encoding="utf-8")
    (doc,), _ = load([f])
    assert doc.title == "Loose" and doc.text.strip() == "Body text stays."
    j = tmp_path / "bom.jsonl"
    j.write_bytes(b"\xef\xbb\xbf" + json.dumps({"_id": "b1", "text": "With a BOM."}).encode() + b"\n")
    (rec,), errors = load([j])
    assert rec.doc_id == "b1" and not errors


def test_pdf_two_pages(tmp_path: Path, two_page_pdf):
    f = two_page_pdf(tmp_path / "report.pdf")
    (doc,), errors = load([f])
    assert not errors
    assert [p.number for p in doc.pages] == [1, 2]
    assert doc.page_at(doc.text.index("first page")) == 1
    assert doc.page_at(doc.text.index("second page")) == 2
    assert doc.title == "Test PDF"
    assert doc.date and doc.date[:4].isdigit()  # from the PDF info dictionary
    assert doc.metadata["n_pages"] == 2


def test_beir_jsonl_as_is(tmp_path: Path):
    f = tmp_path / "corpus.jsonl"
    rows = [
        {"_id": "d1", "title": "T1", "text": "First text.", "metadata": {"year": 2020}},
        {"_id": "d2", "title": "", "text": "Second text.", "metadata": {}, "lang": "en"},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\nnot json\n{\"_id\": \"d3\"}\n", encoding="utf-8")
    docs, errors = load([f])
    assert [d.doc_id for d in docs] == ["d1", "d2"]
    assert docs[0].title == "T1" and docs[0].text == "First text." and docs[0].metadata == {"year": 2020}
    assert docs[1].metadata == {"lang": "en"}
    assert all(d.source == str(f.resolve()) for d in docs)
    assert sorted(e.reason.split(":")[0] for e in errors) == ["invalid JSON", "record has none of the text fields ['text']"]
    assert errors[0].path.endswith("corpus.jsonl:4")


def test_json_records_with_custom_fields(tmp_path: Path):
    f = tmp_path / "faq.json"
    f.write_text(json.dumps([
        {"id": 7, "question": "What is RAG?", "answer": "Retrieval plus generation.", "team": "x", "skip": 1},
    ]), encoding="utf-8")
    (doc,), _ = load([f], text_fields=["question", "answer"], title_field="question", metadata_fields=["team"],
                     metadata={"tenant": "acme"})
    assert doc.doc_id == "7"
    assert doc.text == "What is RAG?\n\nRetrieval plus generation."
    assert doc.metadata == {"tenant": "acme", "team": "x"}


def test_directory_walk_with_globs(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep.md").write_text("# K\nkeep", encoding="utf-8")
    (tmp_path / "a" / "drop.txt").write_text("drop", encoding="utf-8")
    (tmp_path / "b.txt").write_text("b", encoding="utf-8")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.txt").write_text("secret", encoding="utf-8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    docs, errors = load([tmp_path], exclude=[".*", "**/.*", "a/drop.*"])
    assert sorted(Path(d.source).name for d in docs) == ["b.txt", "keep.md"]
    assert not errors  # files outside the include globs are not errors
    docs, _ = load([tmp_path], include=["*.md"])
    assert [Path(d.source).name for d in docs] == ["keep.md"]


def test_bad_inputs_are_reported(tmp_path: Path):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf\n%%EOF")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "data.xyz").write_text("x", encoding="utf-8")
    (tmp_path / "bad.json").write_text("{oops", encoding="utf-8")
    paths = [tmp_path / n for n in ("broken.pdf", "latin1.txt", "data.xyz", "bad.json", "missing.txt")]
    docs, errors = load(paths)
    assert not docs
    reasons = {Path(e.path).name: e.reason for e in errors}
    assert set(reasons) == {"broken.pdf", "latin1.txt", "data.xyz", "bad.json", "missing.txt"}
    assert "PDF" in reasons["broken.pdf"]
    assert "decode" in reasons["latin1.txt"]
    assert "unsupported" in reasons["data.xyz"]
    assert "invalid JSON" in reasons["bad.json"]
    assert "no such file" in reasons["missing.txt"]
    (doc,), _ = load([tmp_path / "latin1.txt"], encoding="latin-1")
    assert doc.text == "café"
