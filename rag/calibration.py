"""Refusal calibration chosen by `rag eval calibrate`, stored per model.

Why a file and not a config default: the right decision depends on the generator (a 135M and a
0.5B model are confident in different ways), and it must be chosen on questions the reported eval
does not score. Two kinds of entry exist: thresholds on the span signals (`refuse_margin`,
`refuse_min_logprob`) and a `refusal_model`, a logistic model over all the refusal signals of a
grounded short answer (span margin and log-probabilities plus the answerability checks of
`rag/answerability.py`) with the decision threshold chosen under a false-refusal cap.

Lookup order: `answer.*` thresholds in the config, then the local file `rag eval calibrate` wrote
(`<storage.path>/calibration.json`), then the entries shipped with the package for the catalogue
models (`rag/calibration_defaults.json`, fitted the same way on SQuAD v2 dev questions outside the
reported sample), so `rag models install qwen2.5-0.5b` refuses sensibly without a calibration run.
An entry applies only to questions in the languages it lists (`applies_to`).
"""

from __future__ import annotations

import copy
import functools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .answerability import AnswerabilityProbe

SHIPPED = Path(__file__).with_name("calibration_defaults.json")


@dataclass
class LinearModel:
    """score = bias + sum coef_i * (x_i - mean_i) / std_i over named signals (a fitted logistic
    model's log-odds)."""

    features: list[str]
    mean: list[float]
    std: list[float]
    coef: list[float]
    bias: float

    def score(self, signals: dict[str, float]) -> float | None:
        """The linear score, or None when a feature is missing (e.g. the checks were off)."""
        if any(f not in signals for f in self.features):
            return None
        z = sum(c * (signals[f] - m) / (s or 1.0)
                for f, m, s, c in zip(self.features, self.mean, self.std, self.coef))
        return self.bias + z

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinearModel:
        return cls(**{k: d[k] for k in ("features", "mean", "std", "coef", "bias")})


@dataclass
class RefusalModel(LinearModel):
    """P(unanswerable) = sigmoid(score); refuse at score >= threshold (the threshold is on the
    linear score, so it is exact, not rounded through the sigmoid)."""

    threshold: float

    def refuses(self, signals: dict[str, float]) -> bool | None:
        s = self.score(signals)
        return None if s is None else s >= self.threshold

    def probability(self, signals: dict[str, float]) -> float | None:
        s = self.score(signals)
        return None if s is None else 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, s))))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RefusalModel:
        return cls(**{k: d[k] for k in ("features", "mean", "std", "coef", "bias", "threshold")})


class SpanSelector(LinearModel):
    """Which per-passage span to give (`rag/answering/candidates.py`): log-odds that a candidate is the
    right answer, fitted by `rag eval calibrate` on answerable calibration questions."""

    def rank(self, candidates: list[dict[str, float]]) -> list[int] | None:
        """Candidate indices best-scored first (ties: the better-ranked passage); None when a
        candidate lacks a feature the selector reads."""
        scores = [self.score(c) for c in candidates]
        if any(s is None for s in scores):
            return None
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))  # type: ignore[operator]

    def choose(self, candidates: list[dict[str, float]]) -> int | None:
        """Index of the best-scored candidate (`rank`'s first); None when a candidate lacks a
        feature the selector reads, or there is none."""
        order = self.rank(candidates)
        return order[0] if order else None


def calibration_path(storage: Path, name: str) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() else storage / p


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=4)
def _read_shipped(path: Path) -> dict[str, Any]:
    """The shipped entries, parsed once per process: the file ships with the package and does not
    change under a running process, and it is ~2.6k lines of probe weights (it was re-read for
    every short answer). Callers copy what they take out of it."""
    return _read(path)


def applies_to(entry: dict[str, Any], language: str | None) -> bool:
    """Whether a calibration entry may decide refusals for a question in `language`.

    Why: the refusal model weighs the generator's confidence, and how confident a model is differs
    by language (the 0.5B model's SQuAD-fitted refusals turned down 40 % of answerable DRCD
    questions). An entry lists the languages it was fitted on (`languages`, ISO 639-1), plus those
    a transfer check on held-out data allowed; an entry without the list (older files) applies to
    every language, and so does a question whose language is unknown (None or "")."""
    langs = entry.get("languages")
    return not langs or not language or language in langs


