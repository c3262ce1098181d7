"""What text of a chunk goes into the indexes (shared by BM25, dense and the embedding cache key)."""

from __future__ import annotations

from indexing.types import Chunk


def indexed_text(chunk: Chunk, include_title: bool = True) -> str:
    """Title prepended when configured: short chunks lose their topic otherwise (a SciFact abstract
    without its title, a code chunk without its file name)."""
    if include_title and chunk.title and not chunk.text.startswith(chunk.title):
        return f"{chunk.title}\n{chunk.text}"
    return chunk.text
