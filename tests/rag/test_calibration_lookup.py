"""Where refusal calibration comes from: the local file `rag eval calibrate` wrote, else the entry
shipped for a catalogue model, else nothing."""

from __future__ import annotations

import json

import rag.calibration as cal


def test_local_calibration_beats_the_shipped_one(tmp_path, monkeypatch):
    """Catches a shipped default overriding a user's own calibration (or being ignored when the
    user has none)."""
    shipped = tmp_path / "shipped.json"
    model = {"features": ["check_passage"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0,
             "threshold": 0.5}
    shipped.write_text(json.dumps({"qwen2.5-0.5b": {"refusal_model": model}}))
    monkeypatch.setattr(cal, "SHIPPED", shipped)
    local = tmp_path / "calibration.json"
    got = cal.load_refusal_model(local, "qwen2.5-0.5b")
    assert got is not None and got.threshold == 0.5
    assert cal.load_refusal_model(local, "qwen2.5-0.5b", shipped=False) is None
    assert cal.load_refusal_model(local, "smollm2") is None
    cal.save_thresholds(local, "qwen2.5-0.5b", {"refusal_model": {**model, "threshold": -2.0}})
    assert cal.load_refusal_model(local, "qwen2.5-0.5b").threshold == -2.0


def test_shipped_calibration_file_is_valid():
    """Catches a malformed shipped entry (the pipeline would fail at the first short answer)."""
    data = json.loads(cal.SHIPPED.read_text(encoding="utf-8"))
    for name, entry in data.items():
        m = cal.RefusalModel.from_dict(entry["refusal_model"])
        assert len(m.features) == len(m.coef) == len(m.mean) == len(m.std), name
        assert m.refuses({f: 0.0 for f in m.features}) in (True, False)
