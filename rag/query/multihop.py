"""Iterative multi-hop retrieval: after a search, the engine names what to search next.

Why: a bridge question ("Which team did the director of film X play for?") needs a second
document that shares no words with the question; only the first document names the bridge
entity (the director). One short, schema-constrained engine call per hop reads the question and
the top passages and answers either "answered" (stop: the first hop already holds the answer) or
a follow-up search query (the bridge entity plus what is asked about it). The follow-up's results
join the earlier ones in the weighted RRF fusion; the reranker then sees them all with the
original question. The prompt's fixed part (system + instruction) comes first, so the engine's
prefix cache computes it once for every question. It runs inside the pipeline's async search
(`Pipeline.asearch`): each hop's call is awaited on the caller's loop, its search is the caller's.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from retrieval.fusion import fuse_searches
from retrieval.types import Candidate, SearchResult

from .config import MultiHopConfig

_SCHEMA = {
    "type": "object",
    "properties": {
        "status": {"enum": ["answered", "search"]},
        "query": {"type": "string", "maxLength": 100},
    },
}

_INSTRUCTION = (
    "You help a search engine answer questions that need two documents. Read the question and the "
    "passages found so far. If the passages already contain the answer, reply "
    '{"status": "answered", "query": ""}. Otherwise the answer depends on something the passages '
    "name (a person, film, place, team or organisation): reply with a short search query for it and "
    'what the question asks about it, as {"status": "search", "query": "..."}.'
)


@dataclass
class Hop:
    """One follow-up decision: `query` is None when the search stops here, `reason` says why."""

    query: str | None
    reason: str  # answered | search | repeat | empty | unparsed
    raw: str = ""
    ms: float = 0.0

    def metadata(self) -> dict[str, Any]:
        return {"query": self.query, "reason": self.reason, "ms": round(self.ms, 1)}


@dataclass
class MultiHop:
    cfg: MultiHopConfig
    llm: Any
    system: str

    def prompt(self, question: str, passages: list[str]) -> list[dict[str, str]]:
        shown = "\n\n".join(f"[{i + 1}] {p[: self.cfg.passage_chars]}" for i, p in enumerate(passages))
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": f"{_INSTRUCTION}\n\nPassages:\n{shown}\n\nQuestion: {question}"}]

    def _request(self, question: str, passages: list[str]) -> tuple[str, Any]:
        """The hop call's prompt and its schema-constrained sampling params (CPU: a worker thread)."""
        from inference.sampling_params import SamplingParams
        from inference.structured import JsonSchemaLogitsProcessor

        tok = self.llm.tokenizer
        text = tok.apply_chat_template(self.prompt(question, passages), tokenize=False, add_generation_prompt=True)
        proc = JsonSchemaLogitsProcessor(_SCHEMA, tok, max_tokens=self.cfg.max_tokens)
        return text, SamplingParams(temperature=0.0, max_tokens=self.cfg.max_tokens, logits_processors=[proc])

    async def anext_hop(self, question: str, passages: list[str], previous: list[str]) -> Hop:
        """The follow-up query after a search whose top passages are `passages` (or a stop)."""
        t0 = time.perf_counter()
        text, params = await asyncio.to_thread(self._request, question, passages)
        raw = (await self.llm.agenerate_many([text], [params]))[0].text.strip()
        hop = decide(raw, question, previous)
        hop.ms = (time.perf_counter() - t0) * 1000
        return hop

    async def arun(self, question: str, searched: list[str], cands: list[Candidate], results: list[SearchResult],
                   weights: list[float], search: Callable[[str], Awaitable[SearchResult]], rrf_k: int
                   ) -> tuple[list[Candidate], list[Hop]]:
        """Up to `max_hops - 1` follow-ups after the first (already fused) search: each named query is
        searched (`await search(query)`), appended to `results` / `weights` and everything fused
        again. Returns the fused candidates and the hop decisions (the last one says why it stopped)."""
        previous, hops = list(searched), []
        first = cands[: self.cfg.keep]
        for _ in range(self.cfg.max_hops - 1):
            hop = await self.anext_hop(question, [c.chunk.text for c in cands[: self.cfg.passages]], previous)
            hops.append(hop)
            if hop.query is None:
                break
            results.append(await search(hop.query))
            weights.append(self.cfg.weight)
            previous.append(hop.query)
            cands = fuse_searches(results, weights, rrf_k)
        if self.cfg.keep and any(h.query for h in hops):
            # The first search's best few stay on top: a follow-up only fills the ranks below them.
            held = {c.chunk.chunk_id for c in first}
            cands = [*first, *(c for c in cands if c.chunk.chunk_id not in held)]
        return cands, hops


def decide(raw: str, question: str, previous: list[str]) -> Hop:
    """The stop rules, on the call's raw output: stop when the model says the passages answer the
    question, when it gives no query, or when the query repeats the question or an earlier search
    (a loop that would only re-rank the same results)."""
    try:
        data = json.loads(raw)
        status, query = str(data.get("status", "")), str(data.get("query", "") or "").strip()
    except (ValueError, AttributeError):
        return Hop(None, "unparsed", raw)
    if status == "answered":
        return Hop(None, "answered", raw)
    if not query:
        return Hop(None, "empty", raw)
    norm = _norm(query)
    if norm == _norm(question) or any(norm == _norm(p) for p in previous):
        return Hop(None, "repeat", raw)
    known = _words(question).union(*(_words(p) for p in previous))
    if _words(query) <= known:
        return Hop(None, "repeat", raw)  # a restatement: no word the searches so far lacked
    return Hop(query, "search", raw)


def _norm(text: str) -> str:
    return " ".join(text.lower().strip(" ?.!").split())


def _words(text: str) -> set[str]:
    """Content words (letters/digits, 3+ characters, or any CJK run) for the restatement test."""
    return {w for w in re.findall(r"\w+", text.lower()) if len(w) >= 3 or not w.isascii()}
