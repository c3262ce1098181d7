"""Invariants of every chunker with the real MiniLM tokenizer: exact spans, coverage, overlap,
the 256 word-piece limit (special tokens included), sentence boundaries, CJK, parent links."""

from __future__ import annotations

import pytest

from indexing.chunking import build_chunkers, chunk_documents
from indexing.config import ChunkingConfig, NoneSpec, RecursiveSpec, SlidingSpec, SmallToBigSpec
from indexing.types import Chunk, Document, Section

SENT_END = tuple(".!?;。！？；")


def run(doc: Document, spec, counter) -> list[Chunk]:
    return chunk_documents([doc], build_chunkers(ChunkingConfig(chunkers=[spec]), counter))[0]


def full_len(counter, text: str) -> int:
    return len(counter.tok.encode(text, add_special_tokens=True).ids)


def check_common(doc: Document, chunks: list[Chunk], counter, limit: int = 256) -> None:
    assert chunks
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    for c in chunks:
        assert c.text == doc.text[c.start : c.end] and c.text == c.text.strip()
        assert c.doc_id == doc.doc_id and c.source == doc.source and c.title == doc.title
        assert c.chunk_id.startswith(f"{doc.doc_id}#{c.granularity}#")
        assert c.section == doc.section_at(c.start)
        assert c.language in ("en", "zh")
        assert c.metadata["tag"] == "t"
        if c.metadata.get("role") != "parent":
            assert full_len(counter, c.text) <= limit, "chunk would be truncated by the embedder"


def check_coverage(doc: Document, chunks: list[Chunk]) -> None:
    covered = bytearray(len(doc.text))
    for c in chunks:
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    missing = [i for i, ch in enumerate(doc.text) if not ch.isspace() and not covered[i]]
    assert not missing, f"uncovered text: {doc.text[missing[0]:missing[0] + 30]!r}"


def check_overlap(chunks: list[Chunk]) -> None:
    starts = [c.start for c in chunks]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    overlapping = sum(b.start < a.end for a, b in zip(chunks, chunks[1:], strict=False))
    assert overlapping >= len(chunks) // 2, "overlap requested but chunks do not share text"


def check_sentence_ends(doc: Document, chunks: list[Chunk]) -> None:
    for c in chunks:
        assert c.text.endswith(SENT_END) or c.end == len(doc.text.rstrip()), f"cut mid-sentence: {c.text[-40:]!r}"


