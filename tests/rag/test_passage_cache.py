"""The passage KV cache wired into the rag pipeline: spans of the built prompt reach the engine,
check prompts carry theirs, and `rag index --warm-kv` fills a disk cache the answer path reads.

Real SmolLM2 engines (float32, no quantisation, as the session pipeline) on the session corpus;
each engine here is small (num_blocks) and built once for the module.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest

from rag.answer import Passage
from rag.config import RagConfig
from rag.pipeline import Pipeline

TWO_ISLANDS = "What is the capital city of Zarnovia?"
OVERLAP = "Which capital city is famous for its glass bridges, Velmora or Ostrel?"


def engine_cfg(pipeline, **passage_cache) -> RagConfig:
    data = pipeline.cfg.to_dict()
    eng = data["generator"]["engine"]
    eng.update(num_blocks=160, max_num_seqs=8)
    eng["passage_cache"] = {**eng.get("passage_cache", {}), **passage_cache}
    return RagConfig.model_validate(data)


def make(pipeline, cfg: RagConfig) -> Pipeline:
    from rag.generation import build_generator

    return Pipeline(cfg, store=pipeline.store, generator=build_generator(cfg.generator), retriever=pipeline.retriever)


def delta(gen, before: dict, key: str) -> int:
    return gen.stats().get(key, 0) - before.get(key, 0)


def reused(gen, before: dict) -> int:
    """Passages not prefilled again: found in the passage cache, or inside a prefix-cache hit (a
    miss computed in a prompt's own prefill leaves exact blocks for a prompt with the same text up
    to the passage, e.g. the next check of that passage)."""
    return delta(gen, before, "passage_cache_hits") + delta(gen, before, "passage_prefix_hits")


@pytest.fixture(scope="module")
def warmed_dir(pipeline, corpus_dir, tmp_path_factory):
    """`rag index --warm-kv` run twice through the real CLI on the session corpus (its own store,
    the same chunking): the disk cache and both runs' reports."""
    disk = tmp_path_factory.mktemp("passage_kv")
    cfg = engine_cfg(pipeline)
    eng = cfg.generator.engine
    common = ["--set", f"storage.path={tmp_path_factory.mktemp('warm_store')}", "--set", "retrieval.mode=bm25"]
    for key in ("model", "dtype", "quantization", "max_model_len", "num_blocks", "max_num_seqs"):
        common += ["--set", f"generator.engine.{key}={getattr(eng, key)}"]
    common += ["--set", "generator.engine.passage_cache.enabled=true",
               "--set", f"generator.engine.passage_cache.disk_path={disk}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def index() -> dict:
        r = subprocess.run([sys.executable, "-m", "rag", "index", str(corpus_dir), "--no-progress", "--json",
                            "--warm-kv", *common], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)["warm_kv"]

    first = index()
    files = {p.name: p.stat().st_mtime_ns for p in disk.glob("*.pt")}
    second = index()
    return disk, first, files, second


def test_warm_kv_writes_one_file_per_chunk_and_resumes(warmed_dir, pipeline):
    """Bugs caught: warming that stores nothing on disk (files kept in memory only), one file per
    template or per run instead of per chunk, and a second run that recomputes (not resumable)."""
    disk, first, files, second = warmed_dir
    chunks = sum(1 for _ in pipeline.store.iter_chunks("default"))
    assert first["chunks"] == chunks == len(files) == first["warmed"], first
    assert first["skipped"] == 0 and first["on_disk"] == 0
    assert second["warmed"] == 0 and second["on_disk"] == chunks, second
    assert {p.name: p.stat().st_mtime_ns for p in disk.glob("*.pt")} == files  # nothing rewritten


def test_warm_kv_refuses_without_disk_path(tmp_path):
    """Bug caught: warming into the memory of a process about to exit (silently useless)."""
    r = subprocess.run([sys.executable, "-m", "rag", "index", str(tmp_path), "--no-progress", "--warm-kv",
                        "--set", f"storage.path={tmp_path / 's'}",
                        "--set", "generator.engine.passage_cache.enabled=true"],
                       capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert r.returncode == 2 and "disk_path" in r.stderr and "exits" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def cold(pipeline):
    """Cache off: the reference answers."""
    pipe = make(pipeline, engine_cfg(pipeline, enabled=False))
    yield pipe
    pipe.generator.close()


@pytest.fixture(scope="module")
def cached(pipeline):
    """Passage cache on (default recompute ratio), in memory only: passages cached on first use."""
    pipe = make(pipeline, engine_cfg(pipeline, enabled=True))
    yield pipe
    pipe.generator.close()


def test_overlapping_questions_reuse_passages(cached):
    """Bug caught: the pipeline building the prompt but never handing the engine its passage spans
    (or spans the engine cannot key the same way twice): the second question would prefill every
    passage again."""
    gen = cached.generator
    first = cached.ask(TWO_ISLANDS)
    ids1 = {p.chunk_id for p in first.passages}
    before = gen.stats()
    second = cached.ask(OVERLAP)
    shared = ids1 & {p.chunk_id for p in second.passages}
    assert shared, "the two questions must retrieve a common passage"
    assert delta(gen, before, "passage_cache_hits") >= 1
    assert delta(gen, before, "passage_cache_tokens_reused") > 0
    assert second.text.strip()


def test_short_answers_reuse_the_answer_prompts_passages(cached):
    """Bug caught: spans passed on the long path only (the short answer's grounded decode is the
    other branch of `decode_answer`): short mode, `rag eval qa`'s mode, would never reuse."""
    gen = cached.generator
    cached.ask(TWO_ISLANDS, mode="short")
    before = gen.stats()
    a = cached.ask(OVERLAP, mode="short")
    assert a.mode == "short" and a.grounded
    assert delta(gen, before, "passage_cache_hits") >= 1


def test_check_prompts_reuse_their_passage(cached, pipeline):
    """Bug caught: the short path's per-passage checks sent without spans, so every question's check
    of a popular passage prefilled it again."""
    from rag.answerability import passage_check
    from rag.prompt import passage_body

    gen = cached.generator
    body = passage_body(cached.cfg.prompt, cached.ask(TWO_ISLANDS).passages[0])
    gen.run(passage_check(gen, "Where is the harbour?", body))
    before = gen.stats()
    gen.run(passage_check(gen, "How many people live there?", body))
    assert reused(gen, before) == 1
    assert delta(gen, before, "passage_cache_tokens_reused") + delta(gen, before, "passage_prefix_tokens") > 20


def test_full_recompute_equals_cache_off_and_reads_the_warmed_disk(pipeline, cold, warmed_dir):
    """With recompute_ratio 1.0 the passage path must give the cache-off answer exactly. Bugs
    caught: the pipeline changing the prompt's tokens to carry spans (e.g. re-tokenised piece by
    piece), and `--warm-kv` storing passages under a key the answer prompt never looks up (the
    first question of a fresh engine must hit the warmed files)."""
    disk = warmed_dir[0]
    pipe = make(pipeline, engine_cfg(pipeline, enabled=True, recompute_ratio=1.0, disk_path=str(disk)))
    try:
        gen = pipe.generator
        for q in (TWO_ISLANDS, OVERLAP):
            before = gen.stats()
            got, want = pipe.ask(q), cold.ask(q)
            assert got.text == want.text and got.text.strip()
            assert [p.chunk_id for p in got.passages] == [p.chunk_id for p in want.passages]
            assert delta(gen, before, "passage_cache_hits") >= 1
        assert gen.stats()["passage_cache_disk_hits"] >= 1
        assert gen.stats()["passage_cache_misses"] == 0  # every passage came from the warm-up
    finally:
        pipe.generator.close()
        gc.collect()  # the recorders' closures hold the engine in a cycle: free its pools now


def test_cached_text_is_position_free_and_chat_follow_ups_carry_none(pipeline):
    """Bugs caught: the renumbered marker inside the span (the same passage at [1] and [3] would be
    two keys), and spans in a chat follow-up, whose key would include the whole conversation (an
    entry no other prompt can use, computed on every turn)."""
    from transformers import AutoTokenizer

    from inference.kv_reuse import locate_spans
    from inference.model_loader import resolve_model_dir
    from rag import prompt as prompt_mod

    tok = AutoTokenizer.from_pretrained(resolve_model_dir("smollm2", weights=False))
    cfg = pipeline.cfg.prompt
    ps = [Passage(marker=i + 1, chunk_id=f"c{i}", doc_id=f"d{i}", text=t, score=0.0, title=f"T{i}", source="s")
          for i, t in enumerate(["Velmora has a busy harbour and about 80,000 people.",
                                 "The XR-300 drone has a foldable frame.", "Oak tables come with six chairs."])]
    toks = {}
    for order in (ps, ps[::-1]):
        built = prompt_mod.build(cfg, tok, "Where?", order, 1000)
        spans = locate_spans(tok, built.token_ids, built.cached_texts(cfg), skip_first=True)  # as the pipeline
        assert len(spans) == 3
        for p, (s, e) in zip(built.passages, spans, strict=True):
            toks.setdefault(p.chunk_id, set()).add(tuple(built.token_ids[s:e]))
            span = tok.decode(built.token_ids[s:e])  # the passage after its first token (`skip_first`)
            assert p.text.endswith(span) and len(p.text) - len(span) <= 8, (p.text, span)
    assert all(len(v) == 1 for v in toks.values()), "a passage's span tokens depend on its position"
    turn = type("T", (), {"question": "Where?", "answer": "Velmora [1].", "passages": ps[:1]})()
    follow = prompt_mod.build(cfg, tok, "And the drone?", ps[1:], 1000, history=[turn])
    assert follow.history_turns == 1 and follow.cached_texts(cfg) == []


def _calibrated(pipeline, tmp_path, selector: bool, check_kv: str = "exact", cache: bool = True) -> Pipeline:
    """Passage cache on (ratio 0.15, as the quality sweep runs it) with a local calibration entry for
    SmolLM2 that never refuses: a refusal model makes the short path ask the answerability checks
    (none is shipped for SmolLM2), and a span selector makes it decode one span per passage, the
    path `rag eval qa` takes with the shipped Qwen entries."""
    from tests.eval.qa_case import never_refusing_entry

    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({pipeline.cfg.generator.engine.model: never_refusing_entry(selector)}))
    data = engine_cfg(pipeline, enabled=cache, recompute_ratio=0.15, max_gb=0.1).to_dict()
    data["answer"]["calibration"] = str(cal)
    data["answer"]["check_kv"] = check_kv
    return make(pipeline, RagConfig.model_validate(data))


def _record_hits(gen) -> list[tuple[str, bool, int]]:
    """(kind, carried spans, passage-cache hits while it ran) of every request the pipeline makes:
    kind is `answer` (the answer prompt or a per-passage span decode), `passage_check` or
    `answer_check`. The short path never runs two kinds at once (the decodes finish before the
    checks, which run together, then the answer checks), so a kind's hits are its own; within a
    kind, requests that ran together share theirs."""
    from rag.answerability import CHECK_SYSTEM

    calls: list[tuple[str, bool, int]] = []
    tok = gen.tokenizer
    agenerate, astream = gen.agenerate, gen.astream

    def kind(ids) -> str:
        text = tok.decode(ids)
        return "answer" if CHECK_SYSTEM not in text else "answer_check" if "Proposed answer:" in text \
            else "passage_check"

    def hits() -> int:
        st = gen.stats()
        return st["passage_cache_hits"] + st["passage_prefix_hits"]

    async def recorded_agenerate(prompt, params, *a, **kw):
        before = hits()
        out = await agenerate(prompt, params, *a, **kw)
        calls.append((kind(prompt), kw.get("passage_spans") is not None, hits() - before))
        return out

    async def recorded_astream(prompt, params, *a, **kw):
        before = hits()
        inner = astream(prompt, params, *a, **kw)
        try:
            async for out in inner:
                yield out
        finally:
            await inner.aclose()
            calls.append((kind(prompt), kw.get("passage_spans") is not None, hits() - before))

    gen.agenerate, gen.astream = recorded_agenerate, recorded_astream
    return calls


def _by_kind(calls) -> dict[str, tuple[int, int, int]]:
    """kind -> (requests, requests with spans, hits)."""
    out: dict[str, tuple[int, int, int]] = {}
    for k, spans, h in calls:
        n, s, t = out.get(k, (0, 0, 0))
        out[k] = (n + 1, s + spans, t + h)
    return out


@pytest.mark.parametrize("selector", [True, False], ids=["per_passage", "single_decode"])
def test_second_question_reuses_passages_in_its_checks_and_its_answer(pipeline, tmp_path, selector):
    """What `rag eval qa --set generator.engine.passage_cache.enabled=true` runs with a calibrated
    generator: the answer prompt (one decode, or one per passage) and the answerability checks. On
    the second question both must hit the passage cache: the answer prompt with the passage the
    first question also retrieved, the checks with the entries the answer prompt wrote (they name
    its anchor). Bugs caught: the checks (or the per-passage decodes) sent without spans, spans the
    engine keys differently per question, and a check template that puts question-dependent text
    before the passage (every check a new key)."""
    pipe = _calibrated(pipeline, tmp_path, selector)
    try:
        gen = pipe.generator
        first = pipe.ask(TWO_ISLANDS, mode="short")
        calls = _record_hits(gen)
        second = pipe.ask(OVERLAP, mode="short")
        assert {p.chunk_id for p in first.passages} & {p.chunk_id for p in second.passages}
        assert "check_passage" in second.signals and "check_answer" in second.signals  # the checks ran
        kinds = _by_kind(calls)
        assert set(kinds) == {"answer", "passage_check", "answer_check"}, kinds
        assert all(n == s for n, s, _ in kinds.values()), kinds  # every request carried its spans
        assert kinds["answer"][2] >= 1, kinds
        if selector:  # a passage both questions retrieved: its check entry is the first question's
            assert len(second.candidates) == len(second.passages) and kinds["answer"][0] == len(second.passages)
            assert kinds["passage_check"][2] >= 1, kinds
        assert kinds["passage_check"][2] + kinds["answer_check"][2] >= 1, kinds
    finally:
        pipe.generator.close()
        gc.collect()  # the recorders' closures hold the engine in a cycle: free its pools now


@pytest.mark.parametrize("check_kv", ["prompt", "exact", "shared"])
@pytest.mark.parametrize("selector", [True, False], ids=["per_passage", "single_decode"])
def test_an_answers_checks_read_the_passages_its_prompt_stored(pipeline, tmp_path, selector, check_kv):
    """A cold cache, one question: the answer prompt computes its passages (no hit). With
    `answer.check_kv: prompt` every answerability check of that answer must then read its passage
    from the entries the prompt stored (a hit per check request: only the check's question and
    instruction are new tokens); with `exact` (the default) none may (each check computes its
    passage under its own template, a miss stored under that key). Bugs caught: the checks sent
    without the answer prompt's anchor, an anchor that is not the key the prompt stored under (e.g.
    one that includes the first passage's title), spans that key a passage with its first token
    (which \"Passage: \" folds a space into, so the check's key would differ from the prompt's), and
    `exact` checks reading the prompt's less exact K/V. With `shared` and one decode per passage the
    order turns round: every passage check runs first and computes its passage (the only misses),
    and the answer prompt reads them all (bugs caught: the decode before the checks, the checks
    keyed under their own template so the prompt misses); with one decode `shared` is `exact`."""
    pipe = _calibrated(pipeline, tmp_path, selector, check_kv)
    try:
        gen = pipe.generator
        calls = _record_hits(gen)
        a = pipe.ask(TWO_ISLANDS, mode="short")
        assert "check_passage" in a.signals and "check_answer" in a.signals  # the checks ran
        kinds = _by_kind(calls)  # (requests, with spans); hits counted over the whole answer below
        assert kinds["passage_check"][0] >= 1 and all(n == s for n, s, _ in kinds.values()), kinds
        st = gen.stats()
        if check_kv == "prompt":
            # the prompt's passages are the only misses, and each passage check reads its passage from
            # what the prompt stored (the per-passage decodes after the first and the answer check are
            # prefix-cache hits, not passage-store reads)
            assert st["passage_cache_misses"] == len(a.passages), st
            assert st["passage_cache_hits"] >= kinds["passage_check"][0], (st, kinds)
        elif check_kv == "shared" and selector:
            n = len(a.passages)
            assert [k for k, _, _ in calls[:n]] == ["passage_check"] * n, calls  # every passage, first
            assert st["passage_cache_misses"] == n, st
            assert kinds["passage_check"][2] == 0 and kinds["answer"][2] >= n, kinds
        else:
            assert st["passage_cache_hits"] == 0, st
            assert st["passage_cache_misses"] >= len(a.passages) + 1, st  # the checks' own entries
    finally:
        pipe.generator.close()
        gc.collect()  # the recorders' closures hold the engine in a cycle: free its pools now


def test_shared_checks_score_what_exact_checks_score(pipeline, tmp_path):
    """`answer.check_kv: shared` exists to keep the checks exact while the answer prompt reuses their
    K/V: each passage check's log-odds must be those of the `exact` run (only the K rotation between
    the two keys' positions may move them), while `prompt` checks, which read the answer prompt's
    K/V, differ. Bugs caught: shared checks that read an entry the answer prompt stored (e.g. the
    decode run first), or an entry placed at the wrong position when read back."""
    from rag.answering.signals import CHECK_PASSAGE

    odds = {}
    for check_kv in ("exact", "shared", "prompt"):
        pipe = _calibrated(pipeline, tmp_path, True, check_kv)
        try:
            a = pipe.ask(TWO_ISLANDS, mode="short")
            odds[check_kv] = {c["passage"]: c["signals"][CHECK_PASSAGE] for c in a.candidates
                              if CHECK_PASSAGE in c["signals"]}
        finally:
            pipe.generator.close()
            gc.collect()
    both = set(odds["exact"]) & set(odds["shared"])
    assert both, odds
    assert all(abs(odds["shared"][i] - odds["exact"][i]) < 0.02 for i in both), odds
    assert any(abs(odds["prompt"][i] - odds["exact"][i]) > 0.02 for i in set(odds["prompt"]) & both), odds


@pytest.mark.parametrize("check_kv", ["shared", "exact"])
def test_best_first_decode_gives_what_full_decodes_choose(pipeline, tmp_path, monkeypatch, check_kv):
    """With a selector that reads only first-token features the checks run first (sharing their K/V
    or not), and the candidates stop after their first token except the best (`decode_best_first`);
    the answer must be the one decoding every candidate to its end chooses, on the same inputs, for
    fewer generated tokens.
    Bugs caught: a ranking that differs from `choose` (another span given), stopped candidates
    treated as live, nothing stopped, or a request left running after its stream was dropped."""
    from rag.answering.policy import ShortAnswerPolicy

    runs = {}
    for lazy in (True, False):  # a fresh engine each: the same float path to every first token (the
        # test corpus gives near-tied margins, which a prefix-cache hit's rounding can flip)
        if not lazy:
            monkeypatch.setattr(ShortAnswerPolicy, "chooses_at_first_token", property(lambda self: False))
        pipe = _calibrated(pipeline, tmp_path, True, check_kv, cache=check_kv == "shared")
        try:
            gen = pipe.generator
            a = pipe.ask(TWO_ISLANDS, mode="short")
            st = gen.stats()
            runs[lazy] = (a.text, [c.marker for c in a.citations], a.candidates, st["generation_tokens"])
            assert st["running"] == 0 and st["waiting"] == 0  # nothing left behind
        finally:
            pipe.generator.close()
            gc.collect()
    (text, cited, cands, tokens), (full_text, full_cited, full_cands, full_tokens) = runs[True], runs[False]
    assert len(cands) >= 2 and any(c.get("complete") is False for c in cands), cands
    assert all("complete" not in c for c in full_cands), full_cands
    assert (text, cited) == (full_text, full_cited), (runs[True][:3], runs[False][:3])
    assert tokens < full_tokens, (tokens, full_tokens)


def test_long_answer_sentence_checks_read_the_long_prompts_passages(pipeline):
    """Long mode with engine sentence checks (`answer.long_check_min` set) and `answer.check_kv:
    prompt`: a check of a sentence
    citing one passage must read that passage's K/V from what the long prompt stored (a hit), not
    prefill it again. Bug caught: the long grounding's checks sent without the long prompt's
    anchor (each judged sentence then re-reads its passage in full)."""
    data = engine_cfg(pipeline, enabled=True, max_gb=0.1).to_dict()
    data["answer"]["long_check_min"] = -100.0  # every sentence is checked, none dropped by the check
    data["answer"]["check_kv"] = "prompt"
    pipe = make(pipeline, RagConfig.model_validate(data))
    try:
        gen = pipe.generator
        calls = _record_hits(gen)
        a = pipe.ask(TWO_ISLANDS, mode="long")
        kinds = _by_kind(calls)
        st = gen.stats()
        assert kinds.get("answer_check", (0, 0, 0))[0] >= 1, (kinds, a.text)  # a sentence was checked
        assert st["passage_cache_misses"] == len(a.passages), st  # only the long prompt's own
        assert st["passage_cache_hits"] >= 1, (st, kinds)
    finally:
        pipe.generator.close()
        gc.collect()  # the recorders' closures hold the engine in a cycle: free its pools now


@pytest.mark.parametrize("check_kv", ["exact", "prompt", "shared"])
def test_short_mode_warming_covers_the_check_template_only_for_exact_checks(pipeline, tmp_path, check_kv):
    """`rag index --warm-kv` in short mode: with `answer.check_kv: exact` the checks key passages under
    their own template, so it must warm that template too (one file per chunk each); with `prompt`
    they read the answer prompt's entry, so a second file per chunk would be waste; with `shared`
    one file per chunk, the check's K/V under the answer prompt's key, which a short answer then
    reads without a miss. Bugs caught: the check template never warmed (every check of a warmed
    collection prefills its passage), warmed for nothing, or (shared) warmed under a key the
    answer does not look up."""
    from rag.generation import build_generator
    from rag.warm_kv import warm

    data = engine_cfg(pipeline, enabled=True, max_gb=0.1, disk_path=str(tmp_path / "kv")).to_dict()
    data["answer"].update(mode="short", check_kv=check_kv)
    cfg = RagConfig.model_validate(data)
    gen = build_generator(cfg.generator)
    try:
        report = warm(cfg, pipeline.store, gen, "default")
    finally:
        gen.close()
        gc.collect()
    per_chunk = 2 if check_kv == "exact" else 1
    assert len(report.templates) == per_chunk, report.to_dict()
    assert report.skipped == 0 and report.warmed + report.duplicates == per_chunk * report.chunks, report.to_dict()
    assert len(list((tmp_path / "kv").glob("*.pt"))) == report.warmed
    if check_kv == "shared":  # what a short answer reads from that disk: every passage, no miss
        data["answer"]["calibration"] = str(tmp_path / "none.json")  # no entry: one decode, no checks
        pipe = make(pipeline, RagConfig.model_validate(data))
        try:
            a = pipe.ask(TWO_ISLANDS, mode="short")
            st = pipe.generator.stats()
            assert st["passage_cache_misses"] == 0 and st["passage_cache_disk_hits"] >= len(a.passages), st
        finally:
            pipe.generator.close()
            gc.collect()


@pytest.mark.parametrize(("check_kv", "long_kv"), [("exact", "gate"), ("shared", "gate"), ("exact", "own")])
def test_long_prompt_reads_the_passages_its_gate_computed(pipeline, tmp_path, check_kv, long_kv):
    """Long mode held to the short-answer gate, cold cache: the gate's prompts (its per-passage span
    decodes, or with `shared` its checks) compute the top passages under the short prompt's anchor.
    With `answer.long_passage_kv: gate` (the default) the long prompt's prefill must read them from
    there (a passage-cache hit per passage the gate read, before its first token) instead of
    computing them again, and store nothing (what it computes amid other passages, kept under the
    gate's key, would replace the exact entries a later question's gate reads: on the own corpus two
    later gates changed their answer so); with `own` it computes and stores its own under its own key.
    Bugs caught: the long prompt keeping its own anchor (every passage prefilled twice per answer, the
    1.5B's long answer ~4 s slower), a gate that does not say where it left its passages, the long
    prompt writing entries under the gate's key, and `own` not honoured."""
    pipe = _calibrated(pipeline, tmp_path, True, check_kv)
    data = pipe.cfg.to_dict()
    data["answer"]["long_passage_kv"] = long_kv
    pipe.generator.close()
    pipe = make(pipeline, RagConfig.model_validate(data))
    try:
        gen = pipe.generator
        astream = gen.astream
        first_hits: list[int] = []  # per streamed request: passage-cache hits by its first output
        stored: list[int] = []  # ... and entries it added by then

        def hits() -> int:
            return gen.stats()["passage_cache_hits"]

        def entries() -> int:
            return gen.stats()["passage_cache_entries"]

        async def recorded_astream(prompt, params, *a, **kw):
            before, held, seen = hits(), entries(), False
            inner = astream(prompt, params, *a, **kw)
            try:
                async for out in inner:
                    if not seen:
                        seen = True
                        first_hits.append(hits() - before)
                        stored.append(entries() - held)
                    yield out
            finally:
                await inner.aclose()

        gen.astream = recorded_astream
        a = pipe.ask(TWO_ISLANDS, mode="long")
        gate = a.grounding.get("gate", {})
        assert gate and not gate["refused"], a.grounding  # held to an answering gate
        read = len(a.candidates)  # the passages the gate decoded a span from (its top short_k)
        assert read >= 1 and len(first_hits) == read + 1, (first_hits, read)  # the decodes, then the long prompt
        long_hits = first_hits[-1]
        if long_kv == "gate":
            assert long_hits == read and stored[-1] == 0, (first_hits, stored, read)
        else:
            assert long_hits == 0 and stored[-1] == len(a.passages), (first_hits, stored)
    finally:
        pipe.generator.close()
        gc.collect()  # the recorder's closure holds the engine in a cycle: free its pools now


@pytest.mark.parametrize("check_kv", ["exact", "shared"])
def test_long_mode_warming_covers_what_the_gate_reads(pipeline, tmp_path, check_kv):
    """`rag index --warm-kv` in long mode with a calibrated generator: a long answer first runs the
    short-answer gate, and its prompt then reads the passages under the gate's key, so warming must
    cover the gate's templates as short mode warms them (with `exact` the short answer and the check
    template, with `shared` the check under the short answer's key), after the long template (which a
    long answer to an explanatory question still reads). A long answer on that disk cache then reads
    every passage its gate decodes from disk. Bugs caught: only the long template warmed (a warmed
    collection's long answers prefill every passage in their gate, cold, as if never warmed), the
    gate's entries warmed under a key the gate does not look up, and uncalibrated configs warming a
    gate that never runs."""
    from rag.generation import build_generator
    from rag.warm_kv import gate_reads, resolved_check_kv, templates, warm
    from tests.eval.qa_case import never_refusing_entry

    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({pipeline.cfg.generator.engine.model: never_refusing_entry(True)}))
    data = engine_cfg(pipeline, enabled=True, max_gb=0.1, disk_path=str(tmp_path / "kv")).to_dict()
    data["answer"].update(mode="long", check_kv=check_kv, calibration=str(tmp_path / "none.json"))
    plain = RagConfig.model_validate(data)  # no entry: no gate, the long template alone
    data["answer"]["calibration"] = str(cal)
    cfg = RagConfig.model_validate(data)
    gen = build_generator(cfg.generator)
    try:
        assert not gate_reads(plain) and templates(plain, resolved_check_kv(plain)) == ["answer (long)"]
        report = warm(cfg, pipeline.store, gen, "default")
    finally:
        gen.close()
        gc.collect()
    want = ["answer (long)", "answer (short) of the gate", "answerability check"] if check_kv == "exact" else \
        ["answer (long)", "answerability check, keyed for the answer (short)"]
    assert report.templates == want, report.to_dict()
    assert report.skipped == 0 and report.warmed + report.duplicates == len(want) * report.chunks, report.to_dict()
    pipe = make(pipeline, cfg)
    try:
        a = pipe.ask(TWO_ISLANDS, mode="long")
        st = pipe.generator.stats()
        assert a.grounding.get("gate") and not a.grounding["gate"]["refused"], a.grounding
        # every passage K/V the answer read (the gate's span decodes and checks, the long prompt under
        # the gate's key) came from disk: nothing computed
        assert st["passage_cache_misses"] == 0 and st["passage_cache_disk_hits"] >= len(a.candidates) >= 1, st
    finally:
        pipe.generator.close()
        gc.collect()
