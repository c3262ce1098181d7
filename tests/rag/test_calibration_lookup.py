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
        assert entry.get("languages"), f"{name}: a shipped entry must say which languages it was fitted on"


def test_entry_applies_only_to_its_languages(tmp_path, monkeypatch):
    """Catches an English-fitted refusal model deciding Chinese questions (the 0.5B one refused 40 %
    of answerable DRCD questions), a local English entry hiding a shipped entry that covers Chinese,
    and old entries without `languages` being dropped."""
    model = {"features": ["check_passage"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0,
             "threshold": 0.5}
    shipped = tmp_path / "shipped.json"
    shipped.write_text(json.dumps({"m": {"refusal_model": {**model, "threshold": 7.0}, "languages": ["en", "zh"]}}))
    monkeypatch.setattr(cal, "SHIPPED", shipped)
    local = tmp_path / "calibration.json"
    cal.save_thresholds(local, "m", {"refusal_model": model, "languages": ["en"], "refuse_margin": 1.0})
    assert cal.load_refusal_model(local, "m", language="en").threshold == 0.5  # local wins where it applies
    assert cal.load_refusal_model(local, "m", language="zh").threshold == 7.0  # else the shipped entry
    assert cal.load_refusal_model(local, "m", language="ko") is None  # neither covers Korean
    assert cal.load_thresholds(local, "m", language="ko") == {}  # nor do its span thresholds
    assert cal.load_refusal_model(local, "m", language="").threshold == 0.5  # unknown language: first entry
    cal.save_thresholds(local, "old", {"refusal_model": model})  # no `languages`: applies everywhere
    assert cal.load_refusal_model(local, "old", language="zh") is not None


def test_calibration_records_the_languages_of_its_questions():
    """Catches `rag eval calibrate` writing an entry that claims languages it never saw (or none,
    which would apply it everywhere): each language of >= 20 % of the questions is listed."""
    from types import SimpleNamespace

    from eval.cli_calibrate import _languages

    en = [SimpleNamespace(question="What is the capital city of the island nation?")] * 7
    zh = [SimpleNamespace(question="這個島國的首都是哪裡？")] * 3
    assert _languages(en + zh) == ["en", "zh"]
    assert _languages(en * 2 + zh[:1]) == ["en"]  # one Chinese question in 15 is not a calibration for Chinese
