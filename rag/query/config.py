"""Config of the pre-retrieval query transforms; each one is switched on separately."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RewriteConfig(_Strict):
    """Rephrase to common vocabulary and split compound questions into sub-queries."""

    enabled: bool = False
    max_subqueries: int = Field(3, ge=1, le=8)
    weight: float = 1.0


class MultiQueryConfig(_Strict):
    """RAG-Fusion: N paraphrases, each searched, all fused by RRF."""

    enabled: bool = False
    n: int = Field(3, ge=1, le=8)
    weight: float = 1.0


class HydeConfig(_Strict):
    """Search with a hypothetical answer passage beside the question (dense side only)."""

    enabled: bool = False
    max_tokens: int = Field(96, ge=8, le=512)
    weight: float = 1.0


class ExpansionConfig(_Strict):
    """Synonyms and related terms appended to the sparse (BM25) query."""

    enabled: bool = False
    llm: bool = True
    synonyms_file: str | None = Field(None, description="lines 'term: syn1, syn2' or 'term,syn1,syn2'")
    max_terms: int = Field(8, ge=1, le=32)
    weight: float = 1.0


class KeywordConfig(_Strict):
    """Names, places, dates and product codes: BM25 must-match terms and/or metadata filters."""

    enabled: bool = False
    llm: bool = False
    must_match: bool = True
    # entity kind -> metadata field, e.g. {"year": "date"} turns "in 2021" into a date range filter
    filters: dict[Literal["year", "date", "code"], str] = Field(default_factory=dict)


class CondenseConfig(_Strict):
    """Multi-turn chat: the follow-up and the last turns become one standalone search query.

    Why a model call: "And who kept it after her?" retrieves nothing useful on its own; the
    previous turn says who "her" and "it" are. One short greedy call; when its output is unusable
    the search falls back to the previous question + the follow-up (`rag.condense: fallback`).
    """

    enabled: bool = True
    turns: int = Field(2, ge=1, le=8, description="earlier exchanges shown to the condensing call")
    max_tokens: int = Field(48, ge=8, le=256)
    max_answer_chars: int = Field(300, ge=0, description="each earlier answer is cut to this many characters")


class MultiHopConfig(_Strict):
    """Iterative retrieval for bridge questions (`rag/query/multihop.py`): after each search the
    engine reads the top passages and either stops (they answer the question) or names a follow-up
    query, whose results are fused with the earlier ones."""

    enabled: bool = False
    max_hops: int = Field(2, ge=1, le=4, description="searches in all, the first one included")
    passages: int = Field(3, ge=1, le=8, description="top passages shown to the follow-up call")
    passage_chars: int = Field(600, ge=100, le=4000, description="each shown passage is cut to this")
    max_tokens: int = Field(40, ge=8, le=128)
    weight: float = Field(1.0, description="RRF weight of each follow-up search")
    keep: int = Field(0, ge=0, le=50, description="the first search's top candidates kept on top "
                      "(0: all ranks re-fused)")


class QueryConfig(_Strict):
    rewrite: RewriteConfig = Field(default_factory=RewriteConfig)
    multi_query: MultiQueryConfig = Field(default_factory=MultiQueryConfig)
    hyde: HydeConfig = Field(default_factory=HydeConfig)
    expansion: ExpansionConfig = Field(default_factory=ExpansionConfig)
    keywords: KeywordConfig = Field(default_factory=KeywordConfig)
    condense: CondenseConfig = Field(default_factory=CondenseConfig)
    multi_hop: MultiHopConfig = Field(default_factory=MultiHopConfig)
    llm_routing: bool = Field(False, description="let the LLM pick collections from their descriptions")
    system: str = Field(
        "You rewrite search queries for a document search engine. Reply only in the format asked.",
        description="shared system prompt of every transform call (one cached prefix for all)",
    )
