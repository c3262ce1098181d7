"""`type: llm`: pointwise relevance from the in-process engine, score = P(yes) / (P(yes) + P(no)).

One prompt per (query, passage). The instruction and the query come first and the passage last,
so every candidate of a query shares the same token prefix: the engine's prefix cache computes
that prefix once and the whole candidate list goes through in one continuous batch.

On the pipeline's async path (`ascore`) an engine with an async scorer (`AsyncNextTokenScorer`:
the RAG generator) is awaited on the caller's loop; the prompts are tokenised in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from inference.protocols import ChatScorer

from .base import Reranker, register
from .config import RerankerConfig


@runtime_checkable
class AsyncNextTokenScorer(Protocol):
    """An engine whose next-token scores can be awaited (`rag.generation.Generator`); an offline
    `inference.LLM` has only the blocking `next_token_logprobs`."""

    async def anext_token_logprobs(self, prompts: list, candidate_token_ids: list[int]
                                   ) -> list[dict[int, float]]: ...


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
        self.yes, self.no = yes_no_ids(tok)

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
        return self._probabilities(self.engine.next_token_logprobs(prompts, self._candidates()))

    async def ascore(self, query: str, passages: Sequence[str]) -> np.ndarray:
        engine = self.engine
        if not passages or not isinstance(engine, AsyncNextTokenScorer):
            return await super().ascore(query, passages)
        prompts = await asyncio.to_thread(lambda: [self._prompt(query, p) for p in passages])
        return self._probabilities(await engine.anext_token_logprobs(prompts, self._candidates()))

    def _candidates(self) -> list[int]:
        return sorted(set(self.yes) | set(self.no))

    def _probabilities(self, logprobs: list[dict[int, float]]) -> np.ndarray:
        odds = np.asarray([yes_log_odds(lp, self.yes, self.no) for lp in logprobs], dtype=np.float64)
        return 1.0 / (1.0 + np.exp(-odds))  # P(yes) / (P(yes) + P(no))


def _first_ids(tok, words: Sequence[str]) -> list[int]:
    """First token of each spelling (the model may start its answer with or without a space)."""
    return sorted({tok.encode(w, add_special_tokens=False)[0] for w in words})


def yes_no_ids(tok) -> tuple[list[int], list[int]]:
    """First tokens of the spellings of "yes" and of "no" (with/without a space, capitalised)."""
    return _first_ids(tok, ("yes", "Yes", " yes", " Yes")), _first_ids(tok, ("no", "No", " no", " No"))


def yes_log_odds(logprobs: dict[int, float], yes: Sequence[int], no: Sequence[int]) -> float:
    """log P(yes) - log P(no) over the spellings of each, from `next_token_logprobs` output.

    Why log-odds and not P(yes): a calibrated refusal combines it linearly with other log-scale
    signals, and it does not saturate at 0/1 the way the probability does.
    """
    p_yes = sum(float(np.exp(logprobs[t])) for t in yes if t in logprobs)
    p_no = sum(float(np.exp(logprobs[t])) for t in no if t in logprobs)
    return float(np.log(max(p_yes, 1e-30)) - np.log(max(p_no, 1e-30)))
