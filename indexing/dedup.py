"""Exact and near-duplicate detection across one ingest (MinHash LSH or SimHash).

Both keep the first document seen and flag later ones, so re-ingesting the same corpus drops
the same documents every time. Shingles are word n-grams, with every CJK character a word,
so Chinese/Japanese text (no spaces) is compared sensibly too.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence

import numpy as np

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|\w+")


def normalized_key(text: str) -> str:
    """Exact-duplicate key: case and whitespace differences do not make a document new."""
    return hashlib.blake2b(" ".join(text.lower().split()).encode("utf-8"), digest_size=16).hexdigest()


_TOKEN_HASH: dict[str, int] = {}
_M = np.uint64(0x9E3779B97F4A7C15)


def _token_hashes(tokens: list[str]) -> np.ndarray:
    """crc32 of each token (memoised: corpora reuse a small vocabulary)."""
    cache = _TOKEN_HASH
    if len(cache) > 2_000_000:
        cache.clear()
    out = np.empty(len(tokens), dtype=np.uint64)
    for i, t in enumerate(tokens):
        h = cache.get(t)
        if h is None:
            h = cache[t] = zlib.crc32(t.encode("utf-8"))
        out[i] = h
    return out


def shingle_hashes(text: str, k: int) -> np.ndarray:
    """Distinct 32-bit hashes of the k-token shingles, stable across processes (unlike hash()),
    so the same corpus always drops the same documents."""
    toks = _TOKEN.findall(text.lower())
    if not toks:
        return np.zeros(0, dtype=np.uint64)
    t = _token_hashes(toks)
    k = min(k, len(t))
    h = t[: len(t) - k + 1].copy()
    with np.errstate(over="ignore"):
        for j in range(1, k):
            h = (h * _M) ^ t[j : len(t) - k + 1 + j]
    return np.unique(h >> np.uint64(32))


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads 32-bit shingle hashes over 64 well-mixed bits (wrapping math)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two arrays of distinct shingle hashes."""
    if a.size == 0 and b.size == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def one_contains_other(a: np.ndarray, b: np.ndarray) -> bool:
    """True when every shingle of one text is in the other (a copy with a header, footer or
    formatting changes), False when each has shingles of its own: a templated document with other
    names or numbers (the same boilerplate with different facts) is a different document."""
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter == min(a.size, b.size)


class ContainmentCheck:
    """Second opinion on a near-duplicate candidate, on 2-token shingles (a one-word or
    one-number substitution shows on both sides). Keeps one uint32 array per remembered text."""

    def __init__(self) -> None:
        self.shingles: list[np.ndarray] = []

    def of(self, text: str) -> np.ndarray:
        return shingle_hashes(text, 2).astype(np.uint32)

    def add(self, x: np.ndarray) -> None:
        self.shingles.append(x)

    def same(self, x: np.ndarray, j: int) -> bool:
        return one_contains_other(x, self.shingles[j])


class _BucketIndex:
    """What both near-duplicate indexes share: documents filed under keys (MinHash bands, SimHash
    bit blocks); the candidates of a new text are the earlier documents sharing one of its keys,
    each tried once in key order, and the first that matches (and passes the containment check,
    when on) is the duplicate. One search, so both indexes keep the first document seen."""

    verify: ContainmentCheck | None
    buckets: dict
    ids: list[str]

    def _find_or_add(self, doc_id: str, text: str, keys: Sequence[Hashable], matches: Callable[[int], bool],
                     remember: Callable[[], None]) -> str | None:
        """Id of the first earlier document that `matches`, else None after `remember` stored the
        new one's own data and it is filed under `keys`."""
        seen: set[int] = set()
        cont = self.verify.of(text) if self.verify is not None else None
        for key in keys:
            for j in self.buckets.get(key, ()):
                if j not in seen:
                    seen.add(j)
                    if matches(j) and (cont is None or self.verify.same(cont, j)):  # type: ignore[union-attr]
                        return self.ids[j]
        idx = len(self.ids)
        if self.verify is not None:
            self.verify.add(cont)  # type: ignore[arg-type]
        remember()
        self.ids.append(doc_id)
        for key in keys:
            self.buckets[key].append(idx)
        return None


