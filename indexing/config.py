"""Config models of the indexing stage (loading, cleaning, chunking).

Every model forbids unknown keys so a typo in YAML fails with the dotted key path instead of
being silently ignored; `rag/config.py` composes `IndexingConfig` into the pipeline config.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Bump when a chunker's algorithm changes, so stored documents are re-cut on the next ingest.
CHUNKER_VERSION = 1

SUPPORTED_EXTENSIONS = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".json", ".jsonl")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoaderConfig(_Strict):
    """How files and records become `Document`s."""

    include: list[str] = Field(default_factory=lambda: [f"*{e}" for e in SUPPORTED_EXTENSIONS])
    exclude: list[str] = Field(default_factory=lambda: [".*", "**/.*", "**/__pycache__/**"])
    encoding: str = "utf-8"
    text_fields: list[str] = Field(default_factory=lambda: ["text"], min_length=1)
    title_field: str = "title"
    id_field: str = "_id"
    id_fallbacks: list[str] = Field(default_factory=lambda: ["id", "doc_id"])
    date_field: str = "date"
    # A dict-valued record field merged into the document metadata (BEIR's "metadata").
    metadata_field: str = "metadata"
    # Record fields copied into metadata; None copies every field not used above.
    metadata_fields: list[str] | None = None
    # Extra metadata attached to every loaded document (e.g. {"tenant": "acme"}).
    metadata: dict[str, Any] = Field(default_factory=dict)


class CleaningConfig(_Strict):
    """Text normalisation and document filtering applied before chunking."""

    nfkc: bool = True
    whitespace: bool = True
    control_chars: bool = True
    strip_headers_footers: bool = True
    # A top/bottom page line seen on at least this share of pages is a running header/footer.
    header_footer_min_share: float = Field(0.6, gt=0.0, le=1.0)
    min_chars: int = Field(1, ge=0)
    exact_dedup: bool = True
    # Also treat what the collection already holds as seen (a copy of a stored file is dropped).
    dedup_against_store: bool = True
    near_dedup: Literal["minhash", "simhash", "off"] = "minhash"
    near_dedup_threshold: float = Field(0.9, gt=0.0, le=1.0)
    minhash_perms: int = Field(128, ge=16, le=1024)
    shingle_words: int = Field(3, ge=1, le=10)
    # "containment": a near-duplicate candidate is dropped only if one text's 2-token shingles all
    # occur in the other (a copy plus header/footer/formatting). Templated reports that share
    # boilerplate but differ in names or numbers are kept: without it, 70 of 160 such distinct
    # documents were dropped at threshold 0.9 (tests/indexing/test_near_dedup_templates.py).
    near_dedup_verify: Literal["containment", "none"] = "containment"
    # User hooks "pkg.mod:func"; func(doc) -> bool | Document | None (False/None drops the doc).
    filters: list[str] = Field(default_factory=list)

    @field_validator("filters")
    @classmethod
    def _dotted(cls, v: list[str]) -> list[str]:
        for f in v:
            mod, _, fn = f.partition(":")
            if not mod or not fn:
                raise ValueError(f"filter {f!r} must look like 'package.module:function'")
        return v


class SlidingSpec(_Strict):
    """Fixed windows measured in embedder tokens, snapped back to a sentence/word end when possible."""

    type: Literal["sliding"] = "sliding"
    chunk_size: int = Field(256, ge=8)
    overlap: int = Field(32, ge=0)
    name: str | None = None

    @model_validator(mode="after")
    def _check(self) -> SlidingSpec:
        if self.overlap >= self.chunk_size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than chunk_size ({self.chunk_size})")
        return self

    @property
    def granularity(self) -> str:
        return self.name or f"sliding-{self.chunk_size}"


class RecursiveSpec(_Strict):
    """langchain RecursiveCharacterTextSplitter with a token length function."""

    type: Literal["recursive"] = "recursive"
    chunk_size: int = Field(200, ge=8)
    overlap: int = Field(30, ge=0)
    # None: the built-in paragraph/line/sentence (CJK too)/clause/word list.
    separators: list[str] | None = None
    separators_are_regex: bool = False
    name: str | None = None

    @model_validator(mode="after")
    def _check(self) -> RecursiveSpec:
        if self.overlap >= self.chunk_size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than chunk_size ({self.chunk_size})")
        return self

    @property
    def granularity(self) -> str:
        return self.name or f"recursive-{self.chunk_size}"


class SmallToBigSpec(_Strict):
    """Small children for matching, each pointing to a bigger parent returned for generation.

    mode "parent": parents cut by `parent` (any flat spec), children cut inside each parent.
    mode "sentence_window": each sentence is a child, its parent is the window of `window`
    sentences on either side. Parents are never embedded, so only children obey max_tokens.
    """

    type: Literal["small_to_big"] = "small_to_big"
    mode: Literal["parent", "sentence_window"] = "parent"
    parent: SlidingSpec | RecursiveSpec = Field(
        default_factory=lambda: RecursiveSpec(chunk_size=512, overlap=0), discriminator="type"
    )
    child_size: int = Field(128, ge=8)
    child_overlap: int = Field(16, ge=0)
    window: int = Field(2, ge=0, le=20)
    name: str | None = None

    @property
    def granularity(self) -> str:
        if self.mode == "sentence_window":
            return self.name or "sentence"
        return self.name or f"child-{self.child_size}"

    @property
    def parent_granularity(self) -> str:
        if self.mode == "sentence_window":
            return f"window-{self.window}"
        return self.parent.name or f"parent-{self.parent.chunk_size}"


class NoneSpec(_Strict):
    """One document = one chunk (documents over the token limit are still split, never truncated)."""

    type: Literal["none"] = "none"
    name: str | None = None

    @property
    def granularity(self) -> str:
        return self.name or "doc"


ChunkerSpec = Annotated[SlidingSpec | RecursiveSpec | SmallToBigSpec | NoneSpec, Field(discriminator="type")]


class ChunkingConfig(_Strict):
    chunkers: list[ChunkerSpec] = Field(default_factory=lambda: [RecursiveSpec()], min_length=1)
    # Alias or path of the embedder's tokenizer; token counts use exactly what the embedder sees.
    tokenizer: str = "minilm"
    # Embedder hard limit including special tokens ([CLS]/[SEP]); all-MiniLM-L6-v2 truncates at 256.
    max_tokens: int = Field(256, ge=16)
    # The retriever embeds "title\ntext" (retrieval.text.indexed_text): keep room for the title so
    # title + chunk still fits max_tokens. Chunks only shrink when chunk size + title would not fit.
    reserve_title: bool = True

    @model_validator(mode="after")
    def _check(self) -> ChunkingConfig:
        seen: set[str] = set()
        for i, spec in enumerate(self.chunkers):
            names = [spec.granularity]
            if isinstance(spec, SmallToBigSpec):
                names.append(spec.parent_granularity)
                size = spec.child_size
            else:
                size = getattr(spec, "chunk_size", 0)
            if size > self.max_tokens:
                raise ValueError(
                    f"chunkers.{i}: chunk size {size} exceeds max_tokens {self.max_tokens} "
                    "(the embedder would silently truncate)"
                )
            for n in names:
                if n in seen:
                    raise ValueError(f"chunkers.{i}: granularity {n!r} used twice; set a distinct 'name'")
                seen.add(n)
        return self

    def roles(self) -> dict[str, str]:
        """Granularity -> "chunk" (flat), "child" (small-to-big, embedded) or "parent" (never embedded,
        returned for generation); tells the retriever which granularities to index."""
        out: dict[str, str] = {}
        for spec in self.chunkers:
            if isinstance(spec, SmallToBigSpec):
                out[spec.granularity] = "child"
                out[spec.parent_granularity] = "parent"
            else:
                out[spec.granularity] = "chunk"
        return out

    def embedded_granularities(self) -> list[str]:
        return [g for g, role in self.roles().items() if role != "parent"]

    def fingerprint(self) -> str:
        """Identity of the chunking settings, stored with each document so changing them re-chunks."""
        blob = json.dumps({"v": CHUNKER_VERSION, **self.model_dump(mode="json")}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class IndexingConfig(_Strict):
    loader: LoaderConfig = Field(default_factory=LoaderConfig)
    cleaning: CleaningConfig = Field(default_factory=CleaningConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    # Documents chunked together, so tokenizer calls are batched.
    batch_size: int = Field(64, ge=1)
