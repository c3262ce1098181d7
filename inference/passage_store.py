"""The passage KV cache's storage: a region of the paged pool with its own LRU, plus keyed files.

An entry is the K/V (every layer) of one passage as it stands right after the prompt's prefix
(computed there, or at its place in a prompt with K rotated back: `passage_cache.miss_compute`),
keyed by (model signature, prefix tokens, passage tokens): the prefix is the template part of the
prompt before the first passage, so the same passage under another system prompt or another model
is another key. The region's blocks are never the BlockManager's, so a full passage cache cannot
take a block a request needs; `max_gb` is the region's size and eviction is least-recently-used.

With `disk_path`, every new entry is also written to `<key>.pt` (write-through; read back on a
memory miss, e.g. after a restart). A file whose signature, prefix or tokens differ from what the
key promises is ignored; one that does not load is skipped with a warning (and overwritten when
the passage is computed again).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

log = logging.getLogger(__name__)


@dataclass
class Entry:
    key: bytes
    blocks: list[int]
    slots: torch.Tensor  # [length] flat pool slots, token order
    length: int


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.digest()


def _ids(tokens) -> bytes:
    return np.asarray(tokens, dtype=np.int64).tobytes()


class PassageStore:
    def __init__(self, caches, base_block: int, num_blocks: int, block_size: int, signature: dict,
                 disk_path: str | None) -> None:
        self.caches = caches
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.free: list[int] = list(range(base_block, base_block + num_blocks))
        self.entries: OrderedDict[bytes, Entry] = OrderedDict()  # LRU first
        self.signature = signature
        self._sig = json.dumps(signature, sort_keys=True).encode()
        self.disk = Path(disk_path).expanduser() if disk_path else None
        if self.disk is not None:
            self.disk.mkdir(parents=True, exist_ok=True)
        self.evictions = 0
        self.disk_hits = 0

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def prefix_id(self, prefix_tokens) -> bytes:
        return _digest(self._sig, _ids(prefix_tokens))

    def key(self, prefix_id: bytes, tokens) -> bytes:
        return _digest(prefix_id, _ids(tokens))

    def get(self, key: bytes, prefix_id: bytes, tokens: list[int], pinned: set[bytes]) -> Entry | None:
        """The entry for `key` (now most recently used), from memory or else from disk."""
        e = self.entries.get(key)
        if e is not None:
            self.entries.move_to_end(key)
            return e
        return self._load(key, prefix_id, tokens, pinned) if self.disk is not None else None

    def allocate(self, key: bytes, length: int, pinned: set[bytes]) -> Entry | None:
        """Blocks for a new entry, evicting LRU entries not in `pinned`; None when it cannot fit."""
        need = -(-length // self.block_size)
        if need > self.num_blocks:
            return None
        victims = (k for k in list(self.entries) if k not in pinned)
        while len(self.free) < need:
            k = next(victims, None)
            if k is None:
                return None
            self.free.extend(self.entries.pop(k).blocks)
            self.evictions += 1
        blocks = [self.free.pop() for _ in range(need)]
        bs = self.block_size
        slots = (torch.tensor(blocks)[:, None] * bs + torch.arange(bs)).reshape(-1)[:length]
        e = Entry(key, blocks, slots.to(self.caches[0].k.device), length)
        self.entries[key] = e
        return e

    def drop(self, key: bytes) -> None:
        e = self.entries.pop(key, None)
        if e is not None:
            self.free.extend(e.blocks)

    def clear(self) -> int:
        n = len(self.entries)
        for k in list(self.entries):
            self.drop(k)
        return n

    # ---- disk -------------------------------------------------------------------------
    def file_for(self, prefix_tokens, tokens) -> Path | None:
        """The file the passage `tokens` after `prefix_tokens` is saved in (None without disk_path):
        lets a warm-up skip passages already on disk without loading them."""
        if self.disk is None:
            return None
        return self._file(self.key(self.prefix_id(prefix_tokens), tokens))

    def _file(self, key: bytes) -> Path:
        assert self.disk is not None
        return self.disk / f"{key.hex()}.pt"

    def save(self, e: Entry, prefix_id: bytes, tokens: list[int]) -> None:
        if self.disk is None:
            return
        data = {"signature": self.signature, "prefix_id": prefix_id.hex(), "token_ids": list(tokens),
                "k": torch.stack([c.gather_slots(e.slots)[0] for c in self.caches]).cpu(),
                "v": torch.stack([c.gather_slots(e.slots)[1] for c in self.caches]).cpu()}
        path = self._file(e.key)
        tmp = path.with_suffix(".tmp")
        try:
            torch.save(data, tmp)
            os.replace(tmp, path)
        except OSError as exc:  # a full or read-only disk costs the spill, never the request
            log.warning("passage cache: cannot write %s: %s", path, exc)

    def _load(self, key: bytes, prefix_id: bytes, tokens: list[int], pinned: set[bytes]) -> Entry | None:
        path = self._file(key)
        if not path.exists():
            return None
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
            k, v = data["k"], data["v"]
            ok = (data["signature"] == self.signature and data["prefix_id"] == prefix_id.hex()
                  and list(data["token_ids"]) == list(tokens))
            shape = (len(self.caches), len(tokens), *self.caches[0].k.shape[2:])
            if ok and (tuple(k.shape) != shape or tuple(v.shape) != shape):
                raise ValueError(f"K/V shape {tuple(k.shape)}, expected {shape}")
        except Exception as exc:  # truncated, garbage, wrong layout: never fatal
            log.warning("passage cache: skipping corrupt file %s (%s: %s)", path, type(exc).__name__, exc)
            return None
        if not ok:
            log.info("passage cache: ignoring %s (saved for another model, template or passage)", path)
            return None
        e = self.allocate(key, len(tokens), pinned)
        if e is None:
            return None
        for li, c in enumerate(self.caches):
            c.write(e.slots, k[li].to(c.k.device), v[li].to(c.k.device))
        self.disk_hits += 1
        return e
