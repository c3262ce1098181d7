"""Linear layers, embedding and output head that keep GGUF weights in their block formats.

Why: dequantising a GGUF to float32 multiplies its size by ~7 (SmolLM2's 98 MB file became 538 MB,
a 7B Q4_K_M would not fit in 24 GB). Here each weight stays the GGUF's own rows (uint8
[N, row_bytes], every row independent blocks along K) and the native kernels
(`inference.kernels.ops`) multiply against them directly.

Backends:
- "kernels": `ops.quant_matmul` / `ops.dequantize_rows` on the raw rows (the product path).
- "torch": dequantise a group once with `gguf.quants.dequantize` (at its first use) and run
  `F.linear`: the reference the tests compare against, and what runs when the kernels cannot be
  loaded and a caller still builds a block model. It holds a float32 copy, so it saves no memory.

Float rule: a row group whose GGUF type is F32 (and a tensor of a type the kernels lack, which
`quantization: auto` dequantises for that tensor only) is kept as a float32 [N, K] tensor and run
with `F.linear`; it is the same bytes the file holds, and MKL's sgemm is the fastest kernel for
float32 weights at any shape. No quantised 2-D tensor gets a float copy, persistent or transient:
on every CPU the kernels' GEMMs beat dequantise-then-GEMM (until session 23 a rule dequantised
chunks to bf16 for prompts of >= 128 rows on AMX CPUs; measured there, on a 2-core Xeon with
AMX, the kernels' AMX-INT8 tile GEMM ran whole prefills at or above it, and per shape the rule was
slower at 64-128 rows; it also needed transient float rows). Norms and biases (1-D) stay float32.

Interleaved Q4_K (x8): a layer's Q4_K group with a multiple of 8 rows is repacked once at load
into the kernels' x8 layout (the same bytes, 8 rows interleaved: `RowGroup.interleaved`), so the
one-row GEMV of decode sums 8 rows per register with no per-row scale unpacking or horizontal sums:
1.4-1.8x per thread, at the memory bandwidth of one core on Zen 4 (docs/performance.md, session 34;
llama.cpp's repacked Q4_K is the same idea). `qtype` stays the file's type (`kernel_qtype` is what the
kernels read). Not for a head tied to the embedding (its rows are the embedding's, looked up by token),
nor with RAG_KERNEL_X8=0.

Row tensors are plain attributes, not parameters or buffers: `model.to(bfloat16)` must not round
an F32 group, and everything here is CPU-only (the kernels are CPU code). Forward takes any float
dtype and returns the input's dtype; the kernels take float32 activations.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from inference.kernels.formats import F32, Q4_K, Q4_K_X8  # type ids (formats.py loads no library)

Backend = Literal["kernels", "torch"]


@functools.lru_cache(maxsize=1)
def _kernel_state() -> tuple[object | None, str | None]:
    try:
        from inference.kernels import ops
    except Exception as e:  # noqa: BLE001 - any import failure means "no kernels", and says why
        return None, f"inference.kernels could not be imported ({type(e).__name__}: {e})"
    try:
        if ops.available():
            return ops, None
        return None, ops.load_error() or "inference.kernels reports the library unavailable"
    except Exception as e:  # noqa: BLE001
        return None, f"inference.kernels failed to load ({type(e).__name__}: {e})"


def kernel_ops():
    """The loaded `inference.kernels.ops` module, or None (see `kernel_error`)."""
    return _kernel_state()[0]


def kernel_error() -> str | None:
    """Why the kernels are unavailable (None when they loaded)."""
    return _kernel_state()[1]


def kernel_types() -> frozenset[int]:
    ops = kernel_ops()
    return frozenset(int(t) for t in ops.SUPPORTED_TYPES) if ops is not None else frozenset()


@functools.lru_cache(maxsize=1)
def torch_types() -> frozenset[int]:
    """Types `gguf.quants.dequantize` handles (probed on one zero block each), i.e. the types the
    torch backend and the per-tensor float fallback can read."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    ok = set()
    for t in GGMLQuantizationType:
        if t not in GGML_QUANT_SIZES:
            continue
        try:
            dequantize(np.zeros((1, GGML_QUANT_SIZES[t][1]), dtype=np.uint8), t)
        except Exception:  # noqa: BLE001 - whatever gguf-py raises, it cannot read this type
            continue
        ok.add(int(t))
    return frozenset(ok)


def type_name(qtype: int) -> str:
    from gguf.constants import GGMLQuantizationType

    try:
        return GGMLQuantizationType(qtype).name
    except ValueError:
        return f"type {qtype}"


