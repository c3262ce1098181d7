"""CUDA graphs for pure-decode steps (opt-in with `enforce_eager=False`, CUDA + Triton only).

Small-batch decode on a GPU is launch-bound: ~10 kernels per layer, each far shorter than its
launch. We capture the whole forward once per padded batch size and replay it, copying the step's
inputs into static buffers. Padding rows point at a scratch block that the block manager never
hands out, so their K/V writes land nowhere that matters.
"""

from __future__ import annotations

import torch

from inference.layers.metadata import AttentionMetadata

SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class DecodeGraphs:
    def __init__(self, model, max_batch: int, max_blocks_per_seq: int, scratch_block: int,
                 block_size: int, device: str) -> None:
        self.model = model
        self.sizes = [s for s in SIZES if s <= max(1, max_batch)]
        n = self.sizes[-1]
        self.scratch_block = scratch_block
        self.scratch_slot = scratch_block * block_size
        self.ids = torch.zeros(n, dtype=torch.long, device=device)
        self.pos = torch.zeros(n, dtype=torch.long, device=device)
        self.slots = torch.full((n,), self.scratch_slot, dtype=torch.long, device=device)
        self.tables = torch.full((n, max_blocks_per_seq), scratch_block, dtype=torch.long, device=device)
        self.lens = torch.ones(n, dtype=torch.long, device=device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = None

    def _meta(self, b: int) -> AttentionMetadata:
        return AttentionMetadata(slot_mapping=self.slots[:b], decode_idx=torch.arange(b, device=self.ids.device),
                                 decode_block_tables=self.tables[:b], decode_ctx_lens=self.lens[:b],
                                 decode_contiguous=True)

    @torch.inference_mode()
    def capture(self) -> None:
        for b in reversed(self.sizes):
            meta = self._meta(b)
            self.model(self.ids[:b], self.pos[:b], meta)  # warm-up: compiles Triton kernels
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                out = self.model(self.ids[:b], self.pos[:b], meta)
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[b] = (graph, out)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor | None:
        """Replay for a pure-decode batch; None when the batch does not qualify."""
        b = input_ids.shape[0]
        if meta.prefills or meta.num_decodes != b or b > self.sizes[-1] \
                or meta.decode_block_tables.shape[1] > self.tables.shape[1]:
            return None
        size = next(s for s in self.sizes if s >= b)
        graph, out = self.graphs[size]
        self.ids[:b].copy_(input_ids)
        self.pos[:b].copy_(positions)
        self.slots.fill_(self.scratch_slot)
        self.slots[:b].copy_(meta.slot_mapping)
        self.tables.fill_(self.scratch_block)
        self.tables[:b, : meta.decode_block_tables.shape[1]].copy_(meta.decode_block_tables)
        self.lens.fill_(1)
        self.lens[:b].copy_(meta.decode_ctx_lens)
        graph.replay()
        return out[:b]
