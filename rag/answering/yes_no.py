"""Questions about two named things answered one thing at a time: "Are A and B both magazines?"
(each one checked on its own passage), "Were A and B of the same nationality?" (each one's value
answered, compared in code), "Which band is from England, A or B?" (each one checked; the one the
checks single out) and "What occupation did A and B share?" (each one's value answered; the value
both hold).

Why: asked the question whole, the packaged models answer "yes" to nearly every such question
whatever the passages say (45-46 of the 46 in hotpotqa_pooled dev, session 20), and the grounded
short answer cannot say yes or no at all, so it refuses. One thing at a time is what one passage
answers: "Is A a magazine?" read against a passage about A, and "What is the nationality of A?"
as an ordinary grounded short answer. The engine writes that one-thing question once, for A; B's
is the same text with the other name. A "both" question is answered yes only when the model says
yes confidently for both (its yes/no log-odds at or above the calibration entry's `yes`), no when
it says no for one (at or below `no`), from a passage that names that thing as a whole name; a
"which" question is answered by the option whose check leans to yes and is clearly above the other's
(by the entry's `margin`); a "shared" one by the value both short answers give (or the shorter
where the longer holds it as a phrase). Anything between, a passage about something else, a
refused or restated value, values that differ, falls back to the ordinary answer of the question
as asked. English only (the rule reads English). A "which"
question that orders the options by a date or a number is `compare.py`'s, tried first.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .compare import parse_date, parse_number
from .named import NAME_WORD, WH, asub_questions, cited, names, options, without

if TYPE_CHECKING:
    from ..calibration import YesNoThresholds

_AUX = r"(?:are|were|is|was|do|did|does|can|could|have|has|had)"
_HEAD = re.compile(rf"^\W*{_AUX}\s+(?P<both>both\s+)?(?P<left>.+?)\s+and\s+(?P<right>.+)$", re.IGNORECASE)
_TOKEN = re.compile(r"\"[^\"]+\"|“[^”]+”|\S+")
_PARTICLES = ("of", "the", "de", "da", "del", "di", "du", "der", "den", "van", "von", "le", "la", "and", "&")

# The one-thing question for the first name: written by the engine from these examples (written for
# this project, not taken from any dataset).
_EXAMPLES_BOTH = (
    ("Were Anna Berg and Tom Lind both painters?", "Anna Berg", "Was Anna Berg a painter?"),
    ("Are both the Alder Bridge and the Stone Bridge made of granite?", "the Alder Bridge",
     "Is the Alder Bridge made of granite?"),
    ("Are Harbour Rowing Club and Ostby Sailing Club both located in Norway?", "Harbour Rowing Club",
     "Is Harbour Rowing Club located in Norway?"),
)
_EXAMPLES_SAME = (
    ("Were Anna Berg and Tom Lind of the same nationality?", "Anna Berg", "What is the nationality of Anna Berg?"),
    ("Were the Alder Bridge and the Stone Bridge opened in the same year?", "the Alder Bridge",
     "In which year did the Alder Bridge open?"),
    ("Do Lake Orm and Lake Vessel lie in the same county?", "Lake Orm", "In which county does Lake Orm lie?"),
)
_EXAMPLES_WHICH = (
    ("Which painter was born in Norway, Anna Berg or Tom Lind?", "Anna Berg", "Was Anna Berg born in Norway?"),
    ("Which club, Harbour Rowing Club or Ostby Sailing Club, has a women's team?", "Harbour Rowing Club",
     "Does Harbour Rowing Club have a women's team?"),
    ("Who was also a singer, Anna Berg or Tom Lind?", "Anna Berg", "Was Anna Berg also a singer?"),
)
_EXAMPLES_SHARED = (
    ("What occupation did Anna Berg and Tom Lind share?", "Anna Berg", "What was the occupation of Anna Berg?"),
    ("Harbour Rowing Club and Ostby Sailing Club are both located in which country?", "Harbour Rowing Club",
     "In which country is Harbour Rowing Club located?"),
    ("What type of boat are both the Alder Swan and the Stone Swan?", "the Alder Swan",
     "What type of boat is the Alder Swan?"),
)
_SYSTEM = "You rewrite a question about two things as a question about one of them."


@dataclass(frozen=True)
class PairQuestion:
    """A question about two named things: `both` asks whether each has a property, `same` whether
    they have the same value, `which` which of the two has a property, `shared` the value both have."""

    question: str
    names: tuple[str, str]
    kind: Literal["both", "same", "which", "shared"]

    @property
    def checks(self) -> bool:
        """Whether it is decided by yes/no checks (whose thresholds are measured per model); the
        others compare two grounded short answers in code, like `compare.py`, with any model."""
        return self.kind in ("both", "which")

    def writer_messages(self) -> list[dict[str, str]]:
        """The chat that asks the engine for the first name's one-thing question."""
        msgs = [{"role": "system", "content": _SYSTEM}]
        examples = {"same": _EXAMPLES_SAME, "which": _EXAMPLES_WHICH, "shared": _EXAMPLES_SHARED}.get(
            self.kind, _EXAMPLES_BOTH)
        for q, x, sub in examples:
            msgs += [{"role": "user", "content": _ask(q, x)}, {"role": "assistant", "content": sub}]
        return [*msgs, {"role": "user", "content": _ask(self.question, self.names[0])}]

    def sub_questions(self, written: str) -> list[str] | None:
        """Both names' questions from the first one's (`written`), or None when it is not one: it
        does not name the first, or still names the second ("Is A in the same province as B?")."""
        first = written.strip().split("\n")[0].strip()
        a, b = self.names
        at = first.lower().find(a.lower())
        if at < 0 or b.lower() in first.lower() or not first.endswith("?") or len(first) > 200:
            return None
        return [first, first[:at] + b + first[at + len(a):]]


