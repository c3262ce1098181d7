"""Text normalisation and document filtering before chunking.

Cleaning rewrites the text, so the section and page span maps are carried through: each span
is cleaned on its own and the maps are rebuilt from the new lengths, keeping every chunk's page
number and section path right after normalisation.
"""

from __future__ import annotations

import importlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from .config import CleaningConfig
from .dedup import MinHashLSH, SimHash, normalized_key
from .types import Document, Page, Section

_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u200b-\u200d\u2060\ufeff]")
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_TRAIL = re.compile(r" +\n")
_BLANKS = re.compile(r"\n{3,}")
_DIGITS = re.compile(r"\d+")

Filter = Callable[[Document], "bool | Document | None"]


def load_filter(spec: str) -> Filter:
    """Import a user hook given as "package.module:function"."""
    mod, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cleaning.filters: cannot import {spec!r}: {e}") from e
    if not callable(fn):
        raise ValueError(f"cleaning.filters: {spec!r} is not callable")
    return fn


def normalize(text: str, cfg: CleaningConfig) -> str:
    if cfg.nfkc:
        text = unicodedata.normalize("NFKC", text)
    if cfg.control_chars or cfg.whitespace:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if cfg.control_chars:
        text = _CTRL.sub("", text)
    if cfg.whitespace:
        text = _BLANKS.sub("\n\n", _TRAIL.sub("\n", _SPACES.sub(" ", text)))
    return text


def _join_ws(prev: str, seg: str) -> str:
    """Trim the start of `seg` so whitespace runs across a segment boundary collapse too."""
    if seg.startswith("\n"):
        have = len(prev) - len(prev.rstrip("\n")) if prev else 2
        lead = len(seg) - len(seg.lstrip("\n"))
        return seg[lead - min(lead, max(0, 2 - have)) :]
    if seg.startswith(" ") and (not prev or prev[-1] in " \n"):
        return seg.lstrip(" ")
    return seg


def rewrite_segments(doc: Document, fn: Callable[[str, int], str], bounds: set[int],
                     collapse: bool = False) -> Document:
    """Apply `fn` to each segment between boundaries and remap sections/pages onto the result."""
    cuts = sorted({0, len(doc.text), *(b for b in bounds if 0 <= b <= len(doc.text))})
    out, new_at = [], {0: 0}
    pos = 0
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        seg = fn(doc.text[a:b], i)
        if collapse and i:
            seg = _join_ws(out[-1] if out[-1] else "".join(out), seg)
        out.append(seg)
        pos += len(seg)
        new_at[b] = pos
    return replace(
        doc,
        text="".join(out),
        sections=[Section(new_at[s.start], new_at[s.end], s.path) for s in doc.sections
                  if new_at[s.end] > new_at[s.start]],
        pages=[Page(new_at[p.start], new_at[p.end], p.number) for p in doc.pages],
    )


def _span_bounds(doc: Document) -> set[int]:
    return {x for s in doc.sections for x in (s.start, s.end)} | {x for p in doc.pages for x in (p.start, p.end)}


def strip_headers_footers(doc: Document, min_share: float, edge: int = 2) -> tuple[Document, int]:
    """Drop lines repeated at the top or bottom of most pages (digits ignored: "Page 3 of 9")."""
    if len(doc.pages) < 2:
        return doc, 0
    pages = [doc.text[p.start : p.end].split("\n") for p in doc.pages]

    def edges(lines: list[str]) -> list[int]:
        idx = [i for i, ln in enumerate(lines) if ln.strip()]
        return sorted(set(idx[:edge] + idx[-edge:]))

    def key(line: str) -> str:
        return _DIGITS.sub("#", " ".join(line.lower().split()))

    seen = Counter(k for lines in pages for k in {key(lines[i]) for i in edges(lines)})
    need = max(2, math.ceil(min_share * len(pages)))
    repeated = {k for k, n in seen.items() if n >= need}
    if not repeated:
        return doc, 0
    removed = 0

    def fn(seg: str, i: int) -> str:
        nonlocal removed
        lines = seg.split("\n")
        drop = {j for j in edges(lines) if key(lines[j]) in repeated}
        removed += len(drop)
        return "\n".join(ln for j, ln in enumerate(lines) if j not in drop)

    # The page spans are exactly the segments here (PDF pages tile the text).
    return rewrite_segments(doc, fn, {x for p in doc.pages for x in (p.start, p.end)}), removed


