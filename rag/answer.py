"""The answer a pipeline returns: text, citations that resolve to real passages, and costs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Citation:
    """Where a `[n]` marker in the answer points: enough to show and link the source."""

    marker: int
    chunk_id: str
    doc_id: str
    source: str
    title: str = ""
    page: int | None = None
    url: str | None = None
    section: str = ""
    inferred: bool = False  # added by overlap attribution, not written by the model
    # [start, end) character offsets in the cited passage's `text` of what the answer took from it
    # (`citations.locate_spans`), so a client can highlight it; None when no part of it matches
    span: list[int] | None = None


@dataclass
class Passage:
    """A context passage as given to the model, numbered as the model saw it."""

    marker: int
    chunk_id: str
    doc_id: str
    text: str
    score: float
    source: str = ""
    title: str = ""
    section: str = ""
    page: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_chunk(cls, marker: int, chunk: Any, score: float = 0.0) -> Passage:
        """A stored chunk (`indexing.types.Chunk`) as passage `marker`: the one mapping the answer
        prompt and the passage KV warm-up share, so both render (and cache) the same passage."""
        return cls(marker=marker, chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, text=chunk.text, score=score,
                   source=chunk.source, title=chunk.title, section=chunk.section, page=chunk.page,
                   metadata=dict(chunk.metadata))


@dataclass
class Answer:
    question: str
    text: str
    citations: list[Citation] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)  # prompt, completion, cached
    refused: bool = False
    removed_markers: int = 0
    dropped_passages: list[str] = field(default_factory=list)  # chunk ids left out for length
    queries: list[str] = field(default_factory=list)  # what was actually searched
    finish_reason: str | None = None
    compression: dict[str, Any] = field(default_factory=dict)  # tokens in/out, ratio, ms
    mode: str = "long"  # short: the answer span and its citation; long: a cited explanation
    grounded: bool = False  # short answer decoded as a verbatim passage span
    # refusal signals: margin = log P(refusal) - log P(best span) at the first token, span_logprob
    signals: dict[str, float] = field(default_factory=dict)
    # per-passage span candidates (`answer.per_passage`): passage index, span and signals of each
    candidates: list[dict[str, Any]] = field(default_factory=list)
    # chat turns: the standalone query searched, how it was condensed, the earlier turns in the prompt
    chat: dict[str, Any] = field(default_factory=dict)
    # on a refusal, the best passages found (those the model read, or, refused before decoding, the
    # retrieved ones), so a reader sees what came closest; empty when the question was answered
    closest_passages: list[Passage] = field(default_factory=list)
    # long mode with `answer.long_grounding` on: the mode, each sentence the model wrote with the path
    # it took (kept, recited, dropped_keyfact, dropped_unsupported, ...) and the count of each path
    grounding: dict[str, Any] = field(default_factory=dict)
    # grounded short answers: what decided give-or-refuse (`ShortAnswerPolicy.calibration`): calibrated
    # false when no calibration entry covers the question's language and the decoder's own no-answer
    # path decided; `by` (refusal_model, thresholds, config, decoder) and the question's `language`
    refusal_calibration: dict[str, Any] = field(default_factory=dict)
    # a question comparing two named options by a date or a number (`rag/answering/compare.py`): the
    # options, each one's question and short answer, which won, and `used` (false: answered as asked,
    # `reason` says why the comparison did not decide)
    comparison: dict[str, Any] = field(default_factory=dict)
    # a refused question tried in two steps (`rag/answering/two_hop.py`): the two questions, their
    # short answers and `used` (false: the refusal stands, `reason` says why)
    two_hop: dict[str, Any] = field(default_factory=dict)

    @property
    def standalone_question(self) -> str:
        """The question without the conversation (what a check that reads one passage is asked)."""
        return self.chat.get("standalone_query") or self.question

    def add_costs(self, out: Any) -> None:
        """The finish reason, token counts and prefill/decode times of the engine's RequestOutput
        (`inference.outputs`) this answer was decoded from."""
        m = out.metrics
        self.finish_reason = out.outputs[0].finish_reason
        self.tokens = {"prompt": m.prompt_tokens, "completion": m.generated_tokens, "cached": m.cached_prompt_tokens}
        if m.ttft is not None:
            self.timings_ms["prefill"] = m.ttft * 1000
            if m.e2e_latency is not None:
                self.timings_ms["decode"] = (m.e2e_latency - m.ttft) * 1000

    def to_dict(self, passages: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if not passages:
            d.pop("passages")
        return d
