"""Grounded long answers (`answer.long_grounding`, rag/answering/long.py) on the real SmolLM2 engine.

The judged sentences are fixed text (what a model might write) so each path is exercised for sure;
the pipeline tests then run what the model really writes through the same hook.
"""

from __future__ import annotations

import pytest

from rag.answer import Answer, Passage
from rag.answering.long import LongGrounding, key_facts, missing_key_facts
from rag.citations import split_sentences
from tests.rag.streaming import collect

HARBOUR = ("Port Elvra harbour has 64 moorings. Since 2019 the harbour master is Ines Kallio. A mooring costs "
           "18 euros per night, or 26 euros for boats over 12 metres.")
DRONE = "The XR-300 drone has a flight time of 55 minutes and a foldable frame."
TEMPLE = "臺北市是中華民國的首都，龍山寺建於西元1738年，是著名的古蹟。"


def _answer(question: str, texts: list[str]) -> Answer:
    ps = [Passage(marker=i + 1, chunk_id=f"given-{i + 1}", doc_id=f"given-{i + 1}", text=t, score=0.0)
          for i, t in enumerate(texts)]
    return Answer(question=question, text="", passages=ps)


def _cfg(pipeline, **answer):
    return pipeline.cfg.model_copy(update={"answer": pipeline.cfg.answer.model_copy(update=answer)})


def _ground(pipeline, text: str, texts: list[str], question: str = "Tell me about Port Elvra harbour.",
            check_min: float | None = None, step: int = 3, **answer) -> tuple[LongGrounding, str]:
    """Stream `text` through a grounding `step` characters at a time; (grounding, what it emitted)."""
    g = LongGrounding(pipeline.generator, _cfg(pipeline, **answer), _answer(question, texts), check_min)

    async def run() -> str:
        out = [await g.feed(text[i:i + step]) for i in range(0, len(text), step)]
        return "".join(out) + await g.finish()

    return g, pipeline.generator.run(run())


def _paths(g: LongGrounding) -> list[str]:
    return [j.path for j in g.judged]


def test_key_facts_are_numbers_and_names_found_without_spaces():
    """Catches a key-fact rule that needs whitespace (CJK), reads the first word as a name, or
    misses the parts of a time or a date."""
    assert key_facts("The ferry leaves Tavrin at 11:57 PM on Sunday [1].") == (
        ["11", "57"], ["tavrin", "pm", "sunday"])
    assert key_facts("龍山寺建於西元1738年 [1]。") == (["1738"], [])
    assert key_facts("他在Tavrin工作。") == ([], ["tavrin"])
    assert missing_key_facts("龍山寺建於西元1783年。", TEMPLE) == ["1783"]
    assert missing_key_facts("Ines Kallio has been harbour master since 2019.", HARBOUR) == []
    assert missing_key_facts("A 14 metre boat pays 26 euros.", HARBOUR, "How much for a 14 m boat?") == []


def test_invented_number_is_dropped_and_supported_sentence_kept_with_its_citation(pipeline):
    """Catches an invented number shown with a citation, or a supported sentence (or its marker) lost."""
    text = "Port Elvra harbour has 64 moorings [1]. It was first lit on January 19th, 1874 [1]."
    g, shown = _ground(pipeline, text, [HARBOUR, DRONE])
    assert _paths(g) == ["kept", "dropped_keyfact"]
    assert g.judged[1].missing == ["19", "1874", "january"]
    assert shown == g.text == "Port Elvra harbour has 64 moorings [1]."
    assert not g.refused


def test_nothing_supported_is_the_refusal(pipeline):
    """Catches an answer of invented sentences that still cites a passage (the issue's ferry)."""
    cfg = pipeline.cfg
    a = _answer("When does the ferry leave?", [HARBOUR, DRONE])
    a.text = ("The ferry leaves Tavrin harbour at 11:57 PM on Sunday, September 22, 2023 [1]. "
              "It can fly up to 5 times per day [2].")
    from rag.answering.long import grounding_for
    from rag.answering.stream import _finish_long
    from rag.citations import MarkerFilter

    markers = MarkerFilter({1, 2})
    markers.feed(a.text)
    g = grounding_for(pipeline.generator, cfg, a, None)
    assert g is not None  # strict is the default
    emitted = pipeline.generator.run(_feed_all(g, markers.text))
    final = _finish_long(cfg, a, markers, None, 0.0, g)
    assert final.refused and final.text == cfg.prompt.refusal == emitted
    assert final.citations == []
    assert final.grounding["counts"]["dropped_keyfact"] == 2 and final.grounding["counts"]["kept"] == 0


