"""`type: llm`: pointwise relevance from the in-process engine, score = P(yes) / (P(yes) + P(no)).

One prompt per (query, passage). The instruction and the query come first and the passage last,
so every candidate of a query shares the same token prefix: the engine's prefix cache computes
that prefix once and the whole candidate list goes through in one continuous batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inference.protocols import ChatScorer

from .base import Reranker, register
from .config import RerankerConfig

INSTRUCTION = ("You judge search results. Given a query and a passage, answer \"yes\" if the passage "
               "contains the answer to the query or is clearly relevant to it, otherwise answer \"no\".")


@register("llm")
class LLMReranker(Reranker):
    def __init__(self, cfg: RerankerConfig, engine: ChatScorer | None = None, **_: object):
        super().__init__(cfg)
        if engine is None:
            from inference import LLM

            engine = LLM(cfg.model_name(), dtype="bfloat16" if cfg.bf16 else "auto")
        self.engine: ChatScorer = engine
        tok = engine.tokenizer
        self.yes = _first_ids(tok, ("yes", "Yes", " yes", " Yes"))
        self.no = _first_ids(tok, ("no", "No", " no", " No"))

    def _prompt(self, query: str, passage: str) -> list[int]:
        tok = self.engine.tokenizer
        ids = tok.encode(passage, add_special_tokens=False)[: self.cfg.max_length]
        passage = tok.decode(ids)
        messages = [{"role": "system", "content": INSTRUCTION},
                    {"role": "user", "content": f"Query: {query}\nPassage: {passage}\nAnswer yes or no."}]
        return self.engine.encode_chat(messages)

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0)
        prompts = [self._prompt(query, p) for p in passages]
        cands = sorted(set(self.yes) | set(self.no))
        out = self.engine.next_token_logprobs(prompts, cands)
        scores = []
        for lp in out:
            p_yes = sum(np.exp(lp[t]) for t in self.yes if t in lp)
            p_no = sum(np.exp(lp[t]) for t in self.no if t in lp)
            scores.append(p_yes / max(p_yes + p_no, 1e-12))
        return np.asarray(scores, dtype=np.float64)


def _first_ids(tok, words: Sequence[str]) -> list[int]:
    """First token of each spelling (the model may start its answer with or without a space)."""
    return sorted({tok.encode(w, add_special_tokens=False)[0] for w in words})