class Cleaner:
    """Normalises documents and drops empty, duplicate or user-filtered ones, counting why."""

    def __init__(self, cfg: CleaningConfig | None = None):
        self.cfg = cfg or CleaningConfig()
        self.dropped: Counter[str] = Counter()
        self.edits: Counter[str] = Counter()
        self.duplicate_of: dict[str, str] = {}
        # (doc_id, source, reason, duplicate_of) of every dropped document, for `rag docs dropped`
        self.dropped_docs: list[tuple[str, str, str, str | None]] = []
        self._exact: dict[str, str] = {}
        self._near: MinHashLSH | SimHash | None = None
        if self.cfg.near_dedup == "minhash":
            self._near = MinHashLSH(self.cfg.near_dedup_threshold, self.cfg.minhash_perms, self.cfg.shingle_words,
                                    containment=self.cfg.near_dedup_verify == "containment")
        elif self.cfg.near_dedup == "simhash":
            self._near = SimHash(self.cfg.near_dedup_threshold, self.cfg.shingle_words,
                                 containment=self.cfg.near_dedup_verify == "containment")
        self.filters = [(spec, load_filter(spec)) for spec in self.cfg.filters]
        self._pending: list[tuple[str, str]] = []
        self._pending_chars = 0

    def clean_text(self, doc: Document) -> Document:
        """Normalisation only (no dedup state): what `rag chunk` shows for a single file."""
        if self.cfg.strip_headers_footers:
            doc, n = strip_headers_footers(doc, self.cfg.header_footer_min_share)
            if n:
                self.edits["header_footer_lines"] += n
        return rewrite_segments(doc, lambda s, _i: normalize(s, self.cfg), _span_bounds(doc),
                                collapse=self.cfg.whitespace)

    def __call__(self, doc: Document) -> Document | None:
        """The cleaned document, or None when it is dropped (the reason is counted)."""
        prepared = self.prepare(doc)
        return None if prepared is None else self.check_near(prepared)

    def prepare(self, doc: Document) -> Document | None:
        """Normalise, then drop empty, user-filtered and exact-duplicate documents."""
        doc = self.clean_text(doc)
        if len(doc.text.strip()) < max(1, self.cfg.min_chars):
            return self._drop("empty" if not doc.text.strip() else "too_short", doc)
        for spec, fn in self.filters:
            verdict = fn(doc)
            if verdict is None or verdict is False:
                return self._drop(f"filter:{spec}", doc)
            if isinstance(verdict, Document):
                doc = verdict
        if self.cfg.exact_dedup:
            k = normalized_key(doc.text)
            first = self._exact.setdefault(k, doc.doc_id)
            if first != doc.doc_id:
                self.duplicate_of[doc.doc_id] = first
                return self._drop("exact_duplicate", doc)
        return doc

    def check_near(self, doc: Document) -> Document | None:
        """Drop `doc` if it nearly duplicates a document seen before it, else remember it."""
        if self._near is None:
            return doc
        self._flush()
        first = self._near.check_add(doc.doc_id, doc.text)
        if first is not None and first != doc.doc_id:
            self.duplicate_of[doc.doc_id] = first
            return self._drop("near_duplicate", doc)
        return doc

    def register_stored(self, doc_id: str, text: str) -> None:
        """A document already in the store: later documents duplicating it are dropped."""
        if self.cfg.exact_dedup:
            self._exact.setdefault(normalized_key(text), doc_id)
        self.remember(Document(doc_id, text, ""))

    def remember(self, doc: Document) -> None:
        """Note an already stored, unchanged document for later near-duplicate checks.

        Signatures are computed lazily, only once a new document needs comparing, so re-ingesting
        an unchanged corpus pays nothing for near-dedup (memory stays bounded by flushing).
        """
        if self._near is None:
            return
        self._pending.append((doc.doc_id, doc.text))
        self._pending_chars += len(doc.text)
        if self._pending_chars > 64_000_000:
            self._flush()

    def _flush(self) -> None:
        assert self._near is not None
        for doc_id, text in self._pending:
            self._near.check_add(doc_id, text)
        self._pending, self._pending_chars = [], 0

    def _drop(self, reason: str, doc: Document | None = None) -> None:
        self.dropped[reason] += 1
        if doc is not None:
            self.dropped_docs.append((doc.doc_id, doc.source, reason, self.duplicate_of.get(doc.doc_id)))
        return None
