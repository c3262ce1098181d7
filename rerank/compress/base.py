"""Compressor interface: shrink retrieved contexts to a token budget before generation.

Contexts are compressed one by one and joined by the caller's separator, so source separators
never pass through a compressor; citation markers inside a context ("[1]") are protected spans
that every backend keeps verbatim, otherwise the model cannot cite what it read.
`acompress` is `compress` for an event loop (the pipeline's async path): in a worker thread,
unless the backend awaits an engine for its scores (the engine compressor).
"""

from __future__ import annotations

import asyncio
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import CompressorConfig
from ..registry import Registry

MARKER_RE = re.compile(r"\[\d{1,3}\]")
LEADING_MARKERS_RE = re.compile(r"^\s*(?:\[\d{1,3}\]\s*)+")
DYNAMIC_RATIO = 0.3  # how much more budget the most relevant context gets than the least


def split_budget(lens: Sequence[int], order: Sequence[int], budget: int, dynamic: float = DYNAMIC_RATIO) -> list[int]:
    """Token budget per context: proportional to length, weighted from 1+dynamic (most relevant,
    first in `order`) down to 1-dynamic (least relevant), never above a context's own length."""
    n = len(lens)
    weight = np.ones(n)
    if n > 1:
        for rank, i in enumerate(order):
            weight[i] = 1 + dynamic * (1 - 2 * rank / (n - 1))
    raw = np.asarray(lens, dtype=float) * weight
    shares = np.minimum(np.floor(raw / max(raw.sum(), 1e-9) * budget), lens).astype(int)
    spare = budget - int(shares.sum())  # rounding leftovers and capped shares go to the most relevant
    for i in order:
        if spare <= 0:
            break
        add = min(spare, int(lens[i] - shares[i]))
        shares[i] += add
        spare -= add
    return [int(x) for x in shares]


@dataclass
class CompressionResult:
    contexts: list[str]
    tokens_in: int
    tokens_out: int
    seconds: float
    dropped: list[int] = field(default_factory=list)  # indexes of contexts removed entirely

    @property
    def ratio(self) -> float:
        """Compression ratio as reported by LLMLingua: tokens in / tokens out."""
        return self.tokens_in / max(self.tokens_out, 1)

    def text(self, sep: str = "\n\n") -> str:
        return sep.join(c for c in self.contexts if c)

    def stats(self) -> dict[str, Any]:
        return {"tokens_in": self.tokens_in, "tokens_out": self.tokens_out, "ratio": round(self.ratio, 3),
                "ms": round(self.seconds * 1000, 1), "dropped": self.dropped}


class Compressor(ABC):
    type: str = ""

    def __init__(self, cfg: CompressorConfig, **_: object):
        self.cfg = cfg

    def budget(self, tokens_in: int) -> int:
        if self.cfg.target_tokens is not None:
            return self.cfg.target_tokens
        return max(1, int(round(tokens_in * (self.cfg.ratio or 1.0))))

    @abstractmethod
    def count_tokens(self, text: str) -> int: ...

    @abstractmethod
    def _compress(self, question: str, contexts: list[str]) -> tuple[list[str], list[int]]:
        """Compressed contexts (same length, "" for a dropped one) and the dropped indexes."""

    def compress(self, question: str, contexts: Sequence[str]) -> CompressionResult:
        t = time.perf_counter()
        contexts = list(contexts)
        out, dropped = self._compress(question, contexts) if contexts else ([], [])
        return self._result(contexts, out, dropped, t)

    async def acompress(self, question: str, contexts: Sequence[str]) -> CompressionResult:
        """`compress` in a worker thread (a backend that awaits an engine overrides this)."""
        return await asyncio.to_thread(self.compress, question, contexts)

    def _result(self, contexts: list[str], out: list[str], dropped: list[int], t: float) -> CompressionResult:
        """The result with its token counts, timed from `t` (`perf_counter` at the start)."""
        tokens_in = sum(self.count_tokens(c) for c in contexts)
        tokens_out = sum(self.count_tokens(c) for c in out if c)
        return CompressionResult(out, tokens_in, tokens_out, time.perf_counter() - t, dropped)

    def to_config(self) -> dict[str, Any]:
        return self.cfg.model_dump(mode="json")


COMPRESSORS: Registry[Compressor] = Registry("compressor", {
    "off": "rerank.compress.base", "llmlingua": "rerank.compress.llmlingua", "engine": "rerank.compress.engine"})
register = COMPRESSORS.register


@register("off")
class NoCompressor(Compressor):
    """`type: off`: contexts pass through; token counts are whitespace words (no model loaded)."""

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _compress(self, question: str, contexts: list[str]) -> tuple[list[str], list[int]]:
        return contexts, []
