"""Citation markers: keep those that point at given passages, drop the rest, attribute if asked."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from indexing.language import CJK_RANGES

from .answer import Answer, Citation, Passage

_MARKER = re.compile(r"\[(\d+(?:\s*[,，、]\s*\d+)*)\]")
_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])")


def resolve_markers(text: str, passages: list[Passage]) -> tuple[str, list[Citation], int]:
    """Return (text with dangling markers removed, citations in order of first use, removed count)."""
    by_marker = {p.marker: p for p in passages}
    order: list[int] = []
    removed = 0

    def fix(m: re.Match[str]) -> str:
        nonlocal removed
        nums = [int(x) for x in re.split(r"\s*[,，、]\s*", m.group(1))]
        kept = [n for n in nums if n in by_marker]
        removed += len(nums) - len(kept)
        for n in kept:
            if n not in order:
                order.append(n)
        return "".join(f"[{n}]" for n in kept)

    cleaned = _MARKER.sub(fix, text)
    cleaned = re.sub(r"[ \t]+([.,;:!?。，])", r"\1", cleaned).strip()
    return cleaned, [to_citation(by_marker[n]) for n in order], removed


class MarkerFilter:
    """Streaming version of `resolve_markers`: text goes in as deltas, checked text comes out.

    A `[` is held back until it is clearly a marker (closed by `]`) or clearly not one, so a
    marker pointing at no passage is never shown, and the concatenated output equals the final
    answer text exactly.
    """

    def __init__(self, valid: set[int]):
        self.valid = valid
        self.used: list[int] = []
        self.removed = 0
        self._buf = ""
        self._started = False
        self._out: list[str] = []

    @property
    def text(self) -> str:
        """Everything emitted so far: exactly the concatenation of the streamed deltas."""
        return "".join(self._out)

    def feed(self, delta: str) -> str:
        out = []
        for ch in delta:
            if self._buf:
                self._buf += ch
                if ch == "]":
                    out.append(self._close())
                elif not (ch.isdigit() or ch in ",，、 ") or len(self._buf) > 24:
                    out.append(self._buf)
                    self._buf = ""
            elif ch == "[":
                self._buf = ch
            else:
                out.append(ch)
        return self._emit("".join(out))

    def flush(self) -> str:
        rest, self._buf = self._buf, ""
        return self._emit(rest)

    def _emit(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            self._started = bool(text)
        self._out.append(text)
        return text

    def _close(self) -> str:
        m = _MARKER.fullmatch(self._buf)
        self._buf_text, self._buf = self._buf, ""
        if m is None:
            return self._buf_text
        nums = [int(x) for x in re.split(r"\s*[,，、]\s*", m.group(1))]
        kept = [n for n in nums if n in self.valid]
        self.removed += len(nums) - len(kept)
        for n in kept:
            if n not in self.used:
                self.used.append(n)
        if len(kept) == len(nums):
            return self._buf_text
        return "".join(f"[{n}]" for n in kept)


def to_citation(p: Passage, inferred: bool = False) -> Citation:
    url = p.metadata.get("url") or (p.source if p.source.startswith(("http://", "https://")) else None)
    # An uploaded document is cited by the client's file name, not the server's copy of it.
    source = str(p.metadata.get("filename") or p.source)
    return Citation(marker=p.marker, chunk_id=p.chunk_id, doc_id=p.doc_id, source=source, title=p.title,
                    page=p.page, url=url, section=p.section, inferred=inferred)


def long_citations(text: str, used: Sequence[int], passages: list[Passage], attribute_uncited: bool,
                   min_overlap: float, refused: bool) -> list[Citation]:
    """A long answer's citations: the markers it holds (`used`: the passage numbers in order of first
    use); when it holds none, those overlap attribution finds (flagged `inferred`; the text stays what
    was streamed). A refusal cites nothing."""
    if refused:
        return []
    by_marker = {p.marker: p for p in passages}
    cites = [to_citation(by_marker[n]) for n in used if n in by_marker]
    if not cites and attribute_uncited:
        _, cites = attribute(text, passages, min_overlap)
    return cites


def _terms(text: str) -> set[str]:
    toks = [t.lower() for t in _WORD.findall(text)]
    out = {t for t in toks if len(t) > 2 and not t.isdigit()}
    # CJK text has no spaces: character bigrams stand in for words.
    for t in toks:
        if any("\u4e00" <= ch <= "\u9fff" for ch in t):
            out |= {t[i : i + 2] for i in range(len(t) - 1)}
    return out


def attribute(text: str, passages: list[Passage], min_overlap: float = 0.3) -> tuple[str, list[Citation]]:
    """Append a marker to each uncited answer sentence whose words overlap a passage enough.

    Small models often answer correctly without writing markers; lexical attribution keeps every
    claim traceable, and such citations are flagged `inferred`.
    """
    if not passages:
        return text, []
    pterms = [(p, _terms(p.text)) for p in passages]
    used: dict[int, Citation] = {}
    parts = []
    for sent in _SENTENCE.split(text):
        if not sent.strip():
            continue
        if _MARKER.search(sent):
            parts.append(sent)
            continue
        st = _terms(sent)
        best, score = None, 0.0
        for p, terms in pterms:
            if st:
                s = len(st & terms) / len(st)
                if s > score:
                    best, score = p, s
        if best is not None and score >= min_overlap:
            used.setdefault(best.marker, to_citation(best, inferred=True))
            stripped = sent.rstrip()
            tail = stripped[-1] if stripped and stripped[-1] in ".!?。！？" else ""
            body = stripped[: len(stripped) - len(tail)] if tail else stripped
            parts.append(f"{body} [{best.marker}]{tail}")
        else:
            parts.append(sent)
    joiner = "" if any("\u4e00" <= ch <= "\u9fff" for ch in text[:50]) else " "
    return joiner.join(s.strip() for s in parts), list(used.values())


# Where a passage's sentences end: as `_SENTENCE`, and at line breaks (headings, list items).
_PASSAGE_BREAK = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])|\n+")
_SPAN_WORD = re.compile(r"\d+|\w{3,}", re.UNICODE)


def _span_terms(text: str) -> set[str]:
    """`_terms` plus numbers: a cited "42 minutes" must find the sentence that says 42."""
    return _terms(text) | {t for t in _SPAN_WORD.findall(text.lower()) if t.isdigit()}


def _passage_sentences(text: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence of a passage, surrounding whitespace excluded."""
    out, start = [], 0
    bounds = [(m.start(), m.end()) for m in _PASSAGE_BREAK.finditer(text)] + [(len(text), len(text))]
    for stop, nxt in bounds:
        seg = text[start:stop]
        if seg.strip():
            lead = len(seg) - len(seg.lstrip())
            out.append((start + lead, start + len(seg.rstrip())))
        start = nxt
    return out


