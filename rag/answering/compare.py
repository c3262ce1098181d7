"""Questions that compare two named options by a date or a number ("Who was born first, A or B?",
"Which lake is deeper, Lake Orm or Lake Vessel?"): each option's value is answered on its own, as
a grounded and calibrated short answer, and the two values are compared in code.

Why: asked to choose, the packaged models pick the right option about as often as a coin (0.48
on hotpotqa_pooled dev in session 20, 0.58 in session 28), and the per-passage short answer
refuses most of these questions, since no single passage answers them. Each option's date or
count is what one passage does answer ("When was A born?"), with the refusal model fitted for
such questions. The engine writes that one-entity question once, for the first option; the second
option's question is the same text with the other name, so both ask for the same property.
Anything not decidable (an option's answer refused, a value that does not parse, different units,
overlapping dates, a tie) falls back to the ordinary answer of the question as asked.
English only: the rule reads English comparatives.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from .named import WH, asub_questions, cited, options, without

_EARLY = r"first|earlier|earliest|older|oldest|sooner"
_LATE = r"later|latest|younger|youngest|more\s+recent(?:ly)?|most\s+recent(?:ly)?|newer|newest"
_MORE = (r"more|most|larger|largest|bigger|biggest|higher|highest|taller|tallest|longer|longest|greater|"
         r"greatest|busier|busiest|heavier|heaviest|deeper|deepest|wider|widest")
_LESS = r"fewer|fewest|less|least|smaller|smallest|shorter|shortest|lower|lowest|lighter|lightest"
# checked in this order: "more recently" is a date, not a count
_DIRECTIONS: tuple[tuple[str, str, Literal["date", "number"], Literal["min", "max"]], ...] = (
    ("early", _EARLY, "date", "min"), ("late", _LATE, "date", "max"),
    ("more", _MORE, "number", "max"), ("less", _LESS, "number", "min"))

# The one-entity question for the first option: written by the engine from these examples (written
# for this project, not taken from any dataset).
_EXAMPLES = (
    ("Which bridge opened first, the Alder Bridge or the Stone Bridge?", "the Alder Bridge",
     "When did the Alder Bridge open?"),
    ("Who is younger, Anna Berg or Tom Lind?", "Anna Berg", "When was Anna Berg born?"),
    ("Which lake is deeper, Lake Orm or Lake Vessel?", "Lake Orm", "How deep is Lake Orm?"),
    ("Which club has more members, Harbour Rowing Club or Ostby Sailing Club?", "Harbour Rowing Club",
     "How many members does Harbour Rowing Club have?"),
)
_SYSTEM = "You rewrite a comparison question as a question about one of its two options."


@dataclass(frozen=True)
class Comparison:
    """A comparison question: its two options as written, whether it compares dates or numbers and
    whether the earlier/smaller (`min`) or later/larger (`max`) value wins."""

    question: str
    options: tuple[str, str]
    kind: Literal["date", "number"]
    best: Literal["min", "max"]

    def writer_messages(self) -> list[dict[str, str]]:
        """The chat that asks the engine for the first option's one-entity question."""
        msgs = [{"role": "system", "content": _SYSTEM}]
        for q, x, sub in _EXAMPLES:
            msgs += [{"role": "user", "content": _ask(q, x)}, {"role": "assistant", "content": sub}]
        return [*msgs, {"role": "user", "content": _ask(self.question, self.options[0])}]

    def sub_questions(self, written: str) -> list[str] | None:
        """Both options' questions from the first one's (`written`), or None when it does not name
        the first option (the writer drifted: nothing guarantees it asks about that option)."""
        first = written.strip().split("\n")[0].strip()
        a, b = self.options
        at = first.lower().find(a.lower())
        if at < 0 or not first.endswith("?") or len(first) > 200:
            return None
        return [first, first[:at] + b + first[at + len(a):]]


def _ask(question: str, option: str) -> str:
    return f"Comparison: {question}\nWrite the question that asks for the date or number of {option} alone."


def parse(question: str, language: str) -> Comparison | None:
    """The comparison `question` makes, or None: an English which/who/what question naming two
    options joined by one " or " ("..., A or B?") with a comparative word before them that orders
    dates or numbers."""
    if language != "en" or not WH.match(question):
        return None
    opts = options(question)
    if opts is None:
        return None
    stem = question[: question.rfind(opts[0])].lower()  # the comparative is asked before the options
    for _, pattern, kind, best in _DIRECTIONS:
        if re.search(rf"\b(?:{pattern})\b", stem):
            return Comparison(question, opts, kind, best)
    return None


# ---- values ---------------------------------------------------------------------------------------

