"""The names of a short answer's refusal signals, and the one place a span's signals are built.

Why one module: the signals are a string contract between four parties, the span decoder
(`inference/structured/span_constraint.py`), the answerability checks (`rag/answerability.py`),
the calibration that fits models over them (`eval/calibrate.py`) and the entries it stores
(`rag/calibration_defaults.json`, whose `features` lists hold these strings). A renamed key in
one of them silently turns a stored feature into a missing one (the model then never decides),
so every party names them through these constants.
"""

from __future__ import annotations

import re
from typing import Any

# the span decoder's own reading (GroundedSpanProcessor)
MARGIN = "margin"  # log P(refusal start) - log P(best span start) at the first token
SPAN_LOGPROB = "span_logprob"  # summed log-probability of the span's tokens
MIN_LOGPROB = "min_logprob"  # the least likely span token: one guessed word shows here
SPAN_TOKENS = "span_tokens"  # tokens in the span (0: no span was written)
SPAN_LOGPROB_MEAN = "span_logprob_mean"  # span_logprob per span token: the sum grows with the span's length
PASSAGE_RANK = "passage_rank"  # a per-passage candidate's passage, 0 = best ranked
CUT_NUMBER = "cut_number"  # 1.0 when the span is part of a longer number in its passage ("30" of "18:30"); absent otherwise
# the answerability checks (rag/answerability.py)
CHECK_PASSAGE = "check_passage"  # log-odds "the passage contains the answer"
CHECK_ANSWER = "check_answer"  # log-odds "the passage states this is the answer"
CHECK_PROBE = "check_probe"  # the linear probe on the passage check's hidden state
# the refusal model's output, recorded with the answer
P_UNANSWERABLE = "p_unanswerable"
# what a per-passage candidate holds once its first token is decoded (the checks ran before it):
# a selector reading only these has chosen before any span is finished
FIRST_TOKEN_FEATURES = frozenset({MARGIN, PASSAGE_RANK, CHECK_PASSAGE, CHECK_PROBE})

# What `rag eval calibrate` fits the refusal model on (those every point carries).
REFUSAL_FEATURES = (MARGIN, MIN_LOGPROB, SPAN_LOGPROB, CHECK_PASSAGE, CHECK_ANSWER, CHECK_PROBE)
# The model's first-token preference, the probe's reading of the candidate's passage, and the
# retrieval rank: on the 1.5B calibration split (5-fold CV) these chose the answer passage for 92 %
# of answerable questions vs 78 % for the single decode; adding the span log-probability or the
# answer check picked more right-looking strings from the wrong passage (docs/results.md).
SELECTOR_FEATURES = (MARGIN, CHECK_PROBE, PASSAGE_RANK)

# The entries fitted on a mix of domains and corpus sizes (`rag eval calibrate --dataset A --dataset B ...`,
# the default feature set `transfer`): only signals whose scale does not depend on how many passages
# the corpus or the prompt holds. Dropped: `passage_rank` (0..k-1, so its mean and spread are set by
# k = min(context_k, corpus size): a group of 3 chunks has no rank 4, and a SQuAD-fitted coefficient
# read rank 2 of 3 as a mid-list passage) and the summed `span_logprob` (it scales with the span's
# length, which differs by language and domain), replaced by its per-token mean. Kept: the first-token
# margin, the least likely token, and the checks and probe, which each read one passage at a time.
TRANSFER_REFUSAL_FEATURES = (MARGIN, MIN_LOGPROB, SPAN_LOGPROB_MEAN, CHECK_PASSAGE, CHECK_ANSWER, CHECK_PROBE)
TRANSFER_SELECTOR_FEATURES = (MARGIN, CHECK_PROBE, CHECK_PASSAGE)
# What judges a sentence of a long answer to an explanatory question (`gate.SentenceGate`): an
# explanation has no span, so no decoder signal; the passage check and probe of the passage the
# sentence cites, and the answer check with the sentence as the proposed answer. `rag eval calibrate`
# fits it on the same chosen candidates as the refusal model (their answer check read a span).
SENTENCE_REFUSAL_FEATURES = (CHECK_PASSAGE, CHECK_PROBE, CHECK_ANSWER)
# `rag eval calibrate --features NAME`
FEATURE_SETS = {"transfer": (TRANSFER_REFUSAL_FEATURES, TRANSFER_SELECTOR_FEATURES),
                "squad": (REFUSAL_FEATURES, SELECTOR_FEATURES)}


def with_derived(signals: dict[str, float]) -> dict[str, float]:
    """`signals` plus those computed from them (`span_logprob_mean`), in place and returned: the span
    decoder's signals get them here, and so do the signals of a `--points` file written before they
    existed, so a refit reads the same features a live answer has."""
    if SPAN_LOGPROB in signals and SPAN_LOGPROB_MEAN not in signals:
        signals[SPAN_LOGPROB_MEAN] = signals[SPAN_LOGPROB] / max(1.0, signals.get(SPAN_TOKENS, 1.0))
    return signals


def span_signals(span: Any, rank: int | None = None) -> dict[str, float]:
    """The span decoder's signals of one grounded decode (a `GroundedSpanProcessor` after it ran),
    with `rank` the passage rank of a per-passage candidate (None: the single decode over all
    passages, which has none). The checks' signals are added to this dict by their runner."""
    out = {MARGIN: span.margin if span.margin is not None else 0.0, SPAN_LOGPROB: span.span_logprob,
           MIN_LOGPROB: span.min_logprob, SPAN_TOKENS: float(span.steps)}
    if rank is not None:
        out[PASSAGE_RANK] = float(rank)
    return with_derived(out)


def gave_span(text: str, signals: dict[str, float]) -> bool:
    """Whether a candidate gave a span to answer with: some text, written in at least one token, not
    cut out of a longer number (`cut_from_number`).

    The one "live candidate" rule: the pipeline's per-passage candidates and `rag eval calibrate`'s
    recorded ones (serialised, where an old points file may lack `span_tokens`) both use it."""
    return bool(text.strip()) and bool(signals.get(SPAN_TOKENS, 1)) and not signals.get(CUT_NUMBER)


# a digit joined to the span's first (last) character by nothing or by one of . , : (a decimal point, a
# thousands separator, the colon of a time): the span then starts (ends) inside a number
_NUMBER_BEFORE = re.compile(r"\d[.,:]?$")
_NUMBER_AFTER = re.compile(r"^[.,:]?\d")


def cut_from_number(span: str, passage: str) -> bool:
    """Whether every occurrence of `span` in `passage` (whitespace runs collapsed) starts or ends inside a
    longer number: "30" of "18:30", "0" of "0.20 euros", "500" of "11,500", "12" of "12:50".

    Why: the grounded-span decoder may start a span at any word edge, and a digit run after a colon or
    a decimal point is one. Qwen writes digits one token at a time, so a model that wanted "3 weeks"
    (the passage says "three weeks") was led into "30" of "18:30", cited: a number the passage never
    states. Such a span is no answer; the candidate is treated as one that gave no span (and the
    refusal model never sees it). A span that is not in the passage at all is not judged here (False)."""
    s = " ".join(span.split())
    if not s or not (s[0].isdigit() or s[-1].isdigit()):
        return False
    text = " ".join(passage.split())
    found = False
    start = text.find(s)
    while start >= 0:
        found = True
        before, after = text[max(0, start - 2):start], text[start + len(s):start + len(s) + 2]
        cut = (s[0].isdigit() and _NUMBER_BEFORE.search(before)) or (s[-1].isdigit() and _NUMBER_AFTER.match(after))
        if not cut:
            return False
        start = text.find(s, start + 1)
    return found
