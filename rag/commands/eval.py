"""`rag eval retrieval|qa|ablate`: offline evaluation runs with tables, JSON and reports."""

from __future__ import annotations

import argparse
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
    r.set_defaults(func=run_retrieval)
    q = esub.add_parser("qa", help="answer EM/F1, refusals and citations end to end through the pipeline")
    _common(q, "dev")
    q.set_defaults(func=run_qa)
    a = esub.add_parser("ablate", help="a grid of config variants on the same queries (resumable)")
    _common(a, "test")
    a.add_argument("--grid", required=True, metavar="FILE")
    a.add_argument("--ks", default="1,3,5,10,100")
    a.add_argument("--out", metavar="DIR", help="results, caches and report (default: <storage>/ablations/...)")
    a.set_defaults(func=run_ablate)


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
    ds = load_beir(args.dataset, args.split, args.limit, args.sample, args.seed, with_corpus=False)
    ks = _ks(args.ks)
    pipe = open_eval_pipeline(args.dataset, cfg, progress=not args.no_progress)
    try:
        res = evaluate_retrieval(ds.queries, ds.qrels, search_fn(pipe, max(ks)), ks, not args.no_progress,
                                 dataset=ds.name, split=args.split, config=_config_summary(args))
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
        res = evaluate_qa(items, answer_fn(pipe), progress=not args.no_progress, dataset=Path(args.dataset).name,
                          split=args.split, config=_config_summary(args))
    finally:
        pipe.close()
    _finish(res, args)
    return 0


def run_ablate(args: argparse.Namespace) -> int:
    from eval.ablation import run_ablation
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
                           dataset=ds.name, split=args.split, fingerprint=ds.fingerprint)
    print(format_table(results))
    paths = write_report(results, args.report or out, title=f"Ablation: {ds.name} {args.split}")
    print(f"report: {paths['markdown']}")
    if args.json:
        from eval.ablation import save_results

        save_results(results, args.json)
    return 0


def _yaml(v: object) -> str:
    import yaml

    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def _config_summary(args: argparse.Namespace) -> dict:
    return {"file": args.config or "embedded defaults", "set": list(args.overrides)}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