@pytest.fixture
def en_doc(en_text) -> Document:
    text = en_text * 6
    return Document("en", text, "/src/en.txt", title="English", metadata={"tag": "t"},
                    sections=[Section(0, len(text) // 2, "Part A"), Section(len(text) // 2, len(text), "Part B")])


@pytest.fixture
def zh_doc(zh_text) -> Document:
    return Document("zh", zh_text * 8, "/src/zh.txt", title="中文", metadata={"tag": "t"})


# langchain overlaps in whole pieces (sentences here, paragraphs being over the size), so the
# recursive overlap must be able to hold a sentence.
@pytest.mark.parametrize("spec", [SlidingSpec(chunk_size=64, overlap=16), RecursiveSpec(chunk_size=48, overlap=24)])
def test_flat_chunkers_english(spec, en_doc, counter):
    chunks = run(en_doc, spec, counter)
    check_common(en_doc, chunks, counter, limit=spec.chunk_size + 2)
    check_coverage(en_doc, chunks)
    check_overlap(chunks)
    check_sentence_ends(en_doc, chunks)
    assert {c.section for c in chunks} == {"Part A", "Part B"}
    assert all(c.granularity == spec.granularity for c in chunks)


@pytest.mark.parametrize("spec", [SlidingSpec(chunk_size=48, overlap=8), RecursiveSpec(chunk_size=48, overlap=24)])
def test_flat_chunkers_cjk(spec, zh_doc, counter):
    chunks = run(zh_doc, spec, counter)
    check_common(zh_doc, chunks, counter, limit=48 + 2)
    check_coverage(zh_doc, chunks)
    check_overlap(chunks)
    check_sentence_ends(zh_doc, chunks)  # cuts after 。！？； although there are no spaces
    assert {c.language for c in chunks} == {"zh"}


@pytest.mark.parametrize("spec", [SlidingSpec(chunk_size=256, overlap=32), RecursiveSpec(chunk_size=256, overlap=32)])
def test_token_limit_at_the_embedder_maximum(spec, en_doc, zh_doc, counter):
    # 256 requested = the embedder limit: content must leave room for [CLS] and [SEP].
    for doc in (en_doc, zh_doc):
        chunks = run(doc, spec, counter)
        check_common(doc, chunks, counter)
        check_coverage(doc, chunks)
        assert max(full_len(counter, c.text) for c in chunks) > 200  # not trivially small


@pytest.mark.parametrize("spec", [SlidingSpec(chunk_size=100, overlap=10), RecursiveSpec(chunk_size=100, overlap=10)])
def test_text_without_boundaries_is_split_not_truncated(spec, counter):
    text = "supercalifragilistic " * 150 + "x" * 3000 + " " + "抗" * 700
    doc = Document("raw", text, "/src/raw.txt", metadata={"tag": "t"})
    chunks = run(doc, spec, counter)
    check_common(doc, chunks, counter, limit=102)
    check_coverage(doc, chunks)


def test_none_is_one_chunk_per_document_whatever_max_tokens(en_doc, zh_doc, counter):
    """`type: none` used to split at max_tokens (256) unless max_tokens was raised as well."""
    for doc in (en_doc, zh_doc, Document("raw", "supercalifragilistic " * 150 + "抗" * 700, "/raw")):
        assert full_len(counter, doc.text) > 256
        (chunk,) = run(doc, NoneSpec(), counter)
        assert chunk.text == doc.text.strip() and chunk.granularity == "doc"
    assert run(Document("e", "   ", "/e"), NoneSpec(), counter) == []


def test_none_keeps_short_documents_whole(counter):
    doc = Document("s", "  One short document. Two sentences.  ", "/s", metadata={"tag": "t"})
    (chunk,) = run(doc, NoneSpec(), counter)
    assert chunk.text == "One short document. Two sentences." and chunk.chunk_id == "s#doc#0"


def test_small_to_big_parent_links(en_doc, counter):
    spec = SmallToBigSpec(child_size=48, child_overlap=8, parent=RecursiveSpec(chunk_size=400, overlap=0))
    chunks = run(en_doc, spec, counter)
    parents = {c.chunk_id: c for c in chunks if c.granularity == "parent-400"}
    children = [c for c in chunks if c.granularity == "child-48"]
    assert parents and len(children) > len(parents)
    check_common(en_doc, chunks, counter, limit=48 + 2)
    check_coverage(en_doc, list(parents.values()))
    assert max(full_len(counter, p.text) for p in parents.values()) > 256  # parents are never embedded
    for c in children:
        p = parents[c.parent_id]
        assert p.start <= c.start and c.end <= p.end
        assert c.metadata["role"] == "child" and p.metadata["role"] == "parent" and p.parent_id is None
    for pid, p in parents.items():
        check_coverage(Document("x", en_doc.text[: p.end], "/"),
                       [c for c in children if c.parent_id == pid] + [c for c in chunks if c.end <= p.start])


def test_sentence_window(en_doc, zh_doc, counter):
    spec = SmallToBigSpec(mode="sentence_window", window=1)
    for doc in (en_doc, zh_doc):
        chunks = run(doc, spec, counter)
        check_common(doc, chunks, counter)
        sentences = [c for c in chunks if c.granularity == "sentence"]
        windows = {c.chunk_id: c for c in chunks if c.granularity == "window-1"}
        assert len(sentences) == len(windows) > 10
        check_sentence_ends(doc, sentences)
        for i, s in enumerate(sentences):
            w = windows[s.parent_id]
            assert w.start <= s.start and s.end <= w.end
            if 0 < i < len(sentences) - 1:  # a middle sentence's window holds its neighbours
                assert w.start == sentences[i - 1].start and w.end == sentences[i + 1].end


def test_multi_granularity_and_stable_ids(en_doc, counter):
    cfg = ChunkingConfig(chunkers=[SlidingSpec(chunk_size=128, overlap=16), RecursiveSpec(chunk_size=96, overlap=0)])
    a = chunk_documents([en_doc], build_chunkers(cfg, counter))[0]
    b = chunk_documents([en_doc], build_chunkers(cfg, counter))[0]
    assert {c.granularity for c in a} == {"sliding-128", "recursive-96"}
    assert [(c.chunk_id, c.start, c.end, c.int_id) for c in a] == [(c.chunk_id, c.start, c.end, c.int_id) for c in b]


@pytest.mark.parametrize("spec", [SlidingSpec(chunk_size=256, overlap=32), RecursiveSpec(chunk_size=256, overlap=0),
                                  SmallToBigSpec(child_size=256, child_overlap=0),
                                  SmallToBigSpec(mode="sentence_window")])
def test_title_prepended_by_the_retriever_still_fits(spec, en_text, counter):
    # The retriever embeds "title\ntext"; the chunk leaves room for the title.
    title = "A deliberately long title about retrieval augmented generation, chunking and tokenizers " * 2
    doc = Document("t", en_text * 8, "/t", title=title.strip(), metadata={"tag": "t"})
    chunks = [c for c in run(doc, spec, counter) if c.metadata.get("role") != "parent"]
    check_common(doc, chunks, counter)
    assert max(full_len(counter, f"{c.title}\n{c.text}") for c in chunks) <= 256
    cfg = ChunkingConfig(chunkers=[spec], reserve_title=False)
    loose = [c for c in chunk_documents([doc], build_chunkers(cfg, counter))[0] if c.metadata.get("role") != "parent"]
    assert max(full_len(counter, c.text) for c in loose) <= 256
    if spec.type == "sliding":  # it fills chunks up to the limit
        assert max(full_len(counter, f"{c.title}\n{c.text}") for c in loose) > 256  # what reserve_title prevents
