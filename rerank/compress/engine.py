"""`type: engine`: our own selective-context compressor from causal-LM token log-probabilities.

A token the model predicts with high probability carries little information and can go; a
surprising one is kept. One forward pass per context over "context + question" gives both the
token surprisals and, question-aware, log P(question | context), which ranks the contexts: the
budget is split so that contexts that explain the question keep more of their tokens (the
LongLLMLingua idea without its iterative passes). Markers and forced tokens are always kept.

Given the pipeline's engine (an `inference.protocols.TokenScorer`: `inference.LLM` or the RAG
generator), the scores come from the engine itself: no second copy
of the model, and all contexts of a question are scored in one continuous batch. Without one, a
transformers copy of `cfg.model` is loaded. On the pipeline's async path (`acompress`) an engine
that can be awaited (`AsyncTokenScorer`) is, and the tokenising and word selection run in a
worker thread around it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from inference.protocols import TokenScorer

from ..config import CompressorConfig
from .base import DYNAMIC_RATIO, MARKER_RE, CompressionResult, Compressor, register, split_budget
from .lm import load_causal_lm


@runtime_checkable
class AsyncTokenScorer(Protocol):
    """An engine whose prompt log-probabilities can be awaited (`rag.generation.Generator`)."""

    async def aprompt_logprobs(self, prompts: list) -> list[list[float]]: ...


@register("engine")
class EngineCompressor(Compressor):
    def __init__(self, cfg: CompressorConfig, model: tuple[Any, Any] | None = None,
                 engine: TokenScorer | None = None, **_: object):
        super().__init__(cfg)
        self.engine = engine
        if self.engine is not None:
            self.tok, self.model = self.engine.tokenizer, None
        else:
            self.tok, self.model = model if model is not None else load_causal_lm(cfg.model, cfg.device)

    def count_tokens(self, text: str) -> int:
        return len(self.tok(text, add_special_tokens=False).input_ids)

    def _token_logprobs(self, seqs: list[list[int]]) -> list[np.ndarray]:
        """lp[j] = log p(ids[j+1] | ids[:j+1]) for each token sequence."""
        if self.engine is not None:
            return [np.asarray(x, dtype=np.float64) for x in self.engine.prompt_logprobs(seqs)]
        import torch

        out = []
        for ids in seqs:
            with torch.inference_mode():
                logits = self.model(torch.tensor([ids])).logits[0, :-1].float()
            out.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy())
        return out

    def _score_all(self, contexts: list[list[int]], question_ids: list[int]) -> list[tuple[np.ndarray, float]]:
        """Per context: surprisal of every context token and the mean log-prob of the question after it."""
        return self._scored(contexts, question_ids, self._token_logprobs(self._sequences(contexts, question_ids)))

    def _sequences(self, contexts: list[list[int]], question_ids: list[int]) -> list[list[int]]:
        bos = [self.tok.bos_token_id] if self.tok.bos_token_id is not None else []
        return [bos + c + question_ids for c in contexts]

    def _scored(self, contexts: list[list[int]], question_ids: list[int], lps: list[np.ndarray]
                ) -> list[tuple[np.ndarray, float]]:
        """`_score_all` from the sequences' log-probabilities."""
        bos = [self.tok.bos_token_id] if self.tok.bos_token_id is not None else []
        off = len(bos) - 1  # lp[j] is log p(ids[j+1]); context token i sits at ids[len(bos)+i]
        out = []
        for c, lp in zip(contexts, lps, strict=True):
            ctx = lp[off: off + len(c)] if off >= 0 else np.concatenate([[0.0], lp[: len(c) - 1]])
            q = lp[off + len(c):] if question_ids else np.zeros(0)
            out.append((-ctx, float(q.mean()) if len(q) else 0.0))
        return out

    def _forced(self, text: str, enc) -> np.ndarray:
        forced = np.zeros(len(enc.input_ids), dtype=bool)
        spans = [m.span() for m in MARKER_RE.finditer(text)] if self.cfg.keep_markers else []
        words = {w for w in self.cfg.force_tokens if w}
        for i, (s, e) in enumerate(enc.offset_mapping):
            piece = text[s:e]
            if any(s < me and e > ms for ms, me in spans) or (piece.strip() or piece) in words \
                    or (self.cfg.keep_numbers and any(ch.isdigit() for ch in piece)):
                forced[i] = True
        return forced

    def _compress(self, question: str, contexts: list[str]) -> tuple[list[str], list[int]]:
        encs, q_ids = self._encode(question, contexts)
        return self._keep(contexts, encs, q_ids, self._score_all([e.input_ids for e in encs], q_ids))

    async def acompress(self, question: str, contexts: Sequence[str]) -> CompressionResult:
        engine = self.engine
        if not contexts or not isinstance(engine, AsyncTokenScorer):
            return await super().acompress(question, contexts)
        t = time.perf_counter()
        contexts = list(contexts)
        encs, q_ids = await asyncio.to_thread(self._encode, question, contexts)
        ids = [e.input_ids for e in encs]
        lps = [np.asarray(x, dtype=np.float64) for x in await engine.aprompt_logprobs(self._sequences(ids, q_ids))]

        def finish() -> CompressionResult:
            out, dropped = self._keep(contexts, encs, q_ids, self._scored(ids, q_ids, lps))
            return self._result(contexts, out, dropped, t)

        return await asyncio.to_thread(finish)

    def _encode(self, question: str, contexts: list[str]) -> tuple[list[Any], list[int]]:
        """Each context's encoding (with offsets) and the question's ids (none unless question-aware)."""
        encs = [self.tok(c, add_special_tokens=False, return_offsets_mapping=True) for c in contexts]
        q_ids = self.tok("\nQuestion: " + question, add_special_tokens=False).input_ids \
            if (question and self.cfg.question_aware) else []
        return encs, q_ids

    def _keep(self, contexts: list[str], encs: list[Any], q_ids: list[int],
              scored: list[tuple[np.ndarray, float]]) -> tuple[list[str], list[int]]:
        """The compressed contexts (and the dropped indexes) from the contexts' scores."""
        lens = [len(e.input_ids) for e in encs]
        order = [int(i) for i in np.argsort([-r for _, r in scored], kind="stable")]
        dynamic = DYNAMIC_RATIO if self.cfg.question_aware else 0.0
        shares = split_budget(lens, order, min(self.budget(sum(lens)), sum(lens)), dynamic)
        out = []
        for text, enc, (surprisal, _), share in zip(contexts, encs, scored, shares, strict=True):
            keep = self._select(text, enc, surprisal, share)
            ids = [t for t, k in zip(enc.input_ids, keep, strict=True) if k]
            out.append(self.tok.decode(ids).strip() if ids else "")
        return out, [i for i, o in enumerate(out) if not o]

    def _select(self, text: str, enc, surprisal: np.ndarray, share: int) -> np.ndarray:
        """Keep whole words (a number split into digit tokens stays whole), the most surprising
        first by mean token surprisal, until the share is used; forced words always."""
        words = _word_ids(text, enc.offset_mapping)
        forced_tok = self._forced(text, enc)
        n_words = int(words.max()) + 1 if len(words) else 0
        cost = np.bincount(words, minlength=n_words)
        score = np.bincount(words, weights=surprisal, minlength=n_words) / np.maximum(cost, 1)
        forced = np.bincount(words, weights=forced_tok, minlength=n_words) > 0
        keep_word = forced.copy()
        free = share - int(cost[forced].sum())
        for w in np.argsort(-score, kind="stable"):
            if free <= 0:
                break
            if not keep_word[w] and cost[w] <= free:
                keep_word[w] = True
                free -= int(cost[w])
        return keep_word[words]


def _word_ids(text: str, offsets) -> np.ndarray:
    """Word index of every token: a word starts at whitespace or at a letters/punctuation switch."""
    ids, w, prev_end = [], -1, 0
    for s, e in offsets:
        piece = text[s:e]
        first = piece[:1]
        starts = (w < 0 or not first or first.isspace() or s > prev_end
                  or (first.isalnum() != (text[s - 1:s].isalnum() if s else False)))
        w += 1 if starts else 0
        ids.append(w)
        prev_end = e
    return np.asarray(ids, dtype=np.int64)
