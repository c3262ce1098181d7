"""`generator.engine.model: auto`: the largest installed catalogue model that is fast enough here.

Why measured, not guessed: seconds per answer depend on the CPU's ISA (AVX2 vs AVX-512/bf16 changes
prefill 2x), the kernels that built, the thread count and the weights' format, so the only honest
number is one taken on this machine. A probe runs in a subprocess once per `Machine` (model file,
CPU model + engine flags, kernel ISA and sources, threads, quantization, dtype, device, and the
config's per-question work, `pipeline_key`) and is cached in `<model cache>/speed.json`.

What it times is the pipeline's answer step, not one prompt (`rag/generation/pipeline_probe.py`): PROBE_REPEATS
synthetic questions (after one warm-up), each over `answer.context_k` passages of a typical RAG
prompt's size (PROMPT_TOKENS in all), answered by `Pipeline.ask` with the config's mode and
everything it runs per question: for the 1.5B's default long mode the short-answer gate's span
decodes, its passage checks and answer check, the long answer and its sentence checks. The median
(the pipeline's p50) is compared with `answer.latency_budget_s`. A prompt-only probe (900 tokens
+ 16) under-counted it: it said 5-7 s for the 1.5B whose own-corpus p50 was 7.2-7.7 s. Without a
config (`choose(cfg=None)`) the prompt-only probe remains: prefill of a PROMPT_TOKENS prompt plus
ANSWER_TOKENS decoded tokens.

The rule (`decide`, pure): among installed catalogue models other than SmolLM2, largest first, the
first whose measured seconds per answer fit the budget. None fits: the smallest (fastest by its
weight bytes; the reason says it is over budget). Nothing measured and no measurement possible: the static rule,
the smallest installed one (Qwen2.5-0.5B: 2.4-3.2 s p50 per question on the idle 2-core box of
docs/performance.md). SmolLM2 is kept for tests and compression and chosen only when nothing else
is installed. `RAG_AUTO_MODEL=NAME` pins what `auto` becomes without measuring (the test suite pins
smollm2).

This module imports no torch and loads no model: the probe runs the engine in its own process, and
`rag models list` decides from the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference.cache_dir import cache_root

if TYPE_CHECKING:
    from inference.catalog import ModelEntry
    from inference.config import EngineConfig
    from rag.config import RagConfig

AUTO = "auto"
TEST_ONLY = "smollm2"  # tests and compression: never picked while another model is installed
PIN_ENV = "RAG_AUTO_MODEL"
PROMPT_TOKENS = 900  # a typical RAG prompt: system + 5 passages + question
ANSWER_TOKENS = 24  # a short-mode answer (answer.short_max_tokens)
PROBE_DECODE = 16  # decoded tokens the probe times
PROBE_REPEATS = 3  # timed runs; the fastest counts
# A probe ran on a busy machine when other processes kept at least BUSY_LOAD x the cores busy (the
# 1-minute load average before it started) or it got less than CONTENDED_SHARE of its threads' CPU
# time: its number is kept (it is what answers took then) but flagged, and `--measure` takes it
# again. Both are needed: spinning OpenMP threads count as CPU time while they stall at barriers on
# shared cores (the 0.5B measured 28 s per answer at 50% share, 3x the 1.5B, on this 2-core box).
CONTENDED_SHARE = 0.5
BUSY_LOAD = 0.5


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


@dataclass(frozen=True)
class Speed:
    """One probe: time to first token for PROMPT_TOKENS tokens and mean seconds per decoded token."""

    prefill_s: float
    decode_s: float
    prompt_tokens: int = PROMPT_TOKENS
    cpu_share: float | None = None  # process CPU time / (wall time x threads) while timed
    others_load: float | None = None  # 1-minute load average before the probe started
    cores: int | None = None  # CPUs the probe could use
    # the pipeline probe: p50 seconds per question of the answer step, and what one question made the
    # engine do (`work_summary`); None: the prompt-only probe
    question_s: float | None = None
    work: dict[str, Any] | None = None

    @property
    def contended(self) -> bool:
        busy = self.others_load is not None and self.others_load >= BUSY_LOAD * (self.cores or 1)
        return busy or (self.cpu_share is not None and self.cpu_share < CONTENDED_SHARE)

    def busy_note(self) -> str:
        """Why the measurement counts as taken on a busy machine (one clause)."""
        parts = []
        if self.others_load is not None:
            parts.append(f"load {self.others_load:.1f} on {self.cores} cores before it")
        if self.cpu_share is not None:
            parts.append(f"{self.cpu_share:.0%} of its threads' CPU")
        return ", ".join(parts)

    @property
    def seconds_per_answer(self) -> float:
        """The pipeline's measured p50 seconds per question when the answer step was timed; else
        (prompt-only probe) prefill of a PROMPT_TOKENS prompt (scaled linearly from the probe's
        length) + the rest of an ANSWER_TOKENS answer (the first token came with the prefill)."""
        if self.question_s is not None:
            return self.question_s
        return self.prefill_s * PROMPT_TOKENS / self.prompt_tokens + (ANSWER_TOKENS - 1) * self.decode_s


@dataclass
class Choice:
    """What `auto` became and why (one line a user can read), plus every candidate's seconds."""

    name: str | None
    reason: str
    seconds: dict[str, float | None] = field(default_factory=dict)
    contended: list[str] = field(default_factory=list)  # measured while the CPU was busy
    work: dict[str, dict[str, Any]] = field(default_factory=dict)  # per measured model: what a question ran


