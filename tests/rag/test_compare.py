"""Comparison questions naming two options (`rag/answering/compare.py`): the rule that recognises
them, the values read from each option's short answer, the decision in code, and the pipeline path
with the real engine writing the one-option question."""

from __future__ import annotations

import pytest

from rag.answering.compare import (
    Comparison,
    DateValue,
    NumberValue,
    parse,
    parse_date,
    parse_number,
    winner,
)


@pytest.mark.parametrize(("question", "options", "kind", "best"), [
    ("Who was born first, Arthur Conan Doyle or Penelope Lively?", ("Arthur Conan Doyle", "Penelope Lively"),
     "date", "min"),
    ("who is younger Ulrich Walter or  Luca Parmitano?", ("Ulrich Walter", "Luca Parmitano"), "date", "max"),
    ("Which film was released more recently, Make Mine Music or Old Dogs?", ("Make Mine Music", "Old Dogs"),
     "date", "max"),  # "more recently" orders dates, not counts
    ("Which Karakoram mountain is higher: Distaghil Sar or The Crown", ("Distaghil Sar", "The Crown"),
     "number", "max"),
    ("Which genus has fewer species, Crowea or Dracula?", ("Crowea", "Dracula"), "number", "min"),
])
def test_comparisons_are_recognised_with_their_options_and_direction(question, options, kind, best) -> None:
    """Bug caught: an option cut short or taken with the stem ("first, Arthur"), "younger" read as
    the earlier date, or "more recently" read as a larger count."""
    c = parse(question, "en")
    assert c is not None and (c.options, c.kind, c.best) == (options, kind, best)


@pytest.mark.parametrize(("question", "language"), [
    ("Which author is an economist, Czesław Miłosz or Bhabananda Deka?", "en"),  # no date or number
    ("Was the first king Henry or John?", "en"),  # not a which/who/what question
    ("Which came first, the chicken, the egg or the nest or the hen?", "en"),  # two "or"
    ("What year was the harbour founded?", "en"),  # no options
    ("Who was born first, Anna or Bo?", "sv"),  # the rule reads English only
])
def test_other_questions_are_not_comparisons(question: str, language: str) -> None:
    """Bug caught: an ordinary question sent down the two-answer path (and answered with an option)."""
    assert parse(question, language) is None


def test_the_second_question_is_the_first_with_the_other_name() -> None:
    """Bug caught: the two options asked about different properties, or a written question that
    does not name the first option used anyway."""
    c = parse("Which lighthouse was lit first, the Orm Light or Vessel Point?", "en")
    assert c is not None
    assert c.sub_questions("When was The Orm Light first lit?\nextra") == [
        "When was The Orm Light first lit?", "When was Vessel Point first lit?"]
    assert c.sub_questions("When was it first lit?") is None
    assert c.sub_questions("When was the Orm Light first lit") is None  # not a question


@pytest.mark.parametrize(("text", "lo", "hi"), [
    ("November 29, 1574", (1574, 11, 29), (1574, 11, 29)),
    ("26 July 1165", (1165, 7, 26), (1165, 7, 26)),
    ("March 2004", (2004, 3, 1), (2004, 3, 31)),
    ("2003", (2003, 1, 1), (2003, 12, 31)),
    ("the 1970s", (1970, 1, 1), (1979, 12, 31)),
    ("384 BC", (-384, 1, 1), (-384, 12, 31)),
    ("the 19th century", (1801, 1, 1), (1900, 12, 31)),
])
def test_dates_are_the_days_they_may_mean(text: str, lo: tuple, hi: tuple) -> None:
    """Bug caught: a year read as its first day (so "1946" would count as before "March 1946"), a
    decade as one year, or a BC year as AD."""
    assert parse_date(text) == DateValue(lo, hi)


@pytest.mark.parametrize("text", ["June 25 to July 1", "in spring", "42"])
def test_no_year_is_no_date(text: str) -> None:
    """Bug caught: a day of the month or a small count taken as a year."""
    assert parse_date(text) is None


