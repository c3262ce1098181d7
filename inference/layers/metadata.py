"""Per-step attention metadata, built once by the model runner and shared by all layers."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class PrefillSpan:
    """One sequence computing `q_len` new tokens on top of `ctx_len - q_len` cached ones."""

    q_start: int
    q_len: int
    ctx_len: int
    slots: torch.Tensor  # [ctx_len] flat pool slots of the whole context, in order
    mask: torch.Tensor | None  # [q_len, ctx_len] bool, None when plain causal (no cached prefix)
    block_table: torch.Tensor | None = None  # [n_blocks] int32, used by the CUDA path
    bias: torch.Tensor | None = None  # CPU: `mask` as a GQA-folded float bias, built by the first layer
    # CPU, long chunks: (row start, row end, keys seen, folded bias) per query block, built by the first layer
    blocks: list[tuple[int, int, int, torch.Tensor]] | None = None
    lims: torch.Tensor | None = None  # native path: context tokens each row sees, built by the first layer


@dataclass
class AttentionMetadata:
    """`slot_mapping[t]` is where token t's K/V go. Decode rows (one new token each) are
    batched into one padded gather; prefill chunks are handled span by span."""

    slot_mapping: torch.Tensor
    prefills: list[PrefillSpan] = field(default_factory=list)
    decode_idx: torch.Tensor | None = None  # [Bd] row of each decode token in the flat batch
    decode_block_tables: torch.Tensor | None = None  # [Bd, max_blocks] (padding -> block 0)
    decode_ctx_lens: torch.Tensor | None = None  # [Bd]
    decode_mask: torch.Tensor | None = None  # [Bd, 1, 1, max_blocks*block_size] bool
    decode_contiguous: bool = False  # decode rows are exactly the first Bd tokens
    # cascade decode (CPU): blocks every decode row shares (e.g. the cached system prompt) are
    # attended once for all rows; only the per-row suffix tables are gathered
    shared_blocks: torch.Tensor | None = None  # [P]
    suffix_block_tables: torch.Tensor | None = None  # [Bd, W]
    suffix_bias: torch.Tensor | None = None  # [Bd, 1, 1, W*block_size] float, 0 or -inf

    @property
    def num_decodes(self) -> int:
        return 0 if self.decode_idx is None else int(self.decode_idx.numel())
