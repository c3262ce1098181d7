"""Collection routing: which collections a query should search.

Rules first (keywords and regexes from config are cheap, predictable and easy to debug); when no
rule fires, the query embedding is compared with each collection's description embedding and the
best collection (plus any within `margin` of it) is chosen. `llm_hook` lets the generator stage
plug an LLM router in later without this module knowing about LLMs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from .config import CollectionConfig, RouterConfig
from .embeddings.base import Embedder

LLMRouter = Callable[[str, Sequence[CollectionConfig]], list[str]]


class Router:
    def __init__(self, collections: Sequence[CollectionConfig], cfg: RouterConfig | None = None,
                 embedder: Callable[[], Embedder] | None = None, llm_hook: LLMRouter | None = None):
        self.collections = list(collections)
        self.cfg = cfg or RouterConfig()
        self._embedder = embedder
        self.llm_hook = llm_hook
        self._patterns = {c.name: [re.compile(p, re.IGNORECASE) for p in c.patterns] for c in self.collections}
        self._desc: np.ndarray | None = None

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.collections]

    def by_rules(self, query: str) -> list[str]:
        q = query.lower()
        hits = []
        for c in self.collections:
            kw = any(re.search(rf"(?<!\w){re.escape(k.lower())}(?!\w)", q) for k in c.keywords)
            if kw or any(p.search(query) for p in self._patterns[c.name]):
                hits.append(c.name)
        return hits

    def by_embedding(self, query: str, qvec: np.ndarray | None = None) -> list[str]:
        described = [c for c in self.collections if c.description]
        if not described or self._embedder is None:
            return []
        emb = self._embedder()
        if self._desc is None:
            self._desc = emb.encode_documents([c.description for c in described])
        q = emb.encode_query(query) if qvec is None else qvec
        sims = self._desc @ q
        best = float(sims.max())
        if best < self.cfg.min_similarity:
            return []
        return [c.name for c, s in zip(described, sims, strict=False) if s >= best - self.cfg.margin]

    def route(self, query: str, qvec: np.ndarray | None = None) -> list[str]:
        """Collections for this query; never empty when collections are configured."""
        if len(self.collections) <= 1 or self.cfg.method == "all":
            return self.names
        picked: list[str] = []
        if self.llm_hook is not None:
            picked = [n for n in self.llm_hook(query, self.collections) if n in self.names]
        if not picked and "rules" in self.cfg.method:
            picked = self.by_rules(query)
        if not picked and "embedding" in self.cfg.method:
            picked = self.by_embedding(query, qvec)
        return picked or list(self.cfg.default) or self.names
