"""Two named things in a question and in passages: the options of "..., A or B?", whether a
passage names a thing as a whole name, a short answer's cited passage, a value read without the
names. Why one home: the comparisons (`compare.py`), the questions about two things (`yes_no.py`)
and the two-step path (`two_hop.py`, which leaves "A or B" questions alone) must find the same names
the same way.
"""

from __future__ import annotations

import re
from typing import Any

# a name's words when no comma sets the options apart ("who is younger Ulrich Walter or Luca Parmitano?")
NAME_WORD = re.compile(r"(?:[A-Z0-9][\w'’.\-]*|of|the|de|da|del|di|du|der|den|van|von|le|la|al|el|ul|bin|ibn|and|&)")
# "Which ...", "Who ...": a question asking for one of the options ("Was the first king A or B?" is not
# a comparison of two dates)
WH = re.compile(r"^\W*(?:and\s+|so\s+)?(?:which|who|whose|what)\b", re.IGNORECASE)


def options(question: str) -> tuple[str, str] | None:
    """The two options of "..., A or B?" / "...: A or B" / "... A or B?" (a capitalised name run
    before " or " when no comma or colon sets A apart)."""
    q = question.strip().rstrip("?").strip()
    if q.count(" or ") != 1:
        return None
    left, right = q.split(" or ")
    b = re.split(r"[,?:;]", right)[0].strip()
    if re.search(r"[,:]", left):
        a = re.split(r"[,:]", left)[-1].strip()
    else:
        words = left.split()
        run: list[str] = []
        for w in reversed(words):
            if not NAME_WORD.fullmatch(w) or (not run and w in ("of", "the", "de", "da", "del", "and")):
                break
            run.append(w)
        a = " ".join(reversed(run))
    if not a or not b or len(a) > 80 or len(b) > 80 or a.lower() == b.lower():
        return None
    return a, b


NOT_NAMES = frozenset((
    "the", "a", "an", "in", "on", "at", "by", "for", "from", "with", "of", "and", "or", "but", "when", "after",
    "before", "during", "since", "while", "as", "to", "both", "unlike", "like", "than", "then", "later",
    "today", "its", "his", "her", "their", "this", "that", "these", "those"))


def names(passage: Any, option: str) -> bool:
    """Whether `passage` (its title or text) names `option` (case and a leading article aside) as
    a whole name: not inside a longer one ("Kenton Terry Richardson" does not name "Terry Richardson",
    whose birth year it would otherwise lend)."""
    name = re.sub(r"^(?:the|a|an)\s+", "", " ".join(option.split()), flags=re.IGNORECASE)
    # not after a capitalised word of the same name run ("In", "The", ... start sentences, not names)
    pattern = re.compile(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", re.IGNORECASE)
    for text in (passage.title or "", passage.text):
        flat = " ".join(text.split())
        for m in pattern.finditer(flat):
            before = flat[: m.start()].rstrip()
            prev = before.split(" ")[-1] if before else ""
            extended = prev[:1].isupper() and not re.search(r"[.!?:;\"(,]$", prev) \
                and prev.lower() not in NOT_NAMES
            if not extended:
                return True
    return False


def without(text: str, names_: tuple[str, str]) -> str:
    """`text` with the names blanked out, so a value is not read from a name ("XR-200 ... 42 minutes":
    42, not 200)."""
    for name in names_:
        text = re.sub(re.escape(name), " ", text, flags=re.IGNORECASE)
    return text


def cited(answer: Any) -> Any:
    """The passage a short answer cites."""
    return next(p for p in answer.passages if p.chunk_id == answer.citations[0].chunk_id)


async def asub_questions(generator: Any, question: Any, max_tokens: int = 40) -> tuple[list[str] | None, str]:
    """Each thing's question of a comparison or of a question about two things (`question`: a
    `compare.Comparison` or `yes_no.PairQuestion`), from the engine's one-line question about the
    first (greedy), and that line; None when it is not one (`question.sub_questions`)."""
    from inference.sampling_params import SamplingParams

    prompt = generator.tokenizer.apply_chat_template(question.writer_messages(), tokenize=False,
                                                     add_generation_prompt=True)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=["\n"])
    written = (await generator.agenerate_many([prompt], [params]))[0].text
    return question.sub_questions(written), written