async def _feed_all(g: LongGrounding, text: str) -> str:
    return await g.feed(text) + await g.finish()


def test_question_name_under_the_wrong_passage_is_dropped(pipeline):
    """Catches a question's own name counted as support: SmolLM2 answered "The capital city of Quintara
    is Velmora [2]" citing the Zarnovia passage (the question names Quintara, the passage does not)."""
    quintara = "Quintara is a mountain republic. The capital city of Quintara is Ostrel."
    zarnovia = "Zarnovia is a small island nation. The capital city of Zarnovia is Velmora."
    g, shown = _ground(pipeline, "The capital city of Quintara is Velmora [2].", [quintara, zarnovia],
                       "What is the capital city of Quintara?")
    assert _paths(g) == ["dropped_keyfact"] and g.judged[0].missing == ["quintara"]
    assert shown == pipeline.cfg.prompt.refusal


def test_strict_recites_to_the_passage_that_holds_the_facts_and_check_drops(pipeline):
    """Catches a sentence shown under the wrong passage's marker, and `check` re-citing (only strict may)."""
    text = "The XR-300 drone flies for 55 minutes [1]."
    g, shown = _ground(pipeline, text, [HARBOUR, DRONE])
    assert _paths(g) == ["recited"]
    assert shown == g.text == "The XR-300 drone flies for 55 minutes [2]."
    g2, shown2 = _ground(pipeline, text, [HARBOUR, DRONE], long_grounding="check")
    assert _paths(g2) == ["dropped_keyfact"] and shown2 == pipeline.cfg.prompt.refusal


def test_uncited_sentence_strict_cites_or_drops_check_keeps(pipeline):
    """Catches strict showing an uncited claim no passage holds, or `check` dropping what it cannot check."""
    text = "Port Elvra harbour has 64 moorings. The ferry leaves at 9 PM."
    g, shown = _ground(pipeline, text, [HARBOUR, DRONE])
    assert _paths(g) == ["recited", "dropped_uncited"]
    assert shown == "Port Elvra harbour has 64 moorings [1]."
    g2, shown2 = _ground(pipeline, text, [HARBOUR, DRONE], long_grounding="check")
    assert _paths(g2) == ["uncited", "uncited"] and shown2 == text


def test_sentence_with_few_passage_words_is_unsupported(pipeline):
    """Catches a sentence kept only because its one number occurs in the passage it cites."""
    g, _ = _ground(pipeline, "Drones can deliver parcels within 55 minutes anywhere in Europe's cities [2].",
                   [HARBOUR, DRONE])
    assert _paths(g) == ["dropped_keyfact"] and g.judged[0].missing == ["europe"]  # a name the passage lacks
    g, _ = _ground(pipeline, "Drones can deliver parcels within 55 minutes anywhere in large cities [2].",
                   [HARBOUR, DRONE])
    assert _paths(g) == ["dropped_unsupported"] and g.judged[0].overlap < 0.3  # without it: too few of its words


def test_engine_check_decides_when_its_threshold_is_set(pipeline):
    """Catches the engine's answer check not being asked, or its threshold ignored: the same supported
    sentence is kept under a threshold below any log-odds and dropped under one above any."""
    text = "Ines Kallio has been the harbour master since 2019 [1]."
    q = "Who is the harbour master of Port Elvra?"
    low, _ = _ground(pipeline, text, [HARBOUR], q, check_min=-50.0)
    high, shown = _ground(pipeline, text, [HARBOUR], q, check_min=50.0)
    assert _paths(low) == ["kept"] and _paths(high) == ["dropped_unsupported"]
    assert low.judged[0].check is not None and low.judged[0].check == pytest.approx(high.judged[0].check, abs=0.05)
    assert shown == pipeline.cfg.prompt.refusal


def test_chinese_answer_keeps_the_right_year_and_drops_an_invented_one(pipeline):
    """Catches a CJK sentence split or checked as if it had spaces."""
    text = "龍山寺建於西元1738年 [1]。龍山寺在1999年重建 [1]。"
    g, shown = _ground(pipeline, text, [TEMPLE], "龍山寺建於哪一年？", step=1)
    assert _paths(g) == ["kept", "dropped_keyfact"]
    assert shown == "龍山寺建於西元1738年 [1]。"
    g, shown = _ground(pipeline, "龍山寺建於西元1738年 [1]。臺北市是中華民國的首都 [1]。", [TEMPLE], "龍山寺建於哪一年？")
    assert _paths(g) == ["kept", "kept"] and shown == "龍山寺建於西元1738年 [1]。臺北市是中華民國的首都 [1]。"  # no space added