_MONTHS = {m: i + 1 for i, m in enumerate((
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december"))}
_MONTHS.update({m[:3]: v for m, v in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_WORD_NUMBERS = {w: i for i, w in enumerate((
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"))}
_WORD_NUMBERS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
                      "ninety": 90, "hundred": 100, "dozen": 12, "a dozen": 12})
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9}
# measures a count can be in: a value in one is compared only with a value in the same; any other
# word after a number ("species", "inhabitants") is what is counted, not a measure
_UNIT_SPELLINGS = {
    "m": ("m", "metre", "metres", "meter", "meters"), "cm": ("cm", "centimetre", "centimetres", "centimeters"),
    "km": ("km", "kilometre", "kilometres", "kilometer", "kilometers"), "ft": ("ft", "feet", "foot"),
    "in": ("inch", "inches"), "mi": ("mi", "mile", "miles"), "km2": ("km2", "km²"), "ha": ("ha", "hectare", "hectares"),
    "acre": ("acre", "acres"), "sq": ("sq", "square"), "kg": ("kg", "kilogram", "kilograms", "kilo", "kilos"),
    "t": ("tonne", "tonnes", "ton", "tons"), "lb": ("lb", "lbs", "pound", "pounds"),
    "s": ("second", "seconds"), "min": ("minute", "minutes", "min"), "h": ("hour", "hours"),
    "day": ("day", "days"), "week": ("week", "weeks"), "month": ("month", "months"), "year": ("year", "years"),
    "decade": ("decade", "decades"), "century": ("century", "centuries"),
    "eur": ("euro", "euros", "eur", "€"), "usd": ("dollar", "dollars", "usd", "$"),
}
_UNITS = {spelling: unit for unit, spellings in _UNIT_SPELLINGS.items() for spelling in spellings}


@dataclass(frozen=True)
class DateValue:
    """A date as the closed interval of days it may mean: "1946" is all of 1946, "the 1970s" ten
    years, "November 25, 2009" one day. (year, month, day) tuples; BC years are negative."""

    lo: tuple[int, int, int]
    hi: tuple[int, int, int]


@dataclass(frozen=True)
class NumberValue:
    value: float
    unit: str = ""  # the normalised word after the number ("m", "ft", "species"...), "" when none
    year_like: bool = False  # a bare 4-digit number that reads as a year (1000-2100)


def parse_date(text: str) -> DateValue | None:
    """The first date in `text` (a year, with a month and a day where written; "1970s" a decade,
    "19th century" a century)."""
    s = text.lower()
    c = re.search(r"\b(\d{1,2})(?:st|nd|rd|th)[\s-]+century\b(\s*(?:bc|bce)\b)?", s)
    if c is not None and 1 <= int(c.group(1)) <= 21:
        n = int(c.group(1))
        lo, hi = (n - 1) * 100 + 1, n * 100
        if c.group(2):
            lo, hi = -hi, -lo
        return DateValue((lo, 1, 1), (hi, 12, 31))
    m = re.search(r"(?<![\d,.])(\d{3,4})(s)?(?!\d)(\s*(?:bc|bce)\b)?", s)
    if m is None:
        return None
    year = int(m.group(1))
    if m.group(3):
        year = -year
    elif year < 500 or year > 2100:
        return None
    if m.group(2):  # a decade
        return DateValue((year, 1, 1), (year + 9, 12, 31))
    month = next((_MONTHS[w] for w in re.findall(r"[a-z]+", s) if w in _MONTHS), 0)
    if not month:
        return DateValue((year, 1, 1), (year, 12, 31))
    rest = s[: m.start()] + " " + s[m.end():]
    d = re.search(r"(?<![\d.:])([0-3]?\d)(?:st|nd|rd|th)?(?![\d.:])", rest)
    day = int(d.group(1)) if d and 1 <= int(d.group(1)) <= 31 else 0
    if not day:
        return DateValue((year, month, 1), (year, month, 31))
    return DateValue((year, month, day), (year, month, day))


def parse_number(text: str, context: str = "") -> NumberValue | None:
    """The first number in `text` (digits with thousands separators and decimals, or a number word
    up to "twenty", the tens, "hundred", "dozen"), times a following thousand/million/billion, with
    the measure written after it (`_UNITS`; "" when none). A span that stops before its measure
    ("8035" of "8035 m") takes it from `context`, the passage it was copied from."""
    s = text.lower().replace("\u00a0", " ")
    words = "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True))
    m = re.search(rf"(?<![\w.])(?<![a-z]-)(\d[\d,]*(?:\.\d+)?|(?:{words})\b)\s*"
                  rf"(?:(thousand|million|billion)\b)?\s*([a-z²2€$]*)", s)
    if m is None:
        return None
    raw = m.group(1)
    if raw in _WORD_NUMBERS:
        value = float(_WORD_NUMBERS[raw])
    else:
        try:
            value = float(raw.replace(",", ""))
        except ValueError:
            return None
    value *= _SCALES.get(m.group(2) or "", 1.0)
    unit = _UNITS.get(m.group(3) or "", "")
    if not unit and not s[m.end():].strip() and context:
        at = " ".join(context.lower().split()).find(" ".join(s.split()))
        if at >= 0:
            after = re.match(r"\s*([a-z²2€$]+)", " ".join(context.lower().split())[at + len(" ".join(s.split())):])
            unit = _UNITS.get(after.group(1), "") if after else ""
    year_like = bool(re.fullmatch(r"\d{4}", raw)) and 1000 <= value <= 2100 and not unit and not m.group(2)
    return NumberValue(value, unit, year_like)


def parse_value(text: str, kind: Literal["date", "number"], context: str = "") -> DateValue | NumberValue | None:
    """`text`'s date or number; `context`: the passage it was copied from (a number's measure)."""
    return parse_date(text) if kind == "date" else parse_number(text, context)


def winner(cmp: Comparison, values: list[DateValue | NumberValue | None]) -> int | None:
    """The index of the option whose value wins, or None when the values cannot decide: one is
    missing, their units differ (one written without a unit counts as different), a number reads as a year (a date, not a count), the two dates
    overlap ("1946" against "March 1946"), or they are equal."""
    a, b = values
    if a is None or b is None:
        return None
    if isinstance(a, DateValue) and isinstance(b, DateValue):
        if a.hi < b.lo:
            first = 0
        elif b.hi < a.lo:
            first = 1
        else:
            return None
        return first if cmp.best == "min" else 1 - first
    if isinstance(a, NumberValue) and isinstance(b, NumberValue):
        if a.unit != b.unit:  # "40 km" against "34,000": no common measure
            return None
        if a.year_like or b.year_like:  # a year is no count or measure ("launched 1996" for "operational longer")
            return None
        if a.value == b.value:
            return None
        smaller = 0 if a.value < b.value else 1
        return smaller if cmp.best == "min" else 1 - smaller
    return None


# ---- the answer -----------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What the comparison path did (`Answer.comparison`): `used` when its answer is the one given;
    otherwise `reason` says why the question was answered as asked."""

    options: list[str]
    kind: str
    best: str
    sub_questions: list[str] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)  # each option's short answer (None: refused)
    chosen: int | None = None
    used: bool = False
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"options": self.options, "kind": self.kind, "best": self.best, "sub_questions": self.sub_questions,
                "answers": self.answers, "chosen": self.chosen, "used": self.used, "reason": self.reason}


async def aanswer(gen: Any, cmp: Comparison, mode: str, ask: Any) -> tuple[Any | None, Outcome]:
    """The comparison's answer, or None with the outcome saying why not. `gen`: the generator that
    writes the first option's question; `ask(question)` awaits one option's grounded short answer
    (an `Answer`) with the caller's filters and collection."""
    from . import parts

    t0 = time.perf_counter()
    out = Outcome(list(cmp.options), cmp.kind, cmp.best)
    subs, written = await asub_questions(gen, cmp)
    if subs is None:
        out.reason = f"the written question does not name {cmp.options[0]!r}: {written.strip()[:120]!r}"
        return None, out
    out.sub_questions = subs
    answers, texts, fault = await parts.aeach(subs, cmp.options, ask)
    out.answers = texts
    if fault:
        out.reason = fault
        return None, out
    # the value is not in the options' names ("XR-200 ... 42 minutes": 42, not 200)
    values = [parse_value(without(t, cmp.options), cmp.kind, cited(a).text)
              for t, a in zip(texts, answers, strict=True) if t is not None]
    won = winner(cmp, values)
    if won is None:
        out.reason = f"the values do not decide: {texts[0]!r} / {texts[1]!r}"
        return None, out
    out.chosen, out.used = won, True
    # the passage each option's value was read from, renumbered [1] and (when another) [2]
    passages, citations, markers = parts.cite(answers)
    lose = 1 - won
    if mode == "short":
        text = cmp.options[won] + " " + "".join(f"[{m}]" for m in dict.fromkeys((markers[won], markers[lose])))
    else:
        text = (f"{cmp.options[won]}: {texts[won]} [{markers[won]}], against {texts[lose]} for "
                f"{cmp.options[lose]} [{markers[lose]}].")
        text = text[0].upper() + text[1:]
    answer = parts.combine(cmp.question, text, mode, answers, (passages, citations), answers[0].refusal_calibration)
    answer.timings_ms["compare"] = (time.perf_counter() - t0) * 1000  # the two answers ran together
    return answer, out