def _ask(question: str, name: str) -> str:
    return f"Question: {question}\nWrite the question about {name} alone."


def parse(question: str, language: str) -> PairQuestion | None:
    """The pair question `question` asks, or None: English, and either a which/who/what question
    choosing between two options set apart by a comma or colon ("Which band is from England,
    A or B?", "Which musician, A or B, is ...?"; one that orders them by a date or a number is
    `compare.parse`'s), or one starting with an auxiliary verb, two names joined by " and ", and
    either "both" right before the first or right after the second, or "same" after the second
    ("Are both A and B ...?", "Were A and B both ...?", "Do A and B have the same ...?"), or else a
    what/which question about two names that asks what they have in common (`_shared`). One
    question."""
    q = question.strip()
    if language != "en" or not q.endswith("?") or "?" in q[:-1]:
        return None
    if re.search(r"\bor\b", q, re.IGNORECASE):
        return _which(q)
    m = _HEAD.match(q[:-1].strip())
    if m is None:
        return _shared(q)
    left = _TOKEN.findall(m.group("left"))
    if not left or left[-1].endswith(","):  # "A from Italy, and B": the clause, not a name, ends there
        return None
    a = _name_back(left)
    right = _TOKEN.findall(m.group("right"))
    b, used = _name_forward(right)
    if not _two_names(a, b):
        return None
    tail = [w.lower() for w in right[used:]]
    kind: Literal["both", "same"]
    if "same" in tail:
        kind = "same"
    elif tail[:1] == ["both"] or (m.group("both") and tail):
        kind = "both"
    else:
        return None
    return PairQuestion(question, (a, b), kind)


_SHARED = re.compile(r"\b(?:both|share|shared|in\s+common)\b", re.IGNORECASE)
_ASKS = re.compile(r"\b(?:what|which|this)\b", re.IGNORECASE)