def _fmt(s: float) -> str:
    return f"{s:.1f} s"


def decide(candidates: Sequence[tuple[str, int]], seconds: Mapping[str, float | None], budget: float) -> Choice:
    """The auto rule on given measurements. `candidates`: installed catalogue models (name, size in
    bytes); `seconds`: measured seconds per answer (None or absent: not measured)."""
    secs = {n: seconds.get(n) for n, _ in candidates}
    big_first = [n for n, _ in sorted(candidates, key=lambda c: -c[1]) if n != TEST_ONLY]
    if not big_first:
        if any(n == TEST_ONLY for n, _ in candidates):
            return Choice(TEST_ONLY, f"{TEST_ONLY}: nothing else is installed (it is meant for tests and "
                                     "compression; `rag models install qwen2.5-0.5b`)", secs)
        return Choice(None, "no catalogue model is installed (`rag models install qwen2.5-0.5b`)", secs)
    skipped = []
    for name in big_first:
        s = secs[name]
        if s is not None and s <= budget:
            return Choice(name, "; ".join([f"{name}: {_fmt(s)} ≤ budget {budget:g} s", *skipped]), secs)
        skipped.append(f"{name}: not measured" if s is None else f"{name}: {_fmt(s)} > budget")
    name = big_first[-1]
    if all(secs[n] is None for n in big_first):
        return Choice(name, f"{name}: not measured yet, static rule (the smallest installed model other than "
                            f"{TEST_ONLY})", secs)
    # None fits: the smallest, the fastest one by its weight bytes. Not the fastest measured: on shared
    # cores the measured order can invert (the 0.5B measured 28 s, the 1.5B 9 s, minutes apart here).
    return Choice(name, f"{name}: no model meets the budget {budget:g} s, the smallest; " + "; ".join(skipped), secs)


# ---- this machine -------------------------------------------------------------------------------

def _cores() -> int:
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
    return _cores()


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
            return "avx512"
        return "avx2"
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


