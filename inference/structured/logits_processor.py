"""Constrained decoding: mask every token that would take the output outside a JSON schema.

Like llama.cpp's `grammar` / `json_schema` fields. The vocabulary is decoded once per tokenizer
into a character trie; for a given automaton state the allowed tokens are found by walking the
trie and pruning dead branches. Masks are cached per state, and inside a string (the common
case) a precomputed mask of "plain" tokens (no quote, backslash or control character), cut to
those whose length fits the string's maxLength, is reused, so the per-token cost stays small.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from .json_automaton import JsonAutomaton, State
from .token_bytes import per_tokenizer, token_bytes

_SPECIAL = set('"\\') | {chr(i) for i in range(0x20)}


class _Vocab:
    """Decoded token strings and a trie over them, shared by every processor of a tokenizer."""

    def __init__(self, tokenizer: Any):
        # The strings come from the one vocabulary walk (`token_bytes`, shared with the grounded span
        # constraint). A token whose bytes are a partial UTF-8 character cannot be validated
        # character by character, so it is left out (None), like specials.
        tb = token_bytes(tokenizer)
        n = tb.size
        self.size = n
        self.strings: list[str | None] = [_utf8(b) for b in tb.bytes_of]
        self.trie: dict = {}
        for i, s in enumerate(self.strings):
            if s is None:
                continue
            node = self.trie
            for ch in s:
                node = node.setdefault(ch, {})
            node.setdefault(None, []).append(i)
        plain = torch.zeros(n, dtype=torch.bool)
        plain_len = torch.zeros(n, dtype=torch.int32)  # characters of each plain token
        self.special_ids: list[int] = []
        for i, s in enumerate(self.strings):
            if s is None:
                continue
            if _SPECIAL.isdisjoint(s):
                plain[i] = True
                plain_len[i] = len(s)
            else:
                self.special_ids.append(i)
        self.plain = plain
        self.plain_len = plain_len


def _utf8(b: bytes | None) -> str | None:
    if not b:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


_vocab = per_tokenizer(_Vocab)
# A step restricted to at most 1/HEAD_ROWS_SHARE of the vocabulary gets only those head rows computed.
HEAD_ROWS_SHARE = 4


class JsonSchemaLogitsProcessor:
    """Per-request processor: call with (generated token ids, logits) -> masked logits.

    `eos_token_id` is only allowed once the document is complete; once it is complete, only EOS
    is allowed, so generation stops right after the closing bracket.
    """

    _mask_cache: dict[tuple, torch.Tensor] = {}

    def __init__(self, schema: dict[str, Any] | str, tokenizer: Any, eos_token_id: int | list[int] | None = None,
                 max_tokens: int | None = None):
        self.schema = json.loads(schema) if isinstance(schema, str) else schema
        self.automaton = JsonAutomaton(self.schema)
        self.vocab = _vocab(tokenizer)
        eos = eos_token_id if eos_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        self._key = json.dumps(self.schema, sort_keys=True) + f"#{id(tokenizer)}"
        self._consumed = 0
        self._state: State | None = self.automaton.start
        # the last step's mask, keyed by (tokens generated, vocabulary rows): the runner asks for it
        # before the step (`head_rows`) and the sampler after it (`__call__`)
        self._last: tuple[int, int, torch.Tensor | None] | None = None
        # With a token budget, the document is closed in time: once the shortest completion no
        # longer fits comfortably, only tokens that spell it are allowed.
        self.max_tokens = max_tokens

    def _advance(self, token_ids: list[int]) -> None:
        for tid in token_ids[self._consumed :]:
            s = self.vocab.strings[tid] if 0 <= tid < self.vocab.size else None
            if tid in self.eos_ids or s is None:
                self._state = None if tid not in self.eos_ids else self._state
                continue
            self._state = self.automaton.feed(self._state, s)
        self._consumed = len(token_ids)

    def allowed(self, state: State) -> torch.Tensor:
        key = (self._key, state)
        mask = self._mask_cache.get(key)
        if mask is not None:
            return mask
        a = self.automaton
        if state and state[-1][0] == "S" and not state[-1][3]:
            # Inside a string: a plain token only adds characters, so it is allowed when they fit
            # the string's maxLength (all of them without one); check the rest one by one. Every
            # schema the query transforms and triple extraction use bounds its strings, and each
            # length is another state: walking the trie there cost ~0.4 s per generated token.
            cap = a._schemas[state[-1][1]]["max"]
            if cap is None:
                mask = self.vocab.plain.clone()
            else:
                mask = self.vocab.plain & (self.vocab.plain_len <= cap - state[-1][2])
            for tid in self.vocab.special_ids:
                if a.feed(state, self.vocab.strings[tid]) is not None:
                    mask[tid] = True
        else:
            mask = torch.zeros(self.vocab.size, dtype=torch.bool)
            stack: list[tuple[dict, State]] = [(self.vocab.trie, state)]
            while stack:
                node, st = stack.pop()
                for ch, child in node.items():
                    if ch is None:
                        mask[child] = True
                        continue
                    nxt = a.step(st, ch)
                    if nxt is not None:
                        stack.append((child, nxt))
        if len(self._mask_cache) > 4096:
            self._mask_cache.clear()
        self._mask_cache[key] = mask
        return mask

    def _closing_tokens(self, closing: str) -> list[int]:
        """Tokens that are a non-empty prefix of the closing text (found by walking the trie)."""
        out, node = [], self.vocab.trie
        for ch in closing:
            node = node.get(ch)
            if node is None:
                break
            out += node.get(None, [])
        return out

    def _mask(self, token_ids: list[int], n: int) -> torch.Tensor | None:
        """The tokens (of the first `n`) this step may sample, or None when nothing is valid (then
        nothing is masked: the engine stops on max_tokens)."""
        if self._last is not None and self._last[:2] == (len(token_ids), n):
            return self._last[2]
        mask = self._compute_mask(token_ids, n)
        self._last = (len(token_ids), n, mask)
        return mask

    def _compute_mask(self, token_ids: list[int], n: int) -> torch.Tensor | None:
        self._advance(list(token_ids))
        state = self._state
        full = torch.zeros(n, dtype=torch.bool)
        if state is not None and self.max_tokens is not None and not self.automaton.is_complete(state):
            closing = self.automaton.completion(state)
            if self.max_tokens - len(token_ids) <= len(closing) + 1:
                for tid in self._closing_tokens(closing):
                    if tid < n:
                        full[tid] = True
                return full if bool(full.any()) else None
        if state is not None:
            m = self.allowed(state)
            k = min(n, m.shape[0])
            full[:k] = m[:k]
            if self.automaton.is_complete(state):
                full[:] = False
        done = state is None or self.automaton.is_complete(state)
        for e in self.eos_ids:
            if e is not None and e < n:
                full[e] = done
        return full if bool(full.any()) else None

    def head_rows(self, token_ids: list[int], n: int) -> list[int] | None:
        """The output-head rows this step needs (`ModelRunner` computes only those when they are
        few): the ids `__call__` will leave unmasked, or None for a step that may sample most of
        the vocabulary (inside a string) or that masks nothing. Outside strings a step allows a
        few hundred tokens at most (punctuation, a key's next characters, a literal)."""
        mask = self._mask(token_ids, n)
        if mask is None:
            return None
        ids = mask.nonzero().squeeze(1)
        return ids.tolist() if ids.numel() <= n // HEAD_ROWS_SHARE else None

    def __call__(self, token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        mask = self._mask(token_ids, logits.shape[-1])
        if mask is None:
            return logits
        return logits.masked_fill(~mask.to(logits.device), float("-inf"))
