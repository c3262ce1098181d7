"""Prompt layout (cache-friendly prefix, dropping passages to fit) and citation checking."""

from __future__ import annotations

import pytest

from rag import prompt as P
from rag.answer import Passage
from rag.citations import MarkerFilter, attribute, locate_spans, resolve_markers, to_citation


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from inference.model_loader import resolve_model_dir

    return AutoTokenizer.from_pretrained(resolve_model_dir("smollm2"))


def passages(n: int, words: int = 60) -> list[Passage]:
    return [Passage(marker=i + 1, chunk_id=f"c{i}", doc_id=f"d{i}", text=" ".join([f"fact{i}"] * words),
                    score=1.0 / (i + 1), title=f"T{i}", source=f"/docs/{i}.md") for i in range(n)]


def test_system_prompt_is_a_byte_stable_prefix(tokenizer):
    cfg = P.PromptConfig()
    head = P.system_prefix(cfg, tokenizer)
    a = P.build(cfg, tokenizer, "first question?", passages(2), 4096)
    b = P.build(cfg, tokenizer, "another one entirely", passages(3), 4096)
    assert a.text.startswith(head) and b.text.startswith(head)
    n = a.system_tokens
    assert a.token_ids[:n] == b.token_ids[:n]  # same tokens: the prefix cache can serve them
    assert a.text.index("[1] T0") < a.text.index("Question: first question?")


def test_lowest_ranked_passages_are_dropped_to_fit(tokenizer):
    cfg = P.PromptConfig()
    full = P.build(cfg, tokenizer, "q?", passages(5), 100_000)
    budget = len(full.token_ids) - 100
    fit = P.build(cfg, tokenizer, "q?", passages(5), budget)
    assert len(fit.token_ids) <= budget
    assert [p.chunk_id for p in fit.passages] == ["c0", "c1", "c2", "c3"]
    assert [p.chunk_id for p in fit.dropped] == ["c4"]
    assert cfg.system_text() in fit.text  # never truncated


def test_prompt_too_long_is_a_clear_error(tokenizer):
    with pytest.raises(P.PromptTooLong, match="max_model_len"):
        P.build(P.PromptConfig(), tokenizer, "why " * 500, passages(2), 300)


def test_resolve_markers_drops_dangling_ones():
    ps = passages(2)
    text, cites, removed = resolve_markers("A [1]. B [3]. C [2, 7].", ps)
    assert text == "A [1]. B. C [2]." and removed == 2
    assert [c.marker for c in cites] == [1, 2] and cites[0].doc_id == "d0"


def test_marker_filter_streams_exactly_the_checked_text():
    f = MarkerFilter({1, 2})
    deltas = [" Paris is", " big [", "1]", " and [3", "] [x] [2,9].", " ["]
    out = "".join(f.feed(d) for d in deltas) + f.flush()
    assert out == f.text == "Paris is big [1] and  [x] [2]. ["
    assert f.used == [1, 2] and f.removed == 2


def test_attribution_by_overlap_english_and_chinese():
    ps = [Passage(1, "a", "da", "Velmora is the capital of Zarnovia.", 1.0),
          Passage(2, "b", "db", "台北是台灣的首都。", 0.5)]
    _, cites = attribute("The capital of Zarnovia is Velmora.", ps)
    assert [c.marker for c in cites] == [1] and cites[0].inferred
    _, cites = attribute("台灣的首都是台北。", ps)
    assert [c.marker for c in cites] == [2]
    _, cites = attribute("Something unrelated entirely.", ps)
    assert cites == []


ZARNOVIA = ("# Zarnovia\n\nZarnovia is a small island nation. The capital city of Zarnovia is Velmora. "
            "Velmora has a population of about 80,000 people and a busy harbour.")


def _spans(text: str, ps: list[Passage], markers: list[int], inferred: bool = False) -> list[str | None]:
    by = {p.marker: p for p in ps}
    cites = [to_citation(by[m], inferred) for m in markers]
    locate_spans(text, cites, ps)
    return [by[c.marker].text[c.span[0]:c.span[1]] if c.span else None for c in cites]


def test_citation_span_is_the_copied_answer_or_the_sentence_it_rests_on():
    """Bugs caught: a span left unset, offsets into the marker-laden answer instead of the passage,
    the first sentence of a passage returned whatever the claim, a number ignored when matching."""
    ps = [Passage(1, "a", "da", ZARNOVIA, 1.0),
          Passage(2, "b", "db", "Quintara is a mountain republic. Its capital Ostrel has 12 glass bridges.", 0.5)]
    assert _spans("Velmora [1]", ps, [1]) == ["Velmora"]  # a grounded short answer: the span itself
    assert _spans("velmora [1]", ps, [1]) == ["Velmora"]  # case-insensitive, offsets into the passage
    # a short answer ending a sentence gets its marker after the full stop: still its claim
    assert _spans("Velmora has a population of about 80,000 people. [1]", ps, [1]) == [
        "Velmora has a population of about 80,000 people"]
    assert _spans("The capital city of Zarnovia is Velmora. [1]", ps, [1]) == [
        "The capital city of Zarnovia is Velmora."]  # with its full stop where the passage has one
    long = "Zarnovia's capital is Velmora [1]. It is an island. Ostrel has 12 bridges [2]."
    assert _spans(long, ps, [1, 2]) == ["The capital city of Zarnovia is Velmora.",
                                        "Its capital Ostrel has 12 glass bridges."]
    assert _spans("80,000 people [1].", ps, [1]) == ["80,000 people"]  # verbatim beats sentence overlap
    assert _spans("It has 80 000 inhabitants [1].", ps, [1]) == [
        "Velmora has a population of about 80,000 people and a busy harbour."]  # the numbers decide


def test_citation_span_whole_words_and_none_when_nothing_is_shared():
    ps = [Passage(1, "a", "da", "We met yesterday near the harbour.", 1.0)]
    assert _spans("Yes [1]", ps, [1]) == [None]  # not the "yes" inside "yesterday"
    assert _spans("Completely unrelated [1].", ps, [1]) == [None]
    # an inferred citation has no marker in the text: the whole answer is its claim
    assert _spans("They met near the harbour.", ps, [1], inferred=True) == ["We met yesterday near the harbour."]
    zh = [Passage(1, "a", "da", "台北是台灣的首都。人口約二百五十萬。", 1.0)]
    assert _spans("台北 [1]", zh, [1]) == ["台北"]  # CJK spans need no word boundary


def test_a_decoded_refusal_keeps_the_passages_it_read_as_closest():
    """Bug caught: a refusal returned with no passage to show beside it (the page's "closest
    passages"), or an answered question carrying closest passages as if it had been refused."""
    import time

    from rag.answer import Answer
    from rag.answering.stream import _finish_long
    from rag.config import RagConfig

    cfg = RagConfig()
    ps = [Passage(1, "a", "da", ZARNOVIA, 1.0)]
    for text, refused in [(cfg.prompt.refusal, True), ("Velmora is the capital [1].", False)]:
        markers = MarkerFilter({1})
        markers.feed(text)
        markers.flush()
        out = _finish_long(cfg, Answer(question="q", text="", passages=list(ps)), markers, None, time.perf_counter())
        assert out.refused is refused
        assert out.closest_passages == (ps if refused else [])
        assert [c.span is not None for c in out.citations] == ([] if refused else [True])
