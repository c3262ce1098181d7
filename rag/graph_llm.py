"""The engine side of the entity graph: LLM triple extraction and community summaries.

`retrieval/graph/` cannot import the engine (retrieval sits below inference in the import
rules), so it asks a `GraphLLM` for raw replies and parses them itself (retrieval/triples.py);
this module is that `GraphLLM` over a `rag.generation.Generator`. Why it is shaped like this:

- batched: the graph hands over `retrieval.graph.llm_batch` chunks at once and they go to the
  engine in one `generate` call, so the scheduler batches their decode steps;
- prefix-cached: the fixed part (system prompt + extraction instruction) is the system message,
  so every prompt starts with the same tokens and the engine's prefix cache computes them once;
- constrained and short: replies are masked to `retrieval/triples.py: schema` (a few
  head/relation/tail objects) and capped at `llm_max_tokens`; a backend without logits processors
  (remote) is asked the same, and what does not parse is skipped and counted by the graph;
- lazy: the generator is built on the first call, so a sync with nothing new never loads a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from retrieval.config import GraphConfig
from retrieval.triples import EXAMPLE, INSTRUCTION, schema

_SYSTEM = "You extract structured facts from text for a knowledge graph. Reply only in the format asked."
_SUMMARY = ("Below are names that occur together in a document collection and passages that mention them. "
            "In one or two sentences, say what this group is about (its common theme). Reply with the "
            "sentences only.")


class EngineGraphLLM:
    """`retrieval.graph.GraphLLM` over the engine (or any generator backend)."""

    def __init__(self, make_generator: Callable[[], Any], cfg: GraphConfig):
        self._make, self.cfg = make_generator, cfg
        self._gen: Any = None
        self.calls = 0  # engine calls made (one per batch), for logs and tests

    @property
    def generator(self) -> Any:
        if self._gen is None:
            self._gen = self._make()
        return self._gen

    def _prompt(self, system: str, user: str, example: tuple[str, str] | None = None) -> str:
        """Chat prompt; `example` (user, assistant) goes in as an earlier exchange, so it is part
        of the shared, prefix-cached head."""
        msgs = [{"role": "system", "content": system}]
        if example is not None:
            msgs += [{"role": "user", "content": example[0]}, {"role": "assistant", "content": example[1]}]
        msgs.append({"role": "user", "content": user})
        return self.generator.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def _generate(self, prompts: list[str], schema: dict[str, Any] | None) -> list[str]:
        from inference.sampling_params import SamplingParams

        gen = self.generator
        params = []
        for _ in prompts:  # a logits processor keeps per-request state: one each
            procs = []
            if schema is not None and gen.supports_logits_processors:
                from inference.structured import JsonSchemaLogitsProcessor

                procs = [JsonSchemaLogitsProcessor(schema, gen.tokenizer, eos_token_id=list(_ids(gen.eos_token_ids)),
                                                   max_tokens=self.cfg.llm_max_tokens)]
            params.append(SamplingParams(temperature=0.0, max_tokens=self.cfg.llm_max_tokens, logits_processors=procs))
        self.calls += 1
        return [o.text.strip() for o in gen.generate(prompts, params)]

    def triples(self, chunks: Sequence[tuple[str, str]]) -> list[str]:
        system = f"{_SYSTEM}\n\n{INSTRUCTION}"  # with the example: the shared prefix of every prompt
        example = (_passage(EXAMPLE[0], EXAMPLE[1]), EXAMPLE[2])
        prompts = [self._prompt(system, _passage(title, text), example) for title, text in chunks]
        return self._generate(prompts, schema(self.cfg.llm_max_triples))

    def summaries(self, communities: Sequence[tuple[list[str], list[str]]]) -> list[str]:
        prompts = [self._prompt(_SYSTEM, f"{_SUMMARY}\n\nNames: {', '.join(names)}\n\nPassages:\n"
                                + "\n".join(f"- {p}" for p in passages)) for names, passages in communities]
        return self._generate(prompts, None)

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
            self._gen = None


def _passage(title: str, text: str) -> str:
    return (f"Title: {title}\n" if title else "") + f"Passage: {text}"


def _ids(eos: Any) -> list[int]:
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else sorted(eos)


def graph_llm_for(cfg: Any, generator: Callable[[], Any] | None = None) -> EngineGraphLLM | None:
    """The GraphLLM a configuration needs (extractor llm/both or summaries on), else None.
    `generator`: a callable returning an already built generator to share (the pipeline's);
    default builds `generator.*` on first use."""
    g = cfg.retrieval.graph
    if not cfg.retrieval.graph_built() or (g.extractor == "cooccurrence" and not g.summaries):
        return None
    if generator is None:
        def generator() -> Any:
            from .generation import build_generator

            return build_generator(cfg.generator)
    return EngineGraphLLM(generator, g)
