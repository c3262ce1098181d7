"""`rag eval calibrate` and `rag eval probe`: the calibration run (answering the calibration
questions down the span path, or refitting from a `--points` file), its points file, and the probe
file `rag eval probe` writes and `--probe` reads. Registered by `eval/cli.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

from rag.commands._common import config_from
from rag.generation.auto_model import resolve_config_model


def run_calibrate(args: argparse.Namespace) -> int:
    from eval.calibrate import domain_cv, fit_entry, pick_margin
    from rag.answering.signals import FEATURE_SETS
    from rag.calibration import calibration_path, save_thresholds
    from rag.warm_kv import resolved_check_kv

    cfg = config_from(args)
    resolve_config_model(cfg)  # entries are stored under the model's name, never under `auto`
    if not cfg.answer.grounded:
        print("error: calibration needs answer.grounded: true (the margin comes from the span decoder)",
              file=sys.stderr)
        return 2
    sentence_answers = getattr(args, "sentence_answers", None)
    if sentence_answers and not cfg.answer.verify:
        # checked before the run: the sentence model reads the checks' signals, so without them there
        # is no model whose cut these answers could choose, and a silent skip looks like a fitted cut
        print("error: --sentence-answers needs answer.verify: true (the sentence refusal model reads the "
              "checks' signals)", file=sys.stderr)
        return 2
    if sentence_answers and getattr(args, "cut_only", False):
        # --cut-only writes the entry it found with one cut changed; a sentence cut chosen in the same
        # run would be silently dropped from it
        print("error: --cut-only keeps the entry's sentence refusal model: choose its cut in a run without "
              "--cut-only (--refit POINTS --sentence-answers FILE)", file=sys.stderr)
        return 2
    try:
        sets = calibration_sets(args.dataset, args.split, args.limit, args.seed, args.exclude_limit, args.exclude_seed)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    items = [it for s in sets for it in s.items]
    # one dataset keeps the SQuAD-era features unless asked; a mix is fitted on the transfer ones
    features = getattr(args, "features", None) or ("transfer" if len(sets) > 1 else "squad")
    refusal_feats, selector_feats = FEATURE_SETS[features]
    probe, trained = _load_probe(args.probe, cfg.generator.engine.model) if args.probe else (None, {})
    points = _read_points(args.refit, sets) if args.refit else _answer_points(args, cfg, sets, probe)
    if getattr(args, "cut_only", False):
        return _cut_only(args, cfg, sets, points)
    best = pick_margin(points, args.max_false_refusal)  # span-only thresholds: the fallback without checks
    cv: dict = {}
    if cfg.answer.verify:
        fitted = fit_entry(points, args.max_false_refusal, refusal_feats, selector_feats)
        best = {**best, "refusal_model": fitted["refusal_model"],
                **{k: fitted[k] for k in ("f1", "refusal_acc", "false_refusal")}}
        if fitted["span_selector"] is not None:
            best["span_selector"] = fitted["span_selector"]
        if fitted["sentence_refusal_model"] is not None:
            best["sentence_refusal_model"] = fitted["sentence_refusal_model"]
        if sentence_answers:
            if fitted["sentence_refusal_model"] is None:
                print(f"error: --sentence-answers {sentence_answers}: no sentence refusal model was fitted "
                      "(its features need the checks' signals in the points: answer.verify, and a probe "
                      "where the refusal model reads one)", file=sys.stderr)
                return 2
            try:
                best.update(_sentence_cut(best["sentence_refusal_model"], sentence_answers))
            except (OSError, ValueError, KeyError) as e:
                print(f"error: --sentence-answers {sentence_answers}: {e}", file=sys.stderr)
                return 2
        cv = domain_cv(points, args.max_false_refusal, refusal_feats, selector_feats)
    selector = best.get("span_selector")
    model = cfg.generator.engine.model
    path = Path(args.out) if args.out else calibration_path(cfg.storage_path, cfg.answer.calibration)
    names = [s.domain for s in sets]
    entry = {**best, "dataset": "+".join(("own:" if s.domain == "own" else "") + Path(s.path).name for s in sets), "split": "+".join(s.split for s in sets),
             "seed": args.seed, "excluded": f"limit {args.exclude_limit} seed {args.exclude_seed}",
             "quantization": cfg.generator.engine.quantization, "features": features,
             # the checks' K/V mode the points were answered with: `answer.check_kv: auto` reads it back
             "check_kv": resolved_check_kv(cfg),
             # and how many passages each short answer read: `answer.short_k: null` reads it back
             **({"short_k": short_k} if (short_k := _recorded_short_k(cfg, items)) < cfg.answer.context_k else {}),
             "dtype": _resolved_dtype(cfg), "languages": _languages(items),
             "domains": {d: sum(p.domain == d for p in points) for d in sorted(set(names))},
             **({"transfer_cv": cv} if cv else {}),
             **({"probe": probe.to_dict(), "probe_trained": trained} if probe is not None else {})}
    save_thresholds(path, model, entry)
    how = ("refusal model over " + ", ".join(best["refusal_model"]["features"]) if "refusal_model" in best
           else f"refuse_margin {best['refuse_margin']}, refuse_min_logprob {best['refuse_min_logprob']}")
    if selector is not None:
        how += "; span selector over " + ", ".join(selector["features"])
    print(f"{model}: {how} (calibration F1 {best['f1']:.3f}, refusal accuracy "
          f"{best['refusal_acc']:.3f}, false refusals {best['false_refusal']:.3f}, n {int(best['n'])})")
    for d, m in cv.items():
        print(f"  held out {d}: refusal accuracy {m['refusal_acc']:.3f}, false refusals {m['false_refusal']:.3f}, "
              f"cited inventions {m['cited_invention_rate']:.3f}, F1 {m['f1']:.3f} (n {int(m['n'])})")
    if getattr(args, "json", None):
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"model": model, "entry": {k: v for k, v in entry.items() if k != "probe"},
                                               "transfer_cv": cv}, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    print(f"wrote {path}")
    return 0


def _cut_only(args: argparse.Namespace, cfg, sets: list, points: list) -> int:
    """`--cut-only`: the model's entry as the pipeline finds it (`--out`/`answer.calibration`, else the
    shipped one) with only its refusal cut chosen again on `points`
    (`eval.calibrate.rechoose_refusal_threshold`), written back with a `refusal_cut` record of what
    the cut scored there and in 5-fold CV; the selector, coefficients, probe and the rest are kept."""
    from eval.calibrate import cut_cv, rechoose_refusal_threshold
    from rag.calibration import calibration_path, load_thresholds, save_thresholds

    model = cfg.generator.engine.model
    path = Path(args.out) if args.out else calibration_path(cfg.storage_path, cfg.answer.calibration)
    entry = load_thresholds(path, model)
    try:
        if not entry:
            raise ValueError(f"no calibration entry for {model} (in {path} or shipped) whose cut could be chosen again")
        r = rechoose_refusal_threshold(entry, points, args.max_false_refusal)
        cv = cut_cv(entry, points, args.max_false_refusal)
    except ValueError as e:
        print(f"error: --cut-only: {e}", file=sys.stderr)
        return 2
    keys = ("f1", "refusal_acc", "false_refusal", "cited_invention_rate")
    new = r["entry"]
    new["refusal_cut"] = {"from": r["from"], "to": new["refusal_model"]["threshold"],
                          "max_false_refusal": args.max_false_refusal,
                          "dataset": "+".join(Path(s.path).name for s in sets), "seed": args.seed,
                          "n": r["n"], **{k: r[k] for k in keys}, "cv": {k: cv[k] for k in keys}}
    save_thresholds(path, model, new)
    print(f"{model}: refusal cut {r['from']:.3f} -> {new['refusal_model']['threshold']:.3f} (on {int(r['n'])} "
          f"questions: F1 {r['f1']:.3f}, refusal accuracy {r['refusal_acc']:.3f}, false refusals "
          f"{r['false_refusal']:.3f}; 5-fold CV: F1 {cv['f1']:.3f}, false refusals {cv['false_refusal']:.3f})")
    print(f"wrote {path}")
    return 0


@dataclasses.dataclass
class CalibrationSet:
    """One dataset of a calibration mix: its questions and the domain leave-one-out CV holds out."""

    path: str
    split: str
    domain: str
    items: list


def calibration_sets(specs: str | list[str], default_split: str, limit: int, seed: int, exclude_limit: int,
                     exclude_seed: int) -> list[CalibrationSet]:
    """The datasets of `--dataset` (repeatable, or comma-separated; `DIR:SPLIT` picks a split), each
    sampled with `calibration_items`. The reported sample is left out of a `dev` split only: a
    training split and a generated own-corpus set (eval/synth_own.py, its `manifest.json`) are never
    reported on. Domain: `own` for generated sets (every small-corpus set is held out together, the
    transfer a user's few files need), else the folder name."""
    from eval.calibrate import calibration_items
    from eval.datasets import load_qa

    raw = [specs] if isinstance(specs, str) else list(specs)
    out = []
    for spec in (p.strip() for s in raw for p in s.split(",") if p.strip()):
        path, _, split = spec.partition(":") if not Path(spec).exists() else (spec, "", "")
        manifest = Path(path) / "manifest.json"
        generated = manifest.is_file() and "source" in json.loads(manifest.read_text(encoding="utf-8"))
        split = split or ("train" if generated else default_split)
        qa = Path(path) / "qa" / f"{split}.jsonl"
        if not qa.is_file():
            raise ValueError(f"{path} has no qa/{split}.jsonl (use DIR:SPLIT, or generate an own-corpus set "
                             "with `python -m eval.synth_own`)")
        held = exclude_limit if split == "dev" and not generated else 0
        items = calibration_items(load_qa(path, split), limit, seed, held, exclude_seed)
        out.append(CalibrationSet(path, split, "own" if generated else Path(path).name, items))
    if not out:
        raise ValueError("no --dataset given")
    return out


def _point_f1(it, text: str, doc_id: str | None) -> float:
    """A calibration answer's F1: token F1 against the gold answers; a question with supporting
    documents but no answer string (a SciFact claim) scores 1 when the answer cites one of them."""
    from eval.answers import token_f1

    if it.is_impossible:
        return 0.0
    if it.answers:
        return token_f1(text, it.answers)
    return float(doc_id is not None and doc_id in it.gold_docs)


def _answer_points(args: argparse.Namespace, cfg, sets: list[CalibrationSet], probe) -> list:
    """Answer every calibration question down the span path and keep its signals (and, with
    per-passage candidates, every candidate's) as calibration points. A question of a generated
    set is asked over its group's passages only (`QAItem.filters`)."""
    from eval.calibrate import Point
    from eval.qa_eval import normalise_answer_output
    from eval.runner import open_eval_pipeline

    cfg.answer.refuse_margin = 1e9  # always take the best span; the thresholds are chosen afterwards
    cfg.answer.refuse_min_logprob = -1e9
    cfg.answer.compare = False  # a point is one span decision; a comparison's answer is two
    cfg.answer.two_hop = False
    cfg.answer.yes_no = False
    if cfg.answer.per_passage is None:
        # Record every passage's span so a selector can be fitted (with a probe); with the
        # per-passage path off (`--set answer.per_passage=false`) the single decode is calibrated.
        cfg.answer.per_passage = True
    from rag.answering.policy import Policies

    points = []
    # --points is written as it goes (one JSON line per question, flushed), so an interrupted
    # hour-long run keeps what it measured and can be refitted offline (--refit).
    sink = open(args.points, "w", encoding="utf-8") if args.points else None  # noqa: SIM115
    try:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(s.items) for s in sets), disable=args.no_progress, desc="calibrate", unit="q")
        for cs in sets:
            # Recording policies: every check runs (they are features of the model being fitted), the probe is
            # exactly `probe` (the entry written afterwards must match the signals), and candidates are chosen as
            # the single decode would (they are chosen again with the selector fitted from them).
            pipe = open_eval_pipeline(cs.path, cfg, progress=not args.no_progress,
                                      policies=Policies(cfg, record=True, probe=probe))
            try:
                for it in cs.items:
                    bar.set_postfix_str(cs.domain)
                    a = pipe.ask(it.question, filters=it.filters, mode="short")
                    out = normalise_answer_output(a)
                    text = re.sub(r"\s*\[\d+\]", "", out.text).strip()
                    cited = a.citations[0].doc_id if a.citations and not a.refused else None
                    cands = [{"signals": c["signals"], "span": c["span"], "passage": c["passage"],
                              "f1": _point_f1(it, c["span"], a.passages[c["passage"]].doc_id)} for c in a.candidates]
                    points.append(Point(a.signals.get("margin", 0.0), it.is_impossible, _point_f1(it, text, cited),
                                        a.signals.get("min_logprob", 0.0), dict(a.signals), cands, cs.domain))
                    if sink is not None:
                        sink.write(json.dumps({**dataclasses.asdict(points[-1]), "id": it.id, "answer": text}) + "\n")
                        sink.flush()
                    bar.update()
            finally:
                pipe.close()
        bar.close()
    finally:
        if sink is not None:
            sink.close()
    return points