def _shared(question: str) -> PairQuestion | None:
    """"What occupation did A and B share?", "A and B are both what?", "What type of film are both
    A and B?": a what/which question about two names joined by " and " that asks what they have in
    common (both / share / shared / in common)."""
    if not _SHARED.search(question) or not _ASKS.search(question) or re.search(r"\bnot\b|n't\b|\bwhich\s+one\b",
                                                                                question, re.IGNORECASE):
        return None  # "did A and B not share?" asks otherwise; "which one" is a choice
    body = question.strip()[:-1]
    for m in re.finditer(r"\s+and\s+", body):
        left = _TOKEN.findall(body[: m.start()])
        if not left or left[-1].endswith(","):
            continue
        a = re.sub(r"^both\s+(?=\S)", "", _name_back(left), flags=re.IGNORECASE)  # "Both A and B had ...?"
        b, _ = _name_forward(_TOKEN.findall(body[m.end():]) + ["?"])  # "?": the run may end the question
        if _two_names(a, b) and a.lower() not in ("both", "what", "which"):
            return PairQuestion(question, (a, b), "shared")
    return None


def _which(question: str) -> PairQuestion | None:
    """"Which band is from England, A or B?": a which/who/what question choosing between two
    options set apart by a comma or colon, not ordering them by a date or a number (`compare.py`)."""
    from .compare import parse as comparison

    if not WH.match(question) or comparison(question, "en") is not None:
        return None
    opts = options(question)
    if opts is None:
        return None
    # the options set apart ("..., A or B"): not an "or" inside a clause ("not in P or NP-complete")
    if not re.search(r"[,:]\s*" + re.escape(opts[0]) + r"\s+or\s", question):
        return None
    a, b = (" ".join(_bare(o).split()) for o in opts)
    if not _two_names(a, b):
        return None
    return PairQuestion(question, (a, b), "which")


def _two_names(a: str, b: str) -> bool:
    """Two different names of a name's length (at most 80 characters each, as `named.options`)."""
    return bool(a) and bool(b) and a.lower() != b.lower() and len(a) <= 80 and len(b) <= 80


def _bare(token: str) -> str:
    return token.strip("\"“”,")


def _is_name_token(token: str) -> bool:
    return token[:1] in "\"“" or bool(NAME_WORD.fullmatch(_bare(token)))


def _name_back(tokens: list[str]) -> str:
    """The name run ending `tokens` ("the operas Vanessa" -> "Vanessa"; a quoted name whole)."""
    run: list[str] = []
    for t in reversed(tokens):
        if not _is_name_token(t) or (not run and t.lower() in _PARTICLES):
            break
        run.append(t)
        if t[:1] in "\"“":
            break
    while run and run[-1].lower() in _PARTICLES and run[-1].lower() != "the":  # "of"/"and" cannot start it
        run.pop()
    return " ".join(_bare(t) for t in reversed(run)).strip()


def _name_forward(tokens: list[str]) -> tuple[str, int]:
    """The name run starting `tokens` and how many tokens it took. A run that would take every
    token leaves the last one as the question's predicate ("... and George Archainbaud American?")."""
    run: list[str] = []
    for t in tokens:
        if t.lower() == "both" or not _is_name_token(t) or (run and t.lower() == "and"):
            break
        run.append(t)
        if t[:1] in "\"“" or t.endswith(","):
            break
    if len(run) == len(tokens) and len(run) >= 2:
        run.pop()
    used = len(run)
    while run and run[-1].lower() in _PARTICLES:
        run.pop()
    return " ".join(_bare(t) for t in run).strip(), used


# ---- deciding ---------------------------------------------------------------------------------------

def both_verdict(odds: list[float | None], yes_at: float, no_at: float) -> tuple[str | None, list[int]]:
    """("yes" | "no" | None, the names whose checks decided it): no when any check is at or below
    `no_at` (one thing without the property answers the question), yes when both are at or above
    `yes_at`, None otherwise (a check missing or unsure)."""
    noes = [i for i, o in enumerate(odds) if o is not None and o <= no_at]
    if noes:
        return "no", noes
    if all(o is not None and o >= yes_at for o in odds):
        return "yes", [0, 1]
    return None, []


def which_verdict(odds: list[float | None], margin: float, no_at: float) -> int | None:
    """The option the checks single out, or None: its check above `no_at` (the model leans to yes)
    and at least `margin` above the other's (it prefers this one clearly)."""
    if None in odds:
        return None
    a, b = (float(o) for o in odds)  # type: ignore[arg-type]
    if a - b >= margin and a > no_at:
        return 0
    if b - a >= margin and b > no_at:
        return 1
    return None


