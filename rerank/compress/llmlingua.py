"""`type: llmlingua`: (Long)LLMLingua from the `llmlingua` package with the local small LM.

Question-aware mode follows LongLLMLingua: contexts are ranked by the LM's perplexity of the
question given each context (`get_rank_results(..., "longllmlingua")`), more relevant contexts
are kept up to 1.5x the token budget (the rest dropped), and the kept ones are filtered token by
token with question-conditioned, contrastive perplexity (`condition_in_question="after"`,
`condition_compare`). Leading citation markers are taken off before compression and put back
verbatim after it, so every kept context still carries its source number.
"""

from __future__ import annotations

import re

from ..config import CompressorConfig
from .base import LEADING_MARKERS_RE, Compressor, register
from .lm import causal_lm_dir, ensure_tiktoken_offline, with_architectures

_PARA_RE = re.compile(r"\n\s*\n+")
COARSE_SLACK = 1.5  # contexts kept by the coarse stage, in multiples of the token budget


@register("llmlingua")
class LLMLinguaCompressor(Compressor):

    def __init__(self, cfg: CompressorConfig, **_: object):
        super().__init__(cfg)
        ensure_tiktoken_offline()  # PromptCompressor builds a tiktoken encoder in __init__
        from llmlingua import PromptCompressor

        self.pc = PromptCompressor(model_name=with_architectures(causal_lm_dir(cfg.model)), device_map=cfg.device,
                                   model_config={"trust_remote_code": False})

    def count_tokens(self, text: str) -> int:
        return len(self.pc.tokenizer(text, add_special_tokens=False).input_ids)

    def _compress(self, question: str, contexts: list[str]) -> tuple[list[str], list[int]]:
        heads, bodies = [], []
        for c in contexts:
            m = LEADING_MARKERS_RE.match(c) if self.cfg.keep_markers else None
            heads.append(m.group(0) if m else "")
            bodies.append(c[m.end():] if m else c)
        bodies = [_PARA_RE.sub("\n", b).strip() for b in bodies]  # "\n\n" is LLMLingua's joiner
        lens = [self.count_tokens(b) for b in bodies]
        head_tokens = sum(self.count_tokens(h) for h in heads if h)
        budget = max(1, min(self.budget(sum(lens) + head_tokens) - head_tokens, sum(lens)))
        qa = self.cfg.question_aware and bool(question)
        keep = list(range(len(bodies)))
        if qa and len(bodies) > 1:
            # Coarse stage: most relevant contexts first, up to COARSE_SLACK x the budget.
            ranked = [int(i) for i, _ in self.pc.get_rank_results(bodies, question, "longllmlingua", "after", lens)]
            keep, total = [], 0
            for i in ranked:
                if keep and total + lens[i] > COARSE_SLACK * budget:
                    continue
                keep.append(i)
                total += lens[i]
            keep.sort()
        texts = {i: bodies[i] for i in keep}
        if sum(lens[i] for i in keep) > budget:
            res = self.pc.compress_prompt(
                [bodies[i] for i in keep], question=question if qa else "", target_token=budget,
                concate_question=False, use_context_level_filter=False, use_sentence_level_filter=False,
                condition_in_question="after" if qa else "none", condition_compare=qa,
                rank_method="longllmlingua" if qa else "llmlingua",
                # One window: llmlingua's multi-window KV-cache path breaks on transformers>=5 caches.
                iterative_size=sum(lens) + self.count_tokens(question) + 64)
            parts = res["compressed_prompt"].split("\n\n")
            if len(parts) == len(keep):
                texts = dict(zip(keep, parts, strict=True))
            else:  # a context compressed to nothing: fall back to one joined block
                texts = {keep[0]: " ".join(parts)} | {i: "" for i in keep[1:]}
        out = [(heads[i] + texts[i].strip()) if texts.get(i, "").strip() else "" for i in range(len(bodies))]
        return out, [i for i, o in enumerate(out) if not o]
