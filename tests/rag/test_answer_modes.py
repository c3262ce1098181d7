"""Answer modes through the real pipeline (SmolLM2): short grounded spans with exact citations,
refusals that cite nothing, per-request mode over CLI/REST/OpenAI, and Chinese spans."""

from __future__ import annotations

import re

import pytest

from tests.rag.streaming import collect


def _body(text: str) -> str:
    return re.sub(r"\s*\[\d+\]", "", text).strip()


def _cfg(pipeline, **answer):
    """A copy of the session config with `answer.*` changed (the session pipeline is never mutated)."""
    cfg = pipeline.cfg.model_copy(deep=True)
    for key, value in answer.items():
        setattr(cfg.answer, key, value)
    return cfg


def _pipe(pipeline, cfg=None, record: bool = False, probe=None):
    """A pipeline of its own over the session's store, retriever and engine, whose short-answer
    policies are built from `cfg` and the calibration file as it is now (`record`: a calibration
    run's policies, see `rag.answering.policy.Policies`)."""
    from rag.answering.policy import Policies
    from rag.pipeline import Pipeline

    cfg = cfg or pipeline.cfg
    return Pipeline(cfg, store=pipeline.store, generator=pipeline.generator, retriever=pipeline.retriever,
                    policies=Policies(cfg, record=record, probe=probe))


def test_short_grounded_answer_is_a_verbatim_span_with_its_citation(pipeline):
    """Catches a short answer that is not copied from a passage, or cites one that lacks it."""
    a = pipeline.ask("What is the capital city of Zarnovia?", mode="short")
    assert a.mode == "short" and a.grounded and not a.refused
    span = _body(a.text)
    assert span and len(span.split()) <= 12
    cited = [c.marker for c in a.citations]
    holding = [p.marker for p in a.passages if span in " ".join(p.text.split())]
    assert holding and cited == holding[:1], a  # the first passage that holds the span, only it
    assert all(f"[{m}]" in a.text for m in cited)
    assert not any(c.inferred for c in a.citations)
    assert "margin" in a.signals


def test_short_answer_cites_one_passage_when_several_hold_the_span(pipeline):
    """Catches a short answer citing every passage that merely contains its words: the second
    passage repeats the first one's sentence, so the span is in both; only the first (the one the
    answerability checks read) is cited."""
    texts = ["The capital city of Zarnovia is Velmora.",
             "The capital city of Zarnovia is Velmora. Velmora hosts a film festival in spring."]
    a = pipeline.ask("What is the capital city of Zarnovia?", passages=texts, mode="short")
    assert not a.refused, a
    span = _body(a.text)
    holding = [p.marker for p in a.passages if span in p.text]
    assert len(holding) == 2, a
    assert [c.marker for c in a.citations] == holding[:1]
    assert a.text.count("[") == 1


def test_short_answer_streams_exactly_its_final_text(pipeline):
    """Catches a final text (with markers appended) that differs from what was streamed."""
    deltas, final = collect(pipeline.stream("How long does the XR-300 drone fly?", mode="short"))
    assert "".join(deltas) == final.text


def test_forced_refusal_cites_nothing(pipeline):
    """Catches a refusal that keeps citations, or a margin threshold that is ignored."""
    cfg = _cfg(pipeline, refuse_margin=-1e9)  # every question goes down the no-answer path
    a = _pipe(pipeline, cfg).ask("What is the capital city of Zarnovia?", mode="short")
    assert a.refused and a.text == cfg.prompt.refusal and a.citations == []


def test_long_mode_refusal_has_no_citations(pipeline):
    """Catches overlap attribution citing a passage for 'I don't know'."""
    texts = ["The capital city of Zarnovia is Velmora."]
    a = pipeline.ask("Who painted the Mona Lisa?", passages=texts, mode="long", max_tokens=24)
    if a.refused:
        assert a.citations == []