def shared_value(values: list[str]) -> str | None:
    """What two short answers have in common, or None: the value both give (words compared without
    case, articles and punctuation), or the shorter where it is a whole phrase of the longer
    ("director" in "film director and producer")."""
    a, b = (_norm(v) for v in values)
    if not a or not b:
        return None
    if a == b:
        return values[0].strip()
    short, long_ = (0, b) if len(a) <= len(b) else (1, a)
    if re.search(rf"\b{re.escape(_norm(values[short]))}\b", long_):
        return values[short].strip()
    return None


def _norm(text: str) -> str:
    text = re.sub(r"^(?:the|a|an)\s+", "", text.lower().strip())
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def same_verdict(values: list[str], contexts: list[str]) -> str | None:
    """Whether two short answers give the same value: dates by year (both years written), numbers by
    value and measure, other text by its words. None when undecidable: a date against something
    else, different measures, or one text inside the other ("Jiangsu" / "Jiangsu Province")."""
    dates = [parse_date(v) for v in values]
    if all(d is not None for d in dates):
        years = [(d.lo[0], d.hi[0]) for d in dates if d is not None]
        if any(lo != hi for lo, hi in years):  # a decade or century: the year is not known
            return None
        return "yes" if years[0] == years[1] else "no"
    if any(d is not None for d in dates):
        return None
    nums = [parse_number(v, c) for v, c in zip(values, contexts, strict=True)]
    if all(n is not None for n in nums):
        x, y = nums
        assert x is not None and y is not None
        if x.unit != y.unit:
            return None
        return "yes" if x.value == y.value else "no"
    if any(n is not None for n in nums):
        return None
    a, b = (_norm(v) for v in values)
    if not a or not b:
        return None
    if a == b:
        return "yes"
    if re.search(rf"\b{re.escape(a)}\b", b) or re.search(rf"\b{re.escape(b)}\b", a):
        return None
    return "no"


# ---- the answer -----------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What the pair path did (`Answer.comparison`, beside the two-option comparisons): `used` when
    its answer is the one given; otherwise `reason` says why the question was answered as asked.
    `answers`: each name's yes/no (`both`) or short answer (`same`); `log_odds` the checks'."""

    options: list[str]
    kind: str
    sub_questions: list[str] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)
    log_odds: list[float | None] = field(default_factory=list)
    verdict: str | None = None
    used: bool = False
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"options": self.options, "kind": self.kind, "sub_questions": self.sub_questions,
                "answers": self.answers, "log_odds": self.log_odds, "verdict": self.verdict, "used": self.used,
                "reason": self.reason}


async def aanswer(gen: Any, pair: PairQuestion, mode: str, ask: Any, look: Any,
                  thresholds: YesNoThresholds | None, calibration: dict[str, Any]) -> tuple[Any | None, Outcome]:
    """The pair question's answer, or None with the outcome saying why not. `gen` writes the first
    name's question and answers the yes/no checks; `ask(question)` awaits a grounded short answer
    (an `Answer`), `look(question)` the passages retrieved for it (best first), both with the
    caller's filters and collection; `thresholds`: the entry's (`ShortAnswerPolicy.yes_no`; None only
    for a question without checks, `PairQuestion.checks`); `calibration`:
    what the answer's metadata says decided it."""
    t0 = time.perf_counter()
    out = Outcome(list(pair.names), pair.kind)
    subs, written = await asub_questions(gen, pair)
    if subs is None:
        out.reason = f"the written question is not one about {pair.names[0]!r} alone: {written.strip()[:120]!r}"
        return None, out
    out.sub_questions = subs
    if pair.kind in ("same", "shared"):
        answer = await _avalues(pair, mode, ask, out)
    else:
        assert thresholds is not None
        answer = await _achecked(gen, pair, mode, look, thresholds, calibration, out)
    if answer is not None:
        out.used = True
        answer.timings_ms["compare"] = (time.perf_counter() - t0) * 1000
    return answer, out