def _read_points(path: str, sets: list[CalibrationSet]) -> list:
    """The points of a `--points` file, in the order of this run's calibration questions; every
    question must be there (a file from another sample or an unfinished run is an error). A line
    is matched by its domain and id (a file from before domains were recorded: by id); its signals
    get the derived ones (`with_derived`), so old files refit on the transfer features too."""
    from eval.calibrate import Point
    from rag.answering.signals import with_derived

    by_id: dict[tuple[str, str], Point] = {}
    try:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                cands = [{**c, "signals": with_derived(dict(c.get("signals", {})))} for c in d.get("candidates", [])]
                by_id[(d.get("domain", ""), d["id"])] = Point(
                    d["margin"], bool(d["impossible"]), float(d["f1"]), d.get("min_logprob", 0.0),
                    with_derived(dict(d.get("signals", {}))), cands, d.get("domain", ""))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: {path} is not a --points file of `rag eval calibrate` ({e})") from None
    out, missing = [], []
    for cs in sets:
        for it in cs.items:
            p = by_id.get((cs.domain, it.id)) or by_id.get(("", it.id))
            if p is None:
                missing.append(it.id)
            else:
                out.append(dataclasses.replace(p, domain=cs.domain))
    if missing:
        total = sum(len(cs.items) for cs in sets)
        raise SystemExit(f"error: {path} lacks {len(missing)} of the {total} calibration questions "
                         f"(e.g. {missing[0]}): refit with the --dataset/--limit/--seed of the run that wrote it")
    return out


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
    from eval.probe import passage_order, probe_pairs, train_probe
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
        odds: list[float] = [0.0] * len(pairs)
        feats: list = [None] * len(pairs)
        # the pairs on one paragraph one after another: the check prompt starts with the passage, so
        # the engine's prefix cache serves it to each later pair on that paragraph (training reads
        # the pairs in their own order: the fit and the folds do not depend on this one)
        for i in tqdm(passage_order(pairs), disable=args.no_progress, desc="probe", unit="pair"):
            text = clip_passage(cfg.prompt, pairs[i].passage)
            odds[i], h = gen.run(passage_check(gen, pairs[i].question, text, layer))
            feats[i] = h.numpy()
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


