"""`Pipeline`: question -> query plan -> hybrid search -> rerank -> compress -> cited answer.

Stages are built lazily from the config, so `search` never loads the language model and a
retrieval-only config never needs one.

A question has one implementation, async (`astream` > `aprepare` > `asearch`): stages that call
the model await the generator's async API on the question's loop; blocking work (building a stage,
retrieval, reranking models, prompts, calibration files) runs in worker threads. The server awaits
it on its own loop; the sync API enters it once, through `rag/generation/base.py`'s bridge.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexing.store_protocol import DocumentStoreProtocol
from inference.protocols import StreamingGenerator
from retrieval.fusion import fuse_searches
from retrieval.types import SearchResult

from . import prompt as prompt_mod
from .answer import Answer, Passage
from .answering.policy import Policies, below_threshold
from .answering.prepare import arequest_for
from .app import build_retriever, open_store
from .config import RagConfig, load_config
from .generation.base import run_sync
from .query.planner import QueryPlan, QueryPlanner

if TYPE_CHECKING:  # built lazily: a search-only pipeline never imports torch-backed stages
    from inference.sampling_params import SamplingParams
    from rerank.base import Reranker
    from rerank.compress.base import Compressor
    from retrieval.retriever import FilterSpec, Retriever

    from .chat import ChatTurn
    from .query.condense import Condenser


class Pipeline:
    def __init__(self, cfg: RagConfig, store: DocumentStoreProtocol | None = None,
                 generator: StreamingGenerator | None = None, retriever: Retriever | None = None,
                 policies: Policies | None = None):
        self.cfg = cfg
        self.store = store or open_store(cfg)
        self.retriever = retriever or build_retriever(cfg, self.store)
        self._generator = generator
        self._planner: QueryPlanner | None = None
        self._condenser: Condenser | None = None
        self._reranker: Reranker | None = None
        self._compressor: Compressor | None = None
        self._policies = policies  # the short-answer decision (`rag/answering/`); a calibration run passes its own
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
    def resolve_model(self) -> str:
        """The answering model's name: `generator.engine.model: auto` becomes its choice here, on first
        need (so `rag search` never measures a model), and stays so in `self.cfg`."""
        from .generation.auto_model import resolve_config_model

        return resolve_config_model(self.cfg)

    @property
    def generator(self) -> StreamingGenerator:
        if self._generator is None:
            from .generation import build_generator

            self.resolve_model()
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
    def condenser(self) -> Condenser:
        """Chat follow-up -> standalone search query, on the answering engine."""
        if self._condenser is None:
            from .query.condense import Condenser

            self._condenser = Condenser(self.cfg.query, self.generator)
        return self._condenser

    @property
    def reranker(self) -> Reranker:
        """Always a reranker (`type: none` is `NoReranker`): depth and order rules live in rerank/."""
        if self._reranker is None:
            from rerank import build_reranker

            engine = self.generator if self.cfg.rerank.type == "llm" else None
            self._reranker = build_reranker(self.cfg.rerank, embedder=self.retriever.embedder(), engine=engine)
        return self._reranker

    @property
    def policies(self) -> Policies:
        """The short-answer policies (one per question language), built from the calibration entries
        on first use."""
        if self._policies is None:
            self.resolve_model()  # calibration entries are looked up by the model's name
            self._policies = Policies(self.cfg)
        return self._policies

    @property
    def compressor(self) -> Compressor | None:
        if self._compressor is None and self.cfg.compress.type != "off":
            from rerank import build_compressor

            self._compressor = build_compressor(self.cfg.compress, engine=self.generator)
        return self._compressor

    async def _built(self, *names: str) -> list[Any]:  # a stage's model is loaded off the loop
        return await asyncio.to_thread(lambda: [getattr(self, n) for n in names])

    # ---- retrieval ----------------------------------------------------------------------
    def search(self, question: str, filters: FilterSpec = None, collection: str | None = None, k: int | None = None,
               plan: QueryPlan | None = None) -> SearchResult:
        """Planned, fused and reranked candidates (no generation of the answer): `asearch`."""
        return run_sync(self.asearch(question, filters, collection, k, plan), self._generator)

    async def asearch(self, question: str, filters: FilterSpec = None, collection: str | None = None,
                      k: int | None = None, plan: QueryPlan | None = None) -> SearchResult:
        k = k or self.cfg.retrieval.k
        planner, reranker = await self._built("planner", "reranker")
        plan = plan or await planner.aplan(question)
        timings: dict[str, float] = dict(plan.timings_ms)
        flt = plan.filters_with(filters)
        coll = collection if collection is not None else plan.collections
        depth = reranker.fetch_depth(k)
        must = plan.must_terms or None

        def retrieve(queries: list[tuple[str, str | None]]) -> list[SearchResult]:
            with self.lock:
                return [self.retriever.search(q, k=depth, mode=mode, filters=flt, collection=coll, must_terms=must)
                        for q, mode in queries]

        t0 = time.perf_counter()
        results = await asyncio.to_thread(retrieve, [(q.text, q.mode) for q in plan.searches])
        timings["retrieve"] = _ms(t0)
        for r in results:
            for key in ("embed", "bm25", "dense"):
                if key in r.timings_ms:
                    timings[key] = timings.get(key, 0.0) + r.timings_ms[key]
        t1 = time.perf_counter()
        weights = [q.weight for q in plan.searches]
        cands = fuse_searches(results, weights, self.cfg.retrieval.fusion.k)
        timings["fuse"] = _ms(t1)
        hops = []
        if self.cfg.query.multi_hop.enabled and self.cfg.query.multi_hop.max_hops > 1 and cands:
            from .query.multihop import MultiHop

            async def follow(query: str) -> SearchResult:
                return (await asyncio.to_thread(retrieve, [(query, None)]))[0]

            t3 = time.perf_counter()
            hopper = MultiHop(self.cfg.query.multi_hop, (await self._built("generator"))[0], self.cfg.query.system)
            cands, hops = await hopper.arun(question, [q.text for q in plan.searches], cands, results, weights,
                                            follow, self.cfg.retrieval.fusion.k)
            timings["multi_hop"] = _ms(t3)
        if cands:
            t2 = time.perf_counter()
            cands = await reranker.arank(question, cands)
            timings["rerank"] = _ms(t2)
        res = SearchResult(cands[:k], timings, results[0].collections if results else [])
        res.queries = [q.text for q in plan.searches] + [h.query for h in hops if h.query]  # type: ignore[attr-defined]
        res.hops = [h.metadata() for h in hops]  # type: ignore[attr-defined]
        return res

    # ---- answering ----------------------------------------------------------------------
    def ask(self, question: str, filters: FilterSpec = None, collection: str | None = None, k: int | None = None,
            passages: list[str] | None = None, mode: str | None = None, history: Sequence[ChatTurn] = (),
            ranked: bool = False, **sampling: Any) -> Answer:
        """`history`: the conversation's earlier turns (`rag.chat`), oldest first. `ranked`: the given
        `passages` are a ranking, best first, and are read as retrieval's are (a short answer and a long
        answer's gate read the top `short_k`); by default a caller's own passages are all read."""
        answer = None
        for item in self.stream(question, filters=filters, collection=collection, k=k, passages=passages,
                                mode=mode, history=history, ranked=ranked, **sampling):
            if isinstance(item, Answer):
                answer = item
        assert answer is not None
        return answer

    def prepare(self, question: str, filters: FilterSpec = None, collection: str | None = None,
                k: int | None = None, mode: str | None = None, history: Sequence[ChatTurn] = (),
                **sampling: Any) -> tuple[Answer, prompt_mod.BuiltPrompt | None, SamplingParams | None]:
        """Everything up to generation (`aprepare`), from sync code."""
        return run_sync(self.aprepare(question, filters, collection, k, mode, history, **sampling), self._generator)

    async def aprepare(self, question: str, filters: FilterSpec = None, collection: str | None = None,
                       k: int | None = None, mode: str | None = None, history: Sequence[ChatTurn] = (),
                       **sampling: Any) -> tuple[Answer, prompt_mod.BuiltPrompt | None, SamplingParams | None]:
        """Everything up to generation: the partial Answer, the built prompt and sampling params.
        A chat turn (`history`) searches its condensed standalone query and answers with the
        earlier turns in the prompt."""
        self._check_question(question)
        t0 = time.perf_counter()
        ac = self.cfg.answer
        condensed = None
        if history:
            (condenser,) = await self._built("condenser")
            condensed = await condenser.acondense(history, question)
        query = condensed.query if condensed else question
        k = k or (ac.follow_up_k if history and ac.follow_up_k else ac.context_k)
        res, passages, weak = await self._retrieved(query, filters, collection, k)
        answer = Answer(question=question, text="", timings_ms=dict(res.timings_ms),
                        queries=getattr(res, "queries", [query]))
        if condensed:
            answer.chat, answer.timings_ms["condense"] = condensed.metadata(), condensed.ms
        if weak:
            answer.closest_passages = passages  # shown with the refusal, never given to the model
            passages = []  # too weak to answer from: refused below, as with no passages at all
        return await arequest_for(self, answer, passages, t0, sampling, mode, history)

    async def _retrieved(self, query: str, filters: FilterSpec, collection: str | None,
                         k: int) -> tuple[SearchResult, list[Passage], bool]:
        """The search for `query`, its top `k` as numbered passages, and whether even the best scores
        under `answer.refuse_below` (too weak to answer from): what an answer and a one-thing check
        (`_passages`) both read."""
        ac = self.cfg.answer
        res = await self.asearch(query, filters=filters, collection=collection, k=k)
        passages = [Passage.of_chunk(i + 1, c.chunk, float(c.score)) for i, c in enumerate(res.candidates[:k])]
        return res, passages, below_threshold(res.candidates, ac.refuse_below, ac.refusal_score)

    def prepare_given(self, question: str, texts: list[str], mode: str | None = None, ranked: bool = False,
                      **sampling: Any):
        """Like `prepare`, but with caller-supplied passages instead of retrieval (RGB-style runs);
        `ranked`: see `ask`."""
        return run_sync(self.aprepare_given(question, texts, mode, ranked, **sampling), self._generator)

    async def aprepare_given(self, question: str, texts: list[str], mode: str | None = None, ranked: bool = False,
                             **sampling: Any):
        self._check_question(question)
        t0 = time.perf_counter()
        passages = [Passage(marker=i + 1, chunk_id=f"given-{i + 1}", doc_id=f"given-{i + 1}", text=t, score=0.0)
                    for i, t in enumerate(texts)]
        return await arequest_for(self, Answer(question=question, text="", queries=[question]), passages, t0,
                                  sampling, mode, ranked=ranked)

    def stream(self, question: str, filters: FilterSpec = None, collection: str | None = None, k: int | None = None,
               passages: list[str] | None = None, history: Sequence[ChatTurn] = (), ranked: bool = False,
               **sampling: Any) -> Iterator[str | Answer]:
        """Text deltas as they are generated, then the final `Answer`. `passages` skips retrieval.
        The one crossing of a sync question into `astream`: the generator's bridge (`iterate`)."""
        if passages is None and self._generator is None:
            # Retrieval errors (bad filters, long questions) surface before any model is loaded.
            self._check_question(question)
        return self.generator.iterate(self.astream(question, filters, collection, k, passages=passages,
                                                   history=history, ranked=ranked, **sampling))

    async def astream(self, question: str, filters: FilterSpec = None, collection: str | None = None,
                      k: int | None = None, request_id: str | None = None, passages: list[str] | None = None,
                      history: Sequence[ChatTurn] = (), ranked: bool = False, **sampling: Any):
        """The question on the caller's loop (so a client that goes away cancels the request and
        frees its KV blocks); blocking work in worker threads; deltas, then the final `Answer`."""
        self._check_question(question)  # before any path reads it (a comparison asks other questions)
        outcome = None
        if passages is None:  # a follow-up too: a question naming both things needs no condensing
            compared = await self._acompare(question, filters, collection, k, sampling)
            if compared is not None:
                answer, outcome = compared
                if answer is not None:
                    answer.comparison = outcome.to_dict()
                    yield answer.text
                    yield answer
                    return
        # a refusal may still be answered in two steps (`_atwo_hop`): its text is held back while
        # the deltas spell it, so that what was streamed always adds up to the answer given
        from .answering.two_hop import RefusalHold

        hold = RefusalHold(self.cfg.prompt.refusal,
                           outcome is None and passages is None and not history and await self._splits(question))
        async for item in self._astream_one(question, filters, collection, k, request_id, passages, history,
                                            ranked, **sampling):
            if not isinstance(item, Answer):
                for delta in hold.feed(item):
                    yield delta
                continue
            if outcome is not None:
                item.comparison = outcome.to_dict()
            if hold.replaceable(item):
                answer, hop = await self._atwo_hop(question, filters, collection, k, sampling)
                if answer is not None:
                    answer.two_hop = hop.to_dict()
                    yield answer.text
                    yield answer
                    return
                item.two_hop = hop.to_dict()
            for delta in hold.release():
                yield delta
            yield item

    async def _splits(self, question: str) -> bool:
        """Whether a refusal of `question` may be answered in two steps: grounded short answers (a
        generator that takes logits processors) and the policy's `two_hop` (configured, else the
        model's calibration entry; English questions)."""
        ac = self.cfg.answer
        if not ac.grounded or ac.two_hop is False:
            return False
        gen, policies = await self._built("generator", "policies")
        if not gen.supports_logits_processors:
            return False
        return (await asyncio.to_thread(policies.for_question, question)).two_hop

    async def _ask_short(self, question: str, filters: FilterSpec, collection: str | None, k: int | None,
                         sampling: dict[str, Any]) -> Answer:
        """One grounded short answer (a part of a comparison or of a two-step answer)."""
        final = None
        # closed here when the question is cancelled (a client gone away): its engine request is aborted
        async with contextlib.aclosing(self._astream_one(question, filters, collection, k, None, None, (),
                                                         **{**sampling, "mode": "short"})) as items:
            async for item in items:
                final = item
        assert isinstance(final, Answer)
        return final

    async def _atwo_hop(self, question: str, filters: FilterSpec, collection: str | None, k: int | None,
                        sampling: dict[str, Any]) -> tuple[Answer | None, Any]:
        """A refused question split by the engine into two grounded short answers, the second naming
        the first's (`rag/answering/two_hop.py`); (None, outcome) when the split does not answer it."""
        from .answering import two_hop
        from .answering.prepare import answer_mode

        (gen,) = await self._built("generator")
        return await two_hop.aanswer(gen, question, answer_mode(sampling.get("mode"), self.cfg.answer.mode),
                                     lambda q: self._ask_short(q, filters, collection, k, sampling))

    async def _acompare(self, question: str, filters: FilterSpec, collection: str | None, k: int | None,
                        sampling: dict[str, Any]) -> tuple[Answer | None, Any] | None:
        """A question about two named things answered from one answer per thing: a comparison of
        two options by a date or a number (`rag/answering/compare.py`, `answer.compare`) or a yes/no
        question about both (`rag/answering/yes_no.py`, `answer.yes_no`); (None, outcome) when the
        parts do not decide; None when the question is neither or answers are not grounded here."""
        from .answering import compare, yes_no
        from .answering.policy import question_language
        from .answering.prepare import answer_mode

        ac = self.cfg.answer
        if not ac.grounded:
            return None
        language = question_language(question)
        cmp = compare.parse(question, language) if ac.compare else None
        pair = yes_no.parse(question, language) if cmp is None and ac.yes_no is not False else None
        if cmp is None and pair is None:
            return None
        gen, policies = await self._built("generator", "policies")
        if not gen.supports_logits_processors:  # the parts' answers would not be grounded spans
            return None
        mode = answer_mode(sampling.get("mode"), ac.mode)

        def ask(q: str) -> Any:
            return self._ask_short(q, filters, collection, k, sampling)

        if cmp is not None:
            return await compare.aanswer(gen, cmp, mode, ask)
        assert pair is not None
        policy = await asyncio.to_thread(policies.for_question, question)
        if policy.yes_no is None and pair.checks:  # checks read against thresholds nobody measured
            return None
        calibration = {**policy.calibration, "by": "yes_no_thresholds"}

        async def look(q: str) -> list[Passage]:
            return await self._passages(q, filters, collection, k, policy.short_k)

        return await yes_no.aanswer(gen, pair, mode, ask, look, policy.yes_no, calibration)

    async def _passages(self, question: str, filters: FilterSpec, collection: str | None, k: int | None,
                        keep: Any) -> list[Passage]:
        """The passages a short answer to `question` would read (retrieved, best first, `keep(n)` of
        them); none when even the best scores under `answer.refuse_below`."""
        _, passages, weak = await self._retrieved(question, filters, collection, k or self.cfg.answer.context_k)
        return [] if weak else passages[:keep(len(passages))]

    async def _astream_one(self, question: str, filters: FilterSpec, collection: str | None, k: int | None,
                           request_id: str | None, passages: list[str] | None, history: Sequence[ChatTurn],
                           ranked: bool = False, **sampling: Any):
        """One question to its answer: retrieval (or the given passages), the prompt, the decode."""
        t0 = time.perf_counter()
        if passages is None:
            prep = await self.aprepare(question, filters, collection, k, history=history, **sampling)
        else:
            prep = await self.aprepare_given(question, passages, ranked=ranked, **sampling)
        answer, built, params = prep
        if built is None:
            yield answer.text
            yield answer
            return
        from .answering.stream import decode_answer

        gen, policies = await self._built("generator", "policies")
        await asyncio.to_thread(policies.for_question, answer.question)  # reads its calibration files: off the loop
        agen = decode_answer(gen, self.cfg, policies, answer, built, params, t0, gen.eos_token_ids, request_id,
                             ranked=passages is None or ranked)
        try:
            async for item in agen:
                yield item
        finally:
            await agen.aclose()  # a client gone away: the engine request is aborted now, not when collected

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


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000

