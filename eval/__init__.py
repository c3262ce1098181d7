"""Offline evaluation: datasets, retrieval and answer metrics, ablations, reports.

Modules are imported one by one so that the CLI pays only for what a command uses; nothing in
the core modules imports the pipeline (`rag`): runners take callables, `eval/runner.py` is the
glue to the pipeline.

    datasets       BEIR / QA / RGB loaders, seeded sampling, fingerprints
    metrics        nDCG, Recall, MRR, MAP, Hit, Precision @k (trec_eval conventions)
    answers        SQuAD EM/F1, Chinese char F1, refusals, citations, RGB accuracy
    cost           latency percentiles, tokens, compression ratio, prefix-cache hit rate
    trec           TREC run / qrels files
    cache          per-query JSONL cache that makes every runner resumable
    retrieval_eval evaluate_retrieval(queries, qrels, search_fn, ks) -> EvalResult
    qa_eval        evaluate_qa(items, answer_fn) -> EvalResult
    rgb_eval       evaluate_rgb(items, answer_fn(query, passages), noise_rate) -> EvalResult
    grid, ablation YAML grids of dotted-key overrides; run_ablation / run_qa_ablation
    significance   paired randomization test / t-test and bootstrap CI between variants
    report         Markdown + JSON + PNG plots + per-query JSONL
    qa_generate    build a QA set from a corpus with an LLM callable
"""