def test_short_mode_chinese_span_keeps_script(pipeline):
    """Catches CJK spans that cannot be decoded or cited without word boundaries."""
    texts = ["臺北市是中華民國的首都，龍山寺建於西元1738年，是著名的古蹟。", "The XR-300 drone has a foldable frame."]
    a = pipeline.ask("龍山寺建於哪一年？", passages=texts, mode="short")
    if not a.refused:
        span = _body(a.text)
        assert span and span in " ".join(texts[0].split()) + " " + texts[1]
        assert a.citations and all(c.doc_id.startswith("given-") for c in a.citations)


def test_bad_mode_is_an_error(pipeline):
    with pytest.raises(ValueError, match="mode"):
        pipeline.ask("What is the capital city of Zarnovia?", mode="medium")


def test_rest_and_openai_take_the_mode(server):
    """Catches the per-request mode being dropped by the HTTP layers."""
    import httpx

    base, _ = server
    r = httpx.post(f"{base}/v1/ask", json={"question": "What is the capital city of Quintara?", "mode": "short"},
                   timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "short" and body["grounded"] is True
    r = httpx.post(f"{base}/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "What is the capital city of Quintara?"}],
        "rag": {"mode": "short"}})
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["message"]["content"]
    assert len(_body(content).split()) <= 12
    r = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "x"}], "rag": {"mode": "tiny"}})
    assert r.status_code in (400, 422)


