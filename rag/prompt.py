"""Prompt layout built for the prefix cache.

The system prompt and answering instructions come first and are byte-stable across requests, so
their KV blocks are computed once and then served from the engine's prefix cache. Then come the
numbered passages, then the question. When everything does not fit in the model context, the
lowest-ranked passages are dropped first; the system prompt is never truncated.

A chat turn's prompt is the previous turn's prompt, its answer, then the new passages and
question: earlier turns are rendered exactly as they were when they were the last one (passages
included), so turn n+1 starts with turn n's tokens and the prefix cache serves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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
SHOWN_BEFORE = "(the same passage as in an earlier question above)"
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
    history_turns: int = Field(6, ge=0, description=(
        "chat: earlier turns kept in the answer prompt; past this the oldest half is dropped at once, "
        "so the cached prefix breaks every history_turns/2 turns, not on every turn"))

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
    history_turns: int = 0  # earlier chat turns the prompt holds (the oldest may have been dropped)
    turns: list[Turn] = field(default_factory=list)  # those turns (`build_each` gives each prompt the same)

    def cached_texts(self, cfg: PromptConfig) -> list[str]:
        """The passages' texts for `Generator.locate_passages`, in prompt order; none in a chat
        follow-up: the cache key includes everything before the first passage, here the whole
        conversation, so an entry would never serve another prompt (and the earlier turns come
        from the prefix cache anyway)."""
        if self.history_turns:
            return []
        return [t for p in self.passages if (t := cached_text(cfg, p))]

    @property
    def passage_anchor(self) -> list[int]:
        """The tokens the engine's passage cache keys this prompt's passages under: the system head,
        the same for every question of a mode. What follows it up to a passage (the user template,
        markers, titles, other passages) is a neighbour the cached K/V may have attended to, not
        part of the key; with `answer.check_kv: prompt` the answerability checks name the same
        anchor, so they read the K/V this prompt computed."""
        return self.token_ids[:self.system_tokens]


class Turn(Protocol):
    """An earlier chat turn as its prompt showed it (`rag.chat.ChatTurn`)."""

    question: str
    answer: str
    passages: list[Passage]


def passage_body(cfg: PromptConfig, p: Passage) -> str:
    """The passage text exactly as the model is shown it (grounded spans are matched against it)."""
    return clip_passage(cfg, p.text)


def clip_passage(cfg: PromptConfig, text: str) -> str:
    """`text` cut to `max_passage_chars` the way every prompt cuts a passage."""
    return text if len(text) <= cfg.max_passage_chars else text[: cfg.max_passage_chars] + "…"


def _title(p: Passage) -> str:
    return p.title + (f" § {p.section}" if p.section else "") or p.source


def _passage_text(cfg: PromptConfig, p: Passage) -> str:
    return cfg.passage_template.format(marker=p.marker, title=_title(p), text=passage_body(cfg, p)).strip()


def cached_text(cfg: PromptConfig, p: Passage) -> str:
    """The part of a rendered passage that is the same wherever it is placed: its text, without the
    marker (renumbered per prompt) and the title line. This is what the engine's passage KV cache
    keys and reuses (`BuiltPrompt.cached_texts`); the answerability checks show the same text
    (`rag.answerability`), so with `answer.check_kv: prompt` an answer's checks reuse the K/V its
    prompt computed. The title's few tokens are computed with the prompt's other template tokens."""
    if "{text}" not in cfg.passage_template:
        return ""
    return passage_body(cfg, p).strip()


def user_content(cfg: PromptConfig, question: str, passages: list[Passage], shown: frozenset[str] = frozenset()) -> str:
    """The user message of a turn: its numbered passages, then its question. A passage an earlier
    turn of the prompt already shows (`shown`, chunk ids) is named, not repeated: repeating it
    would prefill its tokens again on every turn that retrieves it."""
    context = "\n\n".join(_reference(cfg, p) if p.chunk_id in shown else _passage_text(cfg, p)
                           for p in passages) or "(no passages)"
    return cfg.user_template.format(context=context, question=question)


def _reference(cfg: PromptConfig, p: Passage) -> str:
    return cfg.passage_template.format(marker=p.marker, title=_title(p), text=SHOWN_BEFORE).strip()


def conversation(cfg: PromptConfig, turns: Sequence[Turn]) -> tuple[list[dict[str, str]], frozenset[str]]:
    """Earlier turns as chat messages, byte for byte as their own prompt had them (a turn that was
    answered without passages, or whose passages are unknown, shows the bare question), and the
    chunk ids they show."""
    msgs: list[dict[str, str]] = []
    shown: frozenset[str] = frozenset()
    for t in turns:
        user = user_content(cfg, t.question, t.passages, shown) if t.passages else t.question
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": t.answer}]
        shown |= {p.chunk_id for p in t.passages}
    return msgs, shown


def render(cfg: PromptConfig, tokenizer: Any, question: str, passages: list[Passage], mode: str = "long",
           history: Sequence[Turn] = ()) -> str:
    earlier, shown = conversation(cfg, history)
    messages = [
        {"role": "system", "content": cfg.system_text(mode)},
        *earlier,
        {"role": "user", "content": user_content(cfg, question, passages, shown)},
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def kept_history(turns: Sequence[Turn], limit: int) -> list[Turn]:
    """The newest turns within `limit`, dropped oldest-half-first: the kept window starts at a
    multiple of limit/2, so consecutive turns mostly share the same start (and cached prefix)."""
    n = len(turns)
    if n <= limit:
        return list(turns)
    if limit == 0:
        return []
    step = max(1, limit // 2)
    start = -(-(n - limit) // step) * step
    return list(turns[start:])


def system_prefix(cfg: PromptConfig, tokenizer: Any, mode: str = "long") -> str:
    """The byte-stable head every prompt starts with (what the prefix cache serves)."""
    full = render(cfg, tokenizer, "\x00", [], mode)
    return full[: full.index(cfg.system_text(mode)) + len(cfg.system_text(mode))]


def build(cfg: PromptConfig, tokenizer: Any, question: str, passages: list[Passage], budget: int,
          mode: str = "long", history: Sequence[Turn] = ()) -> BuiltPrompt:
    """Fit the prompt into `budget` tokens: the oldest chat turns go first, then the
    lowest-ranked passages.

    Passages arrive best-first; markers are renumbered 1..n over the kept ones so the model
    never sees gaps.
    """
    kept = list(passages)
    turns = kept_history(history, cfg.history_turns)
    dropped: list[Passage] = []
    while True:
        numbered = [_renumber(p, i + 1) for i, p in enumerate(kept)]
        text = render(cfg, tokenizer, question, numbered, mode, turns)
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) <= budget:
            sys_len = len(tokenizer.encode(system_prefix(cfg, tokenizer, mode), add_special_tokens=False))
            return BuiltPrompt(ids, text, numbered, dropped, sys_len, len(turns), turns)
        if turns:
            turns.pop(0)
            continue
        if not kept:
            raise PromptTooLong(
                f"the system prompt and the question take {len(ids)} tokens, more than the {budget} "
                "available for the prompt; shorten the question or raise generator.engine.max_model_len"
            )
        dropped.insert(0, kept.pop())


def build_each(cfg: PromptConfig, tokenizer: Any, question: str, built: BuiltPrompt, budget: int,
               mode: str = "long") -> list[BuiltPrompt]:
    """One prompt per passage of `built`, each holding that passage alone (numbered [1]) with the
    same system head, chat turns and question: what a per-passage short answer's decode of that
    passage reads (`answer.per_passage_prompt: own`). Each is shorter than `built`, so it fits
    `budget` whenever `built` did."""
    return [build(cfg, tokenizer, question, [p], budget, mode, built.turns) for p in built.passages]


def _renumber(p: Passage, marker: int) -> Passage:
    if p.marker == marker:
        return p
    return Passage(marker=marker, chunk_id=p.chunk_id, doc_id=p.doc_id, text=p.text, score=p.score,
                   source=p.source, title=p.title, section=p.section, page=p.page, metadata=p.metadata)
