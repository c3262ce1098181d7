"""Training-side rules on top of the one BEIR reader (`retrieval.beir`): split specs and guards.

Reading folders lives in `retrieval.beir` (shared with evaluation); what is left here is what only
training needs: `DIR:SPLIT` entries and the refusal to train on a benchmark's test split.
"""

from __future__ import annotations

from pathlib import Path

from retrieval.beir import BeirDataset, in_holdout, load_beir

__all__ = ["BeirDataset", "dataset_spec", "guard_split", "in_holdout", "load_beir"]


def dataset_spec(entry: str | Path, default_split: str) -> tuple[str, str]:
    """`DIR` or `DIR:SPLIT` (e.g. `squad_v2_half:dev` next to SciFact's `train`)."""
    head, sep, tail = str(entry).rpartition(":")
    if sep and head and tail and "/" not in tail:
        return head, tail
    return str(entry), default_split


def guard_split(folder: str | Path, split: str) -> None:
    """Training on the benchmark's test split would make every reported number meaningless."""
    if split == "test":
        raise ValueError(f"refusing to train on the test split of {folder}: it is the evaluation set")
