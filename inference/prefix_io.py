"""Prefix-cache persistence and introspection.

Saved: every hashed block's chain hash, parent hash, token ids and K/V (all layers), plus the
shape facts that must match on load. Loading asks the block manager to adopt each block into a
never-used free block as cached-but-unused (`BlockManager.adopt_cached`), so they are reused on
the next hit or evicted LRU; this module never edits the manager's lists or hash map itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch


def _signature(engine) -> dict:
    c = engine.runner.caches[0]
    return {"model": engine.model_dir.name, "block_size": engine.bm.block_size, "layers": len(engine.runner.caches),
            "kv_shape": list(c.k.shape[1:]), "kv_dtype": str(c.k.dtype)}


def save_prefix_cache(engine, path: str | os.PathLike) -> int:
    blocks = engine.bm.cached_blocks()
    index = torch.tensor([b.block_id for b in blocks], dtype=torch.long)
    data = {
        "signature": _signature(engine),
        "hashes": [b.hash for b in blocks],
        "parents": [b.parent_hash for b in blocks],
        "token_ids": [list(b.token_ids) for b in blocks],
        "k": [c.k.index_select(0, index).cpu() for c in engine.runner.caches],
        "v": [c.v.index_select(0, index).cpu() for c in engine.runner.caches],
    }
    if engine.runner.caches[0].int8:
        data["k_scale"] = [c.k_scale.index_select(0, index).cpu() for c in engine.runner.caches]
        data["v_scale"] = [c.v_scale.index_select(0, index).cpu() for c in engine.runner.caches]
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(data, tmp)
    os.replace(tmp, path)
    return len(blocks)


def load_prefix_cache(engine, path: str | os.PathLike) -> int:
    """Returns how many blocks were restored (limited by free, never-cached blocks)."""
    data = torch.load(path, map_location="cpu", weights_only=True)
    if data["signature"] != _signature(engine):
        raise ValueError(f"prefix cache {path} was saved for {data['signature']}, engine is {_signature(engine)}")
    restored = 0
    for j, h in enumerate(data["hashes"]):
        bid = engine.bm.adopt_cached(h, data["parents"][j], data["token_ids"][j])
        if bid is None:
            continue
        for li, c in enumerate(engine.runner.caches):
            c.k[bid].copy_(data["k"][li][j])
            c.v[bid].copy_(data["v"][li][j])
            if c.int8:
                c.k_scale[bid] = data["k_scale"][li][j]
                c.v_scale[bid] = data["v_scale"][li][j]
        engine.runner.refresh_bounds([bid], 0, engine.bm.block_size)  # QUEST key bounds of the full block
        restored += 1
    return restored


def cached_prefixes(engine, top: int = 10) -> list[dict]:
    """Longest cached prefixes (chains of cached blocks ending in a leaf), for introspection."""
    by_hash = {b.hash: b for b in engine.bm.cached_blocks()}
    has_child = {b.parent_hash for b in by_hash.values() if b.parent_hash is not None}
    chains = []
    for h, b in by_hash.items():
        if h in has_child:
            continue
        chain = [b]
        while chain[-1].parent_hash is not None and chain[-1].parent_hash in by_hash:
            chain.append(by_hash[chain[-1].parent_hash])
        chain.reverse()
        tokens = [t for blk in chain for t in blk.token_ids]
        chains.append({
            "tokens": len(tokens),
            "blocks": len(chain),
            "in_use": any(blk.ref_count > 0 for blk in chain),
            "complete": chain[0].parent_hash is None,
            "preview": engine.tokenizer.decode(tokens[:48]),
        })
    chains.sort(key=lambda c: -c["tokens"])
    return chains[:top]
