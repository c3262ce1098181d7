"""Offline entry point: `LLM(model).generate(prompts, params)` runs everything to completion."""

from __future__ import annotations

from collections.abc import Sequence as Seq

from inference.config import EngineConfig
from inference.llm_engine import LLMEngine
from inference.outputs import RequestOutput
from inference.prefix_io import cached_prefixes, load_prefix_cache, save_prefix_cache
from inference.prompt_logprobs import PROMPT_SCORING, prompt_token_logprobs
from inference.sampling_params import SamplingParams


class LLM:
    def __init__(self, model: str = "smollm2", **engine_args) -> None:
        self.engine = LLMEngine(EngineConfig(model=model, **engine_args))
        self.tokenizer = self.engine.tokenizer

    def generate(self, prompts: str | list[str] | list[list[int]],
                 sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 priorities: list[int] | None = None,
                 passage_spans: list[list[tuple[int, int]]] | None = None,
                 passage_anchors: list[list[int] | None] | None = None) -> list[RequestOutput]:
        """`passage_spans[i]`: the passage token ranges of prompt i (the passage KV cache);
        `passage_anchors[i]`: the template its passages are keyed under, when another prompt's."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # one prompt (text or token ids)
        params = sampling_params or SamplingParams()
        plist = list(params) if isinstance(params, Seq) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(plist)} sampling params")
        ids = []
        try:
            for i, (p, sp) in enumerate(zip(prompts, plist, strict=True)):
                ids.append(self.engine.add_request(p, sp, priority=priorities[i] if priorities else 0,
                                                   passage_spans=passage_spans[i] if passage_spans else None,
                                                   passage_anchor=passage_anchors[i] if passage_anchors else None))
        except Exception:
            for rid in ids:
                self.engine.abort(rid)
            raise
        final: dict[str, RequestOutput] = {}
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finished:
                    final[out.request_id] = out
        return [final[r] for r in ids]

    def chat(self, messages: list[dict] | list[list[dict]], sampling_params: SamplingParams | None = None,
             **template_kwargs) -> list[RequestOutput]:
        """Apply the model's chat template (with the assistant turn opened) and generate."""
        convs = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [self.encode_chat(c, **template_kwargs) for c in convs]
        return self.generate(prompts, sampling_params)

    def encode_chat(self, messages: list[dict], **template_kwargs) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                  **template_kwargs)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def next_token_logprobs(self, prompts: list[str] | list[list[int]], candidate_token_ids: list[int]
                            ) -> list[dict[int, float]]:
        """log P(candidate | prompt) for each prompt, e.g. P("yes") for a pointwise reranker."""
        sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=candidate_token_ids)
        return [o.candidate_logprobs for o in self.generate(prompts, sp)]

    def last_hidden_states(self, prompts: list[str] | list[list[int]], layer: int = -1) -> list:
        """The hidden state of each prompt's last token, final normed (-1) or after decoder layer
        `layer`: the features a linear probe reads (float32 CPU tensors of the hidden size)."""
        sp = SamplingParams(max_tokens=1, temperature=0.0, hidden_state=True, hidden_state_layer=layer)
        return [o.hidden_state for o in self.generate(prompts, sp)]

    def prompt_logprobs(self, prompts: list[str] | list[list[int]]) -> list[list[float]]:
        """log P(token | everything before it) for every prompt token after the first, one batch."""
        return prompt_token_logprobs(self.generate(prompts, PROMPT_SCORING))

    def stats(self) -> dict:
        return self.engine.stats()

    def save_prefix_cache(self, path: str) -> int:
        return save_prefix_cache(self.engine, path)

    def load_prefix_cache(self, path: str) -> int:
        return load_prefix_cache(self.engine, path)

    def clear_prefix_cache(self) -> int:
        return self.engine.bm.clear_cache()

    def clear_passage_cache(self) -> int:
        return self.engine.clear_passage_cache()

    def cached_prefixes(self, top: int = 10) -> list[dict]:
        return cached_prefixes(self.engine, top)
