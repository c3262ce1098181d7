"""Answerability check of a grounded short answer: two yes/no questions to the generator itself.

Why: the span decoder always finds a best span, and its own confidence (first-token margin, least
likely token) barely tells an unanswerable question from an answerable one: SQuAD v2's
unanswerable questions are written so that a plausible span exists. Asking the model, with only
the passage that holds the span, "does this passage contain the answer?" and "is this the
answer?" is a separate reading of the evidence, and its log-odds separate the two kinds of
question much better (measured in docs/results.md). Both are one-token prompts answered in one
batch by the same engine; the calibrated refusal (`rag eval calibrate`) weighs them against the
span signals.
"""

from __future__ import annotations

from typing import Any

from rerank.llm import yes_log_odds, yes_no_ids

CHECK_SYSTEM = "You check answers to reading comprehension questions against a passage."
PASSAGE_CHECK = "Passage: {passage}\n\nQuestion: {question}\n\nDoes the passage contain the answer to this " \
                "question? Answer yes or no."
ANSWER_CHECK = "Passage: {passage}\n\nQuestion: {question}\nProposed answer: {answer}\n\nDoes the passage " \
               "state that this is the answer to the question? Answer yes or no."


def check_prompts(encode_chat: Any, question: str, passage: str, answer: str) -> list[list[int]]:
    """Token ids of the passage check and the answer check (same passage, same question)."""
    def chat(user: str) -> list[int]:
        return encode_chat([{"role": "system", "content": CHECK_SYSTEM}, {"role": "user", "content": user}])

    return [chat(PASSAGE_CHECK.format(passage=passage, question=question)),
            chat(ANSWER_CHECK.format(passage=passage, question=question, answer=answer))]


async def check_signals(generator: Any, question: str, passage: str, answer: str) -> dict[str, float]:
    """`check_passage` and `check_answer`: log P(yes) - log P(no) of the two checks."""
    from inference.sampling_params import SamplingParams

    tok = generator.tokenizer
    yes, no = yes_no_ids(tok)
    prompts = check_prompts(generator.encode_chat, question, passage, answer)
    sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=sorted(set(yes) | set(no)))
    # One after the other: both prompts start with the same passage and question, so the second
    # is served from the prefix cache the first just filled (only its last ~30 tokens are new).
    outs = [await generator.agenerate(p, sp) for p in prompts]
    odds = [yes_log_odds(o.candidate_logprobs, yes, no) for o in outs]
    return {"check_passage": odds[0], "check_answer": odds[1]}
