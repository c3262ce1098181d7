"""`rag eval retrieval|qa|calibrate|probe|ablate|rgb|generate-qa`: offline evaluation runs with
tables, JSON and reports.

The command lives here, not in `rag/commands/`, so that `rag` the library never imports `eval`:
the `rag` CLI finds it through the `ragstack.commands` entry point (pyproject.toml) and calls
`register`. Calibration and probe training (their runs and files) are in `eval/cli_calibrate.py`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from eval.cli_calibrate import run_calibrate, run_probe
from rag.commands._common import add_config_args, config_from
from rag.config_loader import apply_overrides, deep_merge

if TYPE_CHECKING:
    from rag.config import RagConfig


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
    c.add_argument("--dataset", required=True, action="append", metavar="DIR[:SPLIT]",
                   help="a QA set; repeat it (or separate with commas) to calibrate on a mix of domains, each held "
                        "out in turn by the leave-one-domain-out CV (generated own-corpus sets: python -m "
                        "eval.synth_own)")
    c.add_argument("--split", default="dev", help="split of a --dataset given without :SPLIT (generated sets: train)")
    c.add_argument("--limit", type=int, default=80, help="calibration questions to answer (per dataset)")
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
    c.add_argument("--sentence-answers", metavar="ANSWERS",
                   help="choose the sentence refusal model's cut again on these long answers to explanatory "
                        "questions (`rag eval qa --mode long --answers FILE --set answer.sentence_gate=record`, "
                        "same model; their questions should be outside the calibration sample)")
    c.add_argument("--cut-only", action="store_true",
                   help="keep the model's entry (the --out file's, else the shipped one) and choose only its refusal "
                        "cut again on these questions, under --max-false-refusal: after a pipeline change that moves "
                        "how sure the spans come out")
    c.add_argument("--features", choices=["transfer", "squad"], default=None,
                   help="refusal/selector features: transfer (no rank- or length-dependent signal; the default "
                        "for a mix) or squad (those of the SQuAD-only entries; the default for one dataset)")
    c.add_argument("--json", metavar="OUT", help="write the fitted entry and the leave-one-domain-out CV here")
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
                                 doc_score=args.doc_score, types=ds.types)
    finally:
        pipe.close()
    if args.run:
        write_trec_run(res.rankings, args.run, tag=Path(args.config or "default").stem)
        print(f"wrote {args.run}")
    _finish(res, args)
    return 0


def qa_config(args: argparse.Namespace) -> RagConfig:
    """The config `rag eval qa` answers with: `--mode` is the config's answer mode too, so what
    `generator.engine.model: auto` measures (the config's answer step, `pipeline_key`) is the mode
    being evaluated (session 43: `--mode short` picked its model from a long-mode measurement)."""
    cfg = config_from(args)
    cfg.answer = cfg.answer.model_copy(update={"mode": args.mode})
    return cfg


def qa_model(cfg: RagConfig) -> str:
    """The generator that answers: `generator.engine.model`, with `auto` resolved here (measuring on
    a first run, as the pipeline would) so the result JSON says which model it scores (with `auto`
    the choice depends on the CPU: on a Zen 4 core the 1.5B in short mode, the 0.5B in long)."""
    from rag.generation.auto_model import resolve_config_model

    return resolve_config_model(cfg)


def run_qa(args: argparse.Namespace) -> int:
    from eval.datasets import load_qa
    from eval.qa_eval import evaluate_qa
    from eval.runner import answer_fn, counter_delta, engine_counters, open_eval_pipeline

    cfg = qa_config(args)
    items = load_qa(args.dataset, args.split, limit=args.limit, sample=args.sample, seed=args.seed)
    # a generated own-corpus set asks each question over its group's passages only (`QAItem.filters`)
    groups = {it.question: it.filters for it in items if it.filters}
    if len(groups) < len({(it.question, it.group) for it in items if it.filters}):
        print("error: a question of this generated set is asked over two groups; "
              "`rag eval qa` answers by question text: score it with `rag eval calibrate --json`",
              file=sys.stderr)
        return 2
    model = qa_model(cfg)
    print(f"answering with {model} ({args.mode} mode)", file=sys.stderr)
    pipe = open_eval_pipeline(args.dataset, cfg, progress=not args.no_progress)
    try:
        before = engine_counters(pipe)
        res = evaluate_qa(items, answer_fn(pipe, args.mode, groups), progress=not args.no_progress,
                          dataset=Path(args.dataset).name, split=args.split,
                          config={**_config_summary(args), "mode": args.mode, "model": model},
                          concurrency=args.concurrency,
                          answers_path=args.answers, sentences=args.mode == "long")
        res.engine = counter_delta(before, engine_counters(pipe))  # the warm-up answer included
    finally:
        pipe.close()
    _finish(res, args)
    if args.answers:
        print(f"wrote {args.answers}")
    return 0


def run_ablate(args: argparse.Namespace) -> int:
    from eval.ablation import ablation_fingerprint, run_ablation
    from eval.datasets import load_beir
    from eval.grid import load_grid
    from eval.report import write_report
    from eval.retrieval_eval import format_table
    from eval.runner import open_eval_pipeline, search_fn
    from rag.config import RagConfig
    from rag.config_loader import validate

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
    from rag.pipeline import Pipeline

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
    from rag.pipeline import Pipeline

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
