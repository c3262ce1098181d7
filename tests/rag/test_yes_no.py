"""Yes/no questions about two named things (`rag/answering/yes_no.py`): the rule that recognises
them, the decisions in code, and the pipeline path with the real engine writing the one-thing
question and answering each check."""

from __future__ import annotations

import pytest

from rag.answering.yes_no import PairQuestion, both_verdict, parse, same_verdict, shared_value, which_verdict


@pytest.mark.parametrize(("question", "names", "kind"), [
    ("Were Anna Berg and Tom Lind both painters?", ("Anna Berg", "Tom Lind"), "both"),
    ("Are both Cynthia Mort and George Archainbaud American?", ("Cynthia Mort", "George Archainbaud"), "both"),
    ('Are both "Cooking Light" and "Vibe" magazines?', ("Cooking Light", "Vibe"), "both"),
    ("Were both the Battle of Stones River and the Battle of the Ch'ongch'on River fought in the 19th century?",
     ("the Battle of Stones River", "the Battle of the Ch'ongch'on River"), "both"),
    ("Do the drinks Gibson and Zurracapote both contain gin?", ("Gibson", "Zurracapote"), "both"),
    ("Is the flight time of the XR-200 and the XR-300 the same?", ("the XR-200", "the XR-300"), "same"),
    ("Do Czesław Miłosz and Nathalie Sarraute have the same nationality?",
     ("Czesław Miłosz", "Nathalie Sarraute"), "same"),
    ("Are Mauritz Stiller and Johannes Grenzfurthner both of the same nationality?",
     ("Mauritz Stiller", "Johannes Grenzfurthner"), "same"),
    ("Which band is from England, Fireflight or Dirty Pretty Things?", ("Fireflight", "Dirty Pretty Things"),
     "which"),
    ("Which musician, Ciaran Gribbin or Brett Scallions, is a member of the post-grunge band Fuel?",
     ("Ciaran Gribbin", "Brett Scallions"), "which"),
    ("Which novelist wrote under the pen name Walter Ericson: Laura Esquivel or Howard Fast?",
     ("Laura Esquivel", "Howard Fast"), "which"),
    ("Which dog is considered a giant dog breed, the  Leonberger or the Basset Hound?",
     ("the Leonberger", "the Basset Hound"), "which"),
    ("What occupation is shared by both Marge Piercy and Richard Aldington?",
     ("Marge Piercy", "Richard Aldington"), "shared"),
    ("What professions did S. Sylvan Simon and Danny Cannon have in common?",
     ("S. Sylvan Simon", "Danny Cannon"), "shared"),
    ("Both Ralph Bakshi and Béla Gaál had what roll in film making?", ("Ralph Bakshi", "Béla Gaál"), "shared"),
    ("Henry Roth and Lewis Mumford are both this nationality?", ("Henry Roth", "Lewis Mumford"), "shared"),
    ('What type of film are both "500 Years Later" and "Manson"?', ("500 Years Later", "Manson"), "shared"),
])
def test_pair_questions_are_recognised_with_their_names(question, names, kind) -> None:
    """Bug caught: a name cut short or taken with the words around it ("the drinks Gibson", "George
    Archainbaud American", a quoted title with its quotes), or a "same" question checked as "both"."""
    p = parse(question, "en")
    assert p is not None and (p.names, p.kind) == (names, kind)


