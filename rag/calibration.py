"""Refusal thresholds chosen by `rag eval calibrate`, stored per model under the storage path.

Why a file and not a config default: the right margin depends on the generator (a 135M and a
0.5B model are confident in different ways), and it must be chosen on questions the reported eval
does not score. The pipeline reads the entry of its own model; `answer.refuse_margin` overrides it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def calibration_path(storage: Path, name: str) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() else storage / p


def load_thresholds(path: Path, model: str) -> dict[str, Any]:
    """The stored entry for `model` ({} when the file or the entry is missing)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return dict(data.get(model, {}))


def save_thresholds(path: Path, model: str, entry: dict[str, Any]) -> None:
    """Merge one model's entry into the file (written to a temp name, then renamed)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data[model] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
