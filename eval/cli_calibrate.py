"""`rag eval calibrate` and `rag eval probe`: the calibration run (answering the calibration
questions down the span path, or refitting from a `--points` file), its points file, and the probe
file `rag eval probe` writes and `--probe` reads. Registered by `eval/cli.py`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from rag.commands._common import config_from
from rag.generation.auto_model import resolve_config_model


def run_calibrate(args: argparse.Namespace) -> int:
    from eval.calibrate import (
        calibration_items,
        fit_refusal_model,
        fit_span_selector,
        pick_margin,
        select_candidates,
    )
    from eval.datasets import load_qa
    from rag.calibration import calibration_path, save_thresholds

    cfg = config_from(args)
    resolve_config_model(cfg)  # entries are stored under the model's name, never under `auto`
    if not cfg.answer.grounded:
        print("error: calibration needs answer.grounded: true (the margin comes from the span decoder)",
              file=sys.stderr)
        return 2
    items = calibration_items(load_qa(args.dataset, args.split), args.limit, args.seed, args.exclude_limit,
                              args.exclude_seed)
    probe, trained = _load_probe(args.probe, cfg.generator.engine.model) if args.probe else (None, {})
    points = _read_points(args.refit, items) if args.refit else _answer_points(args, cfg, items, probe)
    best = pick_margin(points, args.max_false_refusal)  # span-only thresholds: the fallback without checks
    selector = fit_span_selector(points) if cfg.answer.verify else None
    if cfg.answer.verify:
        fitted = fit_refusal_model(select_candidates(points, selector), args.max_false_refusal)
        best = {**best, "refusal_model": fitted["refusal_model"],
                **{k: fitted[k] for k in ("f1", "refusal_acc", "false_refusal")}}
    if selector is not None:
        best["span_selector"] = selector
    model = cfg.generator.engine.model
    path = Path(args.out) if args.out else calibration_path(cfg.storage_path, cfg.answer.calibration)
    save_thresholds(path, model, {**best, "dataset": Path(args.dataset).name, "split": args.split,
                                  "seed": args.seed, "excluded": f"limit {args.exclude_limit} seed {args.exclude_seed}",
                                  "quantization": cfg.generator.engine.quantization,
                                  "dtype": _resolved_dtype(cfg), "languages": _languages(items),
                                  **({"probe": probe.to_dict(), "probe_trained": trained} if probe is not None else {})})
    how = ("refusal model over " + ", ".join(best["refusal_model"]["features"]) if "refusal_model" in best
           else f"refuse_margin {best['refuse_margin']}, refuse_min_logprob {best['refuse_min_logprob']}")
    if selector is not None:
        how += "; span selector over " + ", ".join(selector["features"])
    print(f"{model}: {how} (calibration F1 {best['f1']:.3f}, refusal accuracy "
          f"{best['refusal_acc']:.3f}, false refusals {best['false_refusal']:.3f}, n {int(best['n'])})")
    print(f"wrote {path}")
    return 0


def _answer_points(args: argparse.Namespace, cfg, items, probe) -> list:
    """Answer every calibration question down the span path and keep its signals (and, with
    per-passage candidates, every candidate's) as calibration points."""
    import dataclasses

    from eval.answers import token_f1
    from eval.calibrate import Point
    from eval.qa_eval import normalise_answer_output
    from eval.runner import open_eval_pipeline

    cfg.answer.refuse_margin = 1e9  # always take the best span; the thresholds are chosen afterwards
    cfg.answer.refuse_min_logprob = -1e9
    if cfg.answer.per_passage is None:
        # Record every passage's span so a selector can be fitted (with a probe); with the
        # per-passage path off (`--set answer.per_passage=false`) the single decode is calibrated.
        cfg.answer.per_passage = True
    from rag.answering.policy import Policies

    # Recording policies: every check runs (they are features of the model being fitted), the probe is
    # exactly `probe` (the entry written afterwards must match the signals), and candidates are chosen as
    # the single decode would (they are chosen again with the selector fitted from them).
    pipe = open_eval_pipeline(args.dataset, cfg, progress=not args.no_progress,
                              policies=Policies(cfg, record=True, probe=probe))
    points = []
    # --points is written as it goes (one JSON line per question, flushed), so an interrupted
    # hour-long run keeps what it measured and can be refitted offline (--refit).
    sink = open(args.points, "w", encoding="utf-8") if args.points else None  # noqa: SIM115
    try:
        from tqdm import tqdm

        for it in tqdm(items, disable=args.no_progress, desc="calibrate", unit="q"):
            a = pipe.ask(it.question, mode="short")
            out = normalise_answer_output(a)
            text = re.sub(r"\s*\[\d+\]", "", out.text).strip()
            f1 = 0.0 if it.is_impossible else token_f1(text, it.answers)
            cands = [{"signals": c["signals"], "span": c["span"], "passage": c["passage"],
                      "f1": 0.0 if it.is_impossible else token_f1(c["span"], it.answers)} for c in a.candidates]
            points.append(Point(a.signals.get("margin", 0.0), it.is_impossible, f1,
                                a.signals.get("min_logprob", 0.0), dict(a.signals), cands))
            if sink is not None:
                sink.write(json.dumps({**dataclasses.asdict(points[-1]), "id": it.id, "answer": text}) + "\n")
                sink.flush()
    finally:
        pipe.close()
        if sink is not None:
            sink.close()
    return points


def _read_points(path: str, items) -> list:
    """The points of a `--points` file, in the order of this run's calibration questions; every
    question must be there (a file from another sample or an unfinished run is an error)."""
    from eval.calibrate import Point

    by_id = {}
    try:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                by_id[d["id"]] = Point(d["margin"], bool(d["impossible"]), float(d["f1"]), d.get("min_logprob", 0.0),
                                       dict(d.get("signals", {})), list(d.get("candidates", [])))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: {path} is not a --points file of `rag eval calibrate` ({e})") from None
    missing = [it.id for it in items if it.id not in by_id]
    if missing:
        raise SystemExit(f"error: {path} lacks {len(missing)} of the {len(items)} calibration questions "
                         f"(e.g. {missing[0]}): refit with the --limit/--seed of the run that wrote it")
    return [by_id[it.id] for it in items]


def _load_probe(path: str, model: str):
    """The probe of a `rag eval probe` file, and what the file says about its training."""
    from rag.answerability import AnswerabilityProbe

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        probe = AnswerabilityProbe.from_dict(data["probe"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: {path} is not a probe file from `rag eval probe` ({e})") from None
    if data.get("model") != model:
        raise SystemExit(f"error: the probe in {path} was trained for {data.get('model')!r}, "
                         f"not for generator.engine.model {model!r}")
    return probe, {k: v for k, v in data.items() if k not in ("probe", "cv_auc_by_l2")}


def run_probe(args: argparse.Namespace) -> int:
    import numpy as np
    from tqdm import tqdm

    from eval.calibrate import calibration_items
    from eval.datasets import load_corpus, load_qa, sample_ids
    from eval.probe import probe_pairs, train_probe
    from rag.answerability import AnswerabilityProbe, passage_check
    from rag.generation.engine import EngineGenerator
    from rag.prompt import clip_passage

    cfg = config_from(args)
    resolve_config_model(cfg)  # entries are stored under the model's name, never under `auto`
    try:
        l2s = [float(v) for v in args.l2.split(",")]
    except ValueError:
        print(f"error: --l2 takes comma-separated numbers, got {args.l2!r}", file=sys.stderr)
        return 2
    qa_file = Path(args.dataset) / "qa" / f"{args.split}.jsonl"
    if not qa_file.is_file() or not (Path(args.dataset) / "corpus.jsonl").is_file():
        print(f"error: {args.dataset} needs qa/{args.split}.jsonl and corpus.jsonl (a BEIR-layout QA set)",
              file=sys.stderr)
        return 2
    items = load_qa(args.dataset, args.split)
    held = set(sample_ids([i.id for i in items], args.exclude_limit, True, args.exclude_seed)) \
        if args.exclude_limit else set()
    if args.calibration_limit:
        held |= {i.id for i in calibration_items(items, args.calibration_limit, args.calibration_seed,
                                                 args.exclude_limit, args.exclude_seed)}
    corpus = load_corpus(Path(args.dataset) / "corpus.jsonl")
    pairs = probe_pairs(items, corpus, args.limit, args.seed, held)
    if len({p.label for p in pairs if p.kind == "gold"}) < 2:
        print(f"error: the probe needs answerable and unanswerable questions; {args.dataset} has no "
              "is_impossible questions in this sample", file=sys.stderr)
        return 2
    gen = EngineGenerator(cfg.generator)
    try:
        depth = gen.num_layers
        layer = args.layer if args.layer is not None else round(0.7 * depth)
        odds, feats = [], []
        for p in tqdm(pairs, disable=args.no_progress, desc="probe", unit="pair"):
            text = clip_passage(cfg.prompt, p.passage)
            o, h = gen.run(passage_check(gen, p.question, text, layer))
            odds.append(o)
            feats.append(h.numpy())
    finally:
        gen.close()
    w, b, summary = train_probe(np.stack(feats).astype(np.float64), pairs, odds, l2s)
    out = {"model": cfg.generator.engine.model, "probe": AnswerabilityProbe(layer, w.tolist(), b).to_dict(),
           "layer": layer, "layers": depth, **summary, "dataset": Path(args.dataset).name,
           "split": args.split, "seed": args.seed, "dtype": _resolved_dtype(cfg),
           "excluded": f"qa limit {args.exclude_limit} seed {args.exclude_seed}; calibration limit "
                       f"{args.calibration_limit} seed {args.calibration_seed}; and their paragraphs"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(f"{out['model']}: probe on layer {layer}/{depth}, {out['pairs']} pairs ({out['answerable_pairs']} "
          f"answerable); 5-fold AUC {out['cv_auc']:.4f} (l2 {out['l2']:g}) vs passage check {out['check_auc']:.4f}; "
          f"same-paragraph pairs {out['cv_auc_same_paragraph']:.4f} vs {out['check_auc_same_paragraph']:.4f}")
    print(f"wrote {args.out}")
    return 0


def _languages(items) -> list[str]:
    """The languages the refusal model was fitted on (each >= 20 % of the calibration questions):
    the pipeline applies the entry only to questions in these (`rag/calibration.py: applies_to`)."""
    from collections import Counter

    from indexing.language import detect_language
    from retrieval.language_choice import language_mix

    mix = language_mix(Counter(detect_language(it.question) or "und" for it in items))
    return sorted(lang for lang, share in mix.items() if share >= 0.2 and lang != "und")


def _resolved_dtype(cfg) -> str:
    """What `dtype: auto` became on this machine (the signals of bf16 and fp32 runs differ a little)."""
    eng = cfg.generator.engine
    return str(eng.resolved_dtype(eng.resolved_device())).removeprefix("torch.")