def _recorded_short_k(cfg, items) -> int:
    """The passages each recorded short answer read (`ShortAnswerPolicy.short_k` of `context_k`, as
    the policy of the first calibration question's language resolves it)."""
    from rag.answering.policy import Policies

    return Policies(cfg).for_question(items[0].question if items else "").short_k(cfg.answer.context_k)


def _resolved_dtype(cfg) -> str:
    """What `dtype: auto` became on this machine (the signals of bf16 and fp32 runs differ a little)."""
    eng = cfg.generator.engine
    return str(eng.resolved_dtype(eng.resolved_device())).removeprefix("torch.")


def _sentence_cut(model: dict, answers_path: str) -> dict:
    """The sentence refusal model with its cut chosen on recorded long answers
    (`eval.calibrate.rechoose_sentence_threshold`), and what that cut scored there."""
    from eval.calibrate import rechoose_sentence_threshold
    from eval.datasets import read_jsonl

    rows = list(read_jsonl(answers_path))
    if not any(s.get("signals") for r in rows for s in (r.get("grounding") or {}).get("sentences", [])):
        raise ValueError("no sentence carries signals: record it with --mode long and "
                         "--set answer.sentence_gate=record (questions asking for an explanation)")
    r = rechoose_sentence_threshold(model, rows)
    print(f"sentence refusal model: cut {model['threshold']:.3f} -> {r['model']['threshold']:.3f} on "
          f"{int(r['n'])} long answers (F1 {r['f1']:.3f}, false refusals {r['false_refusal']:.3f})")
    return {"sentence_refusal_model": r["model"],
            "sentence_cut": {"answers": Path(answers_path).name, "span_cut": model["threshold"],
                             **{k: r[k] for k in ("f1", "refusal_acc", "false_refusal", "n")}}}