@pytest.mark.parametrize(("question", "language"), [
    # "both" in a clause of its own: the question is not whether each of the two is something
    ("Did Davies and Baran collaborate at any point after they both developed this concept?", "en"),
    ("Are Ruggero Deodato from Italy, and Mexican Alejandro Springall, both film directors?", "en"),
    ("Were the bands Skin Yard and Ostava from the U.S.?", "en"),  # neither "both" nor "same"
    ("Are both Anna Berg and Tom Lind painters or sculptors?", "en"),  # asks for one of the options
    ("Is the Virgilia found in Africa? And is Koeleria found all over?", "en"),  # two questions
    ("Anna Berg and Tom Lind both painted?", "en"),  # no auxiliary verb first, nothing asked
    ("Are both Anna Berg and Tom Lind painters?", "zh"),
    # an "or" inside a clause, not two options set apart (SQuAD v2 dev, some unanswerable)
    ("What is an example of an NP-intermediate problem not known to exist in P or NP-complete?", "en"),
    ("Who can question statements the First Minister or members of the cabinet make?", "en"),
    ("Which band is older, Fireflight or Dirty Pretty Things?", "en"),  # a date: compare.py's
    ("Did Franki Valli sing with Hellogoodbye or The Four Seasons?", "en"),  # no which/who/what
    ("What profession did Ronald Robinson and John Gallagher not share?", "en"),  # SQuAD v2, unanswerable
    ("Temagami-Lorrain Mine and Burwash Mine were both mines; which one yielded gold in 1935?", "en"),
    ("What did Anna Berg and Tom Lind paint?", "en"),  # nothing asked in common
    ("What did " + "Aa " * 40 + "and Bb share?", "en"),  # no name is 120 characters long
])
def test_other_questions_are_not_pair_questions(question: str, language: str) -> None:
    """Bug caught: an unanswerable SQuAD-style question ("... after they both developed ...")
    answered yes or no, or a question whose names the rule cannot find sent down the path."""
    assert parse(question, language) is None


def test_the_second_question_is_the_first_with_the_other_name() -> None:
    """Bug caught: a written question that still names the second thing ("Is A in the same province
    as B?") turned into "Is B in the same province as B?", or one about something else used."""
    p = PairQuestion("Are both Yangzhou and Dazhou located in the same province?", ("Yangzhou", "Dazhou"), "same")
    assert p.sub_questions("In which province is Yangzhou located?\nmore") == [
        "In which province is Yangzhou located?", "In which province is Dazhou located?"]
    assert p.sub_questions("Is Yangzhou located in the same province as Dazhou?") is None
    assert p.sub_questions("In which province is it located?") is None
    assert p.sub_questions("In which province is Yangzhou located") is None  # not a question


def test_both_is_yes_only_when_each_check_is_sure_and_no_when_one_says_no() -> None:
    """Bug caught: a question answered yes with one check missing or unsure, or not answered no when
    one thing alone is known not to have the property."""
    assert both_verdict([5.0, 6.0], 4.5, 0.0) == ("yes", [0, 1])
    assert both_verdict([5.0, 3.0], 4.5, 0.0) == (None, [])  # unsure about the second
    assert both_verdict([5.0, None], 4.5, 0.0) == (None, [])  # no passage names the second
    assert both_verdict([None, -2.0], 4.5, 0.0) == ("no", [1])  # the second is not: no, whatever the first
    assert both_verdict([-1.0, -3.0], 4.5, 0.0) == ("no", [0, 1])
    assert both_verdict([0.0, 6.0], 4.5, 0.0) == ("no", [0])  # the threshold is inclusive


def test_which_is_the_option_the_checks_clearly_prefer() -> None:
    """Bug caught: an option chosen when the checks barely differ, when the model says no to both
    (the less unlikely of two noes), or with one check missing."""
    assert which_verdict([-2.0, 5.0], 2.0, 0.0) == 1
    assert which_verdict([3.0, 0.5], 2.0, 0.0) == 0
    assert which_verdict([5.0, 6.0], 2.0, 0.0) is None  # both yes: no choice
    assert which_verdict([-4.0, -1.0], 2.0, 0.0) is None  # both no
    assert which_verdict([5.0, None], 2.0, 0.0) is None
    assert which_verdict([0.7, 1.4], 2.0, 0.0) is None


@pytest.mark.parametrize(("values", "shared"), [
    (["poet", "Poet."], "poet"),
    (["film director and producer", "director"], "director"),
    (["American film director", "film director"], "film director"),
    (["novelist", "journalist"], None),
    (["rock", "punk rock"], "rock"),
    (["rock", "rockabilly"], None),  # a word, not a prefix
])
def test_shared_is_the_value_both_answers_hold(values, shared) -> None:
    """Bug caught: two different occupations given as shared, a common prefix taken for a common
    word ("rock" in "rockabilly"), or a shared value missed because one answer says more."""
    assert shared_value(values) == shared