def dequantize_np(rows: torch.Tensor, qtype: int) -> torch.Tensor:
    """float32 [n, K] from raw rows with gguf-py's reference dequantisers."""
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    arr = dequantize(rows.numpy(), GGMLQuantizationType(qtype))
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))


@dataclass
class RowGroup:
    """Consecutive output rows of one GGUF type. `rows` is uint8 [n, row_bytes] for a block type,
    float32 [n, K] when `qtype` is F32 (a float tensor, or one dequantised by the fallback)."""

    rows: torch.Tensor
    qtype: int
    k: int
    _dense: torch.Tensor | None = field(default=None, repr=False)  # torch backend's float copy
    x8: bool = False  # Q4_K rows interleaved by 8 for the kernels (`interleaved`)

    @property
    def n(self) -> int:
        return self.rows.shape[0]

    @property
    def kernel_qtype(self) -> int:
        """The type id the kernels read `rows` as (`qtype` stays the file's type)."""
        return Q4_K_X8 if self.x8 else self.qtype

    def dense(self) -> torch.Tensor:
        if self.qtype == F32:
            return self.rows
        if self._dense is None:
            self._dense = (kernel_ops().dequantize(self.rows, Q4_K_X8, self.k) if self.x8
                           else dequantize_np(self.rows, self.qtype))
        return self._dense

    def interleaved(self) -> RowGroup:
        """This group in the kernels' x8 layout where it applies (Q4_K, a multiple of 8 rows, the
        kernels loaded, RAG_KERNEL_X8 not 0), else itself. The one-row GEMV (decode) then runs
        1.3-1.5x faster at 2 threads (Zen 4, docs/performance.md, session 34); the bytes are the
        same, moved, so the model's memory does not change."""
        ops = kernel_ops()
        if self.x8 or self.qtype != Q4_K or self.n % 8 or ops is None or not ops.x8_enabled():
            return self
        return RowGroup(ops.repack_q4_k_x8(self.rows, self.k), Q4_K, self.k, x8=True)


def merge_groups(groups: Sequence[RowGroup]) -> list[RowGroup]:
    """Concatenate neighbouring groups that share a type (one kernel call instead of several);
    groups of different types (Q4_K_M puts attn_v in Q6_K next to Q4_K q/k) stay apart."""
    out: list[RowGroup] = []
    for g in groups:
        if out and out[-1].qtype == g.qtype and out[-1].k == g.k and not (out[-1].x8 or g.x8):
            out[-1] = RowGroup(torch.cat([out[-1].rows, g.rows]), g.qtype, g.k)
        else:
            out.append(g)
    return out


