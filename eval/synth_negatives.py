"""The unanswerable questions of a synthetic own-corpus set (eval/synth_own.py): a question
rewritten so the group's passages no longer hold it (a wrong entity, another number), and the
one check every negative passes before it is kept (`unsupported`). Apart from the group building
so the rule "really unsupported" reads, and is tested, on its own."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from eval.answers import contains_answer, is_cjk, normalize_zh
from retrieval.entities import extract, normalize


def unsupported(group_texts: Sequence[str], answers: Sequence[str] = (), names: Sequence[str] = (),
                numbers: Sequence[str] = ()) -> bool:
    """Whether nothing in the group's passages supports a negative: no passage contains a gold
    answer, the swapped-in name (normalised, CJK by characters) or the rewritten number (as a whole
    number). The one test every negative passes before it is kept."""
    for t in group_texts:
        if answers and contains_answer(t, answers):
            return False
        if any(_mentions(t, n) for n in names):
            return False
        if any(re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d])", t) for n in numbers):
            return False
    return True


def _mentions(text: str, name: str) -> bool:
    if is_cjk(name):
        return normalize_zh(name) in normalize_zh(text)
    return f" {normalize(name)} " in f" {normalize(text)} "


_NUMBER = re.compile(r"(?<![\w.,])(\d{1,4})(?![\w.,]?\d)")


def _other_number(n: str, rng: random.Random, texts: Sequence[str]) -> str | None:
    """A different number of the same kind (a year stays a plausible year) that no passage holds."""
    v = int(n)
    for _ in range(20):
        if len(n) == 4 and 1000 <= v <= 2100:
            w = v + rng.choice([-1, 1]) * rng.randint(2, 30)
        else:
            w = v + rng.choice([-1, 1]) * rng.randint(1, max(2, v // 2 + 1))
        if w > 0 and w != v and unsupported(texts, numbers=[str(w)]):
            return str(w)
    return None


def number_negative(question: str, texts: Sequence[str], rng: random.Random) -> tuple[str, str] | None:
    """The question with one number the passages state rewritten to one they do not: (question,
    new number), or None when it names no such number."""
    joined = "\n".join(texts)
    found = [m for m in _NUMBER.finditer(question) if not unsupported([joined], numbers=[m.group(1)])]
    if not found:
        return None
    m = rng.choice(found)
    new = _other_number(m.group(1), rng, texts)
    if new is None:
        return None
    return question[: m.start(1)] + new + question[m.end(1):], new


def text_names(text: str, title: str = "") -> dict[str, str]:
    """Names in a text: the entity extractor's (retrieval/entities.py) for Latin script; for CJK
    text only the title (its extractor's CJK pieces are whole clauses, not names)."""
    if is_cjk(text):
        return {normalize(title): title} if title else {}
    return {k: v for k, v in extract(text).items() if len(v) > 2 and not v.isdigit()}


def entity_negative(question: str, texts: Sequence[str], titles: Sequence[str], pool: Sequence[str],
                    rng: random.Random) -> tuple[str, str] | None:
    """The question with its key name (one the passages mention) swapped for a name from elsewhere
    in the corpus that no passage of the group mentions: (question, the new name), or None."""
    joined = "\n".join(texts)
    if is_cjk(question):
        keys = [t for t in titles if t and t in question]
    else:
        keys = [v for v in text_names(question).values() if _mentions(joined, v) and v in question]
    if not keys:
        return None
    old = max(keys, key=len)
    words = len(old.split())
    same = [n for n in pool if (is_cjk(n) == is_cjk(old)) and (is_cjk(n) or len(n.split()) == words)
            and normalize(n) != normalize(old)]
    rng.shuffle(same)
    for new in same[:50]:
        if unsupported(texts, names=[new]) and not _mentions(question, new):
            return question.replace(old, new, 1), new
    return None