@pytest.mark.parametrize(("values", "contexts", "verdict"), [
    (["1945", "May 1945"], ["", ""], "yes"),  # same year
    (["1945", "2011"], ["", ""], "no"),
    (["the 1970s", "1974"], ["", ""], None),  # a decade does not say the year
    (["1945", "Swedish"], ["", ""], None),  # a date against something else
    (["3", "three"], ["", ""], "yes"),
    (["42", "55 minutes"], ["flies 42 minutes", ""], "no"),  # the measure from the passage
    (["40 km", "40"], ["", "about 40 people"], None),  # different measures
    (["Swedish", "swedish."], ["", ""], "yes"),
    (["Swedish", "Austrian"], ["", ""], "no"),
    (["Jiangsu", "Jiangsu Province"], ["", ""], None),  # one inside the other: maybe the same
])
def test_same_compares_dates_numbers_and_words(values, contexts, verdict) -> None:
    """Bug caught: "1945" and "May 1945" called different years, a decade taken for a year,
    "three" and "3" called different, minutes compared with people, "Jiangsu Province" taken for
    another province than "Jiangsu"."""
    assert same_verdict(values, contexts) == verdict


# ---- through the pipeline (the session corpus: Zarnovia an island nation, Quintara a mountain republic;
# the XR-200 flies 42 minutes, the XR-300 55 minutes) ---------------------------------------------------

@pytest.fixture()
def forced(pipeline, monkeypatch):
    """The path on for SmolLM2 (its entry holds no thresholds) with thresholds the test chooses."""
    from rag.answering import policy
    from rag.calibration import YesNoThresholds

    pipeline.cfg.answer.yes_no = True
    pipeline._policies = None  # a policy copies the config when it is built: rebuilt with this one

    def use(yes_at: float, no_at: float, margin: float = 2.0) -> None:
        monkeypatch.setattr(policy, "measured_yes_no", lambda: YesNoThresholds(yes_at, no_at, margin))

    yield use
    pipeline.cfg.answer.yes_no = None
    pipeline._policies = None


@pytest.mark.parametrize("mode", ["short", "long"])
def test_pipeline_answers_both_from_a_check_on_each_things_own_passage(pipeline, forced, mode: str) -> None:
    """Bug caught: the checks run on a passage about something else (both on Zarnovia's), the answer
    citing no passage or the wrong one, or the checks' log-odds not reaching the decision."""
    forced(-1e9, -2e9)  # every check says yes
    a = pipeline.ask("Are Zarnovia and Quintara both republics?", mode=mode)
    c = a.comparison
    assert c["used"] is True and c["kind"] == "both" and c["verdict"] == "yes", c
    assert all(isinstance(x, float) for x in c["log_odds"]) and c["answers"] == ["yes", "yes"]
    assert "Zarnovia" in c["sub_questions"][0] and "Quintara" in c["sub_questions"][1]
    assert a.text.startswith("Yes") and not a.refused and a.grounded
    assert [p.title for p in a.passages] == ["Zarnovia", "Quintara"]
    assert [c.marker for c in a.citations] == [1, 2] and "[1]" in a.text and "[2]" in a.text
    assert a.refusal_calibration["by"] == "yes_no_thresholds"
    forced(1e9, 1e9)  # every check says no: both passages cited as the reason
    a = pipeline.ask("Are Zarnovia and Quintara both republics?", mode=mode)
    assert a.comparison["verdict"] == "no" and a.text.startswith("No") and len(a.citations) == 2


def test_a_thing_the_corpus_does_not_describe_is_answered_as_asked(pipeline, forced) -> None:
    """Bug caught: a check run on a neighbour's passage (Zarnovia's for Atlantis) and its yes taken
    for the other thing's."""
    forced(-1e9, -2e9)
    a = pipeline.ask("Are Zarnovia and Atlantis both republics?", mode="short")
    c = a.comparison
    assert c["used"] is False and "Atlantis" in c["reason"] and c["log_odds"][1] is None, c
    assert not a.text.startswith("Yes")


