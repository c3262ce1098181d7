"""Make the model write a `[n]` marker before it ends a sentence that has none.

Why: small models answer correctly but seldom write markers, and citations inferred by word
overlap afterwards are guesses. Here, when the model's top choice would end an uncited sentence
(a full stop, or EOS), only `[` is allowed; then only the numbers of given passages, then `]`.
Which passage it cites is still the model's choice (its most likely number), so the marker is
model-written; the sentence then ends as the model wanted. A refusal needs no marker.

A bare "." right after a digit may be a decimal point ("0.20 euros", "4.80"), and forcing a marker
there cut the number ("charges 0 [1]." for 0.20): it is let through, and the next token tells. A
digit continues the number and the sentence; anything else means it was the full stop, and then
the marker is forced after it ("... in 1874. [1]"), where `rag/citations.py` keeps it with the
sentence it closes.
"""

from __future__ import annotations

from typing import Any

import torch

from .token_bytes import per_tokenizer, token_bytes

_ENDS = {".", "!", "?", "。", "！", "？"}


class _MarkerVocab:
    """The vocabulary's text and the token classes a marker is made of, built once per tokenizer:
    decoding a 150k vocabulary took ~0.1-0.3 s, and it ran for every answer."""

    def __init__(self, tokenizer: Any):
        tb = token_bytes(tokenizer)
        text = {i: b.decode("utf-8", "ignore") for i, b in enumerate(tb.bytes_of) if b is not None}
        self.text = text
        self.open_ids = [i for i, s in text.items() if s in ("[", " [")]
        # every passage number a single token can write (no leading zero), filtered per request
        self.numbers = {i: int(s) for i, s in text.items() if s.isdigit() and s.isascii() and not s.startswith("0")}
        self.close_ids = [i for i, s in text.items() if s == "]"]
        # "]." and the like: the model closes its marker and ends the sentence in one token
        self.close_end_ids = {i for i, s in text.items() if s.startswith("]") and s[1:].strip() in _ENDS
                              and s[1:].strip()}
        self.end_ids = {i for i, s in text.items() if s.strip() in _ENDS and s.strip()}


_marker_vocab = per_tokenizer(_MarkerVocab)


class CitationMarkerProcessor:
    def __init__(self, tokenizer: Any, n_passages: int, eos_token_id: int | list[int] | set[int] | None = None,
                 refusal: str | None = None):
        v = _marker_vocab(tokenizer)
        self.text = v.text
        self.open_ids = v.open_ids
        self.digit_ids = {i: n for i, n in v.numbers.items() if 1 <= n <= n_passages}
        self.close_ids = v.close_ids
        self.close_end_ids = v.close_end_ids
        self.end_ids = v.end_ids
        eos = eos_token_id if eos_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = {eos} if isinstance(eos, int) else set(eos or [])
        self.refusal = (refusal or "").strip().lower()[:12]
        self._state = "free"  # free | open (after "[") | num (after a number)
        self._cited = False
        self._run = 0  # markers written back to back ("[1] [2]"): more than two is a loop
        self._pending: int | None = None  # the end (full stop or EOS) the model wanted before its marker
        self._out = ""
        self._sentence = ""  # text since the last sentence end: an empty one needs no marker
        self._dot_after_digit = False  # a "." after a digit: a decimal point or the full stop, not yet known
        self._consumed = 0

    def _advance(self, token_ids: list[int]) -> None:
        for t in token_ids[self._consumed:]:
            s = self.text.get(t, "")
            if self._dot_after_digit and not (s[:1].isdigit() or t in self.open_ids or self._state != "free"):
                self._cited, self._sentence = False, ""  # it was the full stop: a new sentence starts
            if self._state == "free" and t not in self.open_ids:
                self._dot_after_digit = False  # a digit (decimal) or the next sentence: known now
            out_before = self._out
            self._out += s
            self._sentence += s
            if self._state == "open" and t in self.digit_ids:
                self._state = "num"
            elif self._state == "num" and (t in self.close_ids or t in self.close_end_ids):
                self._state, self._cited = "free", True
                self._run += 1
            elif t in self.open_ids:
                self._state = "open"
            else:
                self._state = "free"  # the model wrote something else: not a marker after all
                if s.strip():
                    self._run = 0
            if _maybe_decimal_point(s, out_before):
                self._dot_after_digit = True  # decided by the next token (a digit: a decimal point)
            elif t in self.end_ids or t in self.close_end_ids:
                self._cited, self._sentence = False, ""  # a new sentence starts
        self._consumed = len(token_ids)

    def _list_number(self) -> bool:
        """The current line is only a number, with or without its full stop ("1."): no claim to cite."""
        return self._sentence.rsplit("\n", 1)[-1].strip().rstrip(".").isdigit()

    def _only(self, logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
        keep = [i for i in ids if i < logits.shape[-1]]
        if not keep:
            return logits
        out = torch.full_like(logits, float("-inf"))
        idx = torch.tensor(keep, dtype=torch.long, device=logits.device)
        vals = logits[idx]
        # Another processor (no-repeat n-grams) may have banned all of them: the marker still wins.
        out[idx] = vals if bool(torch.isfinite(vals).any()) else torch.zeros_like(vals)
        return out

    def _ban(self, logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
        idx = torch.tensor([i for i in ids if i < logits.shape[-1]], dtype=torch.long, device=logits.device)
        return logits.index_fill(-1, idx, float("-inf")) if idx.numel() else logits

    def __call__(self, token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        self._advance(list(token_ids))
        if self._state == "open":
            return self._only(logits, list(self.digit_ids))
        if self._state == "num":
            return self._only(logits, self.close_ids)
        if self._pending is not None:
            want, self._pending = self._pending, None
            return self._only(logits, [want])  # end the sentence (or the answer) as the model wanted
        if self._run >= 2:
            return self._ban(logits, self.open_ids)
        if self._cited or not self._sentence.strip() or self._list_number():
            return logits  # cited, nothing written since the last end ("... [2]." then EOS), or a list number
        if self.refusal and self._out.strip().lower().startswith(self.refusal):
            return logits
        top = int(logits.argmax())
        if self._dot_after_digit:  # "...1874." uncited: a digit continues the number, else cite now
            return logits if self.text.get(top, "")[:1].isdigit() else self._only(logits, self.open_ids)
        if top in self.end_ids or top in self.eos_ids:
            if _maybe_decimal_point(self.text.get(top, ""), self._out):
                return logits  # maybe a decimal point: the next token tells
            self._pending = top
            return self._only(logits, self.open_ids)
        return logits


def _maybe_decimal_point(token: str, before: str) -> bool:
    """A bare "." right after a digit: a decimal point or a full stop, told apart by the next token."""
    return token == "." and before[-1:].isdigit()