class GGUFLinear(nn.Module):
    """`nn.Linear` over GGUF rows; a fused projection (qkv, gate/up) is several row groups whose
    outputs are concatenated in order."""

    def __init__(self, groups: Sequence[RowGroup], bias: torch.Tensor | None = None,
                 backend: Backend = "kernels", interleave: bool = True) -> None:
        super().__init__()
        if not groups:
            raise ValueError("GGUFLinear needs at least one row group")
        ks = {g.k for g in groups}
        if len(ks) != 1:
            raise ValueError(f"row groups disagree on in_features: {sorted(ks)}")
        self.groups = merge_groups(groups)
        self.in_features = ks.pop()
        self.out_features = sum(g.n for g in self.groups)
        self.bias = None if bias is None else bias.detach().float().contiguous()
        if self.bias is not None and self.bias.shape != (self.out_features,):
            raise ValueError(f"bias has shape {tuple(self.bias.shape)}, expected ({self.out_features},)")
        if backend == "kernels" and kernel_ops() is None:
            raise RuntimeError(f"GGUF kernels unavailable: {kernel_error()}")
        self.backend: Backend = backend
        if backend == "kernels" and interleave:  # not for a head tied to the embedding's rows
            self.groups = [g.interleaved() for g in self.groups]
        self.offsets = np.cumsum([0] + [g.n for g in self.groups]).tolist()
        # every group in blocks: one `quant_linear` call does all groups and the bias
        self._fast = backend == "kernels" and all(g.qtype != F32 for g in self.groups)
        self._ws = [g.rows for g in self.groups]
        self._types = [g.kernel_qtype for g in self.groups]

    def _group_matmul(self, x: torch.Tensor, g: RowGroup) -> torch.Tensor:
        if g.qtype == F32 or self.backend == "torch":
            return F.linear(x, g.dense())
        return kernel_ops().quant_matmul(x, g.rows, g.kernel_qtype, g.k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._fast and x.dim() == 2 and x.dtype == torch.float32:
            return kernel_ops().quant_linear(x, self._ws, self._types, self.in_features, self.bias)
        shape = x.shape
        xf = x.reshape(-1, self.in_features).float().contiguous()
        outs = [self._group_matmul(xf, g) for g in self.groups]
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def forward_rows(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Only the output rows `rows` (int64 [R]) -> [..., R]: for a head whose logits a
        constraint limits to a few tokens (the rest are never computed). The block kernels, as
        `forward`, so it equals `forward`'s columns up to float summation order. The engine calls
        it for `SamplingParams.candidates_only` rows (the answerability checks' yes/no tokens); not
        for the grounded span decoder, whose signals read log-probabilities normalised over the
        whole vocabulary (the span log-probability the calibrated models were fitted on)."""
        shape = x.shape
        xf = x.reshape(-1, self.in_features).float().contiguous()
        rows = rows.to(torch.long)
        out = torch.empty(xf.shape[0], rows.numel(), dtype=torch.float32)
        for g, lo, hi in zip(self.groups, self.offsets, self.offsets[1:], strict=False):
            pick = ((rows >= lo) & (rows < hi)).nonzero().squeeze(1)
            if not pick.numel():
                continue
            local = rows[pick] - lo
            if g.qtype == F32 or self.backend == "torch":
                part = F.linear(xf, g.dense()[local])
            else:
                part = kernel_ops().quant_matmul_rows(xf, g.rows, g.kernel_qtype, g.k, local.contiguous())
            out[:, pick] = part
        if self.bias is not None:
            out = out + self.bias[rows]
        return out.reshape(*shape[:-1], rows.numel()).to(x.dtype)

    def held_tensors(self) -> list[torch.Tensor]:
        """Every tensor this layer keeps alive (for memory accounting)."""
        held = [t for g in self.groups for t in (g.rows, g._dense) if t is not None]
        return held + ([self.bias] if self.bias is not None else [])

    def extra_repr(self) -> str:
        types = "+".join(f"{type_name(g.qtype)}{'(x8)' if g.x8 else ''}x{g.n}" for g in self.groups)
        return (f"in_features={self.in_features}, out_features={self.out_features}, {types}, "
                f"backend={self.backend}, bias={self.bias is not None}")


class GGUFEmbedding(nn.Module):
    """Token lookup that dequantises only the rows of the tokens asked for. `as_head()` gives a
    tied output head over the very same rows (no float copy of the vocabulary)."""

    def __init__(self, group: RowGroup, backend: Backend = "kernels") -> None:
        super().__init__()
        self.group = group
        self.num_embeddings, self.embedding_dim = group.n, group.k
        if backend == "kernels" and kernel_ops() is None:
            raise RuntimeError(f"GGUF kernels unavailable: {kernel_error()}")
        self.backend: Backend = backend
        # 0-element float buffer: `model.to(dtype)` casts it, so lookups return the model's dtype
        self.register_buffer("_dtype_probe", torch.empty(0), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        flat = input_ids.reshape(-1).to(torch.long)
        g = self.group
        if g.qtype == F32:
            out = g.rows[flat]
        elif self.backend == "torch":
            out = dequantize_np(g.rows[flat], g.qtype)
        else:
            out = kernel_ops().dequantize_rows(g.rows, g.qtype, g.k, flat.contiguous())
        return out.reshape(*input_ids.shape, self.embedding_dim).to(self._dtype_probe.dtype)

    def as_head(self) -> GGUFLinear:
        return GGUFLinear([self.group], backend=self.backend, interleave=False)

    def held_tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.group.rows, self.group._dense) if t is not None]

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {type_name(self.group.qtype)}, backend={self.backend}"


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every weight tensor the model keeps (parameters, GGUF rows and any float copies,
    int8 weights), each storage counted once: a tied head shares the embedding's rows. Buffers
    (the RoPE cos/sin table) are not weights and are left out."""
    seen: dict[int, int] = {}
    tensors: list[torch.Tensor] = list(model.parameters())
    for m in model.modules():
        if isinstance(m, (GGUFLinear, GGUFEmbedding)):
            tensors += m.held_tensors()
        elif hasattr(m, "weight_t") and isinstance(m.weight_t, torch.Tensor):  # Int8Linear
            tensors += [m.weight_t, m.scale]
    for t in tensors:
        if t.is_meta:
            continue
        st = t.untyped_storage()
        seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
    return sum(seen.values())
