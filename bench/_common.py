"""What the bench scripts share: the offline environment, where the shared datasets lie, and how an
engine comparison is summed up and reported.

A script puts the repository on `sys.path` and imports this module before the project packages
(import order puts it first among them), so the environment is set before anything imports
transformers, huggingface_hub or tokenizers:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._common import ...  # noqa: E402  (sets the offline environment)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"


def agreement(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Share of positions where two runs' outputs are identical (the runs must be the same length)."""
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def p50_ratios(before: Mapping[str, float], after: Mapping[str, float], name: str) -> dict[str, float]:
    """`ttft_ratio_<name>` and `e2e_ratio_<name>`: the median TTFT and end-to-end latency of the
    run without the feature over the run with it (higher is better)."""
    return {f"ttft_ratio_{name}": before["ttft_p50_s"] / after["ttft_p50_s"],
            f"e2e_ratio_{name}": before["e2e_p50_s"] / after["e2e_p50_s"]}


def report(result: Any, json_out: str | None, indent: int = 1) -> None:
    """Print the result as JSON, and write the same text to `json_out` when given (`--json OUT`)."""
    print(json.dumps(result, indent=indent))
    if json_out:
        Path(json_out).write_text(json.dumps(result, indent=indent))
