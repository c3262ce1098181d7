"""What a `model: auto` speed measurement is valid for: this machine and this config's per-question work.

Why a key and not a guess: seconds per answer depend on the CPU's ISA (AVX2 vs AVX-512/bf16 changes
prefill 2x), the kernels that built, the thread count and the weights' format, and on what the
config runs per question, so a measurement taken under one `Machine` says nothing about another.
Nothing here imports torch or loads a model (`rag models list` reads it from the cache).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inference.config import EngineConfig
    from rag.config import RagConfig


@dataclass(frozen=True)
class Machine:
    """What a measurement is valid for besides the model file: another CPU, ISA, thread count or
    weight format is another machine."""

    cpu: str
    flags: tuple[str, ...]
    kernel_isa: str
    threads: int
    quantization: str = "auto"
    dtype: str = "auto"
    device: str = "auto"
    kernels: str = ""  # hash of the native kernels' sources: new kernels, new speed
    pipeline: str = ""  # `pipeline_key` of the config whose answer step was timed ("": the prompt-only probe)

    def key(self, model_sha256: str) -> str:
        blob = json.dumps([model_sha256, asdict(self)], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cores() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_for(engine: EngineConfig) -> int:
    """The threads the engine will run with: `num_threads`, else OMP_NUM_THREADS, else the CPUs this
    process may use (torch's default on these machines)."""
    if engine.num_threads:
        return engine.num_threads
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return cores()


def predicted_kernel_isa(flags: frozenset[str]) -> str:
    """The path the native GGUF kernels select (inference/kernels/csrc/dispatch.cpp), without
    loading them: RAG_KERNEL_ISA when it names one, else the best the flags allow."""
    forced = os.environ.get("RAG_KERNEL_ISA", "").strip()
    if forced:
        return forced
    import platform

    if platform.machine() in ("aarch64", "arm64"):
        return "neon"
    if {"avx2", "fma"} <= flags:
        if {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags:
            # the tile path where Linux grants the tile state (dispatch.cpp: amx_ready)
            if {"amx_tile", "amx_int8"} <= flags and sys.platform == "linux":
                return "amx"
            return "avx512"
        return "avxvnni" if "avx_vnni" in flags else "avx2"
    return "scalar"


def kernel_sources_hash() -> str:
    """The GGUF kernels' C++ sources (what their build key hashes, without importing torch)."""
    from inference.kernels.build import CSRC

    h = hashlib.sha256()
    for path in sorted(Path(CSRC).iterdir()):
        if path.is_file():
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def this_machine(engine: EngineConfig, cfg: RagConfig | None = None) -> Machine:
    """This machine for `engine`; with `cfg`, also keyed by the config's per-question work (its
    answer step is what the probe times)."""
    from inference.cpu_features import ENGINE_FLAGS, cpu_flags, cpu_model

    flags = cpu_flags()  # RAG_CPU_ISA masks count: they change the engine's paths
    return Machine(cpu=cpu_model(), flags=tuple(f for f in ENGINE_FLAGS if f in flags),
                   kernel_isa=predicted_kernel_isa(flags), threads=threads_for(engine),
                   quantization=engine.quantization, dtype=engine.dtype, device=engine.device,
                   kernels=kernel_sources_hash(), pipeline=pipeline_key(cfg) if cfg is not None else "")


# the settings that do not change what one question makes the engine do (the budget, where things live)
_NOT_WORK = {"answer": ("latency_budget_s",), "engine": ("model", "num_threads", "device", "dtype", "quantization")}


# What the pipeline probe's question runs (`pipeline_probe`): a new version is a new measurement
# (`pipeline_key`). 2: its passages are read as a retrieval's ranking (the gate and a short answer
# read the top short_k, not all five).
PROBE_VERSION = 2


def pipeline_key(cfg: RagConfig) -> str:
    """What one answered question costs depends on the config beyond the model and the machine: the
    answer mode, the passages per prompt, the checks, grounding and gate (`answer.*`), the prompts,
    the sampling (max tokens), the engine's cache settings, and the calibration entry that switches
    per-passage spans and checks on (a local `rag eval calibrate` file changes them), and the probe's
    own version (`PROBE_VERSION`). A hash of those: a new value is a new measurement. Not in it: the
    budget, the model and the machine's own fields (`Machine`)."""
    answer = {k: v for k, v in cfg.answer.model_dump(mode="json").items() if k not in _NOT_WORK["answer"]}
    engine = {k: v for k, v in cfg.generator.engine.model_dump(mode="json").items() if k not in _NOT_WORK["engine"]}
    from rag.calibration import calibration_path

    local = calibration_path(cfg.storage_path, cfg.answer.calibration)
    try:
        calibration = hashlib.sha256(local.read_bytes()).hexdigest()[:16]
    except OSError:
        calibration = ""  # none here: the shipped entries (part of the package's version)
    blob = json.dumps({"answer": answer, "prompt": cfg.prompt.model_dump(mode="json"), "engine": engine,
                       "sampling": cfg.generator.sampling.model_dump(mode="json"), "calibration": calibration,
                       "probe": PROBE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
