"""Answerability check of a grounded short answer: two yes/no questions to the generator itself.

Why: the span decoder always finds a best span, and its own confidence (first-token margin, least
likely token) barely tells an unanswerable question from an answerable one: SQuAD v2's
unanswerable questions are written so that a plausible span exists. Asking the model, with only
the passage that holds the span, "does this passage contain the answer?" and "is this the
answer?" is a separate reading of the evidence, and its log-odds separate the two kinds of
question much better (measured in docs/results.md). Both are one-token prompts answered in one
batch by the same engine; the calibrated refusal (`rag eval calibrate`) weighs them against the
span signals.

A third signal, `check_probe`, reads the same passage-check forward pass differently: a linear
probe (`AnswerabilityProbe`, trained by `rag eval probe` on question/passage pairs outside every
reported and calibration sample) on the hidden state of a middle layer at the prompt's last token.
The yes/no log-odds look at the final state only through two output embeddings; the probe learns
its own direction, and middle layers carry more of the model's reading than the last one
(measured in docs/results.md). It costs nothing at answer time: the state comes out of the forward
pass the passage check runs anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rerank.llm import yes_log_odds, yes_no_ids

from .answering.signals import CHECK_ANSWER, CHECK_PASSAGE, CHECK_PROBE

CHECK_SYSTEM = "You check answers to reading comprehension questions against a passage."
PASSAGE_CHECK = "Passage: {passage}\n\nQuestion: {question}\n\nDoes the passage contain the answer to this " \
                "question? Answer yes or no."
ANSWER_CHECK = "Passage: {passage}\n\nQuestion: {question}\nProposed answer: {answer}\n\nDoes the passage " \
               "state that this is the answer to the question? Answer yes or no."


def check_prompt(encode_chat: Any, question: str, passage: str, answer: str | None = None) -> list[int]:
    """Token ids of the passage check, or with `answer` of the answer check (same passage and
    question, so the answer check reuses the passage check's cached prefix)."""
    user = PASSAGE_CHECK.format(passage=passage, question=question) if answer is None else \
        ANSWER_CHECK.format(passage=passage, question=question, answer=answer)
    return encode_chat([{"role": "system", "content": CHECK_SYSTEM}, {"role": "user", "content": user}])


@dataclass
class AnswerabilityProbe:
    """log-odds that the passage answers the question = weights . h + bias, where h is the hidden
    state after decoder layer `layer` (-1: final) at the last token of the passage-check prompt.
    Standardisation is folded into the weights, so scoring is one dot product."""

    layer: int
    weights: list[float]
    bias: float

    def __post_init__(self) -> None:
        import torch

        self._w = torch.as_tensor(self.weights, dtype=torch.float32)  # converted once, not per answer

    def score(self, hidden: Any) -> float:
        import torch

        w = self._w
        h = torch.as_tensor(hidden, dtype=torch.float32).reshape(-1)
        if h.numel() != w.numel():
            raise ValueError(f"probe expects a hidden size of {w.numel()}, the model gives {h.numel()} "
                             "(a probe trained for another model?)")
        return float(h @ w) + self.bias

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "bias": self.bias, "weights": [float(f"{x:.6g}") for x in self.weights]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AnswerabilityProbe:
        return cls(int(d["layer"]), [float(x) for x in d["weights"]], float(d["bias"]))


async def passage_check(generator: Any, question: str, passage: str, layer: int | None = None,
                        anchor: list[int] | None = None) -> tuple[float, Any]:
    """The passage check alone: its yes/no log-odds and, when `layer` is given, the hidden state a
    probe reads (None otherwise). Probe training (`eval/probe.py`) and answering share this.
    `anchor`: the answer prompt's `passage_anchor` (`answer.check_kv: prompt`), so the passage's
    K/V that prompt's prefill stored in the passage cache serves this check (see `_spans`)."""
    from inference.sampling_params import SamplingParams

    yes, no = yes_no_ids(generator.tokenizer)
    prompt = check_prompt(generator.encode_chat, question, passage)
    # candidates_only: the head computes the yes/no rows alone (the log-odds are the same)
    sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=sorted(set(yes) | set(no)),
                        candidates_only=True, hidden_state=layer is not None,
                        hidden_state_layer=-1 if layer is None else layer)
    out = await generator.agenerate(prompt, sp, passage_spans=_spans(generator, prompt, passage),
                                    passage_anchor=anchor)
    return yes_log_odds(out.candidate_logprobs, yes, no), out.hidden_state


