"""Turns a scheduled batch into tensors, runs the model and returns next-token logits.

Input layout: decode rows first (one token each, so the decode gather covers rows [0, Bd)),
then each prefill chunk contiguously. Only the last row of a sequence whose tokens are now all
computed produces logits; intermediate prefill chunks don't.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference import kv_cache, prompt_logprobs
from inference.layers import quest
from inference.layers.metadata import AttentionMetadata, PrefillSpan
from inference.scheduler import ScheduledBatch
from inference.sequence import Sequence

# cascade decode pays off once a shared prefix is long and several rows read it; below these
# sizes the plain padded gather is used (it is also bit-identical to HF, which tests rely on)
CASCADE_MIN_ROWS = 2
CASCADE_MIN_TOKENS = 256


@dataclass
class RunOutput:
    """Everything one forward pass computed, handed to the scheduler and the output processor."""

    logits: torch.Tensor  # [rows with logits, vocab], float32 on CPU
    owners: list[int]  # batch.seqs index of each logits row
    prompt_logprobs: dict[int, list[prompt_logprobs.Entry]]  # batch.seqs index -> prompt entries
    # layer (-1: final) -> [rows with logits, hidden] float32 CPU, for the layers rows asked for
    hidden: dict[int, torch.Tensor] | None = None


class ModelRunner:
    def __init__(self, model, num_blocks: int, block_size: int, dtype: torch.dtype, device: str,
                 int8_kv: bool, use_cuda_graphs: bool = False, max_num_seqs: int = 64,
                 max_model_len: int = 4096, extra_blocks: int = 0, quest_dense_layers: int | None = None,
                 quest_blocks: int = 0) -> None:
        """`quest_dense_layers` set: QUEST sparse decode on the later layers, `quest_blocks` each."""
        self.model = model
        self.device = device
        self.block_size = block_size
        self.num_layers = len(model.layers)
        self.graphs = None
        self.quest_blocks = quest_blocks if quest_dense_layers is not None else 0
        self.sparse_layers = self.num_layers - quest_dense_layers if quest_dense_layers is not None else 0
        self.sparse_blocks_skipped = 0  # per (decode token, sparse layer, KV head)
        self.sparse_blocks_considered = 0
        # a captured graph would freeze one step's selection sizes: QUEST decodes eagerly
        use_cuda_graphs = use_cuda_graphs and device.startswith("cuda") and not int8_kv and _triton_ok() \
            and not self.sparse_layers
        # one extra scratch block (never handed out) absorbs K/V writes of CUDA-graph padding rows;
        # `extra_blocks` after it are the passage cache's region (its own allocator, never the BlockManager's)
        self.extra_block_base = num_blocks + int(use_cuda_graphs)
        self.caches = kv_cache.allocate(self.num_layers, self.extra_block_base + extra_blocks, block_size,
                                        model.num_kv_heads, model.head_dim, dtype, device, int8_kv,
                                        quest_dense_layers, quest_blocks)
        model.set_kv_caches(self.caches)
        if use_cuda_graphs:
            from inference.cuda_graph import DecodeGraphs

            self.graphs = DecodeGraphs(model, max_num_seqs, -(-max_model_len // block_size), num_blocks,
                                       block_size, device)
            self.graphs.capture()
        self._arange = torch.arange(block_size, device=device)

    def zero_blocks(self, ids: list[int]) -> None:
        if ids:
            t = torch.tensor(ids, dtype=torch.long, device=self.device)
            for c in self.caches:
                c.zero_blocks(t)

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        for src, dst in pairs:
            for c in self.caches:
                c.copy_block(src, dst)

    def reset_bounds(self, ids: list[int]) -> None:
        """QUEST: blocks with a new owner start with empty key bounds (before any copy into them)."""
        if ids and self.sparse_layers:
            t = torch.tensor(ids, dtype=torch.long, device=self.device)
            for c in self.caches:
                c.reset_bounds(t)

    def refresh_bounds(self, table: list[int], start: int, end: int) -> None:
        """QUEST: recompute the key bounds of the blocks holding positions [start, end) of a
        sequence whose K there was overwritten in place (their fill is what `end` leaves)."""
        if not self.sparse_layers or end <= start:
            return
        bs = self.block_size
        first, last = start // bs, -(-end // bs)
        ids = torch.tensor(table[first:last], dtype=torch.long, device=self.device)
        fills = torch.tensor([min(bs, end - i * bs) for i in range(first, last)], device=self.device)
        for c in self.caches:
            c.refresh_bounds(ids, fills)

    def slots_of(self, table: list[int], start: int, end: int) -> torch.Tensor:
        """Flat pool slots of positions [start, end) of a block table."""
        bs = self.block_size
        nb = -(-end // bs)
        bt = torch.tensor(table[:nb], dtype=torch.long)
        return (bt[:, None] * bs + torch.arange(bs)).reshape(-1)[start:end]

    def prepare(self, batch: ScheduledBatch) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[int]]:
        bs = self.block_size
        ids: list[int] = []
        pos: list[torch.Tensor] = []
        slot_parts: list[torch.Tensor] = []
        logits_rows: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        decode_rows: list[int] = []
        prefills: list[PrefillSpan] = []
        for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
            start = seq.num_computed_tokens
            end = start + n
            row = len(ids)
            ids.extend(seq.token_ids[start:end])
            if n == 1:
                p = end - 1
                decode_tables.append(seq.block_table[: -(-end // bs)])
                decode_lens.append(end)
                decode_rows.append(row)
                pos.append(torch.tensor([p]))
                slot_parts.append(torch.tensor([seq.block_table[p // bs] * bs + p % bs]))
            else:
                ctx_slots = self.slots_of(seq.block_table, 0, end)
                pos.append(torch.arange(start, end))
                slot_parts.append(ctx_slots[start:])
                mask = None
                if start:
                    qpos = torch.arange(start, end)[:, None]
                    mask = torch.arange(end)[None, :] <= qpos
                    mask = mask.to(self.device)
                prefills.append(PrefillSpan(row, n, end, ctx_slots.to(self.device), mask,
                                            torch.tensor(seq.block_table[: -(-end // bs)], dtype=torch.int32,
                                                         device=self.device)))
            if end == len(seq.token_ids):
                logits_rows.append(row + n - 1)
        dev = self.device
        meta = AttentionMetadata(slot_mapping=torch.cat(slot_parts).to(dev), prefills=prefills)
        if decode_tables:
            nbd = len(decode_tables)
            width = max(len(t) for t in decode_tables)
            table = torch.zeros(nbd, width, dtype=torch.long)
            for i, t in enumerate(decode_tables):
                table[i, : len(t)] = torch.tensor(t)
            lens = torch.tensor(decode_lens)
            mask = torch.arange(width * bs)[None, :] < lens[:, None]
            meta.decode_idx = torch.tensor(decode_rows, device=dev)
            meta.decode_block_tables = table.to(dev)
            meta.decode_ctx_lens = lens.to(dev)
            meta.decode_mask = mask[:, None, None, :].to(dev)
            meta.decode_contiguous = decode_rows == list(range(nbd))
            if self.sparse_layers:
                skipped = quest.skipped_blocks(decode_lens, bs, self.quest_blocks)
                per_layer = self.sparse_layers * self.model.num_kv_heads
                self.sparse_blocks_skipped += skipped * per_layer
                self.sparse_blocks_considered += sum(-(-n // bs) for n in decode_lens) * per_layer
            if dev == "cpu" and nbd >= CASCADE_MIN_ROWS:
                self._plan_cascade(meta, table, lens)
        input_ids = torch.tensor(ids, dtype=torch.long, device=dev)
        positions = torch.cat(pos).to(dev)
        return input_ids, positions, meta, logits_rows

    def _plan_cascade(self, meta: AttentionMetadata, table: torch.Tensor, lens: torch.Tensor) -> None:
        """Use cascade attention when all decode rows share a long run of leading blocks."""
        bs = self.block_size
        same = (table == table[0]).all(0).to(torch.int32).cumprod(0)
        p = min(int(same.sum()), (int(lens.min()) - 1) // bs)  # keep >= 1 own token per row
        if p * bs < CASCADE_MIN_TOKENS:
            return
        suffix = table[:, p:]
        width = suffix.shape[1]
        own = lens - p * bs
        bias = torch.zeros(table.shape[0], 1, 1, width * bs)
        bias.masked_fill_((torch.arange(width * bs)[None, :] >= own[:, None])[:, None, None, :], float("-inf"))
        meta.shared_blocks = table[0, :p].to(self.device)
        meta.suffix_block_tables = suffix.contiguous().to(self.device)
        meta.suffix_bias = bias.to(self.device)

    def _logits(self, last: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        """The head on the sampled rows (`seqs[r]` owns row r). A row that needs only some tokens'
        logits (`_head_rows`) gets just those rows of the head, the rest of its vocabulary -inf (the
        same sampler and log-softmax then work within the set): a yes/no check skips a 151,936-row
        head GEMV for 2-6 rows, a JSON step outside a string for its punctuation and keys."""
        wants = [_head_rows(s, self.model.vocab_rows) for s in seqs]
        if not any(wants):
            return self.model.compute_logits(last)
        out = torch.full((last.shape[0], self.model.vocab_rows), float("-inf"), dtype=torch.float32,
                         device=last.device)
        full = [r for r, w in enumerate(wants) if w is None]
        if full:
            out[full] = self.model.compute_logits(last[full]).float()
        for ids in {w for w in wants if w is not None}:
            rs = [r for r, w in enumerate(wants) if w == ids]
            cols = torch.tensor(ids, dtype=torch.long, device=last.device)
            out[torch.tensor(rs, device=last.device)[:, None], cols[None, :]] = \
                self.model.compute_logits_rows(last[rs], cols).float()
        return out

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> RunOutput:
        """One forward pass over the batch; returns everything it computed (no side state)."""
        input_ids, positions, meta, rows = self.prepare(batch)
        probed = {s.params.hidden_state_layer for s in batch.seqs if s.params.hidden_state}
        layers = {k: None for k in probed if k > 0} or None
        # a graph replay captures no middle layer: rows that want one take the eager path
        hidden = self.graphs.run(input_ids, positions, meta) if self.graphs is not None and not layers else None
        want_prompt_lps = any(prompt_logprobs.wants_prompt_logprobs(s) for s in batch.seqs)
        index = torch.tensor(rows, dtype=torch.long, device=input_ids.device)
        pruned = False
        if hidden is None:
            # only the sampled rows' final states are read (unless prompt logprobs want every row):
            # the model may skip the last layer's MLP for the others (`keep`)
            keep = None if want_prompt_lps else index
            hidden = self.model(input_ids, positions, meta, layers, keep=keep) if layers else \
                self.model(input_ids, positions, meta, keep=keep)
            pruned = keep is not None and hidden.shape[0] != input_ids.shape[0]
        prompt_lps = prompt_logprobs.collect(self.model, hidden, batch) if want_prompt_lps else {}
        wanted = set(rows)
        owners = []
        r = 0
        for i, n in enumerate(batch.num_tokens):
            r += n
            if (r - 1) in wanted:
                owners.append(i)
        if not rows:
            return RunOutput(torch.empty(0), owners, prompt_lps)
        last = hidden if pruned else hidden[index]
        logits = self._logits(last, [batch.seqs[i] for i in owners])
        kept = None
        if probed:
            kept = {k: (last if k == -1 else layers[k][index]).float().cpu() for k in probed}
        return RunOutput(logits.float().cpu(), owners, prompt_lps, kept)


def _head_rows(seq: Sequence, vocab: int) -> tuple[int, ...] | None:
    """The head rows that are all this row needs, or None for the whole head: the candidates of a
    `SamplingParams.candidates_only` first token, or what the last logits processor will leave
    unmasked when it says so before the step (`head_rows`, the JSON schema processor outside
    strings; the last one, since its mask is then final). Not when the request wants logprobs:
    those are normalised over the whole vocabulary."""
    p = seq.params
    if p.candidates_only and seq.num_output_tokens == 0:
        return tuple(sorted(set(p.candidate_token_ids)))
    if p.logits_processors and p.logprobs is None:
        rows = getattr(p.logits_processors[-1], "head_rows", None)
        ids = rows(seq.output_token_ids, vocab) if rows is not None else None
        return tuple(ids) if ids else None  # ascending and distinct (a mask's nonzero ids)
    return None


def _triton_ok() -> bool:
    from inference.layers.cuda_attention import _triton_forward, select_backend

    return select_backend() is _triton_forward
