"""The answer step after the prompt: the short answer's decision (`policy.py`) over its signals
(`signals.py`), the runs that gather them (`short.py`, with the per-passage candidates of
`candidates.py`), and the decode that streams and finishes an answer (`stream.py`).

Nothing is imported here, so `rag.answering.signals` (the signal names) stays a leaf that the
answerability checks can import without loading the policy.
"""