class MinHashLSH(_BucketIndex):
    """Jaccard near-duplicates: banded MinHash signatures, candidates verified on the signature."""

    def __init__(self, threshold: float = 0.9, num_perm: int = 128, shingle: int = 3, seed: int = 1,
                 containment: bool = False):
        self.verify = ContainmentCheck() if containment else None
        rng = np.random.default_rng(seed)
        # Multiply-shift hashing (odd 64-bit multipliers, wrapping arithmetic): one permutation each.
        self.a = rng.integers(1, 2**63, size=num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.b = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64)
        self.threshold, self.shingle = threshold, shingle
        self.bands, self.rows = self._bands(threshold, num_perm)
        self.buckets: dict[tuple[int, bytes], list[int]] = defaultdict(list)
        self.sigs: list[np.ndarray] = []
        self.ids: list[str] = []

    @staticmethod
    def _bands(t: float, n: int) -> tuple[int, int]:
        # The S-curve midpoint (1/b)^(1/r) sits a little below t: favour recall, verify after.
        target = max(0.05, t - 0.1)
        best = min(((n // r, r) for r in range(1, n + 1)),
                   key=lambda br: abs((1 / br[0]) ** (1 / br[1]) - target))
        return best

    def signature(self, text: str) -> np.ndarray:
        x = shingle_hashes(text, self.shingle)
        if x.size == 0:
            return np.full(self.a.shape, np.iinfo(np.uint64).max, dtype=np.uint64)
        with np.errstate(over="ignore"):
            return ((np.outer(x, self.a) + self.b) >> np.uint64(32)).min(axis=0)

    def check_add(self, doc_id: str, text: str) -> str | None:
        """Id of an earlier near-duplicate of `text`, or None after remembering it as new."""
        sig = self.signature(text)
        keys = [(i, sig[i * self.rows : (i + 1) * self.rows].tobytes()) for i in range(self.bands)]
        return self._find_or_add(doc_id, text, keys, lambda j: float(np.mean(self.sigs[j] == sig)) >= self.threshold,
                                 lambda: self.sigs.append(sig))


class SimHash(_BucketIndex):
    """Near-duplicates from a 64-bit SimHash, confirmed on the exact shingle Jaccard.

    Candidates are fingerprints within a Hamming radius of (1 - threshold) * 64, found through
    exact matches on one of (radius + 1) bit blocks (pigeonhole: no pair within the radius is
    missed). Random fingerprints also fall inside a loose radius now and then, so each
    candidate is confirmed on the real Jaccard of the shingle sets before a document is dropped.
    """

    def __init__(self, threshold: float = 0.9, shingle: int = 3, containment: bool = False):
        self.verify = ContainmentCheck() if containment else None
        self.shingle = shingle
        self.radius = int((1.0 - threshold) * 64)
        n_blocks = self.radius + 1
        edges = np.linspace(0, 64, n_blocks + 1).astype(int)
        self.blocks = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]
        self.buckets: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.hashes: list[int] = []
        self.ids: list[str] = []
        self.shingles: list[np.ndarray] = []
        self.threshold = threshold

    def fingerprint(self, text: str) -> int:
        return self._fingerprint(shingle_hashes(text, self.shingle))

    def _fingerprint(self, x: np.ndarray) -> int:
        if x.size == 0:
            return 0
        bits = np.unpackbits(_mix64(x).view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        votes = bits.sum(axis=0, dtype=np.int64) * 2 - x.size
        packed = np.packbits(votes > 0, bitorder="little")
        return int.from_bytes(packed.tobytes(), "little")

    def _block_keys(self, h: int) -> list[tuple[int, int]]:
        return [(i, (h >> a) & ((1 << (b - a)) - 1)) for i, (a, b) in enumerate(self.blocks)]

    def check_add(self, doc_id: str, text: str) -> str | None:
        x = shingle_hashes(text, self.shingle)
        h = self._fingerprint(x)

        def matches(j: int) -> bool:
            return (self.hashes[j] ^ h).bit_count() <= self.radius and jaccard(x, self.shingles[j]) >= self.threshold

        def remember() -> None:
            self.hashes.append(h)
            self.shingles.append(x.astype(np.uint32))

        return self._find_or_add(doc_id, text, self._block_keys(h), matches, remember)
