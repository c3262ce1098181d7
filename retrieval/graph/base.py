"""The entity graph's contracts and build settings: what it asks of an engine and an embedder,
what a sync reports, and which settings change what a graph holds (so its stored rows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from indexing.types import content_hash

from ..config import GraphConfig
from ..entities import EXTRACTOR_VERSION

HUB_MIN_CHUNKS = 20

# Graph settings that change what the graph holds (the others only change how it is searched).
_GRAPH_BUILD = ("extractor", "max_words", "max_chunk_share", "communities", "community_min_weight", "resolution",
                "seed")


def graph_build_settings(cfg: GraphConfig) -> dict[str, Any]:
    """The part of `retrieval.graph` a graph is built with (manifest, graph_meta, eval index keys)."""
    return {**{k: v for k, v in cfg.model_dump(mode="json").items() if k in _GRAPH_BUILD},
            "extractor_version": EXTRACTOR_VERSION}


class GraphLLM(Protocol):
    """What the graph asks an engine for (rag/graph_llm.py implements it; retrieval cannot import
    the engine). Both return one raw reply per input, in order; parsing is the graph's job."""

    def triples(self, chunks: Sequence[tuple[str, str]]) -> list[str]:
        """(title, text) of each chunk -> the model's triples reply (retrieval/triples.py format)."""
        ...

    def summaries(self, communities: Sequence[tuple[list[str], list[str]]]) -> list[str]:
        """(entity names, passage excerpts) of each community -> a short summary."""
        ...


class Embeds(Protocol):
    name: str

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass
class SyncStats:
    added: int = 0
    removed: int = 0
    skipped_replies: int = 0  # LLM extraction replies that did not parse (their chunk got no triples)
    embedded: int = 0
    summarised: int = 0
    summaries_dropped: int = 0
    written: dict[str, int] = field(default_factory=dict)


def chunk_hash(text: str, title: str) -> str:
    """What a chunk's graph entry was extracted from (title included: it is an entity)."""
    return content_hash(title + "\x00" + text)


def members_hash(members: Sequence[str]) -> str:
    """What a community summary was written for (its sorted member keys)."""
    return content_hash("\x00".join(sorted(members)))
