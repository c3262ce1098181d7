"""Turns a question into the set of searches to run, using the in-process engine once per question.

Every enabled LLM transform contributes one call; all calls for a question go to the engine as
one batch whose prompts start with the same system message, so that prefix is computed once.
Outputs that must be lists are produced under a JSON schema, so they always parse.
`aplan` is the pipeline's (its calls awaited on the caller's loop); `plan` the same from sync code.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from .config import QueryConfig
from .keywords import entity_filters, extract_entities, load_synonyms, synonyms_for


def _queries_schema(n: int) -> dict:
    """At most `n` queries, the number the plan keeps: the automaton closes the list after the n-th,
    where a small model otherwise repeats the same query until its token budget runs out (SmolLM2's
    rewrite: 87 tokens, 3 kept)."""
    return {"type": "object", "properties": {"queries": {"type": "array", "minItems": 1, "maxItems": n,
                                                         "items": {"type": "string", "maxLength": 120}}}}


_TERMS = {"type": "object", "properties": {"terms": {"type": "array", "minItems": 1, "maxItems": 16,
                                                    "items": {"type": "string", "maxLength": 40}}}}


@dataclass
class SearchQuery:
    """One search to run: `mode` None means the retriever's configured mode."""

    text: str
    mode: str | None = None
    weight: float = 1.0
    origin: str = "question"


@dataclass
class QueryPlan:
    question: str
    searches: list[SearchQuery]
    must_terms: list[str] = field(default_factory=list)
    filters: dict[str, Any] = field(default_factory=dict)
    collections: list[str] | None = None
    entities: dict[str, list[str]] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    generated: dict[str, str] = field(default_factory=dict)  # raw LLM outputs, for debugging

    def filters_with(self, user: Any) -> Any:
        """The user's filters (a `retrieval.retriever.FilterSpec`) and the plan's, both applied."""
        if not self.filters:
            return user
        if not user:
            return self.filters
        from retrieval.filters import Filters

        a, b = Filters.parse(user), Filters.parse(self.filters)
        return Filters(conditions=a.conditions + b.conditions)


@dataclass
class _Call:
    name: str
    instruction: str
    schema: dict | None
    max_tokens: int