@pytest.mark.parametrize("mode", ["short", "long"])
def test_pipeline_answers_which_from_each_options_check(pipeline, forced, mode: str) -> None:
    """Bug caught: the option chosen against its own check's log-odds, or the answer not citing the
    two passages the checks read (the chosen one's first)."""
    q = "Which country is a mountain republic, Zarnovia or Quintara?"
    forced(1e9, 1e9, 1e9)  # nothing decides: the checks' log-odds are still recorded
    c = pipeline.ask(q, mode=mode).comparison
    assert c["kind"] == "which" and c["used"] is False and all(isinstance(x, float) for x in c["log_odds"]), c
    odds = c["log_odds"]
    assert odds[0] != odds[1]
    forced(1e9, min(odds) - 1, abs(odds[0] - odds[1]) - 0.01)  # the higher one, by (about) the margin
    a = pipeline.ask(q, mode=mode)
    c = a.comparison
    won = 0 if odds[0] > odds[1] else 1
    assert c["used"] is True and c["verdict"] == ["Zarnovia", "Quintara"][won], c
    assert a.text.startswith(c["verdict"]) and [p.title for p in a.passages] == [
        ["Zarnovia", "Quintara"][won], ["Zarnovia", "Quintara"][1 - won]]
    assert [x.marker for x in a.citations] == [1, 2]


def test_pipeline_answers_same_from_each_things_short_answer(pipeline) -> None:
    """Bug caught: two different values called the same, the answer not citing the passages that
    hold them, or a question without checks kept from a model whose entry holds no thresholds
    (SmolLM2: `answer.yes_no` null)."""
    a = pipeline.ask("Do the XR-200 and the XR-300 fly for the same number of minutes?", mode="short")
    c = a.comparison
    assert c["used"] is True and c["kind"] == "same" and c["verdict"] == "no", c
    assert "42" in c["answers"][0] and "55" in c["answers"][1]
    assert a.text.startswith("No") and len(a.citations) == 2
    assert {("42 minutes" in p.text, "55 minutes" in p.text) for p in a.passages} == {(True, False), (False, True)}


def test_shared_values_that_differ_are_not_given_as_shared(pipeline) -> None:
    """Bug caught: a "what do A and B have in common" question answered with one thing's value when
    the two answers differ (SmolLM2 answers each with its own sentence), or the written question
    not asked of each thing."""
    a = pipeline.ask("What type of product are both the XR-200 and the XR-300?", mode="short")
    c = a.comparison
    assert c["kind"] == "shared" and c["used"] is False and c["reason"].startswith("the values do not decide"), c
    assert [q.lower().count(n) for q, n in zip(c["sub_questions"], ("xr-200", "xr-300"), strict=True)] == [1, 1]
    assert "42 minutes" in c["answers"][0] and "55 minutes" in c["answers"][1]


def test_the_path_is_off_without_thresholds_and_when_turned_off(pipeline) -> None:
    """Bug caught: a model whose entry holds no thresholds (SmolLM2) answering yes/no from checks
    nobody measured, or `answer.yes_no: false` ignored (for the questions without checks too)."""
    a = pipeline.ask("Are Zarnovia and Quintara both republics?", mode="short")
    assert a.comparison == {}
    pipeline.cfg.answer.yes_no = False
    try:
        a = pipeline.ask("Do the XR-200 and the XR-300 fly for the same number of minutes?", mode="short")
    finally:
        pipeline.cfg.answer.yes_no = None
    assert a.comparison == {}


def test_the_check_reads_the_passage(pipeline) -> None:
    """Bug caught: a check prompt that leaves the passage out (every answer the model's prior, the
    same whatever the passage says)."""
    from rag.answerability import yes_no_check
    from rag.generation.base import run_sync

    gen = pipeline.generator
    q = "Is Quintara a mountain republic?"
    on = run_sync(yes_no_check(gen, q, "Quintara is a mountain republic."), gen)
    off = run_sync(yes_no_check(gen, q, "Oak dining tables are sold with six chairs."), gen)
    assert on != off