@pytest.mark.parametrize(("text", "value"), [
    ("7885m", NumberValue(7885.0, "m")),
    ("7205 metres", NumberValue(7205.0, "m")),
    ("1,000", NumberValue(1000.0)),
    ("seven", NumberValue(7.0)),
    ("2.5 million people", NumberValue(2.5e6)),  # what is counted is no measure
    ("1913", NumberValue(1913.0, "", True)),
    ("the XR-200 flies 42 minutes", NumberValue(42.0, "min")),  # a model code is no value
    ("six decades", NumberValue(6.0, "decade")),
])
def test_numbers_with_separators_words_scales_and_units(text: str, value: NumberValue) -> None:
    """Bug caught: "1,000" read as 1, "seven" not read, "2.5 million" as 2.5, or metres and "m" as
    different units."""
    assert parse_number(text) == value


def test_a_span_without_its_measure_takes_it_from_its_passage() -> None:
    """Bug caught: "8035" (the span stopped before "m") compared as a bare count with "7205 m", or a
    word that is not a measure ("as of 2017") taken as one."""
    assert parse_number("8035", "Gasherbrum II is 8035 m high.") == NumberValue(8035.0, "m")
    assert parse_number("34,000", "It covers 34,000 hectares.") == NumberValue(34000.0, "ha")
    assert parse_number("24 million", "24 million as of 2017") == NumberValue(24e6)
    assert parse_number("8035", "Its height, 8035, is disputed.") == NumberValue(8035.0)


def test_the_winner_is_decided_only_when_the_values_can_decide() -> None:
    """Bug caught: a comparison answered from overlapping dates, from different units, from a year
    against a measure ("1913" vs "six decades") or two years read as counts, or from a tie; or min and max swapped."""
    first = Comparison("q", ("A", "B"), "date", "min")
    last = Comparison("q", ("A", "B"), "date", "max")
    assert winner(first, [parse_date("2007"), parse_date("March 2004")]) == 1
    assert winner(last, [parse_date("2007"), parse_date("March 2004")]) == 0
    assert winner(first, [parse_date("2004"), parse_date("March 2004")]) is None
    assert winner(first, [parse_date("2004"), None]) is None
    more = Comparison("q", ("A", "B"), "number", "max")
    fewer = Comparison("q", ("A", "B"), "number", "min")
    assert winner(more, [parse_number("8035 m"), parse_number("7205 m")]) == 0
    assert winner(fewer, [parse_number("8,035 metres"), parse_number("7205m")]) == 1
    assert winner(more, [parse_number("8035 ft"), parse_number("7205 m")]) is None
    assert winner(more, [parse_number("40 km"), parse_number("34,000")]) is None  # one without a unit
    assert winner(more, [parse_number("six decades"), parse_number("1913")]) is None
    assert winner(more, [parse_number("1996"), parse_number("May 1983")]) is None  # years are no measure
    assert winner(more, [parse_number("70"), parse_number("seventy")]) is None


@pytest.mark.parametrize(("text", "title", "option", "named"), [
    ("Terry Richardson (born 1965) is a photographer.", "", "Terry Richardson", True),
    ("In 2004, Terry Richardson won.", "", "Terry Richardson", True),  # a sentence's first word
    ("Kenton Terry Richardson (born 26 July 1999) is a footballer.", "", "Terry Richardson", False),
    ("The XR-300 drone flies 55 minutes.", "", "the XR-300", True),  # the article aside
    ("The XR-3000 drone flies 55 minutes.", "", "the XR-300", False),  # not inside a longer code
    ("A genus of two species.", "Lepidozamia", "Lepidozamia", True),  # the title names it
])
def test_a_value_passage_must_name_its_option_as_a_whole_name(text, title, option, named) -> None:
    """Bug caught: an option's date read from a passage about someone whose longer name contains
    it (the footballer Kenton Terry Richardson's birth year for the photographer Terry Richardson)."""
    from rag.answer import Passage
    from rag.answering.named import names

    assert names(Passage(1, "c", "d", text, 0.0, title=title), option) is named