def pipeline_key(cfg: RagConfig) -> str:
    """What one answered question costs depends on the config beyond the model and the machine: the
    answer mode, the passages per prompt, the checks, grounding and gate (`answer.*`), the prompts,
    the sampling (max tokens), the engine's cache settings, and the calibration entry that switches
    per-passage spans and checks on (a local `rag eval calibrate` file changes them). A hash of
    those: a new value is a new measurement. Not in it: the budget, the model and the machine's own
    fields (`Machine`)."""
    answer = {k: v for k, v in cfg.answer.model_dump(mode="json").items() if k not in _NOT_WORK["answer"]}
    engine = {k: v for k, v in cfg.generator.engine.model_dump(mode="json").items() if k not in _NOT_WORK["engine"]}
    from rag.calibration import calibration_path

    local = calibration_path(cfg.storage_path, cfg.answer.calibration)
    try:
        calibration = hashlib.sha256(local.read_bytes()).hexdigest()[:16]
    except OSError:
        calibration = ""  # none here: the shipped entries (part of the package's version)
    blob = json.dumps({"answer": answer, "prompt": cfg.prompt.model_dump(mode="json"), "engine": engine,
                       "sampling": cfg.generator.sampling.model_dump(mode="json"), "calibration": calibration},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---- the cache -----------------------------------------------------------------------------------

class SpeedCache:
    """Measured speeds, one JSON file keyed by `Machine.key(model sha256)`; entries for other
    machines stay (a shared home directory across hosts keeps each host's numbers)."""

    def __init__(self, path: Path | None = None):
        self.path = path or cache_root() / "speed.json"

    def _read(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def get(self, entry: ModelEntry, machine: Machine) -> Speed | None:
        rec = self._read().get(machine.key(entry.sha256))
        if not rec:
            return None
        return Speed(rec["prefill_s"], rec["decode_s"], rec.get("prompt_tokens", PROMPT_TOKENS), rec.get("cpu_share"),
                     rec.get("others_load"), rec.get("cores"), rec.get("question_s"), rec.get("work"))

    def put(self, entry: ModelEntry, machine: Machine, speed: Speed) -> None:
        data = self._read()
        data[machine.key(entry.sha256)] = {
            "model": entry.name, "file": entry.filename, **asdict(machine), **asdict(speed),
            "seconds_per_answer": round(speed.seconds_per_answer, 3), "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_avg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)  # readers never see half a file


# ---- the probe ----------------------------------------------------------------------------------

class ProbeError(RuntimeError):
    """The probe subprocess failed; the message carries its last stderr line."""


def probe(model: str, machine: Machine, prompt_tokens: int = PROMPT_TOKENS, decode_tokens: int = PROBE_DECODE,
          timeout_s: float = 600.0, repeats: int = PROBE_REPEATS, config: RagConfig | None = None) -> Speed:
    """Measure `model` with the real engine in a subprocess (its memory goes when it exits, and the
    caller never holds a model it may not pick). With `config`: time its answer step per question
    (`pipeline_probe.py`; `prompt_tokens`/`decode_tokens` do not apply), else one prompt."""
    import tempfile

    cmd = [sys.executable, "-m", "rag.generation.auto_model", model, "--threads", str(machine.threads),
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


def describe_work(work: Mapping[str, Any]) -> str:
    """One clause: what a question cost the engine, e.g. "long answer after the short-answer gate (5
    passage spans, checks), 2310 prompt tokens computed + 96 generated, p50 of 3 questions"."""
    parts = [f"{work.get('mode', '?')} answer"]
    short = []
    if work.get("per_passage"):
        short.append(f"{work['per_passage']} passage spans")
    if work.get("checks"):
        short.append("checks")
    if work.get("gate"):
        parts[0] += " after the short-answer gate" + (f" ({', '.join(short)})" if short else "")
    elif short:
        parts[0] += f" ({', '.join(short)})"
    parts.append(f"{work.get('prompt_tokens', 0)} prompt tokens computed + {work.get('generated_tokens', 0)} "
                 "generated")
    parts.append(f"p50 of {work.get('questions', 1)} questions" + (" (it refused: under-counted)"
                                                                   if work.get("refused") else ""))
    return ", ".join(parts)


def _probe_main(argv: list[str] | None = None) -> int:
    """In the subprocess: load the engine as the answer step would, warm it up, time one prompt."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m rag.generation.auto_model")
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
                      "cores": _cores()}))
    return 0


# ---- resolution ---------------------------------------------------------------------------------

def _installed() -> list[ModelEntry]:
    from inference.catalog import CATALOG

    return [e for e in CATALOG if e.installed()]


def choose(engine: EngineConfig | None, budget: float, *, measure: bool = True, cache: SpeedCache | None = None,
           machine: Machine | None = None, run_probe: Callable[[str, Machine], Speed] | None = None,
           log: Callable[[str], None] | None = None, remeasure_contended: bool = False,
           cfg: RagConfig | None = None) -> Choice:
    """What `auto` is on this machine. `measure`: probe the installed models that have no measurement
    for this machine, largest first, until one fits the budget (one stderr line each);
    `remeasure_contended`: also those measured while the CPU was busy. `cfg`: the config whose answer
    step is timed per question (the pipeline probe; None: the prompt-only probe). `run_probe`: what
    measures (default `probe`); tests give their own measurements."""
    pin = os.environ.get(PIN_ENV, "").strip()
    if pin:
        return Choice(pin, f"{pin}: pinned by {PIN_ENV}")
    cache = cache or SpeedCache()
    if machine is None:
        if engine is None:
            raise ValueError("choose() needs the engine config or the machine")
        machine = this_machine(engine, cfg)
    if run_probe is None:
        def run_probe(model: str, m: Machine) -> Speed:
            return probe(model, m, config=cfg)
    what = (f"its answer step on {PROBE_REPEATS} synthetic questions (this config's mode and checks)" if cfg is not None
            else f"{PROMPT_TOKENS}-token prompt + {PROBE_DECODE} tokens, best of {PROBE_REPEATS}")
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    entries = sorted(_installed(), key=lambda e: -e.size)
    seconds: dict[str, float | None] = {}
    contended: list[str] = []
    work: dict[str, dict[str, Any]] = {}
    for e in entries:
        got = cache.get(e, machine)
        seconds[e.name] = got.seconds_per_answer if got else None
        if got is not None and got.work:
            work[e.name] = got.work
        if got is not None and got.contended:
            contended.append(e.name)
            if remeasure_contended and measure:
                seconds[e.name] = None
    if measure:
        for e in entries:
            if e.name == TEST_ONLY:
                continue
            if seconds[e.name] is None:
                log(f"model auto: measuring {e.name} on this CPU once ({what}; cached in {cache.path})")
                try:
                    speed = run_probe(e.name, machine)
                except ProbeError as err:
                    log(f"model auto: {err}")
                    continue
                cache.put(e, machine, speed)
                seconds[e.name] = speed.seconds_per_answer
                if speed.work:
                    work[e.name] = speed.work
                if speed.contended:
                    if e.name not in contended:
                        contended.append(e.name)
                    log(f"model auto: {e.name} was measured on a busy machine ({speed.busy_note()}): "
                        "`rag models list --measure` measures it again")
                elif e.name in contended:
                    contended.remove(e.name)
            if seconds[e.name] <= budget:  # type: ignore[operator]
                break  # the largest that fits: smaller ones need no measurement
    choice = decide([(e.name, e.size) for e in entries], seconds, budget)
    choice.contended = contended
    choice.work = work
    return choice


def estimates(seconds: Mapping[str, float | None], sizes: Mapping[str, int]) -> dict[str, float]:
    """Seconds per answer for unmeasured models, scaled by weight bytes from the largest measured one
    (CPU decode and prefill both grow about linearly with the weights): for display only."""
    measured = [(n, s) for n, s in seconds.items() if s is not None]
    if not measured:
        return {}
    ref, ref_s = max(measured, key=lambda x: sizes[x[0]])
    return {n: ref_s * sizes[n] / sizes[ref] for n, s in seconds.items() if s is None}


def resolve_config_model(cfg: RagConfig, measure: bool = True) -> str:
    """Replace `generator.engine.model: auto` in `cfg` by its choice (once; later calls are free) and
    return the model name. A remote backend never measures: only its tokenizer comes from here."""
    eng = cfg.generator.engine
    if eng.model != AUTO:
        return eng.model
    c = choose(eng, cfg.answer.latency_budget_s, measure=measure and cfg.generator.backend == "engine", cfg=cfg)
    if c.name is None:
        from inference.catalog import ModelNotInstalledError

        raise ModelNotInstalledError(f"generator.engine.model: auto: {c.reason}")
    eng.model = c.name
    return c.name


if __name__ == "__main__":
    sys.exit(_probe_main())
