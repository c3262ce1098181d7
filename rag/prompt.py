"""Prompt layout built for the prefix cache.

The system prompt and answering instructions come first and are byte-stable across requests, so
their KV blocks are computed once and then served from the engine's prefix cache. Then come the
numbered passages, then the question. When everything does not fit in the model context, the
lowest-ranked passages are dropped first; the system prompt is never truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .answer import Passage

DEFAULT_SYSTEM = (
    "You are a careful assistant that answers questions using only the numbered context passages "
    "the user provides.\n"
    "Rules:\n"
    "1. Answer in one or two short sentences, in the language of the question.\n"
    "2. After each claim, cite the passage it comes from with its number in square brackets, "
    "for example [1] or [2].\n"
    "3. Never cite a number that is not in the context.\n"
    "4. If the passages do not contain the answer, reply exactly: {refusal}"
)
DEFAULT_REFUSAL = "I don't know based on the provided documents."
DEFAULT_SHORT_SYSTEM = (
    "You answer questions by copying the answer from the numbered context passages the user "
    "provides.\n"
    "Rules:\n"
    "1. Reply with only the shortest exact phrase from a passage that answers the question: a name, "
    "number, date or short phrase, copied verbatim in the passage's language and script. No sentence, "
    "no explanation.\n"
    "2. If the passages do not contain the answer, reply exactly: {refusal}"
)


class PromptConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: str = DEFAULT_SYSTEM
    short_system: str = Field(DEFAULT_SHORT_SYSTEM, description="system prompt of answer.mode short")
    refusal: str = DEFAULT_REFUSAL
    passage_template: str = "[{marker}] {title}\n{text}"
    user_template: str = "Context passages:\n\n{context}\n\nQuestion: {question}"
    max_passage_chars: int = Field(2000, ge=50, description="each passage is cut to this many characters")

    def system_text(self, mode: str = "long") -> str:
        return (self.short_system if mode == "short" else self.system).replace("{refusal}", self.refusal)


class PromptTooLong(ValueError):
    """Raised when even the system prompt and the question alone exceed the model context."""


@dataclass
class BuiltPrompt:
    token_ids: list[int]
    text: str
    passages: list[Passage]
    dropped: list[Passage] = field(default_factory=list)
    system_tokens: int = 0


def passage_body(cfg: PromptConfig, p: Passage) -> str:
    """The passage text exactly as the model is shown it (grounded spans are matched against it)."""
    return clip_passage(cfg, p.text)


def clip_passage(cfg: PromptConfig, text: str) -> str:
    """`text` cut to `max_passage_chars` the way every prompt cuts a passage."""
    return text if len(text) <= cfg.max_passage_chars else text[: cfg.max_passage_chars] + "…"


def _passage_text(cfg: PromptConfig, p: Passage) -> str:
    title = p.title + (f" § {p.section}" if p.section else "")
    text = passage_body(cfg, p)
    return cfg.passage_template.format(marker=p.marker, title=title or p.source, text=text).strip()


def render(cfg: PromptConfig, tokenizer: Any, question: str, passages: list[Passage], mode: str = "long") -> str:
    context = "\n\n".join(_passage_text(cfg, p) for p in passages) or "(no passages)"
    messages = [
        {"role": "system", "content": cfg.system_text(mode)},
        {"role": "user", "content": cfg.user_template.format(context=context, question=question)},
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def system_prefix(cfg: PromptConfig, tokenizer: Any, mode: str = "long") -> str:
    """The byte-stable head every prompt starts with (what the prefix cache serves)."""
    full = render(cfg, tokenizer, "\x00", [], mode)
    return full[: full.index(cfg.system_text(mode)) + len(cfg.system_text(mode))]


def build(cfg: PromptConfig, tokenizer: Any, question: str, passages: list[Passage], budget: int,
          mode: str = "long") -> BuiltPrompt:
    """Fit the prompt into `budget` tokens by dropping the lowest-ranked passages first.

    Passages arrive best-first; markers are renumbered 1..n over the kept ones so the model
    never sees gaps.
    """
    kept = list(passages)
    dropped: list[Passage] = []
    while True:
        numbered = [_renumber(p, i + 1) for i, p in enumerate(kept)]
        text = render(cfg, tokenizer, question, numbered, mode)
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) <= budget:
            sys_len = len(tokenizer.encode(system_prefix(cfg, tokenizer, mode), add_special_tokens=False))
            return BuiltPrompt(ids, text, numbered, dropped, sys_len)
        if not kept:
            raise PromptTooLong(
                f"the system prompt and the question take {len(ids)} tokens, more than the {budget} "
                "available for the prompt; shorten the question or raise generator.engine.max_model_len"
            )
        dropped.insert(0, kept.pop())


def _renumber(p: Passage, marker: int) -> Passage:
    if p.marker == marker:
        return p
    return Passage(marker=marker, chunk_id=p.chunk_id, doc_id=p.doc_id, text=p.text, score=p.score,
                   source=p.source, title=p.title, section=p.section, page=p.page, metadata=p.metadata)
