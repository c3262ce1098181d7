"""Offline training and evaluation of rerankers/embedders over BEIR folders.

Kept apart from the online rerankers (`rerank/*.py`) because none of it runs in the pipeline: it
mines hard negatives behind our own retrievers, trains, and scores runs with the shared metrics.
"""
