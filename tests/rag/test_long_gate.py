"""Long answers held to the short answer's decision (rag/answering/gate.py) on the real SmolLM2 engine.

SmolLM2 has no calibration, so each test writes a local entry for it (a refusal model over
`check_passage`: threshold -1e9 refuses everything, +1e9 nothing, 0 refuses where the engine's own
passage check says no) and removes it afterwards; the judged sentences of the grounding tests are
fixed text so each path is exercised for sure.
"""

from __future__ import annotations

import pytest

from rag.answer import Answer, Passage
from rag.answering.gate import Gate, states_answer
from rag.answering.long import LongGrounding
from rag.answering.policy import Decision
from tests.rag.streaming import collect

HARBOUR = ("Port Elvra harbour has 64 moorings. Since 2019 the harbour master is Ines Kallio. A mooring costs "
           "18 euros per night, or 26 euros for boats over 12 metres.")
DRONE = "The XR-300 drone has a flight time of 55 minutes and a foldable frame."


def _refusal_model(pipeline, threshold: float, languages: list[str] | None = None) -> None:
    from rag.calibration import calibration_path, save_thresholds

    cfg = pipeline.cfg
    model = {"features": ["check_passage"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0,
             "threshold": threshold}
    save_thresholds(calibration_path(cfg.storage_path, cfg.answer.calibration), cfg.generator.engine.model,
                    {"refusal_model": model, **({"languages": languages} if languages else {})})


@pytest.fixture
def calibrated(pipeline):
    """Write a refusal model for SmolLM2 with `calibrated(threshold)`; removed after the test."""
    cfg = pipeline.cfg
    path = cfg.storage_path / cfg.answer.calibration
    yield lambda threshold, languages=None: _refusal_model(pipeline, threshold, languages)
    path.unlink(missing_ok=True)


def _pipe(pipeline):
    """A pipeline over the session's store, retriever and engine whose policies read the calibration
    file as it is now."""
    from rag.answering.policy import Policies
    from rag.pipeline import Pipeline

    return Pipeline(pipeline.cfg, store=pipeline.store, generator=pipeline.generator, retriever=pipeline.retriever,
                    policies=Policies(pipeline.cfg))


def _stream(pipe, question: str, texts: list[str]) -> tuple[str, Answer]:
    deltas, final = collect(pipe.stream(question, passages=texts, mode="long"))
    return "".join(deltas), final


def test_states_answer_needs_every_word_and_number_of_the_span():
    """Catches a sentence counted as answering when it states part of the span, another number, or
    the span only inside a longer number."""
    assert states_answer("The XR-300 drone flies for 55 minutes [2].", "55 minutes")
    assert states_answer("Boats over 12 metres pay 26 euros per night [1].", "26 euros")
    assert not states_answer("A mooring costs 18 euros per night [1].", "26 euros")
    assert not states_answer("The harbour master is Kallio [1].", "Ines Kallio")
    assert not states_answer("It has 155 moorings [1].", "55")
    assert states_answer("龍山寺建於西元1738年 [1]。", "1738年")
    # a span of function words only must occur verbatim
    assert states_answer("It is one of the oldest [1].", "of the") and not states_answer("The hut [1].", "of the")


def _ground(pipeline, text: str, gate: Gate, question: str) -> tuple[LongGrounding, str]:
    ps = [Passage(marker=i + 1, chunk_id=f"given-{i + 1}", doc_id=f"given-{i + 1}", text=t, score=0.0)
          for i, t in enumerate([HARBOUR, DRONE])]
    g = LongGrounding(pipeline.generator, pipeline.cfg, Answer(question=question, text="", passages=ps), None, gate)

    async def run() -> str:
        out = [await g.feed(text[i:i + 4]) for i in range(0, len(text), 4)]
        return "".join(out) + await g.finish()

    return g, pipeline.generator.run(run())


def test_gated_grounding_keeps_only_sentences_that_state_the_answer(pipeline):
    """Catches a supported neighbouring fact kept beside the answer, or the answer sentence lost."""
    gate = Gate(Decision("55 minutes", 1, False, {}), 2)
    text = "The XR-300 drone has a flight time of 55 minutes [2]. It has a foldable frame [2]."
    g, shown = _ground(pipeline, text, gate, "How long does the XR-300 drone fly?")
    assert [j.path for j in g.judged] == ["kept", "dropped_off_question"]
    assert shown == g.text == "The XR-300 drone has a flight time of 55 minutes [2]."
    assert g.metadata()["gate"] == {"refused": False, "answer": "55 minutes", "marker": 2}


def test_gated_grounding_with_only_neighbouring_facts_gives_the_span_not_the_fact(pipeline):
    """Catches the issue's failure: every sentence is a supported fact about something else (the
    moorings for a question about the drone) and one is still shown with its citation; and a
    refusal where the policy answered."""
    gate = Gate(Decision("55 minutes", 1, False, {}), 2)
    g, shown = _ground(pipeline, "Port Elvra harbour has 64 moorings [1].", gate, "How long does the XR-300 fly?")
    assert [j.path for j in g.judged] == ["dropped_off_question", "short_answer"]
    assert shown == g.text == "55 minutes [2]" and not g.refused


def test_long_answer_is_the_policy_refusal_and_generates_nothing(pipeline, calibrated):
    """Catches a long answer that ignores the calibrated refusal (generates and cites a neighbouring
    fact) or decodes the long answer anyway: the refusal model refuses everything here."""
    calibrated(-1e9)
    shown, a = _stream(_pipe(pipeline), "How long does the XR-300 drone fly?", [HARBOUR, DRONE])
    assert a.refused and a.text == shown == pipeline.cfg.prompt.refusal and a.citations == []
    assert a.grounding["gate"] == {"refused": True} and a.grounding["sentences"] == []
    assert a.refusal_calibration["by"] == "refusal_model" and "p_unanswerable" in a.signals
    assert "gate" in a.timings_ms and "prefill" not in a.timings_ms  # the long answer was never decoded
    assert a.closest_passages  # a refusal shows what came closest


def test_long_answer_past_the_gate_states_the_short_answer(pipeline, calibrated):
    """Catches a gate whose answer is not the short answer's, or sentences shown that do not state it:
    with a refusal model that never refuses, the long answer's every shown sentence holds the span the
    short mode gives for the same question and passages, and the stream is the final text."""
    calibrated(1e9)
    q, texts = "How long does the XR-300 drone fly?", [HARBOUR, DRONE]
    pipe = _pipe(pipeline)
    short = pipe.ask(q, passages=texts, mode="short")
    shown, a = _stream(pipe, q, texts)
    assert not short.refused and not a.refused
    gate = a.grounding["gate"]
    assert gate["refused"] is False and gate["answer"] == short.text.rsplit(" [", 1)[0]
    assert shown == a.text and a.citations
    kept = [s for s in a.grounding["sentences"] if s["path"] in ("kept", "recited", "uncited", "short_answer")]
    assert kept and all(states_answer(s.get("cited_as", s["text"]), gate["answer"]) for s in kept)


@pytest.mark.parametrize("question", ["How long does the XR-300 drone fly?", "When does the ferry leave?"])
def test_long_and_short_refuse_the_same_questions(pipeline, calibrated, question):
    """Catches a second refusal rule: with a real decision (refuse where SmolLM2's passage check says
    no), the long answer refuses exactly when the short answer does."""
    calibrated(0.0)
    pipe = _pipe(pipeline)
    short = pipe.ask(question, passages=[HARBOUR, DRONE], mode="short")
    _, long_ = _stream(pipe, question, [HARBOUR, DRONE])
    assert long_.refused == short.refused
    assert long_.signals.get("check_passage") == pytest.approx(short.signals.get("check_passage"), abs=1e-3)


def test_uncalibrated_language_is_not_gated(pipeline, calibrated):
    """Catches an English-only calibration holding a Chinese question's long answer to it (the
    decoder's path decides there, and its long answer keeps the sentence checks only)."""
    calibrated(-1e9, ["en"])
    _, a = _stream(_pipe(pipeline), "XR-300 無人機能飛多久？", [HARBOUR, DRONE])
    assert "gate" not in a.grounding and "gate" not in a.timings_ms


def test_the_gate_reads_the_passages_a_short_answer_reads(pipeline):
    """Catches a long answer's gate deciding over passages its short answer never reads: with an
    entry recorded over the top 2 (`short_k`), a retrieved question's gate decodes and checks one
    candidate per top passage only, while the long answer keeps every retrieved passage; a caller's
    own passages are all read, in both modes, unless given as a ranking (`ranked=True`, what
    `model: auto`'s pipeline probe asks so that it times a retrieved question's work): then read as
    retrieved ones. Bugs caught: the flag lost on its way to the gate or the short prompt (the probe
    then times five checks where a real question runs three)."""
    from rag.calibration import calibration_path, save_thresholds
    from tests.eval.qa_case import never_refusing_entry

    cfg = pipeline.cfg
    path = calibration_path(cfg.storage_path, cfg.answer.calibration)
    try:
        save_thresholds(path, cfg.generator.engine.model, {**never_refusing_entry(True), "short_k": 2})
        pipe = _pipe(pipeline)
        _, a = collect(pipe.stream("What is the capital city of Zarnovia?", mode="long"))
        assert a.grounding["gate"]["refused"] is False
        assert len(a.passages) == cfg.answer.context_k == 3
        assert [c["passage"] for c in a.candidates] == [0, 1]
        texts = [HARBOUR, DRONE, DRONE + " It is red."]
        _, given = _stream(pipe, "How long does the XR-300 drone fly?", texts)
        assert [c["passage"] for c in given.candidates] == [0, 1, 2]
        as_ranked = pipe.ask("How long does the XR-300 drone fly?", passages=texts, mode="long", ranked=True)
        assert [c["passage"] for c in as_ranked.candidates] == [0, 1] and len(as_ranked.passages) == 3
        short = pipe.ask("How long does the XR-300 drone fly?", passages=texts, mode="short", ranked=True)
        assert len(short.passages) == 2 and [c["passage"] for c in short.candidates] == [0, 1]
    finally:
        path.unlink(missing_ok=True)


def _sentence_model(threshold: float) -> dict:
    """A sentence refusal model over the answer check (+1e9 never refuses, -1e9 always does)."""
    return {"features": ["check_passage", "check_answer"], "mean": [0.0, 0.0], "std": [1.0, 1.0],
            "coef": [-1.0, -1.0], "bias": 0.0, "threshold": threshold}


def _sentence_policy(pipeline, threshold: float):
    from rag.answering.policy import ShortAnswerPolicy
    from rag.calibration import CalibrationEntry
    from tests.eval.qa_case import never_refusing_entry

    entry = CalibrationEntry.from_dict({**never_refusing_entry(False),
                                        "sentence_refusal_model": _sentence_model(threshold)})
    return ShortAnswerPolicy(entry, pipeline.cfg.answer, pipeline.cfg.prompt.refusal, language="en")


@pytest.mark.parametrize("threshold", [1e9, -1e9])
def test_sentence_gate_judges_each_grounded_sentence(pipeline, threshold):
    """Catches an explanatory answer's sentence shown without the sentence model's judgement (never
    refusing: kept with its P(unanswerable); always refusing: dropped, and the answer is the refusal
    citing nothing) or judged against a passage it does not cite."""
    from rag.answering.gate import SentenceGate

    policy = _sentence_policy(pipeline, threshold)
    q = "How does the XR-300 drone fold for transport?"
    judge = SentenceGate(pipeline.generator, policy, q)
    ps = [Passage(marker=i + 1, chunk_id=f"given-{i + 1}", doc_id=f"given-{i + 1}", text=t, score=0.0)
          for i, t in enumerate([HARBOUR, DRONE])]
    g = LongGrounding(pipeline.generator, pipeline.cfg, Answer(question=q, text="", passages=ps), None, None,
                      sentence_gate=judge)
    text = "The XR-300 drone has a foldable frame [2]."

    async def run() -> str:
        return await g.feed(text) + await g.finish()

    shown = pipeline.generator.run(run())
    [j] = g.judged
    assert j.check is not None and j.p_unanswerable is not None  # the engine's check read passage 2
    assert set(judge._passage) == {2}
    if threshold > 0:
        assert j.path == "kept" and shown == g.text == text and not g.refused
        assert g.metadata()["gate"] == {"kind": "sentences", "refused": False, "judged": 1, "dropped": 0}
    else:
        assert j.path == "dropped_off_question" and g.refused and shown == g.text == pipeline.cfg.prompt.refusal
        assert g.metadata()["gate"] == {"kind": "sentences", "refused": True, "judged": 1, "dropped": 1}


def test_explanatory_questions_skip_the_span_gate(pipeline):
    """Catches an explanatory question held to a span (the decoder copies some phrase and the
    sentences that explain are dropped) or a factoid one taken off it: with an entry whose span
    refusal model refuses everything and whose sentence model refuses nothing, "how does ..." is
    judged by sentence (no span decoded), "how long ..." is refused by the span gate."""
    from rag.calibration import calibration_path, save_thresholds

    cfg = pipeline.cfg
    path = calibration_path(cfg.storage_path, cfg.answer.calibration)
    always = {"features": ["margin"], "mean": [0.0], "std": [1.0], "coef": [0.0], "bias": 0.0, "threshold": -1e9}
    try:
        save_thresholds(path, cfg.generator.engine.model, {"refusal_model": always, "languages": ["en"],
                                                           "sentence_refusal_model": _sentence_model(1e9)})
        pipe = _pipe(pipeline)
        _, a = _stream(pipe, "How does the XR-300 drone fold for transport?", [HARBOUR, DRONE])
        assert a.grounding["gate"]["kind"] == "sentences" and "gate" not in a.timings_ms
        assert a.refusal_calibration["by"] == "sentence_refusal_model"
        _, f = _stream(pipe, "How long does the XR-300 drone fly?", [HARBOUR, DRONE])
        assert f.refused and f.grounding["gate"] == {"refused": True}
    finally:
        path.unlink(missing_ok=True)


def test_sentence_gate_record_mode_keeps_every_sentence_and_its_signals(pipeline):
    """Catches `answer.sentence_gate: record` dropping sentences (the recorded answers would then
    lack the sentences a cut is chosen on) or recording none of their signals."""
    from rag.calibration import calibration_path, save_thresholds

    cfg = pipeline.cfg
    path = calibration_path(cfg.storage_path, cfg.answer.calibration)
    never = {"features": ["margin"], "mean": [0.0], "std": [1.0], "coef": [0.0], "bias": 0.0, "threshold": 1e9}
    old = cfg.answer.sentence_gate
    try:
        save_thresholds(path, cfg.generator.engine.model, {"refusal_model": never, "languages": ["en"],
                                                           "sentence_refusal_model": _sentence_model(-1e9)})
        cfg.answer.sentence_gate = "record"
        _, a = _stream(_pipe(pipeline), "How does the XR-300 drone fold for transport?", [HARBOUR, DRONE])
        gate = a.grounding["gate"]
        assert gate["kind"] == "sentences" and gate["dropped"] == 0 and gate["judged"] >= 1  # greedy SmolLM2: one
        judged = [s for s in a.grounding["sentences"] if "p_unanswerable" in s]
        assert len(judged) == gate["judged"]
        assert all(s["path"] != "dropped_off_question" and "check_answer" in s["signals"] for s in judged)
    finally:
        cfg.answer.sentence_gate = old
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("long_passages", ["gate", "all"])
def test_a_gated_long_prompt_holds_the_passages_its_gate_read(pipeline, monkeypatch, long_passages):
    """Catches the long prompt computing passages its gate never read (`answer.long_passages: gate`,
    the default): with an entry over the top 2 and three passages given as a ranking, the long prompt
    holds the first two only and its citation-marker constraint allows [1]-[2] (a constraint still
    sized for three lets the model cite a passage it was not shown); the answer still lists all three
    as retrieved. `all` keeps every passage in the prompt (the option ignored: three are not there)."""
    from inference.structured.citation_markers import CitationMarkerProcessor
    from rag.answering.policy import Policies
    from rag.calibration import calibration_path, save_thresholds
    from rag.pipeline import Pipeline
    from tests.eval.qa_case import never_refusing_entry

    base = pipeline.cfg
    cfg = base.model_copy(update={"answer": base.answer.model_copy(update={"long_passages": long_passages})})
    gen = pipeline.generator
    seen: list[tuple[str, int]] = []
    astream = gen.astream

    def spy(prompt, params, *args, **kwargs):
        marks = [p for p in params.logits_processors if isinstance(p, CitationMarkerProcessor)]
        if marks:  # the long answer's request (the gate's span decodes carry no marker constraint)
            seen.append((gen.tokenizer.decode(prompt), max(marks[0].digit_ids.values())))
        return astream(prompt, params, *args, **kwargs)

    monkeypatch.setattr(gen, "astream", spy)
    path = calibration_path(base.storage_path, base.answer.calibration)
    try:
        save_thresholds(path, base.generator.engine.model, {**never_refusing_entry(True), "short_k": 2})
        pipe = Pipeline(cfg, store=pipeline.store, generator=gen, retriever=pipeline.retriever, policies=Policies(cfg))
        third = "The Kestrel ferry leaves Port Elvra at 07:40 on weekdays."
        a = pipe.ask("How long does the XR-300 drone fly?", passages=[HARBOUR, DRONE, third], mode="long",
                     ranked=True)
    finally:
        path.unlink(missing_ok=True)
    assert a.grounding["gate"]["refused"] is False and a.grounding["gate"]["read"] == 2
    assert len(a.passages) == 3 and len(seen) == 1
    prompt, max_marker = seen[0]
    assert "55 minutes" in prompt and "64 moorings" in prompt
    assert ("Kestrel" in prompt, max_marker) == ((False, 2) if long_passages == "gate" else (True, 3))
    assert all(c.marker <= max_marker for c in a.citations)