async def check_signals(generator: Any, question: str, passage: str, answer: str,
                        probe: AnswerabilityProbe | None = None, anchor: list[int] | None = None
                        ) -> dict[str, float]:
    """`check_passage` and `check_answer`: log P(yes) - log P(no) of the two checks; with a probe,
    also `check_probe`, the probe's log-odds on the passage check's hidden state."""
    # One after the other: both prompts start with the same passage and question, so the second
    # is served from the prefix cache the first just filled (only its last ~30 tokens are new).
    signals = await passage_signals(generator, question, passage, probe, anchor)
    signals[CHECK_ANSWER] = await answer_check(generator, question, passage, answer, anchor)
    return signals


async def passage_signals(generator: Any, question: str, passage: str,
                          probe: AnswerabilityProbe | None = None, anchor: list[int] | None = None
                          ) -> dict[str, float]:
    """`check_passage` (and with a probe `check_probe`): what does not depend on the answer."""
    passage_odds, hidden = await passage_check(generator, question, passage, probe.layer if probe else None,
                                               anchor)
    signals = {CHECK_PASSAGE: passage_odds}
    if probe is not None:
        signals[CHECK_PROBE] = probe.score(hidden)
    return signals


async def answer_check(generator: Any, question: str, passage: str, answer: str,
                       anchor: list[int] | None = None) -> float:
    """`check_answer`: log-odds that the passage states `answer` answers the question."""
    from inference.sampling_params import SamplingParams

    yes, no = yes_no_ids(generator.tokenizer)
    prompt = check_prompt(generator.encode_chat, question, passage, answer)
    sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=sorted(set(yes) | set(no)),
                        candidates_only=True)
    out = await generator.agenerate(prompt, sp, passage_spans=_spans(generator, prompt, passage),
                                    passage_anchor=anchor)
    return yes_log_odds(out.candidate_logprobs, yes, no)


YES_NO_SYSTEM = "You answer questions about a passage."
YES_NO = "Passage: {passage}\n\nQuestion: {question}\nAnswer yes or no."


async def yes_no_check(generator: Any, question: str, passage: str) -> float:
    """log P(yes) - log P(no) of the engine answering a yes/no `question` from `passage` alone (the
    one-thing checks of "Are A and B both ...?", `answering/yes_no.py`)."""
    from inference.sampling_params import SamplingParams

    yes, no = yes_no_ids(generator.tokenizer)
    prompt = generator.encode_chat([{"role": "system", "content": YES_NO_SYSTEM},
                                    {"role": "user", "content": YES_NO.format(passage=passage, question=question)}])
    sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=sorted(set(yes) | set(no)),
                        candidates_only=True)
    out = await generator.agenerate(prompt, sp)
    return yes_log_odds(out.candidate_logprobs, yes, no)


def _spans(generator: Any, prompt: list[int], passage: str) -> list[tuple[int, int]] | None:
    """The check prompt's passage span for the engine's passage KV cache. Without an anchor its key
    is the checks' own template (every question's check of a passage reuses the first one's K/V);
    with the answer prompt's template as anchor it is that prompt's key, so the checks of an
    answer read the K/V its prefill just computed and only their question and instruction are new
    tokens (`Generator.locate_passages` keys a passage without its first token, the one a
    template's "Passage: " or "\n" before it changes)."""
    return generator.locate_passages(prompt, [passage])
