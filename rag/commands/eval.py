"""`rag eval retrieval|qa|ablate`: offline evaluation runs with tables, JSON and reports."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ..config_loader import apply_overrides, deep_merge
from ._common import add_config_args, config_from


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate retrieval or answers on a dataset")
    esub = p.add_subparsers(dest="eval_command", metavar="RUN", required=True)
    r = esub.add_parser("retrieval", help="nDCG/Recall/MRR/MAP/Hit@k of the search on a BEIR dataset")
    _common(r, "test")
    r.add_argument("--ks", default="1,3,5,10,100", help="cut-offs, comma-separated")
    r.add_argument("--run", metavar="OUT", help="write the ranked lists in TREC run format")
    r.add_argument("--doc-score", choices=["max", "mean"], default="max",
                   help="a document's score from its chunks' scores: the best one, or their mean")
    r.add_argument("--holdout", type=float, default=0.0, metavar="F",
                   help="score only the queries a reranker trained with `rag rerank train --holdout F` never "
                        "saw (applied before --limit/--sample)")
    r.set_defaults(func=run_retrieval)
    q = esub.add_parser("qa", help="answer EM/F1, refusals and citations end to end through the pipeline")
    _common(q, "dev")
    q.add_argument("--concurrency", type=int, default=1,
                   help="answer N questions at once (engine batching; latencies then include queueing)")
    q.add_argument("--mode", choices=["short", "long"], default="short",
                   help="answer mode (EM/F1 sets score short answers; default short)")
    q.add_argument("--answers", metavar="OUT.jsonl",
                   help="write every question's answer, gold, citations, refusal flag and F1 here")
    q.set_defaults(func=run_qa)
    c = esub.add_parser("calibrate", help="choose the refusal threshold on questions the reported eval does not score")
    add_config_args(c)
    c.add_argument("--dataset", required=True, metavar="DIR")
    c.add_argument("--split", default="dev")
    c.add_argument("--limit", type=int, default=80, help="calibration questions to answer")
    c.add_argument("--seed", type=int, default=1, help="seed of the calibration sample")
    c.add_argument("--exclude-limit", type=int, default=100,
                   help="leave out the questions of `rag eval qa --limit N --sample --seed S` (this N)")
    c.add_argument("--exclude-seed", type=int, default=0, help="... and this S")
    c.add_argument("--max-false-refusal", type=float, default=0.15)
    c.add_argument("--out", metavar="FILE", help="calibration file (default: answer.calibration under storage)")
    c.add_argument("--points", metavar="FILE", help="also write each question's signals and F1 (JSON lines)")
    c.add_argument("--probe", metavar="FILE",
                   help="answerability probe from `rag eval probe`: its score becomes a refusal signal and the "
                        "probe is stored with the calibration entry (without it, no probe is used)")
    c.add_argument("--refit", metavar="POINTS",
                   help="fit from the --points file of an earlier run (same model and flags) instead of answering "
                        "the questions again")
    c.add_argument("--no-progress", action="store_true")
    c.set_defaults(func=run_calibrate)
    pr = esub.add_parser("probe", help="train the answerability probe on question/passage pairs outside the "
                                       "reported and calibration samples")
    add_config_args(pr)
    pr.add_argument("--dataset", required=True, metavar="DIR", help="a QA set with unanswerable questions")
    pr.add_argument("--split", default="dev")
    pr.add_argument("--limit", type=int, default=1600, help="questions to draw pairs from")
    pr.add_argument("--seed", type=int, default=2, help="seed of the question sample")
    pr.add_argument("--exclude-limit", type=int, default=100, help="leave out `rag eval qa --limit N --sample` ...")
    pr.add_argument("--exclude-seed", type=int, default=0, help="... --seed S, and their paragraphs")
    pr.add_argument("--calibration-limit", type=int, default=300,
                    help="also leave out `rag eval calibrate --limit N` ... (and their paragraphs)")
    pr.add_argument("--calibration-seed", type=int, default=1, help="... --seed S")
    pr.add_argument("--layer", type=int, default=None,
                    help="decoder layer to probe (default: 70%% of the depth; -1: the final output)")
    pr.add_argument("--l2", default="100,300,1000,3000", help="L2 penalties tried by 5-fold cross-validation")
    pr.add_argument("--out", required=True, metavar="FILE", help="probe file for `rag eval calibrate --probe`")
    pr.add_argument("--no-progress", action="store_true")
    pr.set_defaults(func=run_probe)
    a = esub.add_parser("ablate", help="a grid of config variants on the same queries (resumable)")
    _common(a, "test")
    a.add_argument("--grid", required=True, metavar="FILE")
    a.add_argument("--ks", default="1,3,5,10,100")
    a.add_argument("--out", metavar="DIR", help="results, caches and report (default: <storage>/ablations/...)")
    a.set_defaults(func=run_ablate)
    g = esub.add_parser("rgb", help="RGB noise robustness / rejection / counterfactual runs with given passages")
    _common(g, "")
    g.add_argument("--noise-rate", type=float, default=0.0, help="share of noise passages among the n given")
    g.add_argument("--passages", type=int, default=5)
    g.add_argument("--counterfactual", action="store_true", help="the file holds counterfactual passages")
    g.set_defaults(func=run_rgb)
    q2 = esub.add_parser("generate-qa", help="build a QA set from your own corpus with the engine (no labels needed)")
    add_config_args(q2)
    q2.add_argument("--corpus", metavar="FILE", help="a corpus.jsonl; default: the documents of --collection in the store")
    q2.add_argument("--collection", default="default")
    q2.add_argument("--out", required=True, metavar="DIR", help="writes a BEIR + QA dataset here")
    q2.add_argument("--n", type=int, default=50, help="questions to keep")
    q2.add_argument("--seed", type=int, default=0)
    q2.set_defaults(func=run_generate_qa)


def _common(p: argparse.ArgumentParser, split: str) -> None:
    add_config_args(p)
    p.add_argument("--dataset", required=True, metavar="DIR")
    p.add_argument("--split", default=split)
    p.add_argument("--limit", type=int, help="evaluate only N queries")
    p.add_argument("--sample", action="store_true", help="with --limit: a seeded random sample, not the first N")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", help="write the result JSON here")
    p.add_argument("--report", metavar="DIR", help="write report.md, report.json and PNG plots here")
    p.add_argument("--no-progress", action="store_true")


def _ks(s: str) -> list[int]:
    return sorted({int(x) for x in s.split(",") if x.strip()})


def _finish(res, args) -> None:
    from eval.report import write_report
    from eval.retrieval_eval import format_table

    print(format_table(res))
    if args.json:
        res.save_json(args.json)
        print(f"wrote {args.json}")
    if args.report:
        paths = write_report(res, args.report, title=f"{res.dataset} {res.split}")
        print(f"report: {paths['markdown']}")


def run_retrieval(args: argparse.Namespace) -> int:
    from eval.datasets import load_beir
    from eval.retrieval_eval import evaluate_retrieval
    from eval.runner import open_eval_pipeline, search_fn
    from eval.trec import write_trec_run

    cfg = config_from(args)
    ds = load_beir(args.dataset, args.split, args.limit, args.sample, args.seed, with_corpus=False,
                   holdout=args.holdout, part="holdout" if args.holdout else "rest")
    ks = _ks(args.ks)
    pipe = open_eval_pipeline(args.dataset, cfg, progress=not args.no_progress)
    try:
        res = evaluate_retrieval(ds.queries, ds.qrels, search_fn(pipe, max(ks)), ks, not args.no_progress,
                                 dataset=ds.name, split=args.split, config=_config_summary(args),
                                 doc_score=args.doc_score)
    finally:
        pipe.close()
    if args.run:
        write_trec_run(res.rankings, args.run, tag=Path(args.config or "default").stem)
        print(f"wrote {args.run}")
    _finish(res, args)
    return 0


def run_qa(args: argparse.Namespace) -> int:
    from eval.datasets import load_qa
    from eval.qa_eval import evaluate_qa
    from eval.runner import answer_fn, open_eval_pipeline

    cfg = config_from(args)
    items = load_qa(args.dataset, args.split, limit=args.limit, sample=args.sample, seed=args.seed)
    pipe = open_eval_pipeline(args.dataset, cfg, progress=not args.no_progress)
    try:
        res = evaluate_qa(items, answer_fn(pipe, args.mode), progress=not args.no_progress,
                          dataset=Path(args.dataset).name, split=args.split,
                          config={**_config_summary(args), "mode": args.mode}, concurrency=args.concurrency,
                          answers_path=args.answers)
    finally:
        pipe.close()
    _finish(res, args)
    if args.answers:
        print(f"wrote {args.answers}")
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    from eval.calibrate import (
        calibration_items,
        fit_refusal_model,
        fit_span_selector,
        pick_margin,
        select_candidates,
    )
    from eval.datasets import load_qa

    from ..calibration import calibration_path, save_thresholds

    cfg = config_from(args)
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
    pipe = open_eval_pipeline(args.dataset, cfg, progress=not args.no_progress)
    pipe.record_signals = True  # the checks are features of the model being fitted
    pipe.probe, pipe.stored_probe = probe, False  # the entry written afterwards must match the signals
    pipe.stored_selector = False  # candidates are chosen again with the selector fitted from them
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
    from ..answerability import AnswerabilityProbe

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

    from ..answerability import AnswerabilityProbe, passage_check
    from ..generation.engine import EngineGenerator
    from ..prompt import clip_passage

    cfg = config_from(args)
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


def run_ablate(args: argparse.Namespace) -> int:
    from eval.ablation import ablation_fingerprint, run_ablation
    from eval.datasets import load_beir
    from eval.grid import load_grid
    from eval.report import write_report
    from eval.retrieval_eval import format_table
    from eval.runner import open_eval_pipeline, search_fn

    from ..config import RagConfig
    from ..config_loader import validate

    base = config_from(args)
    grid = load_grid(args.grid)
    ds = load_beir(args.dataset, args.split, args.limit, args.sample, args.seed, with_corpus=False)
    ks = _ks(args.ks)
    out = Path(args.out or base.storage_path / "ablations" / f"{ds.name}-{args.split}-{Path(args.grid).stem}")

    def make(overrides: dict) -> object:
        data = apply_overrides(deep_merge(RagConfig().to_dict(), base.to_dict()),
                               [f"{k}={_yaml(v)}" for k, v in overrides.items()])
        cfg = validate(RagConfig, data, f"grid variant {overrides}")
        return search_fn(open_eval_pipeline(args.dataset, cfg, progress=not args.no_progress), max(ks))

    results = run_ablation(grid, ds.queries, ds.qrels, make, out, ks, not args.no_progress,
                           dataset=ds.name, split=args.split,
                           fingerprint=ablation_fingerprint(ds.fingerprint, base.to_dict()))
    print(format_table(results))
    paths = write_report(results, args.report or out, title=f"Ablation: {ds.name} {args.split}")
    print(f"report: {paths['markdown']}")
    if args.json:
        from eval.ablation import save_results

        save_results(results, args.json)
    return 0


def run_rgb(args: argparse.Namespace) -> int:
    from eval.datasets import load_rgb
    from eval.rgb_eval import evaluate_rgb

    from ..pipeline import Pipeline

    items = load_rgb(args.dataset, args.limit, args.sample, args.seed)
    pipe = Pipeline.from_config(config_from(args))
    try:
        res = evaluate_rgb(items, lambda q, texts: pipe.ask(q, passages=texts), noise_rate=args.noise_rate,
                           n_passages=args.passages, seed=args.seed, counterfactual=args.counterfactual,
                           progress=not args.no_progress, dataset=Path(args.dataset).stem,
                           name=f"noise={args.noise_rate}")
    finally:
        pipe.close()
    _finish(res, args)
    return 0


def run_generate_qa(args: argparse.Namespace) -> int:
    from eval.datasets import CorpusDoc, load_corpus
    from eval.qa_generate import QAGenConfig, generate_qa, write_qa_dataset

    from ..pipeline import Pipeline

    cfg = config_from(args)
    pipe = Pipeline.from_config(cfg)
    try:
        if args.corpus:
            corpus = load_corpus(args.corpus)
        else:
            corpus = {}
            for d in pipe.store.list_documents(args.collection):
                full = pipe.store.get_document(d["doc_id"], args.collection)
                corpus[d["doc_id"]] = CorpusDoc(d["doc_id"], full["text"], d["title"], d["metadata"])
        if not corpus:
            print("error: no documents to ask about (index some, or pass --corpus)", file=sys.stderr)
            return 1
        import json as _json

        from inference.sampling_params import SamplingParams
        from inference.structured import JsonSchemaLogitsProcessor

        schema = {"type": "object", "properties": {"question": {"type": "string", "maxLength": 200},
                                                   "answer": {"type": "string", "maxLength": 80}}}

        def generate(prompts: list[str]) -> list[str]:
            # JSON-constrained so every reply parses; turned back into the "Question/Answer" form.
            tok = pipe.generator.tokenizer
            chats = [tok.apply_chat_template([{"role": "user", "content": p + '\nReply as JSON {"question": '
                                                                          '"...", "answer": "..."}.'}],
                                             tokenize=False, add_generation_prompt=True) for p in prompts]
            params = [SamplingParams(temperature=0.0, max_tokens=120, logits_processors=[
                JsonSchemaLogitsProcessor(schema, tok, max_tokens=120)]) for _ in prompts]
            out = []
            for o in pipe.generator.generate(chats, params):
                try:
                    d = _json.loads(o.text)
                    out.append(f"Question: {d['question']}\nAnswer: {d['answer']}")
                except (ValueError, KeyError):
                    out.append(o.text)
            return out

        res = generate_qa(corpus, generate, QAGenConfig(n_questions=args.n, seed=args.seed))
        path = write_qa_dataset(args.out, corpus, res.items)
    finally:
        pipe.close()
    print(f"kept {len(res.items)} question(s) from {res.n_prompts} passage(s); dropped {res.dropped}; wrote {path}")
    return 0


def _yaml(v: object) -> str:
    import yaml

    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def _config_summary(args: argparse.Namespace) -> dict:
    return {"file": args.config or "embedded defaults", "set": list(args.overrides)}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
