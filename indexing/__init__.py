"""Indexing: loaders, cleaning, chunkers and the SQLite document store (imports no other package)."""

from .config import (
    ChunkingConfig,
    CleaningConfig,
    IndexingConfig,
    LoaderConfig,
    NoneSpec,
    RecursiveSpec,
    SlidingSpec,
    SmallToBigSpec,
)
from .loaders import LoaderError, iter_documents
from .pipeline import Ingestor, ingest
from .report import IngestReport
from .store import DocumentStore
from .types import Chunk, Document, Page, Section

__all__ = [
    "Chunk", "ChunkingConfig", "CleaningConfig", "Document", "DocumentStore", "IndexingConfig", "IngestReport",
    "Ingestor", "LoaderConfig", "LoaderError", "NoneSpec", "Page", "RecursiveSpec", "Section", "SlidingSpec",
    "SmallToBigSpec", "ingest", "iter_documents",
]
