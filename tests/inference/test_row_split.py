"""Float32 linear layers split by output rows across threads (inference/layers/row_split.py) give
F.linear's bits, fall back where they would not, and are what the float32 model's layers run."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inference.kernels import ops
from inference.layers import row_split

pytestmark = pytest.mark.skipif(not ops.available(), reason=f"native kernels unavailable: {ops.load_error()}")


@pytest.fixture
def two_threads():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def calls(monkeypatch):
    """The weights of the split calls made, the per-shape check's included (the op still runs)."""
    seen = []
    split = row_split._split

    def counted(*args):
        seen.append(args[1].shape)
        return split(*args)

    monkeypatch.setattr(row_split, "_split", counted)
    monkeypatch.setattr(row_split, "_same", {})
    return seen


@pytest.mark.parametrize("n,k,bias", [(1000, 576, False), (3072, 576, True), (49152, 64 * 9, False), (896, 4864, True)])
def test_split_is_bit_identical_to_f_linear(two_threads, calls, n, k, bias):
    """Bugs caught: a block boundary that cuts a GEMV row block (other bits than F.linear), a bias
    sliced to the wrong rows, a tail past the last whole block dropped or doubled, activation row
    counts whose GEMV differs once split (5-7 rows on Zen 4) taking the split, 3-D input taking it
    (torch computes those another way), and the op failing under inference mode (its worker threads
    do not inherit it: writing the output there was an error)."""
    g = torch.Generator().manual_seed(n)
    w = torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    with torch.inference_mode():
        for shape in [(m, k) for m in range(1, row_split.MAX_ROWS + 1)] * 2 + [(2, 3, k), (1, 1, k)]:
            x = torch.randn(*shape, generator=g)
            got = row_split.linear(x, w, b)
            assert got.shape == (*shape[:-1], n) and torch.equal(got, F.linear(x, w, b)), shape
    # each row count checked once (one split call), then split on both its calls where it matched
    ok = [row_split._same[(n, k, k, 1, bias, m)] for m in range(1, row_split.MAX_ROWS + 1)]
    assert len(calls) == len(ok) + 2 * sum(ok), (len(calls), ok)


def test_a_split_that_differs_is_never_used(two_threads, calls, monkeypatch):
    """Bug caught: the per-shape check skipped or ignored, so a CPU whose GEMV blocks rows
    differently would get other bits than F.linear (greedy output and HF parity moved)."""
    w = torch.randn(2048, 512)
    monkeypatch.setattr(row_split, "_split", lambda x, w_, b: F.linear(x, w_, b) + 1e-6)
    x = torch.randn(1, 512)
    with torch.inference_mode():
        assert torch.equal(row_split.linear(x, w), F.linear(x, w))
    assert row_split._same[(2048, 512, 512, 1, False, 1)] is False


def test_not_split_where_it_cannot_help_or_must_not_run(two_threads, calls):
    """Bugs caught: a split on one thread (pure overhead), under autograd (the op has no backward),
    for a prefill-sized batch (torch's GEMM already uses every thread), for a small weight, for
    bf16, or for strided activations (F.linear may read those another way)."""
    w = torch.randn(2048, 512)
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            row_split.linear(torch.randn(1, 512), w)
    finally:
        torch.set_num_threads(2)
    wg = w.clone().requires_grad_(True)
    row_split.linear(torch.randn(1, 512), wg).sum().backward()
    assert wg.grad is not None
    with torch.inference_mode():
        row_split.linear(torch.randn(row_split.MAX_ROWS + 1, 512), w)
        row_split.linear(torch.randn(1, 64), torch.randn(256, 64))
        row_split.linear(torch.randn(1, 512, dtype=torch.bfloat16), w.bfloat16())
        row_split.linear(torch.randn(2, 1024)[:, ::2], w)
    assert calls == []
    with torch.inference_mode():
        row_split.linear(torch.randn(1, 512), w)
    assert calls  # the same weight at decode size is checked (and split where it matches)


def test_float32_model_layers_and_head_run_the_split(llm):
    """Bug caught: a projection or the output head built as a plain nn.Linear (or a tied head
    computed with F.linear), left on one thread at decode."""
    model = llm.engine.model
    if llm.engine.dtype != torch.float32 or not hasattr(model, "layers"):
        pytest.skip("the session engine is not the float32 torch model")
    for layer in model.layers:
        for mod in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj):
            assert isinstance(mod, row_split.RowSplitLinear), type(mod)
    seen = []
    real = row_split.linear

    def spy(x, w, b=None):
        seen.append(w.shape)
        return real(x, w, b)

    import inference.models.llama as llama

    old = llama.linear
    llama.linear = spy
    try:
        with torch.inference_mode():
            model.compute_logits(torch.randn(1, model.config.hidden_size))
    finally:
        llama.linear = old
    if model.tied:
        assert seen == [(model.vocab_rows, model.config.hidden_size)]
    else:
        assert isinstance(model.lm_head, row_split.RowSplitLinear)


def test_the_split_op_computes_the_product_on_its_own(two_threads):
    """The op itself, whatever the per-shape check decides on this CPU (there it may be rejected for
    other bits and never run). Bugs caught: a block past the last whole one dropped or doubled, a
    bias sliced to other rows, rows written to another block's columns, a wrong shape."""
    g = torch.Generator().manual_seed(1)
    for n, k in [(1000, 96), (64 * 3, 128), (4096 + 17, 64)]:
        w, b = torch.randn(n, k, generator=g), torch.randn(n, generator=g)
        for m in range(1, row_split.MAX_ROWS + 1):
            x = torch.randn(m, k, generator=g)
            with torch.inference_mode():
                got = row_split._split(x, w, b)
            assert got.shape == (m, n)
            torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-4)
