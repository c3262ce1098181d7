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


class QueryConfig(_Strict):
    rewrite: RewriteConfig = Field(default_factory=RewriteConfig)
    multi_query: MultiQueryConfig = Field(default_factory=MultiQueryConfig)
    hyde: HydeConfig = Field(default_factory=HydeConfig)
    expansion: ExpansionConfig = Field(default_factory=ExpansionConfig)
    keywords: KeywordConfig = Field(default_factory=KeywordConfig)
    llm_routing: bool = Field(False, description="let the LLM pick collections from their descriptions")
    system: str = Field(
        "You rewrite search queries for a document search engine. Reply only in the format asked.",
        description="shared system prompt of every transform call (one cached prefix for all)",
    )
