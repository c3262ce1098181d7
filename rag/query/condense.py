"""Multi-turn chat: a follow-up and the last turns become one standalone search query.

Why: "And who kept it after her?" finds nothing on its own; the previous turn says who "her"
and "it" are. One short greedy call to the engine writes the query under a JSON schema (so it
always parses). Its prompt starts with the transforms' shared system message and a fixed
instruction, and only then the conversation, so that head is served from the prefix cache on
every turn of every conversation.

A small model sometimes writes nothing useful (empty, an answer instead of a query, words that
appear nowhere in the conversation, the follow-up copied with its pronouns unresolved); then the
search runs on the previous question + the follow-up, and the metadata says so. So does a query
that keeps none of the follow-up's own words (the previous question restated, its follow-up lost).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .config import QueryConfig

INSTRUCTION = (
    "Rewrite the last question of the conversation below as one standalone search query. Replace "
    "words that refer to the conversation (it, he, she, they, her, there, that) with the names they "
    "refer to, keep every name, date and number, and add nothing else. "
    'Answer as JSON {"query": "..."}.'
)
# one worked example, as an earlier exchange of the same call: small models copy the follow-up
# unchanged without it; it is part of the fixed, cached head of the prompt
_EXAMPLE = (
    "Conversation:\nUser: Who designed the Eiffel Tower?\nAssistant: Gustave Eiffel's company designed it.\n\n"
    "Last question: And how tall is it?",
    '{"query": "How tall is the Eiffel Tower?"}',
)
_SCHEMA = {"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 200}}}
_MARKER = re.compile(r"\s*\[\d+\]")
_WORD = re.compile(r"\w+", re.UNICODE)
# English words that point back into the conversation: a query that keeps them unresolved and
# adds nothing is the follow-up copied, not condensed.
_REFERRING_WORDS = ("it its he him his she her hers they them their theirs there that this those these "
                    "one ones after before then same")
_REFERRING = frozenset(_REFERRING_WORDS.split())
# words too common to show that a query is about the conversation
_STOP_WORDS = "the and who what when where which how was were did does are for from with after before"
_STOP = frozenset(_STOP_WORDS.split()) | _REFERRING


class Exchange(Protocol):
    """An earlier turn: what was asked and answered (`rag.chat.ChatTurn`)."""

    question: str
    answer: str


@dataclass
class Condensed:
    """The query searched for a chat turn, and how it was obtained."""

    query: str
    method: str  # "model": the engine's query; "fallback": previous + last question; "none": first turn
    reason: str = ""  # why the model's output was not used (fallback only)
    raw: str = ""  # the engine's output, as generated
    ms: float = 0.0

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"standalone_query": self.query, "condense": self.method}
        if self.reason:
            meta["condense_reason"] = self.reason
        if self.raw:
            meta["condense_output"] = self.raw
        return meta


def fallback_query(history: Sequence[Exchange], question: str) -> str:
    """The previous user question and the follow-up, concatenated: crude, but it carries the
    names the follow-up refers to."""
    prev = history[-1].question.strip() if history else ""
    return f"{prev} {question.strip()}".strip()


def conversation_text(cfg: QueryConfig, history: Sequence[Exchange], question: str) -> str:
    """The variable part of the condensing prompt: the last `condense.turns` exchanges (answers
    cut, their [n] markers removed: they mean nothing outside their own prompt) and the follow-up."""
    c = cfg.condense
    lines = []
    for t in list(history)[-c.turns:]:
        ans = _MARKER.sub("", t.answer).strip()
        if len(ans) > c.max_answer_chars:
            ans = ans[: c.max_answer_chars] + "…"
        lines += [f"User: {t.question.strip()}", f"Assistant: {ans}"]
    return "Conversation:\n" + "\n".join(lines) + f"\n\nLast question: {question.strip()}"


def condense_messages(cfg: QueryConfig, history: Sequence[Exchange], question: str) -> list[dict[str, str]]:
    """System message and fixed instruction first (the cached prefix), the conversation after."""
    return [{"role": "system", "content": cfg.system},
            {"role": "user", "content": f"{INSTRUCTION}\n\n{_EXAMPLE[0]}"},
            {"role": "assistant", "content": _EXAMPLE[1]},
            {"role": "user", "content": f"{INSTRUCTION}\n\n{conversation_text(cfg, history, question)}"}]


def rejection(query: str, history: Sequence[Exchange], question: str) -> str | None:
    """Why `query` is not a usable standalone query (None: it is)."""
    words = [w.lower() for w in _WORD.findall(query)]
    if not words:
        return "empty"
    if len(query) > 200 or len(words) > 3 * len(_WORD.findall(question)) + 30:
        return "too long"
    context = {w.lower() for t in history for w in _WORD.findall(f"{t.question} {t.answer}")}
    context |= {w.lower() for w in _WORD.findall(question)}
    if not any(w in context for w in words if (w not in _STOP and len(w) > 2) or w.isdigit()):
        return "unrelated to the conversation"
    asked = {w.lower() for w in _WORD.findall(question)}
    added = [w for w in words if w not in asked and w not in _STOP and len(w) > 2]
    if not added and asked & _REFERRING:
        return "follow-up copied with its references unresolved"
    own = {w[:4] for w in asked if w not in _STOP and len(w) > 2}  # 4-letter stems: "kept" ~ "keeper"
    if own and not own & {w[:4] for w in words}:
        return "the follow-up's own words are missing"
    return None


def parse_query(text: str) -> str:
    """The query of the engine's JSON answer; plain text (a backend without a schema
    constraint) is taken as its first line."""
    text = text.strip()
    if not text:
        return ""
    try:
        val = json.loads(text)
    except ValueError:
        return "" if text.startswith("{") else text.splitlines()[0].strip().strip('"')
    q = val.get("query") if isinstance(val, dict) else None
    return q.strip() if isinstance(q, str) else ""


class Condenser:
    """Writes the standalone query of a chat turn with the pipeline's engine."""

    def __init__(self, cfg: QueryConfig, llm: Any):
        self.cfg = cfg
        self.llm = llm

    def prompt(self, history: Sequence[Exchange], question: str) -> str:
        tok = self.llm.tokenizer
        return tok.apply_chat_template(condense_messages(self.cfg, history, question), tokenize=False,
                                       add_generation_prompt=True)

    def _without_model(self, history: Sequence[Exchange], question: str) -> Condensed | None:
        """The turn's query when no call is needed (a first turn, condensing switched off)."""
        if not history:
            return Condensed(question, "none")
        if not self.cfg.condense.enabled:
            return Condensed(fallback_query(history, question), "fallback", "query.condense.enabled is false")
        return None

    def _request(self, history: Sequence[Exchange], question: str) -> tuple[list[str], list[Any]]:
        """The one condensing call's prompt and sampling params (schema-constrained where the
        backend takes logits processors)."""
        from inference.sampling_params import SamplingParams

        n = self.cfg.condense.max_tokens
        procs = []
        if getattr(self.llm, "supports_logits_processors", False):
            from inference.structured import JsonSchemaLogitsProcessor

            procs = [JsonSchemaLogitsProcessor(_SCHEMA, self.llm.tokenizer, max_tokens=n)]
        params = SamplingParams(temperature=0.0, max_tokens=n, logits_processors=procs)
        return [self.prompt(history, question)], [params]

    def _result(self, history: Sequence[Exchange], question: str, raw: str, t0: float) -> Condensed:
        ms = (time.perf_counter() - t0) * 1000
        query = parse_query(raw)
        why = rejection(query, history, question)
        if why is not None:
            return Condensed(fallback_query(history, question), "fallback", why, raw, ms)
        return Condensed(query, "model", "", raw, ms)

    def condense(self, history: Sequence[Exchange], question: str) -> Condensed:
        """The standalone query of a chat turn, from sync code."""
        if (done := self._without_model(history, question)) is not None:
            return done
        t0 = time.perf_counter()
        raw = self.llm.generate(*self._request(history, question))[0].text
        return self._result(history, question, raw, t0)

    async def acondense(self, history: Sequence[Exchange], question: str) -> Condensed:
        """`condense` on an event loop: the prompt built in a worker thread, the call awaited here."""
        if (done := self._without_model(history, question)) is not None:
            return done
        t0 = time.perf_counter()
        prompts, params = await asyncio.to_thread(self._request, history, question)
        raw = (await self.llm.agenerate_many(prompts, params))[0].text
        return self._result(history, question, raw, t0)