def cited_span(claims: list[str], passage: str) -> list[int] | None:
    """The part of `passage` that `claims` (the answer sentences citing it, markers removed) take
    from it: a claim found verbatim (case-insensitive; a grounded short answer always is), else the
    passage sentence sharing the most words and numbers with them. None when nothing is shared."""
    for claim in claims:
        full = claim.strip()
        for c in dict.fromkeys([full, full.rstrip(".!?。！？").strip()]):  # with its full stop, then without
            # whole Latin words only ("Yes" is not in "yesterday"); CJK has no word boundaries to keep
            m = re.search(rf"(?<![A-Za-z0-9]){re.escape(c)}(?![A-Za-z0-9])", passage, re.IGNORECASE) if c else None
            if m:
                return [m.start(), m.end()]
    want = set().union(*(_span_terms(c) for c in claims)) if claims else set()
    best, score = None, 0
    for s, e in _passage_sentences(passage):
        n = len(want & _span_terms(passage[s:e]))
        if n > score:
            best, score = [s, e], n
    return best


def locate_spans(text: str, citations: list[Citation], passages: list[Passage]) -> None:
    """Set each citation's `span` in its passage from the answer `text`: the sentences carrying its
    marker are its claims; an inferred citation (no marker in the text) claims the whole answer."""
    by_marker = {p.marker: p for p in passages}
    sentences: list[str] = []
    for s in _SENTENCE.split(text):
        if sentences and not _MARKER.sub("", s).strip():
            sentences[-1] += " " + s  # "... in 2019. [1]": the marker belongs to the sentence before it
        elif s.strip():
            sentences.append(s)
    for c in citations:
        p = by_marker.get(c.marker)
        if p is None:
            continue
        claims = [_MARKER.sub("", s) for s in sentences
                  if any(int(n) == c.marker for m in _MARKER.finditer(s) for n in re.split(r"\s*[,，、]\s*", m.group(1)))]
        c.span = cited_span(claims or [_MARKER.sub("", text)], p.text)


