"""K/V reuse at shifted positions: the passage KV cache and KV shifting (`cache_reuse`).

RAG prompts are mostly retrieved passages, and popular passages come back question after question
at different positions, after different neighbours. Prefix caching only serves an identical
prefix, so this module reuses K/V wherever it is in the prompt:

* **passage cache** (`passage_cache`): a request's `passage_spans` mark prompt token ranges that
  are passages. Each passage's K/V is computed once and kept in the pool's passage region
  (`PassageStore`) as if it stood right after the prompt's prefix (the template tokens before the
  first passage). A miss is computed inside the request's own prefill (`miss_compute: prompt`, so
  a cold cache costs what a plain prefill costs) and stored with K re-rotated to that position,
  or on its own after the prefix in an extra forward (`miss_compute: alone`). A prompt none of
  whose passages is cached (and with no shifted run) is not a reuse prompt at all: it takes the
  plain prefill path, chunked and batched with the other requests (an answer's per-passage checks
  arrive together), and its passages are stored once that prefill has computed them
  (`store_computed`, after the step, before any sequence finishes). On reuse it is copied
  to its position in the new prompt with K re-rotated by the position delta
  (`RotaryEmbedding.shift_keys`: exact for post-RoPE keys).
* **KV shifting** (`cache_reuse: N`, llama.cpp's --cache-reuse): runs of >= N tokens of the new
  prompt that sit in cached prefix blocks at another position (`BlockManager.find_runs`) are copied
  the same way.

Reused K/V misses the attention to the tokens that now precede it. CacheBlend's selective
recompute restores most of it: every token is computed on layers 0..`check_layer`; on the check
layer the reused tokens whose K/V deviate most from that full computation (the top
`recompute_ratio`) stay active and are recomputed on all later layers, the others keep the reused
K/V. Tokens that are not reused (the template between passages, the question) are always
computed. Ratio 1.0 is a full prefill, ratio 0 pure reuse (no check pass). Shifted runs are
blended with the passage cache's ratio when the passage cache is enabled, else reused as they are
(llama.cpp's behaviour). K/V from the first reused token on differs from a full prefill, so those
blocks never serve an exact prompt from the prefix cache (`Sequence.hash_limit`): they are
registered on a salted branch of the chain (`salt`: these settings and the prompt's passage
spans), which only a request that would be blended the same way matches. So the same prompt
submitted again (the k per-passage candidate decodes of a short answer) is a prefix-cache hit, not
k reuse passes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Container
from dataclasses import dataclass

import torch

from inference.block_manager import BlockManager
from inference.config import EngineConfig
from inference.layers.metadata import AttentionMetadata, PrefillSpan
from inference.layers.rotary import RotaryEmbedding
from inference.passage_store import Entry, PassageStore
from inference.sequence import Sequence

MIN_PASSAGE_TOKENS = 4  # shorter spans are cheaper to compute than to look up and blend


class NoRotaryError(ValueError):
    """`passage_cache` / `cache_reuse` asked of a model without rotary position embeddings."""


def require_rope(model, what: str) -> RotaryEmbedding:
    """The model's rotary embedding, or a clear refusal: shifting K needs RoPE."""
    rot = getattr(model, "rotary", None)
    if not isinstance(rot, RotaryEmbedding):
        raise NoRotaryError(f"{what} needs a model with rotary position embeddings (RoPE) to move cached K/V "
                            f"to a new position; {type(model).__name__} has none. Turn it off for this model.")
    return rot


@dataclass
class Segment:
    """Reused K/V: prompt positions [dst, dst + n) get the K/V at `src_slots` (computed at positions
    src_pos..), K rotated by dst - src_pos."""

    dst: int
    n: int
    src_slots: torch.Tensor
    src_pos: int
    kind: str  # "passage" | "shift"