async def _achecked(gen: Any, pair: PairQuestion, mode: str, look: Any, thresholds: YesNoThresholds,
                    calibration: dict[str, Any], out: Outcome) -> Any | None:
    """A "both" or "which" question from one yes/no check per name, each on the best-ranked of its
    question's passages that names it as a whole name (not a neighbour's)."""
    from ..answer import Answer
    from ..answerability import yes_no_check
    from . import parts

    found = await asyncio.gather(*(look(q) for q in out.sub_questions))
    chosen = [next((p for p in ps if names(p, n)), None) for n, ps in zip(pair.names, found, strict=True)]
    odds: list[float | None] = []
    for q, p in zip(out.sub_questions, chosen, strict=True):  # one after the other: one engine
        odds.append(None if p is None else await yes_no_check(gen, q, p.text))
    out.log_odds = [None if o is None else round(o, 3) for o in odds]
    yes_at, no_at, margin = thresholds
    out.answers = [None if o is None else "yes" if o >= yes_at else "no" if o <= no_at else "unsure" for o in odds]
    if pair.kind == "both":
        verdict, by = both_verdict(odds, yes_at, no_at)
        head = verdict.capitalize() if verdict else ""
    else:
        won = which_verdict(odds, margin, no_at)
        verdict, by = (pair.names[won], [won, 1 - won]) if won is not None else (None, [])
        head = verdict or ""
    if verdict is None:
        missing = [n for n, p in zip(pair.names, chosen, strict=True) if p is None]
        out.reason = ("no passage names " + ", ".join(repr(n) for n in missing)) if missing else \
            f"the checks do not decide: {out.log_odds}"
        return None
    out.verdict = verdict
    # the passages that decided, one marker each (one passage may name both)
    passages, citations, markers = parts.number([(chosen[i], None) for i in by])
    if mode == "short":
        text = head + " " + "".join(f"[{m}]" for m in dict.fromkeys(markers))
    else:
        said = "; ".join(f"{out.sub_questions[i]} {out.answers[i]} [{m}]" for i, m in zip(by, markers, strict=True))
        text = f"{head}: {said}."
    answer = Answer(question=pair.question, text=text, citations=citations, passages=passages, mode=mode,
                    grounded=True, queries=list(out.sub_questions))
    answer.refusal_calibration = dict(calibration)
    return answer


async def _avalues(pair: PairQuestion, mode: str, ask: Any, out: Outcome) -> Any | None:
    """A "same" or "shared" question from each name's grounded short answer: compared in code
    (`same_verdict`) or the value they share (`shared_value`), citing both passages."""
    from . import parts

    answers, texts, fault = await parts.aeach(out.sub_questions, pair.names, ask)
    out.answers = texts
    restated = [n for n, t in zip(pair.names, texts, strict=True) if t and _norm(t) in _norm(n)]
    if not fault and restated:  # "What is the nationality of A?" answered "A"
        fault = "the answer restates " + ", ".join(repr(n) for n in restated)
    if fault:
        out.reason = fault
        return None
    values = [t for t in texts if t is not None]
    if pair.kind == "shared":
        verdict = shared_value(values)
        head = verdict or ""
    else:
        # read without the names ("XR-200 ... 42 minutes": 42, not 200)
        verdict = same_verdict([without(v, pair.names) for v in values], [cited(a).text for a in answers])
        head = (verdict or "").capitalize()
    if verdict is None:
        out.reason = f"the values do not decide: {values[0]!r} / {values[1]!r}"
        return None
    out.verdict = verdict
    passages, citations, markers = parts.cite(answers)
    marks = "".join(f"[{m}]" for m in dict.fromkeys(markers))
    if mode == "short":
        text = f"{head} {marks}"
    else:
        text = (f"{head}: {values[0]} for {pair.names[0]} [{markers[0]}], {values[1]} for "
                f"{pair.names[1]} [{markers[1]}].")
    return parts.combine(pair.question, text, mode, answers, (passages, citations), answers[0].refusal_calibration)
