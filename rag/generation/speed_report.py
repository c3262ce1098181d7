"""What `rag models list` says about the speed measurements: the work a timed question ran, and
estimates for the models not measured. For display only: `model: auto` decides from measurements
alone (`rag/generation/auto_model.py`), never from these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


def estimates(seconds: Mapping[str, float | None], sizes: Mapping[str, int]) -> dict[str, float]:
    """Seconds per answer for unmeasured models, scaled by weight bytes from the largest measured one
    (CPU decode and prefill both grow about linearly with the weights): for display only."""
    measured = [(n, s) for n, s in seconds.items() if s is not None]
    if not measured:
        return {}
    ref, ref_s = max(measured, key=lambda x: sizes[x[0]])
    return {n: ref_s * sizes[n] / sizes[ref] for n, s in seconds.items() if s is None}
