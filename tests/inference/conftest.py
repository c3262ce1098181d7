"""Shared engines for the inference tests: SmolLM2 is loaded once per session, HF transformers
reference outputs are computed once per prompt, and every test ends with zero KV blocks in use."""

from __future__ import annotations

import weakref

import pytest
import torch

from inference import LLM, SamplingParams
from tests.lifetimes import released_after_last_use

# every engine a test made, for the block-accounting check; weak, so an engine dies with the test
# or module fixture that made it instead of living (GBs each for Qwen) until the session ends
_ENGINES: weakref.WeakSet[LLM] = weakref.WeakSet()

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n   ",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "List three colors:",
]
SYSTEM = ("You are a careful assistant for a retrieval system. Answer only from the given context, cite "
          "the passages you used, and say you do not know when the context is silent. Context:")


def make_llm(**kwargs) -> LLM:
    """Extra engines (tiny pools, int8 KV ...) reuse the converted model dir from the session one.
    float32 float weights unless a test asks otherwise: the HF parity checks need them, `dtype: auto`
    means bf16 on CPUs with AVX512-BF16 and `quantization: auto` GGUF blocks when the kernels load."""
    kwargs.setdefault("dtype", "float32")
    kwargs.setdefault("quantization", "none")
    llm = LLM(kwargs.pop("model", "smollm2"), **kwargs)
    _ENGINES.add(llm)
    return llm


@pytest.fixture(scope="session")
def engine_factory():
    return make_llm


@pytest.fixture(scope="session")
def prompts() -> list[str]:
    return list(PROMPTS)


@pytest.fixture(scope="session")
def system_prompt() -> str:
    return SYSTEM


@pytest.fixture(scope="session")
def llm() -> LLM:
    return make_llm(num_blocks=256, max_num_seqs=16, max_num_batched_tokens=512)


@pytest.fixture(scope="session")
def model_dir(llm):
    return llm.engine.model_dir


@released_after_last_use
def hf_greedy(llm):
    """fn(prompt, n) -> HF transformers greedy continuation (fp32, same dequantised weights)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(llm.engine.model_dir), dtype=torch.float32).eval()
    cache: dict[tuple, list[int]] = {}

    def run(prompt: str | list[int], n: int) -> list[int]:
        ids = llm.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        key = (tuple(ids), n)
        if key not in cache:
            x = torch.tensor([ids])
            with torch.inference_mode():
                out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                                     pad_token_id=llm.tokenizer.eos_token_id)
            cache[key] = out[0, len(ids):].tolist()
        return cache[key]

    run.model = model
    return run


@pytest.fixture
def greedy():
    return lambda n: SamplingParams(temperature=0.0, max_tokens=n)


@pytest.fixture(autouse=True)
def _no_leaked_blocks():
    """Block accounting invariant: once a test is done, no engine holds a KV block."""
    yield
    problems = []
    for engine_llm in list(_ENGINES):
        eng = engine_llm.engine
        if eng.requests:
            problems.append(f"unfinished requests left: {list(eng.requests)}")
            for rid in list(eng.requests):
                eng.abort(rid)  # clean up so one failure does not cascade into later tests
        if eng.bm.num_used or eng.bm.live_slots or eng.bm.num_free != eng.bm.num_blocks:
            problems.append(f"{eng.bm.num_used} KV blocks still in use")
    assert not problems, problems


@pytest.fixture(scope="session")
def qwen_name() -> str:
    """The packaged Qwen2.5-0.5B, assembled once (sha256-verified) into the model cache; skips
    when its split packages are absent (`make install` installs them)."""
    from inference.catalog import find_entry, part_path
    from inference.model_install import install

    entry = find_entry("qwen2.5-0.5b")
    missing = [p.requirement for p in entry.parts if part_path(p) is None]
    if missing:
        pytest.skip(f"Qwen2.5 GGUF packages not installed ({', '.join(missing)}); `make install` installs them")
    install(entry.name, allow_pip=False, progress=False)
    return entry.name


@released_after_last_use
def qwen_f32(qwen_name) -> LLM:
    """Qwen2.5-0.5B with float32 (dequantised) weights, loaded once: the reference the GGUF-block,
    int8 and HF parity tests compare with (each loaded its own: ~9 s and 2.5 GB a time), released
    after the last of them."""
    llm = LLM(qwen_name, num_blocks=64, dtype="float32", quantization="none")
    _ENGINES.add(llm)
    return llm
