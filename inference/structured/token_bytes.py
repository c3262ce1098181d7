"""The exact bytes each vocabulary token stands for.

Why bytes and not decoded strings: byte-level BPE (GPT-2, SmolLM2, Qwen2) splits many CJK
characters and symbols across tokens, and such a token decodes to U+FFFD on its own. Matching
token bytes against UTF-8 passage bytes treats a split character like any other substring, so a
span constraint can allow "the first half of 龍" followed by "the second half" without guessing.
"""

from __future__ import annotations

import contextlib
import re
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
T = TypeVar("T")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's reversible byte <-> printable-unicode map, inverted (unicode char -> byte)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class TokenBytes:
    """`ids_by_bytes[b]` lists the token ids whose bytes are exactly `b`; specials are left out."""

    def __init__(self, tokenizer: Any, max_len: int = 48):
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        special |= set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
        dec = _byte_decoder()
        byte_level = sum(1 for p in pieces[:2000] if p and all(ch in dec for ch in p)) > 1500
        self.size = len(pieces)
        self.max_len = max_len
        self.ids_by_bytes: dict[bytes, list[int]] = {}
        self.bytes_of: list[bytes | None] = [None] * len(pieces)
        table = _byte_table(dec) if byte_level else dec
        for i, piece in enumerate(pieces):
            if i in special or piece is None:
                continue
            b = _piece_bytes(piece, table, byte_level, tokenizer, i)
            if not b or len(b) > max_len:
                continue
            self.bytes_of[i] = b
            self.ids_by_bytes.setdefault(b, []).append(i)


def _byte_table(dec: dict[str, int]) -> dict[int, str]:
    """`str.translate` table taking a byte-level piece to latin-1 (one char per byte), so a piece
    is converted in C, not char by char (Qwen2.5's 151k pieces: 0.3 s -> 0.03 s a process). A
    char below 256 that the byte map does not produce becomes U+FFFF, which latin-1 cannot
    encode: such a piece, like one with any char outside the map, has no bytes."""
    table = {ord(c): chr(b) for c, b in dec.items()}
    for x in range(256):
        table.setdefault(x, "\uffff")
    return table


def _piece_bytes(piece: str, dec: dict[str, int] | dict[int, str], byte_level: bool, tokenizer: Any,
                 tid: int) -> bytes | None:
    if byte_level:
        try:
            return piece.translate(dec).encode("latin-1")
        except UnicodeEncodeError:
            return None
    m = _SP_BYTE.match(piece)
    if m:  # sentencepiece byte fallback
        return bytes([int(m.group(1), 16)])
    if "▁" in piece:  # sentencepiece word boundary
        return piece.replace("▁", " ").encode("utf-8")
    text = tokenizer.decode([tid])
    return None if "\ufffd" in text else text.encode("utf-8")


def per_tokenizer(build: Callable[[Any], T]) -> Callable[[Any], T]:
    """`build(tokenizer)` once per tokenizer object, under a lock of its own (a build may call
    another cache's getter: the JSON trie is built from `token_bytes`). The one cache of every
    table that walks the whole vocabulary. An entry goes with its tokenizer: kept by id alone, it
    outlived it (a table of ~150k entries per engine a process ever built) and a new tokenizer
    given the dead one's id received the dead one's table."""
    cache: dict[int, T] = {}
    lock = threading.Lock()

    def get(tokenizer: Any) -> T:
        with lock:
            key = id(tokenizer)
            v = cache.get(key)
            if v is None:
                v = cache[key] = build(tokenizer)
                # runs as the tokenizer dies, before its id can be reused; no lock (GC may run anywhere);
                # a tokenizer that cannot be weakly referenced keeps its table for the process
                with contextlib.suppress(TypeError):
                    weakref.finalize(tokenizer, cache.pop, key, None)
            return v

    return get


token_bytes = per_tokenizer(TokenBytes)  # one table per tokenizer object