class KVReuse:
    def __init__(self, config: EngineConfig, model, runner, bm: BlockManager, store: PassageStore | None) -> None:
        pc = config.passage_cache
        what = "generator.engine.passage_cache" if pc.enabled else "generator.engine.cache_reuse"
        self.rotary = require_rope(model, what)
        if pc.check_layer >= len(model.layers):
            raise ValueError(f"passage_cache.check_layer {pc.check_layer} is not a layer of this model "
                             f"(0..{len(model.layers) - 1})")
        self.model = model
        self.runner = runner
        self.bm = bm
        self.store = store
        self.cache_reuse = config.cache_reuse
        self.recompute_ratio = pc.recompute_ratio if pc.enabled else 0.0
        self.check_layer = pc.check_layer
        self.miss_inline = pc.miss_compute == "prompt"
        self.hits = 0
        self.misses = 0
        self.tokens_reused = 0
        self.recomputed_tokens = 0
        self.shift_reused_tokens = 0
        # passages a prefix-cache hit reaches into (a miss computed in a prompt's prefill leaves
        # exact blocks the prefix cache serves to the next prompt with the same text before it)
        self.prefix_served = 0
        self.prefix_served_tokens = 0
        self.reuse_prefills = 0  # prompts computed by `prefill` (the others took the plain path)

    # ---- planning -----------------------------------------------------------------------
    def salt(self, passage_spans: list[tuple[int, int]], anchor: list[int] | None = None) -> bytes:
        """What blended K/V depends on besides the tokens: the spans, the entries they are read
        from (an anchor picks another prompt's) and how they are blended."""
        spec = (f"{self.recompute_ratio}|{self.check_layer}|{self.cache_reuse}|{self.miss_inline}|"
                f"{self.store is not None}|{sorted(passage_spans)}")
        h = hashlib.blake2b(spec.encode(), digest_size=16)
        if anchor is not None:
            h.update(b"|anchor|" + bytes(str(list(anchor)), "ascii"))
        return h.digest()

    def _spans(self, seq: Sequence, start: int, end: int) -> list[tuple[int, int]]:
        if self.store is None:
            return []
        return [(s, e) for s, e in seq.passage_spans if s >= start and e <= end and e - s >= MIN_PASSAGE_TOKENS]

    @staticmethod
    def _anchor(seq: Sequence) -> tuple[list[int], int]:
        """(The tokens that key every passage of the prompt, the position a stored passage's K
        sits at.) By default the prompt's own tokens before its first passage (system prompt,
        template). Not the first passage still to compute: when the prefix cache serves the first
        passages (the exact blocks a plain prefill left), the others must keep the key they were
        stored under. A request's `passage_anchor` names another prompt's template instead: an
        answer's checks read the passages under the answer prompt's key, so the K/V its prefill
        stored serves them (placed after their own template, like any shifted passage)."""
        if seq.passage_anchor is not None:
            return seq.passage_anchor, len(seq.passage_anchor)
        first = KVReuse._own_template(seq)
        return seq.token_ids[:first], first

    @staticmethod
    def _own_template(seq: Sequence) -> int:
        """Where the prompt's first passage starts (its own template ends)."""
        return next(s for s, e in seq.passage_spans if e - s >= MIN_PASSAGE_TOKENS)

    def _gaps(self, start: int, end: int, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        out, at = [], start
        for s, e in spans:
            if s > at:
                out.append((at, s))
            at = max(at, e)
        if end > at:
            out.append((at, end))
        return out

    def wants(self, seq: Sequence) -> bool:
        """Scheduler hook, after the prefix-cache match: can this prompt reuse shifted K/V?"""
        start, end = seq.num_computed_tokens, len(seq.token_ids) - 1
        first = not seq.passages_counted
        if self.store is not None and first:
            seq.passages_counted = True  # `wants` is asked again when admission has to wait
            # a passage the hit reaches into: at most its last partial block is computed again
            served = [(s, min(e, start)) for s, e in seq.passage_spans if s < start and e - s >= MIN_PASSAGE_TOKENS]
            self.prefix_served += len(served)
            self.prefix_served_tokens += sum(e - s for s, e in served)
        spans = self._spans(seq, start, end)
        seq.passages_to_store = []
        if self.cache_reuse and self.bm.find_runs(seq.token_ids, [(start, end)], self.cache_reuse):
            return True
        if not spans:
            return False
        if not self.miss_inline or self._any_cached(seq, spans):
            return True
        if seq.params.store_passages:
            seq.passages_to_store = spans  # every passage a miss: a plain prefill, stored after it
        elif first:  # read-only: missed, computed in the plain prefill, kept nowhere (counted once)
            self.misses += len(spans)
        return False

    def _any_cached(self, seq: Sequence, spans: list[tuple[int, int]]) -> bool:
        """Is any of these passages in the store (memory, or a file under disk_path)?"""
        store = self.store
        assert store is not None
        head, _ = self._anchor(seq)
        pid = store.prefix_id(head)
        for s, e in spans:
            if store.key(pid, seq.token_ids[s:e]) in store.entries:
                return True
            if store.disk is not None and store.file_for(head, seq.token_ids[s:e]).exists():
                return True
        return False

    def store_computed(self, seqs: list[Sequence]) -> None:
        """After a step: store the passages of plain prefills that have now computed them all (exact
        K/V, rotated back to the position right after the prefix, as an inline miss is stored). A
        passage another request stored meanwhile is left as it is; one that cannot fit is not kept."""
        for seq in seqs:
            spans = seq.passages_to_store
            if not spans or seq.num_computed_tokens < spans[-1][1]:
                continue
            seq.passages_to_store = []
            store = self.store
            assert store is not None
            head, base = self._anchor(seq)
            pid = store.prefix_id(head)
            keys = [store.key(pid, seq.token_ids[s:e]) for s, e in spans]
            pending = self._allocate_misses(keys, spans, store.entries)
            if pending:
                slots = self.runner.slots_of(seq.block_table, 0, spans[-1][1]).to(self.runner.device)
                self._store_inline(seq, slots, base, pid, pending)

    # ---- the prefill --------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, seq: Sequence) -> None:
        """Compute K/V of prompt[num_computed:-1] into the sequence's blocks, reusing what can be."""
        h, end = seq.num_computed_tokens, len(seq.token_ids) - 1
        self.reuse_prefills += 1
        slots = self.runner.slots_of(seq.block_table, 0, end).to(self.runner.device)
        spans = self._spans(seq, h, end)
        start = h
        segments: list[Segment] = []
        pending: list[tuple[Entry, int, int]] = []
        if spans:
            prefix = spans[0][0]
            if not self.miss_inline:  # misses are computed after the template: it must be there first
                self._forward_range(seq, slots, h, prefix)
                start = prefix
            head, base = self._anchor(seq)
            pid, found, pending = self._passages(seq, slots, head, base, spans)
            segments += found
        if self.cache_reuse:
            taken = sorted((s.dst, s.dst + s.n) for s in segments)
            for r in self.bm.find_runs(seq.token_ids, self._gaps(start, end, taken), self.cache_reuse):
                n = len(r.block_ids) * self.bm.block_size
                src = self.runner.slots_of(r.block_ids, 0, n).to(self.runner.device)
                segments.append(Segment(r.dst_start, n, src, r.src_start, "shift"))
                self.shift_reused_tokens += n
        self._place(slots, segments)
        self._blend(seq, slots, start, end, segments)
        if pending:
            self._store_inline(seq, slots, base, pid, pending)
        if segments:  # the blend overwrote placed K in place: QUEST's running bounds would only widen
            self.runner.refresh_bounds(seq.block_table, h, end)
        seq.num_computed_tokens = end
        if segments and self.recompute_ratio < 1.0:
            seq.hash_limit = min(s.dst for s in segments)
        self.bm.commit(seq, h)

    def _passages(self, seq: Sequence, slots: torch.Tensor, head: list[int], base: int,
                  spans: list[tuple[int, int]]) -> tuple[bytes, list[Segment], list[tuple[Entry, int, int]]]:
        """(prefix id, cached passages as segments, misses to store from this prompt's prefill):
        entries keyed under the template `head`, their K at position `base`. With `miss_compute:
        alone` the misses are computed on their own after this prompt's template (one forward),
        stored (K moved to `base`) and returned as segments instead."""
        store = self.store
        assert store is not None
        pid = store.prefix_id(head)
        keys = [store.key(pid, seq.token_ids[s:e]) for s, e in spans]
        pinned = set(keys)
        found: dict[bytes, Entry] = {}
        for k, (s, e) in zip(keys, spans, strict=True):
            if k not in found:
                entry = store.get(k, pid, seq.token_ids[s:e], pinned)
                if entry is not None:
                    found[k] = entry
                    self.hits += 1
                    self.tokens_reused += e - s
        if seq.params.store_passages:
            missing = self._allocate_misses(keys, spans, found)
        else:  # read-only: a miss is computed in this prompt's prefill and kept nowhere
            missing = []
            self.misses += len({k for k in keys if k not in found})
        if missing and not self.miss_inline:
            prefix = self._own_template(seq)
            ctx_slots = slots[:prefix]
            self._run_groups([(seq.token_ids[s:e], torch.arange(prefix, prefix + e - s), entry.slots,
                               torch.cat([ctx_slots, entry.slots])) for entry, s, e in missing])
            if base != prefix:  # an anchored request: its entries' K sits after the anchor's template
                done = torch.cat([entry.slots for entry, _, _ in missing])
                self._copy_rotated(done, done, torch.full((done.numel(),), base - prefix, dtype=torch.long))
            for entry, s, e in missing:
                store.save(entry, pid, seq.token_ids[s:e])
                found[entry.key] = entry
            missing = []
        segments = [Segment(s, e - s, found[k].slots, base, "passage")
                    for k, (s, e) in zip(keys, spans, strict=True) if k in found]
        return pid, segments, missing

    def _allocate_misses(self, keys: list[bytes], spans: list[tuple[int, int]], have: Container[bytes]
                         ) -> list[tuple[Entry, int, int]]:
        """Store entries for the passages whose key is not in `have`, each key once, counted as
        misses; one that cannot fit gets none (its tokens are simply computed, not kept)."""
        store = self.store
        assert store is not None
        pinned = set(keys)
        out: list[tuple[Entry, int, int]] = []
        new: set[bytes] = set()
        for k, (s, e) in zip(keys, spans, strict=True):
            if k in have or k in new:
                continue
            self.misses += 1
            entry = store.allocate(k, e - s, pinned)
            if entry is not None:
                new.add(k)
                out.append((entry, s, e))
        return out

    def _store_inline(self, seq: Sequence, slots: torch.Tensor, prefix: int, pid: bytes,
                      pending: list[tuple[Entry, int, int]]) -> None:
        """Copy the K/V this prefill computed for the missed passages into their entries, K rotated
        back to the position right after the prefix (where a hit expects it)."""
        assert self.store is not None
        self._copy_rotated(torch.cat([slots[s:e] for _, s, e in pending]),
                           torch.cat([entry.slots for entry, _, _ in pending]),
                           torch.cat([torch.full((e - s,), prefix - s, dtype=torch.long) for _, s, e in pending]))
        for entry, s, e in pending:
            self.store.save(entry, pid, seq.token_ids[s:e])

    def _place(self, slots: torch.Tensor, segments: list[Segment]) -> None:
        """Copy every segment's K/V into the sequence's slots, K re-rotated by the position delta."""
        if not segments:
            return
        self._copy_rotated(torch.cat([s.src_slots for s in segments]),
                           torch.cat([slots[s.dst:s.dst + s.n] for s in segments]),
                           torch.cat([torch.full((s.n,), s.dst - s.src_pos, dtype=torch.long) for s in segments]))

    def _copy_rotated(self, src: torch.Tensor, dst: torch.Tensor, delta: torch.Tensor) -> None:
        """K/V of pool slots `src` into slots `dst` on every layer, K rotated by `delta` positions."""
        delta = delta.to(src.device)
        for cache in self.runner.caches:
            k, v = cache.gather_slots(src)
            cache.write(dst, self.rotary.shift_keys(k, delta), v)

    # ---- forward passes ----------------------------------------------------------------
    def _meta(self, groups) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        """groups: (token ids, positions, write slots, context slots in position order)."""
        dev = self.runner.device
        ids, pos, writes, spans = [], [], [], []
        row = 0
        for tok, p, w, ctx in groups:
            n = len(tok)
            ctx_pos = torch.arange(ctx.numel())
            mask = (ctx_pos[None, :] <= p[:, None]).to(dev)
            spans.append(PrefillSpan(row, n, int(ctx.numel()), ctx, mask))
            ids.append(torch.as_tensor(tok, dtype=torch.long))
            pos.append(p)
            writes.append(w)
            row += n
        meta = AttentionMetadata(slot_mapping=torch.cat(writes).to(dev), prefills=spans)
        return torch.cat(ids).to(dev), torch.cat(pos).to(dev), meta

    def _run_groups(self, groups) -> None:
        ids, pos, meta = self._meta(groups)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, pos, meta)

    def _forward_range(self, seq: Sequence, slots: torch.Tensor, start: int, end: int) -> None:
        if end > start:
            self._run_groups([(seq.token_ids[start:end], torch.arange(start, end), slots[start:end], slots[:end])])

    def _blend(self, seq: Sequence, slots: torch.Tensor, start: int, end: int, segments: list[Segment]) -> None:
        """Compute [start, end) around the placed segments, recomputing the most deviating reused
        tokens from the check layer on (see the module docstring)."""
        if end <= start:
            return
        reused = torch.zeros(end - start, dtype=torch.bool)
        for s in segments:
            reused[s.dst - start:s.dst - start + s.n] = True
        n_reused = int(reused.sum())
        ratio = self.recompute_ratio if n_reused else 1.0
        if ratio >= 1.0:
            self.recomputed_tokens += n_reused
            self._forward_range(seq, slots, start, end)
            return
        positions = torch.arange(start, end)
        tokens = torch.tensor(seq.token_ids[start:end], dtype=torch.long)
        check = self.check_layer if ratio > 0 else -1
        active = torch.ones(end - start, dtype=torch.bool) if check >= 0 else ~reused
        if not bool(active.any()):
            return
        ctx = slots[:end]
        rel = active.nonzero().squeeze(1)
        ids, pos, meta = self._meta([(tokens[rel], positions[rel], slots[start:end][rel.to(slots.device)], ctx)])
        x = self.model.embed_tokens(ids)
        cand = slots[start:end][reused.to(slots.device)]
        for i, layer in enumerate(self.model.layers):
            if i == check:
                kv_cache = layer.self_attn.kv_cache
                k_old, v_old = kv_cache.gather_slots(cand)
            x = layer(x, pos, meta)
            if i != check:
                continue
            k_new, v_new = kv_cache.gather_slots(cand)
            dev = (k_new.float() - k_old.float()).pow(2).sum((1, 2)) + (v_new.float() - v_old.float()).pow(2).sum((1, 2))
            n_sel = min(n_reused, math.ceil(ratio * n_reused))
            self.recomputed_tokens += n_sel
            keep = ~reused
            reused_rel = reused.nonzero().squeeze(1)
            keep[reused_rel[self._select(dev, n_sel).cpu()]] = True
            if not bool(keep.any()):
                return  # every later layer keeps the reused K/V
            sub = keep.nonzero().squeeze(1)  # rows of x (all tokens are rows before the check)
            x = x[sub.to(x.device)]
            ids, pos, meta = self._meta([(tokens[sub], positions[sub], slots[start:end][sub.to(slots.device)], ctx)])

    def _select(self, deviation: torch.Tensor, n: int) -> torch.Tensor:
        """Which reused tokens to recompute: CacheBlend's rule, the `n` largest K/V deviations on
        the check layer (an overridable hook: the comparison against random picks in the docs)."""
        return deviation.topk(n).indices

    # ---- introspection ------------------------------------------------------------------
    def stats(self) -> dict:
        out = {"passage_cache_hits": self.hits, "passage_cache_misses": self.misses,
               "passage_cache_tokens_reused": self.tokens_reused, "recomputed_tokens": self.recomputed_tokens,
               "kv_shift_reused_tokens": self.shift_reused_tokens,
               "passage_prefix_hits": self.prefix_served, "passage_prefix_tokens": self.prefix_served_tokens,
               "reuse_prefills": self.reuse_prefills}
        if self.store is not None:
            out.update({"passage_cache_entries": len(self.store.entries),
                        "passage_cache_blocks_used": self.store.num_used,
                        "passage_cache_blocks_total": self.store.num_blocks,
                        "passage_cache_evictions": self.store.evictions,
                        "passage_cache_disk_hits": self.store.disk_hits})
        return out


