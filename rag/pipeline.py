"""`Pipeline`: question -> query plan -> hybrid search -> rerank -> compress -> cited answer.

Stages are built lazily from the config, so `search` never loads the language model and a
retrieval-only config never needs one.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexing.store import DocumentStore
from inference.protocols import StreamingGenerator
from inference.structured import GroundedSpanProcessor, span_sources
from retrieval.fusion import fuse_searches
from retrieval.types import Candidate, SearchResult

from . import prompt as prompt_mod
from .answer import Answer, Passage
from .app import build_retriever, open_store
from .citations import MarkerFilter, attribute, to_citation
from .config import RagConfig, load_config
from .loops import is_looping
from .query.planner import QueryPlan, QueryPlanner

if TYPE_CHECKING:  # built lazily: a search-only pipeline never imports torch-backed stages
    from inference.outputs import RequestOutput
    from inference.sampling_params import SamplingParams
    from rerank.base import Reranker
    from rerank.compress.base import Compressor
    from retrieval.retriever import FilterSpec, Retriever

    from .answerability import AnswerabilityProbe
    from .calibration import RefusalModel, SpanSelector


class Pipeline:
    def __init__(self, cfg: RagConfig, store: DocumentStore | None = None,
                 generator: StreamingGenerator | None = None, retriever: Retriever | None = None):
        self.cfg = cfg
        self.store = store or open_store(cfg)
        self.retriever = retriever or build_retriever(cfg, self.store)
        self._generator = generator
        self._planner: QueryPlanner | None = None
        self._reranker: Reranker | None = None
        self._compressor: Compressor | None = None
        self._refusal: dict[str, RefusalModel | None] | None = None  # per question language, loaded once
        self.record_signals = False  # run the answerability checks even without a refusal model (calibration)
        # the answerability probe (`rag eval calibrate --probe`); None: the calibration entry's, if any
        self.probe: AnswerabilityProbe | None = None
        self.stored_probe = True  # else use only `probe` (calibration must match what it stores)
        self._probes: dict[str, AnswerabilityProbe | None] = {}
        self._selectors: dict[str, SpanSelector | None] = {}
        self.stored_selector = True  # else choose as the single decode would (calibration fits the selector)
        # Searches and index updates (server ingest jobs) must not interleave on the store.
        self.lock = threading.RLock()

    @classmethod
    def from_config(cls, path: str | Path | RagConfig | None = None, overrides: list[str] | None = None,
                    **kwargs: Any) -> Pipeline:
        cfg = path if isinstance(path, RagConfig) else load_config(path, overrides)
        return cls(cfg, **kwargs)

    def to_config(self) -> dict[str, Any]:
        return self.cfg.to_dict()

    # ---- lazily built stages ------------------------------------------------------------
    @property
    def generator(self) -> StreamingGenerator:
        if self._generator is None:
            from .generation import build_generator

            self._generator = build_generator(self.cfg.generator)
        return self._generator

    @property
    def planner(self) -> QueryPlanner:
        if self._planner is None:
            colls = {c.name: c.description for c in self.cfg.retrieval.collections}
            planner = QueryPlanner(self.cfg.query, None, colls)
            if planner.needs_llm:
                planner.llm = self.generator
            self._planner = planner
        return self._planner

    @property
    def reranker(self) -> Reranker:
        """Always a reranker (`type: none` is `NoReranker`): depth and order rules live in rerank/."""
        if self._reranker is None:
            from rerank import build_reranker

            engine = self.generator if self.cfg.rerank.type == "llm" else None
            self._reranker = build_reranker(self.cfg.rerank, embedder=self.retriever.embedder(), engine=engine)
        return self._reranker

    @property
    def compressor(self) -> Compressor | None:
        if self._compressor is None and self.cfg.compress.type != "off":
            from rerank import build_compressor

            self._compressor = build_compressor(self.cfg.compress, engine=self.generator)
        return self._compressor

    # ---- retrieval ----------------------------------------------------------------------
    def search(self, question: str, filters: FilterSpec = None, collection: str | None = None, k: int | None = None,
               plan: QueryPlan | None = None) -> SearchResult:
        """Planned, fused and reranked candidates (no generation of the answer)."""
        k = k or self.cfg.retrieval.k
        timings: dict[str, float] = {}
        plan = plan or self.planner.plan(question)
        timings.update(plan.timings_ms)
        flt = _merge_filters(filters, plan.filters)
        coll = collection if collection is not None else plan.collections
        depth = self.reranker.fetch_depth(k)
        t0 = time.perf_counter()
        with self.lock:
            results = [self.retriever.search(q.text, k=depth, mode=q.mode, filters=flt, collection=coll,
                                             must_terms=plan.must_terms or None) for q in plan.searches]
        timings["retrieve"] = _ms(t0)
        for r in results:
            for key in ("embed", "bm25", "dense"):
                if key in r.timings_ms:
                    timings[key] = timings.get(key, 0.0) + r.timings_ms[key]
        t1 = time.perf_counter()
        cands = fuse_searches(results, [q.weight for q in plan.searches], self.cfg.retrieval.fusion.k)
        timings["fuse"] = _ms(t1)
        if cands:
            t2 = time.perf_counter()
            cands = self.reranker.rank(question, cands)
            timings["rerank"] = _ms(t2)
        res = SearchResult(cands[:k], timings, results[0].collections if results else [])
        res.queries = [q.text for q in plan.searches]  # type: ignore[attr-defined]
        return res

    # ---- answering ----------------------------------------------------------------------
    def ask(self, question: str, filters: FilterSpec = None, collection: str | None = None, k: int | None = None,
            passages: list[str] | None = None, mode: str | None = None, **sampling: Any) -> Answer:
        answer = None
        for item in self.stream(question, filters=filters, collection=collection, k=k, passages=passages,
                                mode=mode, **sampling):
            if isinstance(item, Answer):
                answer = item
        assert answer is not None
        return answer

    def prepare(self, question: str, filters: FilterSpec = None, collection: str | None = None,
                k: int | None = None, mode: str | None = None,
                **sampling: Any) -> tuple[Answer, prompt_mod.BuiltPrompt | None, SamplingParams | None]:
        """Everything up to generation: the partial Answer, the built prompt and sampling params."""
        self._check_question(question)
        t0 = time.perf_counter()
        ac = self.cfg.answer
        res = self.search(question, filters=filters, collection=collection, k=k or ac.context_k)
        answer = Answer(question=question, text="", timings_ms=dict(res.timings_ms),
                        queries=getattr(res, "queries", [question]))
        passages = [_passage(i + 1, c) for i, c in enumerate(res.candidates[: k or ac.context_k])]
        if _below_threshold(res.candidates, ac.refuse_below, ac.refusal_score):
            passages = []
        return self._prompt_for(answer, passages, t0, sampling, mode)

    def prepare_given(self, question: str, texts: list[str], mode: str | None = None, **sampling: Any):
        """Like `prepare`, but with caller-supplied passages instead of retrieval (RGB-style runs)."""
        self._check_question(question)
        t0 = time.perf_counter()
        passages = [Passage(marker=i + 1, chunk_id=f"given-{i + 1}", doc_id=f"given-{i + 1}", text=t, score=0.0)
                    for i, t in enumerate(texts)]
        return self._prompt_for(Answer(question=question, text="", queries=[question]), passages, t0, sampling,
                                mode)

    def _prompt_for(self, answer: Answer, passages: list[Passage], t0: float, sampling: dict[str, Any],
                    mode: str | None = None):
        question = answer.question
        mode = mode or self.cfg.answer.mode
        if mode not in ("short", "long"):
            raise ValueError(f"mode must be 'short' or 'long', not {mode!r}")
        answer.mode = mode
        if self.compressor is not None and passages:
            t1 = time.perf_counter()
            comp = self.compressor.compress(question, [p.text for p in passages])
            passages = [dataclasses.replace(p, text=t) for p, t in zip(passages, comp.contexts) if t]
            answer.compression = comp.stats()
            answer.timings_ms["compress"] = _ms(t1)
        if not passages:
            answer.text, answer.refused = self.cfg.prompt.refusal, True
            answer.timings_ms["total"] = _ms(t0)
            return answer, None, None
        gen = self.generator
        if mode == "short":
            # Copying from the passages is the point: no penalty on tokens the prompt contains.
            sampling = {"max_tokens": self.cfg.answer.short_max_tokens, "repetition_penalty": 1.0, **sampling}
        params = self.cfg.generator.sampling.params(**sampling)
        budget = gen.max_model_len - params.max_tokens
        built = prompt_mod.build(self.cfg.prompt, gen.tokenizer, question, passages, budget, mode)
        if self.cfg.generator.context_shift:
            params.context_shift_keep = built.system_tokens
        if mode == "long" and self.cfg.answer.force_markers and gen.supports_logits_processors:
            from inference.structured.citation_markers import CitationMarkerProcessor

            params.logits_processors = [*params.logits_processors, CitationMarkerProcessor(
                gen.tokenizer, len(built.passages), self._eos_ids(), self.cfg.prompt.refusal)]
        if mode == "short" and self.cfg.answer.grounded and gen.supports_logits_processors:
            # (a remote backend has no logits to mask: its short answers are prompted only)
            params.logits_processors = [*params.logits_processors, self._span_processor(built, params, question)]
            answer.grounded = True
        answer.passages = built.passages
        answer.dropped_passages = [p.chunk_id for p in built.dropped]
        answer.timings_ms["prepare"] = _ms(t0)
        return answer, built, params

    def stream(self, question: str, filters: FilterSpec = None, collection: str | None = None, k: int | None = None,
               passages: list[str] | None = None, **sampling: Any) -> Iterator[str | Answer]:
        """Text deltas as they are generated, then the final `Answer`. `passages` skips retrieval."""
        if passages is None and self._generator is None:
            # Retrieval errors (bad filters, long questions) surface before any model is loaded.
            self._check_question(question)
        return self.generator.iterate(self.astream(question, filters, collection, k, passages=passages,
                                                   **sampling))

    async def astream(self, question: str, filters: FilterSpec = None, collection: str | None = None,
                      k: int | None = None, request_id: str | None = None, passages: list[str] | None = None,
                      **sampling: Any):
        """Retrieval in a worker thread, generation on the caller's loop (so a client that goes
        away cancels the request and frees its KV blocks); deltas, then the final `Answer`."""
        import asyncio

        t0 = time.perf_counter()
        if passages is None:
            prep = await asyncio.to_thread(self.prepare, question, filters, collection, k, **sampling)
        else:
            prep = await asyncio.to_thread(self.prepare_given, question, passages, **sampling)
        answer, built, params = prep
        if built is None:
            yield answer.text
            yield answer
            return
        if answer.mode == "short" and answer.grounded and self._per_passage(answer.question):
            final = await self._answer_per_passage(answer, built, params, t0)
            yield final.text
            yield final
            return
        markers = MarkerFilter({p.marker for p in answer.passages})
        last = None
        short = answer.mode == "short"  # a few tokens that may still turn into the refusal: sent whole
        agen = self.generator.astream(built.token_ids, params, request_id=request_id)
        looped = False
        try:
            async for out in agen:
                last = out
                if (delta := markers.feed(out.outputs[0].delta_text)) and not short:
                    yield delta
                if delta and is_looping(markers.text):
                    looped = True  # stop a degenerate loop now (closing the stream aborts the request)
                    break
        finally:
            await agen.aclose()
        if (tail := markers.flush()) and not short:
            yield tail
        span = next((p for p in params.logits_processors if isinstance(p, GroundedSpanProcessor)), None)
        checks = await self._checks(answer, span.answer_text(), span) if span is not None else {}
        final = self.finish(answer, last, markers, t0, span, checks)
        if looped:
            final.finish_reason = "repetition"
        if short:
            yield final.text
        yield final

    async def _checks(self, answer: Answer, text: str, span: GroundedSpanProcessor) -> dict[str, float]:
        """The answerability checks of a grounded span (`rag/answerability.py`), on the first passage
        that contains it; {} when they are off or the decoder already took the refusal path."""
        if not self.cfg.answer.verify or span.refused or not span.steps or not text.strip():
            return {}
        if not self.record_signals and self._refusal_model(answer.question) is None:
            return {}  # no calibrated model reads them: two prompts for nothing (SmolLM2, a user GGUF)
        from .answerability import check_signals

        t1 = time.perf_counter()
        body = [prompt_mod.passage_body(self.cfg.prompt, p) for p in answer.passages]
        src = span_sources(text.strip(), body)
        out = await check_signals(self.generator, answer.question, body[src[0] if src else 0], text.strip(),
                                  self._probe(answer.question))
        answer.timings_ms["check"] = _ms(t1)
        return out

    def _per_passage(self, question: str) -> bool:
        """Per-passage candidates (`rag/span_select.py`): as configured, else when a span selector
        is calibrated for the generator. They need the checks, i.e. a refusal model to read them
        (or a calibration run recording them)."""
        ac = self.cfg.answer
        if not ac.verify or (not self.record_signals and self._refusal_model(question) is None):
            return False
        return ac.per_passage if ac.per_passage is not None else self._selector(question) is not None

    async def _answer_per_passage(self, answer: Answer, built: prompt_mod.BuiltPrompt, params: SamplingParams,
                                  t0: float) -> Answer:
        """One span per passage, the checks on each, the selector's choice; cited to its passage."""
        from .answerability import answer_check, passage_signals
        from .span_select import choose, decode_candidates

        q = answer.question
        body = [prompt_mod.passage_body(self.cfg.prompt, p) for p in answer.passages]
        procs = [self._span_processor_for([t], params, refuse_margin=float("inf")) for t in body]
        cands = await decode_candidates(self.generator, built.token_ids, params, procs)
        t1 = time.perf_counter()
        probe = self._probe(q)
        live = [c for c in cands if c.text.strip() and c.processor.steps]
        for c in live:
            c.signals.update(await passage_signals(self.generator, q, body[c.index], probe))
        selector = self._selector(q) if self.stored_selector else None
        # The answer check is one more prompt per candidate; unless the selector reads it (or a
        # calibration run records every signal) only the chosen span needs it, for the refusal.
        every = self.record_signals or (selector is not None and "check_answer" in selector.features)
        if every:
            for c in live:
                c.signals["check_answer"] = await answer_check(self.generator, q, body[c.index], c.text.strip())
        best = choose(cands, selector)
        if best is not None and not every:
            best.signals["check_answer"] = await answer_check(self.generator, q, body[best.index],
                                                              best.text.strip())
        answer.timings_ms["check"] = _ms(t1)
        answer.candidates = [c.to_dict() for c in cands]
        if best is None:  # no passage gave a span (cannot happen with non-empty passages)
            answer.text, answer.refused = self.cfg.prompt.refusal, True
            answer.timings_ms["total"] = _ms(t0)
            return answer
        return self.finish(answer, best.output, MarkerFilter(set()), t0, best.processor, best.signals,
                           source=best.index)

    def _span_processor(self, built: prompt_mod.BuiltPrompt, params: SamplingParams,
                        question: str = "") -> GroundedSpanProcessor:
        texts = [prompt_mod.passage_body(self.cfg.prompt, p) for p in built.passages]
        return self._span_processor_for(texts, params, self._refuse_margin(question))

    def _span_processor_for(self, texts: list[str], params: SamplingParams,
                            refuse_margin: float | None) -> GroundedSpanProcessor:
        return GroundedSpanProcessor(texts, self.generator.tokenizer, self.cfg.prompt.refusal,
                                     eos_token_id=self._eos_ids(),
                                     max_tokens=params.max_tokens, refuse_margin=refuse_margin)

    def _eos_ids(self) -> set[int] | int | None:
        return self.generator.eos_token_ids

    def _threshold(self, key: str, question: str = "") -> float | None:
        """`answer.<key>`, else what `rag eval calibrate` stored for this model and the question's
        language."""
        ac = self.cfg.answer
        if getattr(ac, key) is not None:
            return getattr(ac, key)
        from .calibration import calibration_path, load_thresholds

        entry = load_thresholds(calibration_path(self.cfg.storage_path, ac.calibration),
                                self.cfg.generator.engine.model, language=_language(question))
        return entry.get(key)

    def _refusal_model(self, question: str = "") -> RefusalModel | None:
        """The calibrated refusal model of this generator for the question's language, unless the
        config sets thresholds itself or the answerability checks it needs are off."""
        ac = self.cfg.answer
        if not ac.verify or ac.refuse_margin is not None or ac.refuse_min_logprob is not None:
            return None
        lang = _language(question)
        if self._refusal is None:
            self._refusal = {}
        if lang not in self._refusal:
            from .calibration import calibration_path, load_refusal_model

            self._refusal[lang] = load_refusal_model(calibration_path(self.cfg.storage_path, ac.calibration),
                                                     self.cfg.generator.engine.model, language=lang)
        return self._refusal[lang]

    def _probe(self, question: str = "") -> AnswerabilityProbe | None:
        """The probe whose score the refusal model reads: the one set on the pipeline, else the one
        stored with the calibration entry for this model and the question's language."""
        if self.probe is not None or not self.stored_probe:
            return self.probe
        lang = _language(question)
        if lang not in self._probes:
            from .answerability import AnswerabilityProbe
            from .calibration import calibration_path, load_thresholds

            entry = load_thresholds(calibration_path(self.cfg.storage_path, self.cfg.answer.calibration),
                                    self.cfg.generator.engine.model, language=lang)
            self._probes[lang] = AnswerabilityProbe.from_dict(entry["probe"]) if "probe" in entry else None
        return self._probes[lang]

    def _selector(self, question: str = "") -> SpanSelector | None:
        """The span selector stored with the calibration entry for this model and language."""
        lang = _language(question)
        if lang not in self._selectors:
            from .calibration import calibration_path, load_span_selector

            self._selectors[lang] = load_span_selector(
                calibration_path(self.cfg.storage_path, self.cfg.answer.calibration),
                self.cfg.generator.engine.model, language=lang)
        return self._selectors[lang]

    def _refuse_margin(self, question: str = "") -> float | None:
        # With a refusal model the span path is always taken; the model weighs the margin itself.
        if self._refusal_model(question) is not None:
            return float("inf")
        return self._threshold("refuse_margin", question)

    def finish(self, answer: Answer, out: RequestOutput | None, markers: MarkerFilter, t0: float,
               span: GroundedSpanProcessor | None = None, checks: dict[str, float] | None = None,
               source: int | None = None) -> Answer:
        """Turn the streamed, marker-checked text into the answer: citations, refusal, costs.

        Long mode: `text` is exactly what was streamed; when the model cited nothing, citations
        are attributed by word overlap and flagged `inferred`. Short mode: the span, then the
        marker of `source` (the passage a per-passage candidate was decoded from), else of the
        first passage that contains it verbatim (none if none does). A refusal cites nothing.
        """
        text = markers.text
        refusal = self.cfg.prompt.refusal
        refused = refusal.lower().rstrip(".") in text.lower() or (span is not None and span.refused)
        signals: dict[str, float] = {}
        if span is not None:
            signals = {"margin": span.margin if span.margin is not None else 0.0,
                       "span_logprob": span.span_logprob, "min_logprob": span.min_logprob,
                       "span_tokens": float(span.steps), **(checks or {})}
        if span is not None and not refused and span.steps:
            model = self._refusal_model(answer.question)
            decided = model.refuses(signals) if model is not None else None
            if decided is not None:
                refused = decided
                signals["p_unanswerable"] = model.probability(signals)  # type: ignore[union-attr]
            elif (low := self._threshold("refuse_min_logprob", answer.question)) is not None and \
                    span.min_logprob < low:
                refused = True  # a span the model had to guess a token of: not supported well enough
        if answer.mode == "short":
            if span is not None and not refused and span.steps:
                text = span.answer_text()  # whole words even when max_tokens cut the span
            if refused:
                cites = []
            elif source is not None:  # the passage the span was decoded from (per-passage candidates)
                cites = [to_citation(answer.passages[source])]
            else:
                cites = self._span_citations(text, answer.passages)
            if refused:
                text = refusal
            elif cites:
                text = text.strip() + " " + "".join(f"[{c.marker}]" for c in cites)
        else:
            by_marker = {p.marker: p for p in answer.passages}
            cites = [to_citation(by_marker[n]) for n in markers.used]
            if not cites and self.cfg.answer.attribute and not refused:
                _, cites = attribute(text, answer.passages, self.cfg.answer.attribution_overlap)
            if refused:
                cites = []
        answer.text, answer.citations, answer.removed_markers = text, cites, markers.removed
        answer.refused = refused
        if signals:
            answer.signals = signals
        if out is not None:
            m = out.metrics
            answer.finish_reason = out.outputs[0].finish_reason
            answer.tokens = {"prompt": m.prompt_tokens, "completion": m.generated_tokens,
                             "cached": m.cached_prompt_tokens}
            if m.ttft is not None:
                answer.timings_ms["prefill"] = m.ttft * 1000
                if m.e2e_latency is not None:
                    answer.timings_ms["decode"] = (m.e2e_latency - m.ttft) * 1000
        answer.timings_ms["total"] = _ms(t0)
        return answer

    def _span_citations(self, text: str, passages: list[Passage]) -> list:
        """The citation of a short answer: the first passage (in prompt order, i.e. rank) that holds
        it verbatim, the one the answerability checks read.

        Why one: a short span such as "Poland" or "1562" is verbatim in many passages that say
        nothing about the question; citing each of them cited text that does not support the
        answer (on SQuAD, every multi-passage short citation had at most one supporting passage).
        """
        body = [prompt_mod.passage_body(self.cfg.prompt, p) for p in passages]
        return [to_citation(passages[i]) for i in span_sources(text.strip(), body)[:1]]

    def _check_question(self, question: str) -> None:
        if not question or not question.strip():
            raise ValueError("question is empty")
        limit = self.cfg.answer.max_question_chars
        if len(question) > limit:
            raise ValueError(f"question has {len(question)} characters; the limit is {limit} "
                             "(answer.max_question_chars)")

    def close(self) -> None:
        if self._generator is not None:
            self._generator.close()
        self.store.close()


def _language(question: str) -> str:
    """The question's language for choosing a calibration entry ("" when there is no question)."""
    from indexing.language import detect_language

    return detect_language(question) if question else ""


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _passage(marker: int, c: Candidate) -> Passage:
    ch = c.chunk
    return Passage(marker=marker, chunk_id=ch.chunk_id, doc_id=ch.doc_id, text=ch.text, score=float(c.score),
                   source=ch.source, title=ch.title, section=ch.section, page=ch.page,
                   metadata=dict(ch.metadata))


def _merge_filters(user: FilterSpec, planned: dict) -> FilterSpec:
    if not planned:
        return user
    if not user:
        return planned
    from retrieval.filters import Filters

    a, b = Filters.parse(user), Filters.parse(planned)
    return Filters(conditions=a.conditions + b.conditions)


def _below_threshold(cands: list[Candidate], threshold: float | None, key: str) -> bool:
    if threshold is None or not cands:
        return False
    best = max((c.scores.get(key, c.score) if key != "score" else c.score) for c in cands)
    return best < threshold