class QueryPlanner:
    def __init__(self, cfg: QueryConfig, llm: Any | None = None, collections: dict[str, str] | None = None):
        self.cfg = cfg
        self.llm = llm
        self.collections = collections or {}
        self._synonyms = load_synonyms(cfg.expansion.synonyms_file) if cfg.expansion.synonyms_file else {}

    @property
    def needs_llm(self) -> bool:
        c = self.cfg
        return (c.rewrite.enabled or c.multi_query.enabled or c.hyde.enabled
                or (c.expansion.enabled and c.expansion.llm) or (c.keywords.enabled and c.keywords.llm)
                or (c.llm_routing and len(self.collections) > 1))

    def _calls(self, question: str) -> list[_Call]:
        c, calls = self.cfg, []
        if c.rewrite.enabled:
            calls.append(_Call("rewrite", (
                "Rewrite the question below as standalone search queries in plain, common words. If it asks "
                f"several things, give one query per part (at most {c.rewrite.max_subqueries}). "
                'Answer as JSON {"queries": [...]}.'), _queries_schema(c.rewrite.max_subqueries), 96))
        if c.multi_query.enabled:
            calls.append(_Call("multi_query", (
                f"Write {c.multi_query.n} different paraphrases of the question below, each a full search "
                'query. Answer as JSON {"queries": [...]}.'), _queries_schema(c.multi_query.n), 128))
        if c.hyde.enabled:
            calls.append(_Call("hyde", (
                "Write a short factual passage, as found in a reference document, that answers the "
                "question below. Write only the passage."), None, c.hyde.max_tokens))
        if c.expansion.enabled and c.expansion.llm:
            calls.append(_Call("expansion", (
                f"List up to {c.expansion.max_terms} synonyms or closely related search terms for the key "
                'words of the question below. Answer as JSON {"terms": [...]}.'), _TERMS, 80))
        if c.keywords.enabled and c.keywords.llm:
            calls.append(_Call("keywords", (
                "List the names, places, dates and product codes mentioned in the question below, exactly "
                'as written. Answer as JSON {"terms": [...]}.'), _TERMS, 64))
        if c.llm_routing and len(self.collections) > 1:
            names = list(self.collections)
            desc = "\n".join(f"- {n}: {d}" for n, d in self.collections.items())
            schema = {"type": "object", "properties": {"collection": {"enum": names}}}
            calls.append(_Call("routing", (
                f"Which collection should be searched for the question below?\n{desc}\n"
                'Answer as JSON {"collection": "..."}.'), schema, 24))
        return calls

    def _requests(self, question: str, calls: list[_Call]) -> tuple[list[str], list[Any]]:
        """The prompts and sampling params of the calls (chat template, schema processors: CPU)."""
        from inference.sampling_params import SamplingParams
        from inference.structured import JsonSchemaLogitsProcessor

        tok = self.llm.tokenizer
        prompts, params = [], []
        for call in calls:
            messages = [{"role": "system", "content": self.cfg.system},
                        {"role": "user", "content": f"{call.instruction}\n\nQuestion: {question}"}]
            prompts.append(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
            procs = [JsonSchemaLogitsProcessor(call.schema, tok, max_tokens=call.max_tokens)] if call.schema else []
            params.append(SamplingParams(temperature=0.0, max_tokens=call.max_tokens, logits_processors=procs))
        return prompts, params

    def plan(self, question: str) -> QueryPlan:
        """The searches for `question`, from sync code (the calls through the generator's bridge)."""
        calls = self._calls(question) if self.llm is not None else []
        t0 = time.perf_counter()
        outs = self.llm.generate(*self._requests(question, calls)) if calls else []
        return self._assemble(question, calls, outs, t0)

    async def aplan(self, question: str) -> QueryPlan:
        """`plan` on an event loop: the prompts built in a worker thread, the calls awaited here."""
        calls = self._calls(question) if self.llm is not None else []
        t0 = time.perf_counter()
        outs = await self.llm.agenerate_many(*await asyncio.to_thread(self._requests, question, calls)) \
            if calls else []
        return self._assemble(question, calls, outs, t0)

    def _assemble(self, question: str, calls: list[_Call], outs: list[Any], t0: float) -> QueryPlan:
        """The plan from the calls' outputs (`outs`, in call order; none without calls)."""
        c = self.cfg
        plan = QueryPlan(question, [SearchQuery(question)])
        if calls:
            plan.generated = {call.name: out.text.strip() for call, out in zip(calls, outs)}
            plan.timings_ms["rewrite"] = (time.perf_counter() - t0) * 1000
        gen = plan.generated
        for name, weight in (("rewrite", c.rewrite.weight), ("multi_query", c.multi_query.weight)):
            if name in gen:
                limit = c.rewrite.max_subqueries if name == "rewrite" else c.multi_query.n
                for q in _json_list(gen[name], "queries")[:limit]:
                    if q.strip() and q.strip().lower() != question.lower():
                        plan.searches.append(SearchQuery(q.strip(), None, weight, name))
        if gen.get("hyde"):
            plan.searches.append(SearchQuery(gen["hyde"], "dense", c.hyde.weight, "hyde"))
        if c.expansion.enabled:
            terms = synonyms_for(question, self._synonyms)
            terms += [t for t in _json_list(gen.get("expansion", ""), "terms") if t not in terms]
            terms = [t for t in terms if t.lower() not in question.lower()][: c.expansion.max_terms]
            if terms:
                plan.searches.append(SearchQuery(question + " " + " ".join(terms), "bm25",
                                                 c.expansion.weight, "expansion"))
        if c.keywords.enabled:
            ents = extract_entities(question)
            llm_terms = [t for t in _json_list(gen.get("keywords", ""), "terms") if t and t in question]
            if llm_terms:
                ents["llm"] = llm_terms
            plan.entities = ents
            if c.keywords.must_match:
                plan.must_terms = list(dict.fromkeys(ents.get("code", []) + ents.get("phrase", []) + llm_terms))
            plan.filters = entity_filters(ents, dict(c.keywords.filters))
        if "routing" in gen:
            try:
                plan.collections = [json.loads(gen["routing"])["collection"]]
            except (ValueError, KeyError, TypeError):
                plan.collections = None
        return plan


def _json_list(text: str, key: str) -> list[str]:
    if not text:
        return []
    try:
        val = json.loads(text)[key]
    except (ValueError, KeyError, TypeError):
        return []
    return [str(v) for v in val if isinstance(v, str)] if isinstance(val, list) else []