def join_segments(tokenizer, pieces: list[tuple[str, bool]]) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of `pieces` (text, is_passage) tokenised one by one and concatenated, and the
    [start, end) span of each passage: a passage then has the same token ids in every prompt,
    whatever surrounds it, which is what lets its cached K/V be found."""
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    for text, is_passage in pieces:
        toks = tokenizer.encode(text, add_special_tokens=False)
        if is_passage and toks:
            spans.append((len(ids), len(ids) + len(toks)))
        ids += toks
    return ids, spans


def locate_spans(tokenizer, ids: list[int], texts: list[str], skip_first: bool = False) -> list[tuple[int, int]]:
    """Spans of `texts` (in prompt order) inside `ids`, a prompt tokenised as one string: for a
    caller that renders the prompt whole and knows its passages' texts. A boundary token may have
    merged with a neighbour, so the passage's own tokens are searched whole (also with the
    leading space BPE vocabularies fold into a word's token: "[1] Paris" holds " Paris"), then
    without the first and/or last one; a passage not found gets no span (it is simply computed).

    `skip_first`: a span never holds the passage's first token. After "Passage: " it is " Paris",
    after a newline "Paris", so only the tokens after it are the same in every template: what a
    caller needs whose prompts of different templates read one entry (it then names their key's
    `passage_anchor`: the default key, the prompt up to its first span, would hold that token)."""
    spans: list[tuple[int, int]] = []
    at = 0
    for text in texts:
        found = None
        variants = [tokenizer.encode(v, add_special_tokens=False) for v in (" " + text, text)]
        for trim_a, trim_b in ((0, 0), (1, 0), (0, 1), (1, 1)):  # whole tokens first, either variant
            for toks in variants:
                sub = toks[trim_a:len(toks) - trim_b]
                skip = int(skip_first and trim_a == 0)
                pos = _find(ids, sub, at) if len(sub) - skip >= MIN_PASSAGE_TOKENS else -1
                if pos >= 0:
                    found = (pos + skip, pos + len(sub))
                    break
            if found:
                break
        if found:
            spans.append(found)
            at = found[1]
    return spans


def _find(ids: list[int], sub: list[int], start: int) -> int:
    first, n = sub[0], len(sub)
    for i in range(start, len(ids) - n + 1):
        if ids[i] == first and ids[i:i + n] == sub:
            return i
    return -1
