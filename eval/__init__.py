"""Offline evaluation: datasets, retrieval and answer metrics, ablations, reports.

Modules are imported one by one (`from eval.metrics import ...`) so that the CLI pays only for
what a command uses; nothing here imports the pipeline (`rag`): runners take callables.
"""