def load_thresholds(path: Path, model: str, shipped: bool = True, language: str | None = None) -> dict[str, Any]:
    """The entry for `model` in the local file, else the shipped one, skipping an entry that does
    not cover `language` ({} when none applies)."""
    entries = [_read(path).get(model)] + ([_read_shipped(SHIPPED).get(model)] if shipped else [])
    entry = next((e for e in entries if e is not None and applies_to(e, language)), None)
    return copy.deepcopy(entry or {})


class YesNoThresholds(NamedTuple):
    """Where a one-thing yes/no check's log-odds (`answerability.yes_no_check`) decide: `yes` at or
    above, `no` at or below; a choice between two options needs the chosen one's above `no` and
    at least `margin` above the other's."""

    yes: float
    no: float
    margin: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> YesNoThresholds:
        return cls(float(d["yes"]), float(d["no"]), float(d["margin"]))


@dataclass(frozen=True)
class CalibrationEntry:
    """What one entry of the calibration file decides with, parsed: the refusal model, the span
    selector, the probe whose score they read, and the span-only thresholds (the fallback where
    the checks are off). Everything None: an uncalibrated generator (SmolLM2, a user's GGUF)."""

    refusal_model: RefusalModel | None = None
    span_selector: SpanSelector | None = None
    probe: AnswerabilityProbe | None = None
    refuse_margin: float | None = None
    refuse_min_logprob: float | None = None
    # what `answer.check_kv: auto` means for this model: the setting its entry was measured to answer
    # as well with (`shared` saves the answer prompt's passages; None: `exact`)
    check_kv: str | None = None
    # the passages a grounded short answer reads with this entry (`answer.short_k: null`): the number
    # its points were recorded with, or one measured on its calibration questions (the shipped
    # entries); None: every retrieved passage (`answer.context_k`)
    short_k: int | None = None
    # the question languages `short_k` was measured for (None: every language the entry applies to);
    # in the others a short answer reads every passage until a calibration says otherwise
    short_k_languages: tuple[str, ...] | None = None
    # the refusal model over the signals that need no span (the passage checks, the probe, the answer
    # check with a sentence as the answer): what judges each sentence of a long answer to a question
    # asking for an explanation (`gate.SentenceGate`); None: those questions keep the span gate
    sentence_refusal_model: RefusalModel | None = None
    # whether a refused English question is tried in two steps with this model (`answer.two_hop:
    # null`): set where it was measured to answer bridge questions without new inventions
    two_hop: bool = False
    # the one-thing yes/no checks' log-odds thresholds ("Are A and B both ...?", "Which ..., A or
    # B?", `answering/yes_no.py`) where measured for this model
    yes_no: YesNoThresholds | None = None

    @classmethod
    def from_dict(cls, entry: dict[str, Any]) -> CalibrationEntry:
        probe = None
        if "probe" in entry:
            from .answerability import AnswerabilityProbe

            probe = AnswerabilityProbe.from_dict(entry["probe"])
        return cls(RefusalModel.from_dict(entry["refusal_model"]) if "refusal_model" in entry else None,
                   SpanSelector.from_dict(entry["span_selector"])  # type: ignore[arg-type]
                   if "span_selector" in entry else None,
                   probe, entry.get("refuse_margin"), entry.get("refuse_min_logprob"), entry.get("check_kv"),
                   entry.get("short_k"),
                   tuple(entry["short_k_languages"]) if "short_k_languages" in entry else None,
                   RefusalModel.from_dict(entry["sentence_refusal_model"]) if "sentence_refusal_model" in entry
                   else None, bool(entry.get("two_hop", False)),
                   YesNoThresholds.from_dict(entry["yes_no"]) if "yes_no" in entry else None)


def load_entry(path: Path, model: str, shipped: bool = True, language: str | None = None) -> CalibrationEntry:
    """The parsed entry that `load_thresholds` finds (an empty one when none applies)."""
    return CalibrationEntry.from_dict(load_thresholds(path, model, shipped, language))


def load_refusal_model(path: Path, model: str, shipped: bool = True,
                       language: str | None = None) -> RefusalModel | None:
    return load_entry(path, model, shipped, language).refusal_model


def load_span_selector(path: Path, model: str, shipped: bool = True,
                       language: str | None = None) -> SpanSelector | None:
    return load_entry(path, model, shipped, language).span_selector


def save_thresholds(path: Path, model: str, entry: dict[str, Any]) -> None:
    """Merge one model's entry into the file (written to a temp name, then renamed)."""
    data = _read(path)
    data[model] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
