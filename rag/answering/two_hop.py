"""Questions answered through another answer ("What is the fight song of the university whose main
campus is in Lawrence, Kansas?"): the engine splits the question into a first question and a
second that names the first one's answer as #1; each is an ordinary grounded short answer.

Why: the short answer decides per passage, and no single passage answers a bridge question (the
passage with the fight song does not say Lawrence, Kansas), so it refuses: 26 of the 52 bridge
questions of the reported HotpotQA sample. Asked in two steps, each step is a question one passage
answers, decided by the refusal model fitted for such questions. Only a question the ordinary
answer refuses is split (an answer given is never replaced), English only (the examples are).
A split is used only when it is one: a first question that does not already ask everything the
question asks (`no_first`: the question restated, however reworded, which the one-step answer has
just refused), a second that names #1, a first answer that is a name or a number (not "garden")
the question does not already name, a second answer that does not restate the first, and, where
both say, a second question asking for the same kind of answer (a date for a date). A question naming two options
("A or B?") is answered by one of them, never by a chain.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..citations import answer_span, content_words

# written for this project, not taken from any dataset
_EXAMPLES = (
    ("Which team did the director of the film Green Harbour play for?",
     "1. Who directed the film Green Harbour?\n2. Which team did #1 play for?"),
    ("In which city was the founder of Ostby Sailing Club born?",
     "1. Who founded Ostby Sailing Club?\n2. In which city was #1 born?"),
    ("What river flows through the town where the Halden bakery is located?",
     "1. In which town is the Halden bakery located?\n2. What river flows through #1?"),
)
_SYSTEM = "You split a question that needs two facts, one found through the other, into two questions."
_SPLIT = re.compile(r"^\s*1\.\s*(?P<first>[^\n]+?)\s*\n\s*2\.\s*(?P<second>[^\n]+)", re.MULTILINE)
_FIRST_LINE = re.compile(r"^\s*1\.\s*(?P<first>.+?)\s*$")


@dataclass(frozen=True)
class Split:
    first: str
    second: str  # names the first one's answer as #1

    def then(self, answer: str) -> str:
        return self.second.replace("#1", answer)


def writer_messages(question: str) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": _SYSTEM}]
    for q, split in _EXAMPLES:
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": split}]
    return [*msgs, {"role": "user", "content": question}]


def parse_split(question: str, written: str) -> Split | None:
    """The two questions of the engine's reply, or None when it is no split: not two numbered
    questions, a first that is no first question (`no_first`), a second that does not name #1, or
    a second that asks for another kind of answer than the question (`answer_type`)."""
    m = _SPLIT.search(written)
    if m is None:
        return None
    first, second = m.group("first").strip(), m.group("second").strip()
    if no_first(question, first) or "#1" not in second or not second.endswith("?"):
        return None
    asked, found = answer_type(question), answer_type(second)
    if asked and found and asked != found:  # "Which man ... born in 1930?" split into "When was #1 born?"
        return None
    return Split(first, second)


def no_first(question: str, first: str) -> bool:
    """Whether `first` cannot be the first of two steps: not a question, naming #1, or asking
    everything `question` asks (each of its content words, `rag.citations.content_words`, is in
    `first`, and where the question names its answer type, `answer_type`, `first` names the same:
    "... based where?" -> "What airline ...?" asks something else). Why the last: a first step that asks the whole question again is the question the
    one-step answer has just refused ("How do regimes not fight ...?" -> "What regimes do not
    fight ...?"); its short answer costs a retrieval, the checks and a decode, and on 40 SQuAD
    questions it was refused each time. A real first step leaves out what the second asks."""
    if "#1" in first or not first.endswith("?"):
        return True
    asked = answer_type(question)
    if asked is not None and answer_type(first) != asked:
        return False
    return set(content_words(question)) <= set(content_words(first))


def bridges(answer: str) -> bool:
    """Whether a first answer can stand in a second question: a name or a number (capitalised or
    starting with a digit), at most eight words."""
    words = answer.split()
    return 0 < len(words) <= 8 and (answer[:1].isupper() or answer[:1].isdigit())


_TYPES = (  # the first that matches anywhere in a question ("... has won how many tournaments?")
    ("number", re.compile(r"\bhow\s+(?:many|much)\b", re.IGNORECASE)),
    ("date", re.compile(r"\b(?:when|(?:what|which)\s+(?:year|date|decade|century))\b", re.IGNORECASE)),
    ("place", re.compile(r"\b(?:where|(?:what|which)\s+(?:city|town|country|state|county|region|village))\b",
                         re.IGNORECASE)),
    ("person", re.compile(r"\b(?:who|whom|(?:what|which)\s+(?:man|woman|person|actor|actress|player|singer|author|"
                          r"writer|director|musician|politician))\b", re.IGNORECASE)),
)


def answer_type(question: str) -> str | None:
    """What kind of answer a question asks for (number, date, place, person), None when unclear."""
    return next((name for name, pattern in _TYPES if pattern.search(question)), None)


def first_fault(question: str, a1: str | None) -> str | None:
    """Why the first step's answer `a1` (None: refused) cannot lead on, or None when it can: it
    must bridge (`bridges`) and be something the question does not already name ("Who was X?"
    answered "X" found nothing)."""
    if a1 is None:
        return "refused: the first question"
    if not bridges(a1):
        return f"the first answer is no name or number: {a1!r}"
    if _norm(a1) in _norm(question):
        return f"the first answer is named in the question: {a1!r}"
    return None


def second_fault(a1: str, a2: str | None) -> str | None:
    """Why the second step's answer `a2` (None: refused) is no answer, or None when it is: it must
    not restate the first ("Shirley Temple Black" for a question about Shirley Temple)."""
    if a2 is None:
        return "refused: the second question"
    if _norm(a1) in _norm(a2):
        return "the second answer restates the first"
    return None


@dataclass
class Outcome:
    """What the two-step path did (`Answer.two_hop`): `used` when its answer is the one given."""

    questions: list[str] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)
    used: bool = False
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"questions": self.questions, "answers": self.answers, "used": self.used, "reason": self.reason}


async def awrite(generator: Any, question: str, max_tokens: int = 64) -> str:
    """The engine's split of `question` (greedy), cut off once its first line is a numbered
    question that `no_first` rejects: whatever follows, `parse_split` would find no split (the
    second line is ~15-20 tokens, ~1 s of a 1.5B's decode on two AVX2 cores)."""
    from inference.sampling_params import SamplingParams

    prompt = generator.tokenizer.apply_chat_template(writer_messages(question), tokenize=False,
                                                     add_generation_prompt=True)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    text, first_seen = "", False
    # closed when left early: the engine request is aborted
    async with contextlib.aclosing(generator.astream(prompt, params)) as outs:
        async for out in outs:
            text = out.text
            if first_seen:
                continue
            line, first_seen, _ = text.partition("\n")  # judged once, when the first line is whole
            m = _FIRST_LINE.match(line) if first_seen else None
            if m is not None and no_first(question, m.group("first")):
                break
    return text


async def aanswer(gen: Any, question: str, mode: str, ask: Any) -> tuple[Any | None, Outcome]:
    """The two-step answer to `question`, or None with the outcome saying why not. `gen` writes the
    split; `ask(question)` awaits one grounded short answer (an `Answer`) with the caller's filters
    and collection."""
    from .named import options

    t0 = time.perf_counter()
    out = Outcome()
    if options(question) is not None:  # "Who ranked higher, A or B?" is answered by A or B, not a chain
        out.reason = "the question names two options"
        return None, out
    written = await awrite(gen, question)
    split = parse_split(question, written)
    if split is None:
        out.reason = "no split: " + " / ".join(written.strip().splitlines())[:160]
        return None, out
    out.questions = [split.first]
    first = await ask(split.first)
    a1 = answer_span(first)
    out.answers = [a1]
    if (fault := first_fault(question, a1)) is not None:
        out.reason = fault
        return None, out
    assert a1 is not None
    out.questions.append(split.then(a1))
    second = await ask(out.questions[1])
    a2 = answer_span(second)
    out.answers.append(a2)
    if (fault := second_fault(a1, a2)) is not None:
        out.reason = fault
        return None, out
    out.used = True
    answer = assemble(question, split, first, second, mode)
    answer.timings_ms["two_hop"] = (time.perf_counter() - t0) * 1000
    return answer, out


def assemble(question: str, split: Split, first: Any, second: Any, mode: str) -> Any:
    """The answer from the two steps' short answers (`Answer`s, both given): the second's span,
    citing [1] the passage holding it and [2] the one that led to it (one marker when both are the
    same passage); long mode also states the first step."""
    from . import parts

    a1, a2 = answer_span(first), answer_span(second)
    passages, citations, markers = parts.cite((second, first))
    via = markers[1]  # the first step's passage (1 when both came from one passage)
    if mode == "short":
        text = f"{a2} " + "".join(f"[{n}]" for n in range(1, len(passages) + 1))
    else:
        text = f"{a2} [1] ({split.first} {a1} [{via}])."
    answer = parts.combine(question, text, mode, (first, second), (passages, citations),
                           second.refusal_calibration)
    return answer


class RefusalHold:
    """The deltas of an answer that may still be replaced by a two-step one: held back while they
    spell (a prefix of) the refusal, passed through from the first that does not. Why: what a
    client was streamed must add up to the answer it is given; a refusal arrives as its own text,
    so holding it costs the reader nothing, and any other answer streams as before."""

    def __init__(self, refusal: str, on: bool):
        self.refusal, self.on = refusal, on
        self.held: list[str] = []
        self.shown = False  # something other than the refusal was streamed: the answer stays

    def feed(self, delta: str) -> list[str]:
        """What to stream now for `delta`."""
        if self.on and not self.shown and self.refusal.startswith("".join(self.held) + delta):
            self.held.append(delta)
            return []
        self.shown = True
        out, self.held = [*self.held, delta], []
        return out

    def replaceable(self, answer: Any) -> bool:
        """Whether `answer` (the final one) may be replaced: a refusal of which only its own text,
        or nothing, was held."""
        return self.on and not self.shown and bool(answer.refused)

    def release(self) -> list[str]:
        """The held deltas, when the answer stands."""
        out, self.held = self.held, []
        return out


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())
