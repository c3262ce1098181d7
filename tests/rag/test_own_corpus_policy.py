"""The short-answer policy on own-corpus questions, without a model.

Two things are pinned here:
- spans cut out of a longer number ("30" of "18:30") are no answers (`signals.cut_from_number`): the
  0.5B answered "How long is the loan period?" with "30 [1]" from the reading club's "18:30";
- the shipped qwen2.5-0.5b entry's decisions on the recorded signals of the own corpus
  (`tests/data/own_corpus_signals_qwen05.jsonl`: `rag eval qa --dataset eval/data/own_corpus --mode
  short` with the default config, session 13, the signals each answer was decided on). A refit or a
  policy change that refuses fewer unanswerable questions, or more answerable ones, fails here; the
  three neighbouring-fact inventions it still makes are strict xfails, so the refit that fixes them
  says so (then move them to the refused list).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag.answering.policy import Candidate, ShortAnswerPolicy
from rag.answering.signals import CUT_NUMBER, SPAN_TOKENS, cut_from_number, gave_span
from rag.calibration import RefusalModel, load_entry

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "own_corpus_signals_qwen05.jsonl"
CORPUS = ROOT / "eval" / "data" / "own_corpus" / "corpus.jsonl"
# unanswerable questions the shipped 0.5B entry answers with a cited neighbouring fact (session 13):
# ferry -> "April" (the fuel dock's season), city-bike age -> "16 years old" (e-bikes only),
# spring break -> "43" (the autumn break's week)
KNOWN_INVENTIONS = {"own-27", "own-36", "own-38"}


@pytest.mark.parametrize(("span", "passage", "cut"), [
    ("30", "The reading club meets at 18:30.", True),  # the minutes of a time
    ("0", "Late returns cost 0.20 euros per item.", True),  # before a decimal point
    ("500", "It holds about 11,500 books.", True),  # after a thousands separator
    ("12", "On Fridays lessons end at 12:50.", True),  # the hour of a time
    ("30, and the break", "Lunch is from 11:45 to 12:30, and the break is at 10.", True),
    ("2017", "She was appointed in 2017.", False),  # a full stop after a number ends a sentence
    ("4.80 euros", "A loaf costs 4.80 euros.", False),
    ("30", "Open until 18:30; loans last 30 days.", False),  # one whole occurrence is enough
    ("three weeks", "The loan period is three weeks.", False),  # no digit at either edge
    ("31", "Nothing here says it.", False),  # not in the passage: not judged here
])
def test_cut_from_number(span: str, passage: str, cut: bool) -> None:
    """Bug caught: a span starting or ending inside "18:30" / "0.20" / "11,500" given as an answer."""
    assert cut_from_number(span, passage) is cut


def _model(threshold: float) -> RefusalModel:
    return RefusalModel(["margin"], [0.0], [1.0], [1.0], 0.0, threshold)


def test_cut_span_is_no_candidate_and_is_refused() -> None:
    """Bug caught: the choice or the judge giving a span flagged `cut_number` (the refusal model, here
    one that answers everything, must not get to weigh it)."""
    from rag.calibration import CalibrationEntry

    policy = ShortAnswerPolicy(CalibrationEntry(refusal_model=_model(1e9)))
    cut = Candidate("30", {SPAN_TOKENS: 1.0, "margin": -9.0, CUT_NUMBER: 1.0}, passage=0)
    whole = Candidate("38 euros", {SPAN_TOKENS: 2.0, "margin": -5.0}, passage=1)
    assert not gave_span(cut.text, cut.signals) and gave_span(whole.text, whole.signals)
    assert policy.choose([cut, whole]) == 1  # the cut one had the better margin
    assert policy.judge(cut).refused and policy.judge(cut).citation is None
    assert not policy.judge(whole).refused
    assert policy.decide([cut]).refused


def _recorded() -> list[dict]:
    return [json.loads(line) for line in RECORDED.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def shipped_05(tmp_path_factory: pytest.TempPathFactory) -> ShortAnswerPolicy:
    entry = load_entry(tmp_path_factory.mktemp("cal") / "none.json", "qwen2.5-0.5b", language="en")
    assert entry.refusal_model is not None, "the shipped qwen2.5-0.5b entry has no refusal model"
    return ShortAnswerPolicy(entry, language="en")


def _span(rec: dict) -> str:
    return rec["answer"].rsplit("[", 1)[0].strip()


def test_recorded_decisions_reproduce(shipped_05: ShortAnswerPolicy) -> None:
    """Bug caught: the shipped entry or the judge changing a decision on recorded signals unnoticed
    (a renamed feature makes the refusal model undecided and the fallback threshold decide)."""
    for rec in _recorded():
        d = shipped_05.judge(Candidate(_span(rec), rec["signals"], passage=0))
        assert d.refused is rec["refused"], rec["id"]


def test_recorded_answerable_not_refused_more(shipped_05: ShortAnswerPolicy) -> None:
    """Bug caught: a refit that turns answered own-corpus questions into false refusals (2 of 27 then)."""
    answerable = [r for r in _recorded() if not r["is_impossible"]]
    refused = {r["id"] for r in answerable if shipped_05.judge(Candidate(_span(r), r["signals"], passage=0)).refused}
    assert refused <= {"own-04", "own-15"}


_INVENTION = pytest.mark.xfail(strict=True, reason="a neighbouring fact the SQuAD-fitted 0.5B entry answers "
                               "(docs/results.md, session 13)")


@pytest.mark.parametrize("rec", [pytest.param(r, id=r["id"], marks=[_INVENTION] if r["id"] in KNOWN_INVENTIONS else [])
                                 for r in _recorded() if r["is_impossible"]])
def test_recorded_unanswerable_refused(shipped_05: ShortAnswerPolicy, rec: dict) -> None:
    """Bug caught: an unanswerable question answered with a cited span (a cited invention)."""
    assert shipped_05.judge(Candidate(_span(rec), rec["signals"], passage=0)).refused


def test_recorded_cut_number_answer_is_refused_now(shipped_05: ShortAnswerPolicy) -> None:
    """Bug caught: own-08's recorded "30" (from the reading club's "18:30"; the gold is "three weeks")
    given with a citation: with the cut flag the pipeline sets, the policy refuses it."""
    texts = {json.loads(line)["_id"]: json.loads(line)["text"] for line in CORPUS.read_text().splitlines()}
    rec = next(r for r in _recorded() if r["id"] == "own-08")
    span = _span(rec)
    assert span == "30" and not rec["refused"]
    assert cut_from_number(span, texts["brenholt_library"])
    signals = {**rec["signals"], CUT_NUMBER: 1.0}
    assert shipped_05.judge(Candidate(span, signals, passage=0)).refused