# ---- an answer's sentences and their content words (also `rag eval qa`'s sentence support) ----
# Words that carry no checkable fact: function words and the meta-talk of long answers ("based on
# the information provided in the passage").
_FUNCTION_WORDS_TEXT = """
a an the and or but if then than so as of in on at to for from by with without about into over under
after before between during per up out off is are was were be been being am do does did has have had
will would can could shall should may might must it its this that these those there here he she they
we you i his her their our your them him me us who whom whose which what when where why how not no
also only just very more most some any each every all both such other another same one
based according provided information passage passages context document documents text mentioned
stated says said states given following answer
"""
_FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())
_WORDS = re.compile(f"[{CJK_RANGES}]|(?:(?![{CJK_RANGES}])[^\\W_])+")
_ANSWER_MARK = r"(?:\[\d+(?:\s*[,，]\s*\d+)*\]|【\d+】)"
# A sentence ends at . ! ? before a space (not "4.80"), at 。！？ or at a line end; markers after it
# on the same line stay with it.
_ANSWER_SENTENCE = re.compile(rf"\S.*?(?:(?:[.!?](?=\s|$|\[|【)|[。！？])(?:[ \t]*{_ANSWER_MARK})*|(?=\n)|$)", re.S)


def _stem(word: str) -> str:
    """Plural/tense folding good enough for "moorings" ~ "mooring", "opened" ~ "open"."""
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> list[str]:
    """Lower-cased words (CJK: characters) without function words; numbers split at punctuation
    ("4.80" -> "4", "80") the same way on both sides of a comparison."""
    words = _WORDS.findall(unicodedata.normalize("NFKC", text).lower())
    return [_stem(w) for w in words if w not in _FUNCTION_WORDS]


_MARKERS = re.compile(r"\s*(?:\[\d+(?:\s*[,，]\s*\d+)*\]|【\d+】)")


def strip_citation_markers(text: str) -> str:
    """Remove `[1]`, `[1, 2]`, `【1】` markers: citations are scored apart, not as answer tokens."""
    return _MARKERS.sub("", text).strip()


def answer_span(answer: Answer) -> str | None:
    """A given short answer's text without its citation markers (what a comparison or a two-step
    answer reads as a value); None for a refusal or an answer that cites nothing."""
    if answer.refused or not answer.citations:
        return None
    return strip_citation_markers(answer.text) or None


def split_sentences(text: str) -> list[str]:
    """Sentences of a long answer, each with the `[n]` markers written after it."""
    return [m.group(0).strip() for m in sentence_matches(text)]


def sentence_matches(text: str, pos: int = 0) -> list[re.Match[str]]:
    """`split_sentences` with positions (from `pos`): the streaming grounding cuts the growing text
    at them, and keeps the whitespace between sentences as written."""
    return list(_ANSWER_SENTENCE.finditer(text, pos))


def sentence_markers(sentence: str) -> list[int]:
    """The passage numbers a sentence's `[n]` markers name, in order, without repeats."""
    nums = [int(n) for m in _MARKER.finditer(sentence) for n in re.split(r"\s*[,，、]\s*", m.group(1))]
    return list(dict.fromkeys(nums))
