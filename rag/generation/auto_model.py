"""`generator.engine.model: auto`: the largest installed catalogue model that is fast enough here.

Why measured, not guessed: seconds per answer depend on the CPU's ISA, the kernels that built, the
thread count, the weights' format and what the config runs per question, so the only honest number
is one taken on this machine. Choosing is this module; what a measurement is valid for is
`machine.py` (`Machine`, `pipeline_key`), the measurement and its cache (`<model cache>/speed.json`)
`speed.py`, taking one `speed_probe.py` (a subprocess, once per `Machine`), and what `rag models
list` prints about them `speed_report.py`. The measured figure per model is the pipeline's p50
seconds per question, compared with `answer.latency_budget_s`.

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

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .machine import Machine, this_machine
from .speed import PROBE_DECODE, PROBE_REPEATS, PROMPT_TOKENS, Speed, SpeedCache
from .speed_probe import ProbeError, probe

if TYPE_CHECKING:
    from inference.catalog import ModelEntry
    from inference.config import EngineConfig
    from rag.config import RagConfig

AUTO = "auto"
TEST_ONLY = "smollm2"  # tests and compression: never picked while another model is installed
PIN_ENV = "RAG_AUTO_MODEL"


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