def test_stream_never_shows_a_dropped_sentence(pipeline):
    """Catches deltas sent before their sentence is judged: a dropped sentence must never reach the reader."""
    text = "Port Elvra harbour has 64 moorings [1]. A mooring costs 99 euros [1]. The harbour master is Ines Kallio [1]."
    g = LongGrounding(pipeline.generator, pipeline.cfg, _answer("Tell me about Port Elvra.", [HARBOUR]), None)
    deltas: list[str] = []

    async def run() -> None:
        for ch in text:
            deltas.append(await g.feed(ch))
        deltas.append(await g.finish())

    pipeline.generator.run(run())
    assert all("99" not in d for d in deltas)
    assert "".join(deltas) == g.text == ("Port Elvra harbour has 64 moorings [1]. "
                                         "The harbour master is Ines Kallio [1].")


@pytest.mark.parametrize("question", ["How long does the XR-300 drone fly?", "When does the ferry leave?"])
def test_pipeline_long_answer_is_grounded_and_streams_its_final_text(pipeline, question):
    """Catches the hook not running (no grounding metadata), a kept sentence with an invented key fact,
    a citation to a passage the text does not name, or a stream that differs from the final answer."""
    texts = [HARBOUR, DRONE]
    deltas, final = collect(pipeline.stream(question, passages=texts, mode="long"))
    assert final.grounding["mode"] == "strict"
    assert "".join(deltas) == final.text
    sentences = final.grounding["sentences"]
    assert sentences and sum(final.grounding["counts"].values()) == len(sentences)
    if final.refused:
        assert final.text == pipeline.cfg.prompt.refusal and final.citations == []
        assert not any(s["path"] in ("kept", "recited", "uncited") for s in sentences)
        return
    by_marker = {p.marker: p.text for p in final.passages}
    for s in split_sentences(final.text):
        cited = [c.marker for c in final.citations if f"[{c.marker}]" in s]
        assert cited, s
        assert missing_key_facts(s, "\n".join(by_marker[m] for m in cited), question) == []


def test_off_leaves_the_answer_as_generated(pipeline):
    """Catches `off` still judging sentences, or strict's record not being what the model wrote
    (greedy decoding: both runs write the same text)."""
    question, texts = "When does the ferry leave?", [HARBOUR, DRONE]
    from rag.pipeline import Pipeline

    off = Pipeline(_cfg(pipeline, long_grounding="off"), store=pipeline.store, generator=pipeline.generator,
                   retriever=pipeline.retriever).ask(question, passages=texts, mode="long")
    strict = pipeline.ask(question, passages=texts, mode="long")
    assert off.grounding == {}
    written = [s["text"] for s in strict.grounding["sentences"]]
    assert written and " ".join(written) in " ".join(off.text.split())


def test_engine_check_threshold_comes_from_the_calibration_entry(pipeline, tmp_path):
    """Catches an engine check asked of an uncalibrated model (SmolLM2's yes/no is noise), a default
    threshold that is not the model's own (the 0.5B's check_answer sits near -1.2 on every answer,
    so 0 would drop them all), a configured threshold ignored, or `off` still grounding."""
    from rag.answering.long import check_threshold, grounding_for
    from rag.calibration import load_entry

    cfg = pipeline.cfg
    qwen = load_entry(tmp_path / "none.json", "qwen2.5-0.5b", language="en")
    model = qwen.refusal_model
    i = model.features.index("check_answer")
    assert check_threshold(cfg, qwen) == pytest.approx(model.mean[i] - model.std[i], abs=1e-3)
    assert check_threshold(cfg, qwen) < 0
    assert check_threshold(cfg, load_entry(tmp_path / "none.json", "smollm2", language="en")) is None
    assert check_threshold(_cfg(pipeline, long_check_min=0.5), None) == 0.5
    a = _answer("Who is the harbour master?", [HARBOUR])
    assert grounding_for(pipeline.generator, cfg, a, qwen).check_min == check_threshold(cfg, qwen)
    assert grounding_for(pipeline.generator, _cfg(pipeline, long_grounding="off"), a, qwen) is None
