"""Incremental detokenisation that never emits half a character.

Byte-level BPE splits multi-byte UTF-8 characters (CJK, emoji) across tokens; decoding a prefix
then yields U+FFFD. We decode a small window `[prefix_offset:]` and compare it with the window's
already-emitted part `[prefix_offset:read_offset]`; new text is released only when it does not
end in an incomplete character. The window keeps per-token cost constant and lets the tokenizer
apply its context-dependent spacing rules correctly.
"""

from __future__ import annotations

_WINDOW = 6


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_token_ids: list[int] | None = None,
                 skip_special_tokens: bool = True) -> None:
        self.tok = tokenizer
        self.skip = skip_special_tokens
        self.ids: list[int] = list(prompt_token_ids or [])[-_WINDOW:]
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=self.skip, clean_up_tokenization_spaces=False)

    def add(self, token_id: int) -> str:
        """Feed one token; returns the newly completed text (may be empty)."""
        self.ids.append(token_id)
        prefix = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full = self._decode(self.ids[self.prefix_offset:])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            self.text += delta
            return delta
        return ""

    def flush(self) -> str:
        """At the end of generation release whatever is left (even a dangling byte)."""
        if self.read_offset >= len(self.ids):
            return ""
        prefix = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full = self._decode(self.ids[self.prefix_offset:])
        delta = full[len(prefix):] if full.startswith(prefix) else ""
        self.read_offset = len(self.ids)
        self.text += delta
        return delta
