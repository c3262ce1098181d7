"""Grounded extractive decoding: the output must be a contiguous span of one of the passages,
or the configured refusal.

Why: a small model asked for a short answer paraphrases, pads it into a sentence or invents it.
Masking every token that would leave the passages makes the answer verbatim by construction, so
its citation is exact (the passages that contain it) and it keeps the passages' script
(Traditional Chinese stays Traditional).

How: the state is the set of places in the passages where the text generated so far could end.
At the start every character boundary of every passage is such a place (a span may begin in
the middle of a passage word, or of what would be one token there); a token is allowed when its
bytes continue the text at one of the places. Matching is on UTF-8 bytes against the tokens'
exact bytes (`token_bytes`), so a CJK character split over two byte-level tokens is just two
steps. Whitespace in passages is collapsed and a space put in front, so " Paris" and "Paris" both
start a span. The refusal is a separate entry that can only be entered at its start: its first
token against the best span token at step 0 is the model's no-answer signal (`margin`), and with
`refuse_margin` set that comparison, not the argmax, picks the path. EOS is allowed once the span
is non-empty and ends on a character boundary (or the refusal is complete).

The processor only applies a margin it is given; choosing it is the caller's decision (in the RAG
pipeline the short-answer policy's `decoder_margin`: inf when a calibrated refusal model decides
after decoding, else the configured or calibrated `refuse_margin`).
"""

from __future__ import annotations

from typing import Any

import torch

from .token_bytes import TokenBytes, token_bytes


def normalize_passage(text: str) -> str:
    """What spans are matched against: whitespace runs collapsed, one leading space."""
    return " " + " ".join(text.split())


def span_sources(span: str, passages: list[str]) -> list[int]:
    """Indices of the passages that contain `span` verbatim (modulo whitespace)."""
    s = " ".join(span.split())
    if not s:
        return []
    return [i for i, p in enumerate(passages) if s in normalize_passage(p)]


def _boundary(t: bytes, p: int) -> bool:
    """True when byte offset p starts a UTF-8 character (or is the end)."""
    return p >= len(t) or (t[p] & 0xC0) != 0x80


def _wordish(ch: str) -> bool:
    """A letter or digit of a script that separates words with spaces (CJK characters are words
    of their own: a span may start or end at any of them)."""
    return ch.isalnum() and not ("\u2e80" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af"
                                 or "\uf900" <= ch <= "\ufaff" or "\u3040" <= ch <= "\u30ff")


def word_edges(text: str) -> tuple[list[int], set[int]]:
    """Byte offsets (in `text` as UTF-8) where a span may start, and where it may end.

    Why: a short answer is whole words ("Palace of Culture", not "se French names" or "Pal"), but
    it may start or end at punctuation ("$5,000" -> "5,000") and anywhere in CJK text. A start is
    a character that does not continue a word; an end is a place not followed by a word's next
    letter. Offsets need not be token boundaries: matching is on bytes, so a span may still begin
    in the middle of what the tokenizer would make one token of the passage."""
    starts: list[int] = []
    ends: set[int] = set()
    off = 0
    prev = ""
    for ch in text:
        if not (_wordish(ch) and _wordish(prev)):
            starts.append(off)
            ends.add(off)
        prev = ch
        off += len(ch.encode("utf-8"))
    ends.add(off)
    return starts, ends


