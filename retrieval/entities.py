"""Entity extraction for the co-occurrence graph: no model, no dictionary, one pass of regexes.

Why heuristics and not an LLM or a tagger: LLM extraction is most of GraphRAG's indexing cost and
models under ~7B find few entities; FastGraphRAG / LazyGraphRAG show that cheap candidates plus
co-occurrence carry most of the multi-hop signal. What counts as an entity here:

- runs of capitalised words, with lowercase connectors inside ("Battle of Manila", "University of
  Kansas"); a lone capitalised stopword or sentence starter ("The", "However") is not one;
- quoted spans of a few words (film, song and book titles: "The Storyteller"), and CJK title
  brackets 《...》「...」;
- the chunk's own document title, without a trailing "(disambiguation)": it is how other
  documents refer to this one, which is what makes a bridge document reachable;
- CJK: no whitespace, so a run is cut at punctuation, digits and common function characters
  (的 是 在 了 和 ...) and each piece of 2..2*max_words characters is a candidate (a RAKE-style
  split; names come out whole because function characters rarely occur inside them).

Pure numbers, years and numbers with units are never entities (they link unrelated documents).
Keys are normalised (NFKC, case-folded, Traditional folded to Simplified, punctuation to spaces,
leading "the" and trailing "'s" dropped) so "The Beatles", "the Beatles'" and "BEATLES" meet.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from indexing.language import CJK_RANGES as _CJK

from .analyzer import ENGLISH_STOPWORDS, simplified_table

# Bump when extraction changes what it returns: it is part of the index manifest (and of the eval
# index keys), so a graph built by an older extractor is rebuilt instead of silently mixed.
EXTRACTOR_VERSION = 1

# words (letters/digits, inner apostrophes, dots, hyphens, ampersands), CJK runs, and the
# punctuation that ends a name (kept as tokens so a run never crosses them)
_TOKEN = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+(?:['’.\-&][^\W_{_CJK}]+)*)|([.!?;:,()\[\]\"“”«»/]|\s-\s)")
_QUOTED = re.compile(r"[\"“”«»]([^\"“”«»\n]{2,120}?)[\"“”«»]")
_CJK_QUOTED = re.compile(r"[《〈「『]([^《》〈〉「」『』\n]{1,40})[》〉」』]")
_PAREN_TAIL = re.compile(r"\s*\([^()]*\)\s*$")
_NONWORD = re.compile(rf"[^\w{_CJK}]+")
_DIGITS = re.compile(r"^[\d\s.,]+$")
_HAS_ALPHA = re.compile(rf"[^\W\d_]|[{_CJK}]")
# characters that almost never occur inside a Chinese name: a CJK run is cut at them
_CJK_BREAK = re.compile(
    r"[的是在了和与及或并而为于由以被把对从到将其之也有这那一个们等中上下后前时所就都还又即则他她它位"
    r"、，。！？；：“”‘’（）《》〈〉「」『』\s0-9０-９]+")
# connectors allowed inside a capitalised run ("Battle of Manila", "Pirates of the Caribbean")
_CONNECT = frozenset(["of", "the", "de", "la", "le", "du", "des", "del", "di", "da", "van", "von", "der", "den", "for", "on"])
_MONTHS = frozenset(["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"])
_STARTERS = frozenset(["however", "although", "though", "after", "before", "during", "since", "while", "when", "where", "whereas", "many", "several", "some", "other", "others", "there", "this", "these", "those", "following", "according", "both", "each", "today", "later", "early", "also", "including", "despite", "because", "within", "without", "among", "upon", "unlike", "like", "such", "its", "it", "his", "her", "their", "our", "january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]) | ENGLISH_STOPWORDS


@lru_cache(maxsize=1)
def _fold() -> dict[int, str]:
    return simplified_table()


def normalize(name: str) -> str:
    """The entity key: equal for the spellings of one name that differ in case, script,
    punctuation, a leading article or a possessive."""
    s = unicodedata.normalize("NFKC", name).casefold().translate(_fold())
    s = s.replace("’", "'")
    if s.endswith("'s"):
        s = s[:-2]
    s = _NONWORD.sub(" ", s).strip()
    if s.startswith("the "):
        s = s[4:]
    return s


def _valid(key: str) -> bool:
    return bool(key) and _HAS_ALPHA.search(key) is not None and _DIGITS.match(key) is None \
        and key not in _STARTERS


def title_entity(title: str) -> str:
    """A document title as it is cited elsewhere: "Battle of Manila (1945)" -> "Battle of Manila"."""
    return _PAREN_TAIL.sub("", title).strip()


def extract(text: str, title: str = "", max_words: int = 6) -> dict[str, str]:
    """Entities of one chunk: normalised key -> the first surface form seen."""
    out: dict[str, str] = {}

    def add(surface: str) -> None:
        surface = surface.strip(" '’-.()[]")
        key = normalize(surface)
        if _valid(key) and key not in out:
            out[key] = surface

    if title:
        add(title_entity(title))
    text = unicodedata.normalize("NFKC", text)
    for m in _QUOTED.finditer(text):
        if len(m.group(1).split()) <= max_words:
            add(m.group(1))
    for m in _CJK_QUOTED.finditer(text):
        add(m.group(1))
    run: list[str] = []
    sentence_start = True

    def flush() -> None:
        while run and run[-1].lower() in _CONNECT:
            run.pop()
        if run and not (len(run) == 1 and run[0].lower() in _STARTERS):
            for i in range(0, len(run), max_words):  # an over-long run: keep it in pieces
                add(" ".join(run[i : i + max_words]))
        run.clear()

    for cjk, word, punct in _TOKEN.findall(text):
        if cjk:
            flush()
            for piece in _CJK_BREAK.split(cjk.translate(_fold())):
                if 2 <= len(piece) <= 2 * max_words:
                    add(piece)
            sentence_start = False
            continue
        if punct == "." and run and len(run[-1]) == 1 and run[-1].isupper():
            continue  # an initial inside a name: "Tom T. Hall"
        if punct:
            flush()
            sentence_start = punct in ".!?;:"
            continue
        first = word[0]
        if first.isupper() and not (sentence_start and word.lower() in _STARTERS) or run and word.lower() in _CONNECT:
            run.append(word)
        elif run and word.isdigit() and len(word) <= 4 and not run[-1][0].isdigit() and run[-1].lower() not in _MONTHS:
            run.append(word)  # "Apollo 11", "Windows 95"
        else:
            flush()
        sentence_start = False
    flush()
    return out


def question_keys(question: str, known: dict[str, object] | set[str], max_words: int = 6) -> list[str]:
    """Entity keys a question names: its own extracted entities plus every word n-gram (CJK:
    substring) whose normalised form is a known key, so lowercase or partial mentions link too."""
    found = dict.fromkeys(k for k in extract(question, max_words=max_words) if k in known)
    words = [w for w in normalize(question).split(" ") if w]
    for n in range(1, max_words + 1):
        for i in range(len(words) - n + 1):
            key = " ".join(words[i : i + n])
            if key in known and not (n == 1 and key in _STARTERS):
                found.setdefault(key)
    for run in re.findall(rf"[{_CJK}]+", normalize(question)):
        for n in range(2, min(len(run), 2 * max_words) + 1):
            for i in range(len(run) - n + 1):
                if run[i : i + n] in known:
                    found.setdefault(run[i : i + n])
    return list(found)