# ---- through the pipeline (the session corpus: XR-200 flies 42 minutes, XR-300 55 minutes) ----------

@pytest.mark.parametrize("mode", ["short", "long"])
def test_pipeline_answers_a_comparison_from_each_options_answer(pipeline, mode: str) -> None:
    """Bug caught: the comparison answered by the single decode (a coin flip between the options),
    the wrong option chosen from the two values, or the answer citing a passage that does not hold
    the value it compared."""
    a = pipeline.ask("Which drone has a longer flight time, the XR-200 or the XR-300?", mode=mode)
    c = a.comparison
    assert c["used"] is True, c
    assert c["options"] == ["the XR-200", "the XR-300"] and c["chosen"] == 1
    assert [s.lower() for s in c["sub_questions"]][0].count("xr-200") == 1
    assert "42 minutes" in c["answers"][0] and "55 minutes" in c["answers"][1]
    assert a.text.lower().startswith("the xr-300") and not a.refused and a.grounded
    cited = {p.marker: p.text for p in a.passages}
    assert len(a.citations) == 2 and {c.marker for c in a.citations} == set(cited)
    assert any("55 minutes" in t for t in cited.values()) and any("42 minutes" in t for t in cited.values())
    if mode == "long":
        assert "42" in a.text and "55" in a.text and "[1]" in a.text and "[2]" in a.text


def test_a_follow_up_naming_both_options_is_compared_too(pipeline) -> None:
    """Bug caught: a comparison asked as the second turn of a conversation (the page sends every
    question with the conversation) answered by the single decode instead of from each option's
    answer; it names both options, so it needs no condensing."""
    from rag.chat import ChatTurn

    history = [ChatTurn("What is the capital city of Zarnovia?", "Velmora [1].")]
    a = pipeline.ask("Which drone has a longer flight time, the XR-200 or the XR-300?", mode="short",
                     history=history)
    assert a.comparison["used"] is True and a.comparison["chosen"] == 1, a.comparison
    assert a.text.lower().startswith("the xr-300")


def test_an_option_the_corpus_does_not_describe_is_answered_as_asked(pipeline) -> None:
    """Bug caught: a value read from a neighbour's passage (the XR-300's flight time for the
    XR-900) compared as if it were the option's: the comparison must not decide."""
    a = pipeline.ask("Which drone has a longer flight time, the XR-200 or the XR-900?", mode="short")
    c = a.comparison
    assert c["used"] is False and "XR-900" in c["reason"], c
    assert not a.text.startswith("the XR-")


def test_comparison_can_be_turned_off(pipeline) -> None:
    """Bug caught: `answer.compare: false` ignored."""
    pipe_cfg = pipeline.cfg
    pipe_cfg.answer.compare = False
    try:
        a = pipeline.ask("Which drone has a longer flight time, the XR-200 or the XR-300?", mode="short")
    finally:
        pipe_cfg.answer.compare = True
    assert a.comparison == {}


def test_rag_ask_shows_what_was_compared() -> None:
    """Bug caught: `rag ask` printing "the XR-300 [1][2]" with no sign of the two values behind it."""
    import io

    from rag.answer import Answer
    from rag.commands.ask import print_sources

    out = io.StringIO()
    a = Answer(question="q", text="the XR-300 [1][2]", comparison={
        "used": True, "sub_questions": ["How long does the XR-200 fly?", "How long does the XR-300 fly?"],
        "answers": ["42 minutes", "55 minutes"]}, timings_ms={"compare": 812.0})
    print_sources(a, out)
    text = out.getvalue()
    assert "Compared:" in text and "How long does the XR-300 fly? 55 minutes" in text and "compare 812ms" in text
    out = io.StringIO()
    print_sources(Answer(question="q", text="x", comparison={"used": False, "reason": "refused"}), out)
    assert "Compared:" not in out.getvalue()
