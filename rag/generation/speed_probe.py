"""Measuring one model for `model: auto`: the probe subprocess and what it reports (`Speed`).

Why a subprocess: its memory goes when it exits, and the caller never holds a model it may not pick.
What it times is the pipeline's answer step, not one prompt (`rag/generation/pipeline_probe.py`): PROBE_REPEATS
synthetic questions (after one warm-up), each over `answer.context_k` passages of a typical RAG
prompt's size (PROMPT_TOKENS in all), answered by `Pipeline.ask` with the config's mode and
everything it runs per question: for the 1.5B's default long mode the short-answer gate's span
decodes, its passage checks and answer check, the long answer and its sentence checks. The median
is the pipeline's p50. A prompt-only probe (900 tokens + 16) under-counted it: it said 5-7 s for the
1.5B whose own-corpus p50 was 7.2-7.7 s. Without a config the prompt-only probe remains (this
module run as `python -m rag.generation.speed_probe MODEL`): prefill of a PROMPT_TOKENS prompt plus
PROBE_DECODE decoded tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .machine import Machine, cores
from .speed import PROBE_DECODE, PROBE_REPEATS, PROMPT_TOKENS, Speed

if TYPE_CHECKING:
    from rag.config import RagConfig


class ProbeError(RuntimeError):
    """The probe subprocess failed; the message carries its last stderr line."""


def probe(model: str, machine: Machine, prompt_tokens: int = PROMPT_TOKENS, decode_tokens: int = PROBE_DECODE,
          timeout_s: float = 600.0, repeats: int = PROBE_REPEATS, config: RagConfig | None = None) -> Speed:
    """Measure `model` with the real engine in a subprocess (its memory goes when it exits, and the
    caller never holds a model it may not pick). With `config`: time its answer step per question
    (`pipeline_probe.py`; `prompt_tokens`/`decode_tokens` do not apply), else one prompt."""
    import tempfile

    cmd = [sys.executable, "-m", "rag.generation.speed_probe", model, "--threads", str(machine.threads),
           "--quantization", machine.quantization, "--dtype", machine.dtype, "--device", machine.device,
           "--prompt-tokens", str(prompt_tokens), "--decode-tokens", str(decode_tokens), "--repeats", str(repeats)]
    with tempfile.TemporaryDirectory(prefix="rag-probe-") as tmp:
        if config is not None:  # rag/generation/pipeline_probe.py (run, not imported: it imports the pipeline)
            path = Path(tmp) / "config.json"
            path.write_text(json.dumps(probe_config(config, model, machine, Path(tmp) / "storage")), encoding="utf-8")
            cmd = [sys.executable, "-m", "rag.generation.pipeline_probe", path.as_posix(), "--threads",
                   str(machine.threads), "--repeats", str(repeats)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise ProbeError(f"speed probe of {model} took over {timeout_s:.0f} s") from e
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProbeError(f"speed probe of {model} failed: {last}")
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return Speed(d["prefill_s"], d["decode_s"], d["prompt_tokens"], d.get("cpu_share"), d.get("others_load"),
                 d.get("cores"), d.get("question_s"), d.get("work"))


def probe_config(cfg: RagConfig, model: str, machine: Machine, storage: Path) -> dict[str, Any]:
    """The config the pipeline probe answers with: `cfg` with the model and the machine's engine
    settings pinned, its own empty store (`storage`; the user's is never opened) and no passage KV
    files written, but the user's calibration file (it decides which checks run)."""
    from rag.calibration import calibration_path

    data = cfg.to_dict()
    eng = data["generator"]["engine"]
    eng.update(model=model, num_threads=machine.threads, quantization=machine.quantization, dtype=machine.dtype,
               device=machine.device)
    eng["passage_cache"]["disk_path"] = None
    data["generator"]["backend"] = "engine"
    data["storage"].update(path=str(storage), backend="sqlite")
    data["answer"]["calibration"] = str(calibration_path(cfg.storage_path, cfg.answer.calibration).resolve())
    return data


def _probe_main(argv: list[str] | None = None) -> int:
    """In the subprocess: load the engine as the answer step would, warm it up, time one prompt."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m rag.generation.speed_probe")
    p.add_argument("model")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--quantization", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS)
    p.add_argument("--decode-tokens", type=int, default=PROBE_DECODE)
    p.add_argument("--repeats", type=int, default=PROBE_REPEATS)
    a = p.parse_args(argv)
    others_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # before this process adds to it
    from inference.llm import LLM
    from inference.sampling_params import SamplingParams

    n, m = a.prompt_tokens, a.decode_tokens
    blocks = -(-(n + m + 16) // 16) + 8
    llm = LLM(a.model, quantization=a.quantization, dtype=a.dtype, device=a.device, num_threads=a.threads,
              max_model_len=n + m + 16, num_blocks=blocks, enable_prefix_caching=False)
    text = ("The harbour office on the east quay is open every day; mooring fees are charged per night and "
            "depend on the boat's length. ")
    ids = llm.tokenizer.encode(text * (n // 8 + 1))[:n]
    # One-time costs (kernel and GEMM-primitive set-up per shape, first-touch of the weights) belong to
    # loading, not to an answer: warm up on the same prompt shape (no prefix cache, so nothing is reused).
    llm.generate(ids, SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))
    # Best of `repeats`: other processes on the cores only ever add time, so the fastest run is the
    # closest to this machine's own speed (one run on a busy 2-core box varied 6 s -> 25 s).
    prefill, decode, share = [], [], []
    for _ in range(a.repeats):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        met = llm.generate(ids, SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True))[0].metrics
        share.append((time.process_time() - cpu0) / max(1e-9, (time.perf_counter() - wall0) * a.threads))
        prefill.append(met.ttft)
        decode.append(met.tpot)
    print(json.dumps({"prefill_s": min(prefill), "decode_s": min(decode), "prompt_tokens": len(ids),
                      "cpu_share": round(min(1.0, max(share)), 3), "runs": a.repeats, "others_load": others_load,
                      "cores": cores()}))
    return 0


if __name__ == "__main__":
    sys.exit(_probe_main())
