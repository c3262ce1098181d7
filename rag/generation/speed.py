"""A `model: auto` speed measurement and the cache that keeps it (`<model cache>/speed.json`).

Why cached: a probe takes minutes (it loads and runs the model), and the figure holds as long as the
`Machine` (rag/generation/machine.py) does, so it is taken once per machine and model file and
read by every later choice and by `rag models list`. No torch here.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference.cache_dir import cache_root

if TYPE_CHECKING:
    from inference.catalog import ModelEntry

    from .machine import Machine

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