def _write_refusal_model(pipeline, threshold: float) -> None:
    from rag.calibration import calibration_path, save_thresholds

    cfg = pipeline.cfg
    model = {"features": ["check_passage"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0,
             "threshold": threshold}
    save_thresholds(calibration_path(cfg.storage_path, cfg.answer.calibration), cfg.generator.engine.model,
                    {"refusal_model": model})


def test_answerability_checks_feed_the_calibrated_refusal(pipeline):
    """Catches the checks not being run (no `check_*` signals), a refusal model that is loaded but
    not applied, and a refusal decided by it that still cites passages. Score = -check_passage:
    a threshold of -1e9 refuses everything, +1e9 nothing."""
    cfg = pipeline.cfg
    path = cfg.storage_path / cfg.answer.calibration
    try:
        _write_refusal_model(pipeline, 1e9)
        a = _pipe(pipeline).ask("What is the capital city of Zarnovia?", mode="short")
        assert not a.refused and a.citations
        assert {"check_passage", "check_answer", "p_unanswerable"} <= set(a.signals)
        assert a.timings_ms["check"] > 0
        # the check asks about the passage that holds the span: an answerable question scores yes
        assert a.signals["check_passage"] > -5
        _write_refusal_model(pipeline, -1e9)
        b = _pipe(pipeline).ask("What is the capital city of Zarnovia?", mode="short")
        assert b.refused and b.text == cfg.prompt.refusal and b.citations == []
        assert b.signals["check_passage"] == pytest.approx(a.signals["check_passage"], abs=1e-3)
        # without checks the model cannot decide: span thresholds apply
        c = _pipe(pipeline, _cfg(pipeline, verify=False)).ask("What is the capital city of Zarnovia?", mode="short")
        assert not c.refused and "check_passage" not in c.signals
    finally:
        path.unlink(missing_ok=True)


def test_checks_run_only_when_something_reads_them(pipeline):
    """Catches two extra prompts per short answer for a generator with no refusal model (a hot-path
    waste), and calibration losing the check signals it fits on."""
    from rag.answering.policy import Policies

    question = "What is the capital city of Zarnovia?"
    policy = Policies(pipeline.cfg).for_question(question)
    assert policy.refusal_model is None and not policy.runs_checks  # SmolLM2 has no shipped or local calibration
    a = _pipe(pipeline).ask(question, mode="short")
    assert "check_passage" not in a.signals and "check" not in a.timings_ms
    b = _pipe(pipeline, record=True).ask(question, mode="short")  # a calibration run's policies
    assert {"check_passage", "check_answer"} <= set(b.signals) and "p_unanswerable" not in b.signals


def test_refusal_model_is_chosen_by_the_question_language(pipeline):
    """Catches the pipeline applying an English-only calibration to a Chinese question (or caching
    one language's decision for all): the refusal model, and with it the span path's forced margin,
    must follow the question's language, and each language's policy is built once."""
    from rag.answering.policy import Policies
    from rag.calibration import calibration_path, save_thresholds

    cfg = pipeline.cfg
    path = calibration_path(cfg.storage_path, cfg.answer.calibration)
    model = {"features": ["check_passage"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0,
             "threshold": 0.0}
    try:
        save_thresholds(path, cfg.generator.engine.model, {"refusal_model": model, "languages": ["en"]})
        policies = Policies(cfg)
        en = policies.for_question("What is the capital city of Zarnovia?")
        zh = policies.for_question("札爾諾維亞的首都是哪裡？")
        assert en.refusal_model is not None and zh.refusal_model is None
        assert en.decoder_margin == float("inf")
        assert zh.decoder_margin is None  # no calibration for Chinese here
        assert policies.for_question("What is the capital city of Quintara?") is en  # built once per language
    finally:
        path.unlink(missing_ok=True)


def test_probe_stored_with_the_calibration_scores_the_passage_check_state(pipeline):
    """Catches a probe that is loaded but never scored, scored on the wrong layer or the wrong
    passage, or a refusal model over `check_probe` that cannot see it. The probe in the entry reads
    layer 10; its score must equal the probe applied to the passage check's own hidden state."""
    from rag.answerability import AnswerabilityProbe, passage_check
    from rag.calibration import calibration_path, save_thresholds

    cfg = pipeline.cfg
    gen = pipeline.generator
    width = gen.engine.engine.model.config.hidden_size
    probe = AnswerabilityProbe(10, [((i % 7) - 3) / 50 for i in range(width)], 0.25)
    model = {"features": ["check_probe"], "mean": [0.0], "std": [1.0], "coef": [1.0], "bias": 0.0,
             "threshold": 1e9}
    path = calibration_path(cfg.storage_path, cfg.answer.calibration)
    question = "What is the capital city of Zarnovia?"
    try:
        save_thresholds(path, cfg.generator.engine.model, {"refusal_model": model, "probe": probe.to_dict()})
        a = _pipe(pipeline).ask(question, mode="short")
        assert not a.refused and "check_probe" in a.signals and "p_unanswerable" in a.signals
        cited = next(p for p in a.passages if p.marker == a.citations[0].marker)
        from rag.prompt import passage_body

        _, hidden = gen.run(passage_check(gen, question, passage_body(cfg.prompt, cited), 10))
        assert a.signals["check_probe"] == pytest.approx(probe.score(hidden), abs=1e-3)
        _, final = gen.run(passage_check(gen, question, passage_body(cfg.prompt, cited), -1))
        assert abs(probe.score(final) - probe.score(hidden)) > 1e-3  # the layer matters
        b = _pipe(pipeline, record=True).ask(question, mode="short")  # calibration without --probe: no check_probe
        assert "check_probe" not in b.signals and "p_unanswerable" not in b.signals
    finally:
        path.unlink(missing_ok=True)


def test_probe_rejects_a_hidden_state_of_another_size():
    """Catches a probe trained for one model silently scoring another model's states."""
    from rag.answerability import AnswerabilityProbe

    probe = AnswerabilityProbe.from_dict(AnswerabilityProbe(-1, [1.0, 2.0, 3.0], 0.5).to_dict())
    assert probe.score([1.0, 1.0, 1.0]) == pytest.approx(6.5)
    with pytest.raises(ValueError, match="hidden size of 3"):
        probe.score([1.0] * 4)


def test_per_passage_candidates_follow_the_selector_and_cite_their_passage(pipeline):
    """Catches per-passage decoding that is not confined to its passage, a selector that is loaded
    but not applied, a citation of the first passage holding the words instead of the passage the
    chosen span came from, and per-passage work when nothing asked for it. The selector reads only
    `passage_rank`: coef +1 must pick the last passage's span, -1 the first's."""
    from rag.calibration import calibration_path, save_thresholds

    cfg = pipeline.cfg
    path = calibration_path(cfg.storage_path, cfg.answer.calibration)
    texts = ["The capital city of Zarnovia is Velmora.",
             "An old atlas says the capital city of Zarnovia is Kestrin.",
             "The flag of Zarnovia is green and white."]
    question = "What is the capital city of Zarnovia?"
    never = {"features": ["check_passage"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0,
             "threshold": 1e9}

    def entry(coef: float) -> dict:
        return {"refusal_model": never, "span_selector": {"features": ["passage_rank"], "mean": [0.0],
                                                          "std": [1.0], "coef": [coef], "bias": 0.0}}
    try:
        save_thresholds(path, cfg.generator.engine.model, {"refusal_model": never})
        plain = _pipe(pipeline).ask(question, passages=texts, mode="short")
        assert plain.candidates == []  # no selector calibrated: the single decode
        for coef, want in ((1.0, 3), (-1.0, 1)):
            save_thresholds(path, cfg.generator.engine.model, entry(coef))
            a = _pipe(pipeline).ask(question, passages=texts, mode="short")
            assert not a.refused, a
            assert [c["passage"] for c in a.candidates] == [0, 1, 2]
            for c in a.candidates:
                # the selector reads the rank only, so the others stop after their first token
                # (`decode_best_first`); the chosen one is decoded whole
                if c.get("complete", True):
                    assert c["span"] and " ".join(c["span"].split()) in texts[c["passage"]], c
                assert {"check_passage", "passage_rank"} <= set(c["signals"])
                # the answer check only for the chosen span: the selector does not read it
                assert ("check_answer" in c["signals"]) == (c["passage"] == want - 1), c
            assert [c.marker for c in a.citations] == [want], a
            assert "check_answer" in a.signals and "p_unanswerable" in a.signals
            assert a.candidates[want - 1].get("complete", True) and _body(a.text) == a.candidates[want - 1]["span"]
            assert a.signals["passage_rank"] == want - 1
        forced = _cfg(pipeline, per_passage=True)  # forced on without a selector: the single decode's choice
        save_thresholds(path, cfg.generator.engine.model, {"refusal_model": never})
        b = _pipe(pipeline, forced).ask(question, passages=texts, mode="short")
        best = min(b.candidates, key=lambda c: (c["signals"]["margin"], c["passage"]))
        assert _body(b.text) == best["span"] and [c.marker for c in b.citations] == [best["passage"] + 1]
        # calibration: every candidate's answer check, for refits
        r = _pipe(pipeline, forced, record=True).ask(question, passages=texts, mode="short")
        assert all("check_answer" in c["signals"] for c in r.candidates)
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("reads", ["own", "all"])
def test_each_passage_span_is_decoded_from_the_prompt_configured(pipeline, monkeypatch, reads):
    """`answer.per_passage_prompt`: with `own` each passage's span decode reads a prompt holding
    that passage alone (the others cannot pull its span), with `all` one prompt holding every
    passage; either way the answer cites the passage its span came from by that passage's marker
    in the answer (not the [1] of an own prompt). Bugs caught: own prompts built but not sent,
    another passage leaking into one, a passage with no decode of its own, and the citation taken
    from the own prompt's numbering."""
    from rag.answerability import CHECK_SYSTEM
    from rag.calibration import calibration_path, save_thresholds
    from tests.eval.qa_case import never_refusing_entry

    cfg = _cfg(pipeline, per_passage_prompt=reads)
    path = calibration_path(cfg.storage_path, cfg.answer.calibration)
    texts = ["The capital city of Zarnovia is Velmora.",
             "An old atlas says the capital city of Zarnovia is Kestrin.",
             "The flag of Zarnovia is green and white."]
    gen = pipeline.generator
    seen: list[str] = []
    agenerate, astream = gen.agenerate, gen.astream

    def note(ids) -> None:
        text = gen.tokenizer.decode(ids)
        if CHECK_SYSTEM not in text:  # a span decode, not an answerability check
            seen.append(text)

    async def noted_agenerate(prompt, params, *a, **kw):
        note(prompt)
        return await agenerate(prompt, params, *a, **kw)

    def noted_astream(prompt, params, *a, **kw):
        note(prompt)
        return astream(prompt, params, *a, **kw)

    entry = {**never_refusing_entry(True), "span_selector": {"features": ["passage_rank"], "mean": [0.0],
                                                            "std": [1.0], "coef": [1.0], "bias": 0.0}}
    try:
        save_thresholds(path, cfg.generator.engine.model, entry)
        monkeypatch.setattr(gen, "agenerate", noted_agenerate)
        monkeypatch.setattr(gen, "astream", noted_astream)
        a = _pipe(pipeline, cfg).ask("What is the capital city of Zarnovia?", passages=texts, mode="short")
    finally:
        path.unlink(missing_ok=True)
    assert [c["passage"] for c in a.candidates] == [0, 1, 2]
    held = [[t for t in texts if t in prompt] for prompt in seen]
    if reads == "own":
        assert all(len(h) == 1 for h in held), held
        assert {h[0] for h in held} == set(texts), held
        assert all(re.findall(r"^\[(\d+)\]", prompt, re.M) == ["1"] for prompt in seen), seen
    else:
        assert held and all(h == texts for h in held), held
        assert all(re.findall(r"^\[(\d+)\]", prompt, re.M) == ["1", "2", "3"] for prompt in seen), seen
    # the selector picks the last passage: its span, cited by its marker in the answer
    assert not a.refused and [c.marker for c in a.citations] == [3], a
    assert _body(a.text) in texts[2] and _body(a.text) == a.candidates[2]["span"]


def test_short_answers_read_the_calibrated_number_of_top_passages(pipeline):
    """`answer.short_k`: a grounded short answer reads the top passages its calibration entry was
    recorded with (the entry's `short_k`), one candidate and one check each; a configured value
    beats the entry; long mode and a caller's own passages keep all of them. Bugs caught: the
    entry's number ignored (five checks where three were calibrated: slower, and answers the
    selector was not fitted on), the lower-ranked passages kept instead of the top ones, long mode
    or given passages cut."""
    from rag.calibration import calibration_path, save_thresholds
    from tests.eval.qa_case import never_refusing_entry

    cfg = pipeline.cfg
    path = calibration_path(cfg.storage_path, cfg.answer.calibration)
    question = "What is the capital city of Zarnovia?"
    try:
        full = _pipe(pipeline).ask(question, mode="long")
        assert len(full.passages) == cfg.answer.context_k == 3
        save_thresholds(path, cfg.generator.engine.model, {**never_refusing_entry(True), "short_k": 2})
        a = _pipe(pipeline).ask(question, mode="short")
        assert [p.chunk_id for p in a.passages] == [p.chunk_id for p in full.passages[:2]]
        assert [c["passage"] for c in a.candidates] == [0, 1]
        assert a.citations and a.citations[0].marker in (1, 2)
        one = _pipe(pipeline, _cfg(pipeline, short_k=1)).ask(question, mode="short")
        assert [p.chunk_id for p in one.passages] == [full.passages[0].chunk_id] and len(one.candidates) == 1
        assert len(_pipe(pipeline).ask(question, mode="long").passages) == 3
        texts = ["The capital city of Zarnovia is Velmora.", "Zarnovia has a green flag.", "Ostrel is a port."]
        assert len(_pipe(pipeline).ask(question, passages=texts, mode="short").candidates) == 3
    finally:
        path.unlink(missing_ok=True)