class GroundedSpanProcessor:
    """Per-request logits processor: call with (generated token ids, logits) -> masked logits.

    After generation, `refused` says which path was taken, `margin` is log P(refusal start) -
    log P(best span start) at the first step, and `span_logprob` / `steps` the summed model
    log-probability of the emitted tokens (raw logits, before masking), `min_logprob` the lowest.
    """

    def __init__(self, passages: list[str], tokenizer: Any, refusal: str | None = None,
                 eos_token_id: int | list[int] | set[int] | None = None, max_tokens: int | None = None,
                 refuse_margin: float | None = None):
        self.tb: TokenBytes = token_bytes(tokenizer)
        norm = [normalize_passage(p) for p in passages]
        self.texts = [t.encode("utf-8") for t in norm]
        edges = [word_edges(t) for t in norm]
        self._start_at = [e[0] for e in edges]  # word starts, per passage
        self._end_at = [e[1] for e in edges]  # word ends, per passage
        self.ref = len(self.texts)  # index of the refusal entry
        self.entries = self.texts + [refusal.strip().encode("utf-8") if refusal else b""]
        eos = eos_token_id if eos_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else sorted(eos or [])
        self.max_tokens = max_tokens
        self.refuse_margin = refuse_margin
        self.margin: float | None = None
        self.refused = False
        self.span_logprob = 0.0
        self.min_logprob = 0.0  # the least likely emitted token: one guessed word shows here
        self.steps = 0
        self._path: str | None = None  # "span" | "refuse" once decided at step 0
        self._pos: list[tuple[int, int]] | None = None  # None: nothing generated yet
        self._consumed = 0
        self._out = b""
        self._whole = 0  # bytes of _out up to the last place a span may end (a word end)
        self._last_lp: torch.Tensor | None = None

    # ---- state ---------------------------------------------------------------------------
    def _starts(self, path: str | None) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        if path in (None, "span"):
            for i, starts in enumerate(self._start_at):
                out += [(i, p) for p in starts]
        if path in (None, "refuse") and self.entries[self.ref]:
            out.append((self.ref, 0))
        return out

    def _advance(self, token_ids: list[int]) -> None:
        for tid in token_ids[self._consumed:]:
            if self._last_lp is not None and tid < self._last_lp.shape[0]:
                lp = float(self._last_lp[tid])
                self.span_logprob += lp
                self.min_logprob = min(self.min_logprob, lp)
                self.steps += 1
            b = self.tb.bytes_of[tid] if 0 <= tid < self.tb.size else None
            if b is None:
                self._pos = []
                continue
            pos = self._pos if self._pos is not None else self._starts(self._path)
            self._pos = [(i, p + len(b)) for i, p in pos if self.entries[i].startswith(b, p)]
            self._out += b
            if any(i != self.ref and p in self._end_at[i] for i, p in self._pos):
                self._whole = len(self._out)
        self._consumed = len(token_ids)
        if self._pos and self._path is None:
            # Undecided while the text could still be either (a refusal starting with a word
            # that is also in a passage); decided as soon as only one kind of place is left.
            kinds = {i == self.ref for i, _ in self._pos}
            if len(kinds) == 1:
                self._path = "refuse" if kinds == {True} else "span"
        ref = self.entries[self.ref]
        self.refused = bool(ref) and self._out.strip() == ref

    def _allowed(self, positions: list[tuple[int, int]], ending: bool = False) -> set[int]:
        """Tokens that continue the text at one of `positions`; with `ending`, only those after
        which the answer may stop (a word end, or the end of the refusal)."""
        ids: set[int] = set()
        get, cap = self.tb.ids_by_bytes.get, self.tb.max_len
        for i, p in positions:
            t = self.entries[i]
            ends = self._end_at[i] if i != self.ref else {len(t)}
            for q in range(p + 1, min(len(t), p + cap) + 1):
                hit = get(t[p:q])
                if hit and (not ending or q in ends):
                    ids.update(hit)
        return ids

    def _eos_ok(self) -> bool:
        if not self._pos:
            return self._pos is not None  # dead state: let it stop
        if any(i == self.ref and p == len(self.entries[i]) for i, p in self._pos):
            return True
        return bool(self._out.strip()) and any(i != self.ref and p in self._end_at[i] for i, p in self._pos)

    def answer_text(self) -> str:
        """The span as whole words: what was generated, cut back to the last word end when the
        token budget stopped it inside a word or a UTF-8 character."""
        if self.refused or self._whole == len(self._out):
            return self._out.decode("utf-8", "replace").strip()
        return self._out[: self._whole].decode("utf-8", "replace").strip()

    # ---- processor -----------------------------------------------------------------------
    def __call__(self, token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        self._advance(list(token_ids))
        lp = torch.log_softmax(logits.float(), dim=-1)
        self._last_lp = lp
        n = logits.shape[-1]
        if self._pos is None:
            allowed = self._first_step(lp)
        else:
            allowed = self._allowed(self._pos)
        eos_ok = self._eos_ok()
        last = self.max_tokens is not None and len(token_ids) >= self.max_tokens - 1
        if last and eos_ok:
            allowed = set()
        elif last and self._pos:
            # The budget ends with this token: make it one after which the answer is whole
            # (never cut mid-word or inside a UTF-8 character).
            allowed = self._allowed(self._pos, ending=True) or allowed
        if eos_ok:
            allowed |= set(self.eos_ids)
        mask = torch.ones(n, dtype=torch.bool, device=logits.device)
        keep = [t for t in allowed if t < n]
        if not keep:
            return logits  # nothing valid (cannot happen with a non-empty passage); max_tokens ends it
        mask[torch.tensor(keep, dtype=torch.long, device=logits.device)] = False
        return logits.masked_fill(mask, float("-inf"))

    def _first_step(self, lp: torch.Tensor) -> set[int]:
        span = self._allowed(self._starts("span"))
        ref = self._allowed([(self.ref, 0)]) if self.entries[self.ref] else set()
        n = lp.shape[0]
        best_span = max((float(lp[t]) for t in span if t < n), default=float("-inf"))
        best_ref = max((float(lp[t]) for t in ref if t < n), default=float("-inf"))
        self.margin = best_ref - best_span
        if self.refuse_margin is None or not ref:
            return span | ref
        self._path = "refuse" if self.margin > self.refuse_margin else "span"
        return ref if self._path == "refuse" else span
