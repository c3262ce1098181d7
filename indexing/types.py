"""Data types shared by every stage: a loaded document and the chunks cut from it.

They live here, in the lowest package that needs them, so that `retrieval/`, `rerank/`
and `rag/` can all speak about chunks without importing each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any


def content_hash(text: str) -> str:
    """Stable identity of a piece of text (used for idempotent ingest and embedding caches)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass
class Section:
    """A character span of a document that belongs to one heading path (e.g. "Intro > Setup")."""

    start: int
    end: int
    path: str


@dataclass
class Page:
    """A character span of a document that came from one page (1-based) of its source."""

    start: int
    end: int
    number: int


@dataclass
class Document:
    """A loaded, not yet chunked, document.

    `sections` and `pages` are span maps so that chunkers can attach a section path and a page
    number to every chunk without knowing the source format.
    """

    doc_id: str
    text: str
    source: str
    title: str = ""
    date: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)

    @property
    def content_hash(self) -> str:
        # Title and metadata belong to the identity: changing them must re-ingest the document.
        meta = repr(sorted((k, repr(v)) for k, v in self.metadata.items()))
        return content_hash(f"{self.title}\x00{self.text}\x00{meta}")

    def section_at(self, offset: int) -> str:
        for s in self.sections:
            if s.start <= offset < s.end:
                return s.path
        return ""

    def page_at(self, offset: int) -> int | None:
        for p in self.pages:
            if p.start <= offset < p.end:
                return p.number
        return None


@dataclass
class Chunk:
    """A retrievable unit of text with everything needed to filter on it and cite it.

    `start`/`end` are character offsets into the cleaned document text. `parent_id` links a
    small-to-big child to the larger chunk returned for generation. `int_id` is the 63-bit id
    used by vector and sparse indexes (derived from `chunk_id`, stable across processes).
    """

    chunk_id: str
    doc_id: str
    text: str
    start: int
    end: int
    granularity: str = "default"
    parent_id: str | None = None
    source: str = ""
    title: str = ""
    date: str | None = None
    section: str = ""
    page: int | None = None
    language: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return content_hash(self.text)

    @property
    def int_id(self) -> int:
        return chunk_int_id(self.chunk_id)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["content_hash"] = self.content_hash
        return d


def chunk_int_id(chunk_id: str) -> int:
    """63-bit non-negative integer id for FAISS/BM25, derived from the string chunk id."""
    h = hashlib.blake2b(chunk_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(h, "big") & 0x7FFF_FFFF_FFFF_FFFF
