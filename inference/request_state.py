"""Per-request bookkeeping: its sequences, their detokenizers, stop checks and outputs."""

from __future__ import annotations

import time

from inference.detokenizer import IncrementalDetokenizer
from inference.outputs import CompletionOutput, RequestMetrics, RequestOutput
from inference.sequence import Sequence, Status


class RequestState:
    def __init__(self, request_id: str, prompt: str | None, seq: Sequence, tokenizer,
                 eos_token_ids: set[int], max_model_len: int) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.seqs: list[Sequence] = [seq]
        self.tokenizer = tokenizer
        self.eos = eos_token_ids
        self.max_model_len = max_model_len
        self.detoks: dict[int, IncrementalDetokenizer] = {}
        self.sent: dict[int, tuple[int, int]] = {}  # seq_id -> (chars, tokens) already streamed
        self._new_detok(seq)
        self.aborted = False

    def _new_detok(self, seq: Sequence) -> None:
        self.detoks[seq.seq_id] = IncrementalDetokenizer(
            self.tokenizer, seq.prompt_token_ids, seq.params.skip_special_tokens)
        self.sent[seq.seq_id] = (0, 0)

    def add_fork(self, seq: Sequence) -> None:
        self.seqs.append(seq)
        self._new_detok(seq)

    @property
    def finished(self) -> bool:
        return all(s.status == Status.FINISHED for s in self.seqs) and not any(
            s.pending_forks for s in self.seqs)

    def on_token(self, seq: Sequence, token: int) -> bool:
        """Record a freshly sampled token; returns True when the sequence has finished."""
        now = time.monotonic()
        if seq.first_token_time is None:
            seq.first_token_time = now
        seq.append(token)
        p = seq.params
        detok = self.detoks[seq.seq_id]
        delta = detok.add(token)
        seq.text = detok.text
        done_min = seq.num_output_tokens >= p.min_tokens
        if done_min and token in p.stop_token_ids:
            seq.finish_reason, seq.stop_reason = "stop", token
        elif done_min and not p.ignore_eos and token in self.eos:
            seq.finish_reason, seq.stop_reason = "stop", None
        elif p.stop and delta and done_min:
            start = max(0, len(seq.text) - len(delta) - max(len(s) for s in p.stop) + 1)
            for stop in p.stop:
                at = seq.text.find(stop, start)
                if at != -1:
                    cut = at + len(stop) if p.include_stop_str_in_output else at
                    seq.text = seq.text[:cut]
                    seq.finish_reason, seq.stop_reason = "stop", stop
                    break
        if seq.finish_reason is None and seq.num_output_tokens >= p.max_tokens:
            seq.finish_reason = "length"
        elif seq.finish_reason is None and len(seq.token_ids) >= self.max_model_len:
            if p.context_shift_keep is None:
                seq.finish_reason = "length"
            else:
                seq.needs_shift = True  # the engine shifts the context and recomputes
        if seq.finish_reason is not None:
            if not isinstance(seq.stop_reason, str):  # a stop string already cut the text
                detok.flush()
                seq.text = detok.text
            seq.finished_time = now
            return True
        return False

    def output(self) -> RequestOutput:
        """Snapshot for streaming/returning; advances the streamed-so-far markers."""
        comps = []
        for s in sorted(self.seqs, key=lambda x: x.index):
            chars, ntok = self.sent[s.seq_id]
            visible = len(s.text)
            if s.finish_reason is None and s.params.stop:
                # hold back a possible partial stop string
                visible = max(chars, visible - max(len(x) for x in s.params.stop) + 1)
            comps.append(CompletionOutput(
                index=s.index, text=s.text if s.finish_reason else s.text[:visible],
                token_ids=list(s.output_token_ids), finish_reason=s.finish_reason, stop_reason=s.stop_reason,
                logprobs=list(s.logprobs) if s.params.logprobs is not None else None,
                delta_text=s.text[chars:visible] if s.finish_reason is None else s.text[chars:],
                delta_token_ids=list(s.output_token_ids[ntok:])))
            self.sent[s.seq_id] = (len(s.text) if s.finish_reason else visible, s.num_output_tokens)
        head = self.seqs[0]
        return RequestOutput(self.request_id, self.prompt, head.prompt_token_ids, comps,
                             self.finished, self.metrics(), head.candidate_logprobs,
                             list(head.prompt_logprobs) if head.prompt_logprobs is not None else None,
                             head.hidden_state)

    def metrics(self) -> RequestMetrics:
        s = self.seqs[0]
        m = RequestMetrics(arrival_time=s.arrival_time, prompt_tokens=s.num_prompt_tokens,
                           cached_prompt_tokens=s.num_cached_tokens,
                           generated_tokens=sum(x.num_output_tokens for x in self.seqs),
                           preemptions=sum(x.num_preemptions for x in self.seqs))
        if s.first_scheduled_time is not None:
            m.queue_time = s.first_scheduled_time - s.arrival_time
        if s.first_token_time is not None:
            m.ttft = s.first_token_time - s.arrival_time
        if s.finished_time is not None:
            m.e2e_latency = s.finished_time - s.arrival_time
            if s.first_token_time is not None and s.num_output_tokens > 1:
                m.tpot = (s.finished_time - s.first_token_time) / (s.num_output_tokens - 1)
        return m
