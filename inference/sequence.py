"""A sequence: token ids, how many of them have K/V in the pool, and its block table.

Every sequence is handled the same way each step: it computes its not-yet-computed tokens
(the whole prompt, a prompt chunk, or the one token sampled last step). That single rule covers
prefill, chunked prefill, decode and recompute after preemption.
"""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field

from inference.sampling_params import SamplingParams

_ids = itertools.count()


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int = 0
    arrival_time: float = field(default_factory=time.monotonic)
    seq_id: int = field(default_factory=lambda: next(_ids))
    index: int = 0  # which of the request's n samples

    def __post_init__(self) -> None:
        self.token_ids: list[int] = list(self.prompt_token_ids)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.block_table: list[int] = []
        self.num_hashed_blocks = 0  # leading blocks already registered in the prefix cache
        self.block_hashes: list[bytes] = []  # chained hash of each full block
        self.status = Status.WAITING
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache (first admission)
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finished_time: float | None = None
        self.num_preemptions = 0
        self.logprobs: list[dict[int, float]] = []
        self.candidate_logprobs: dict[int, float] | None = None
        self.hidden_state = None  # torch.Tensor [hidden] when params.hidden_state
        # position -> {token: logprob}; position 0 has nothing to be predicted from
        self.prompt_logprobs: list[dict[int, float] | None] | None = \
            [None] if self.params.prompt_logprobs is not None and self.index == 0 else None
        self.generator = None  # torch.Generator when params.seed is set
        self.pending_forks = self.params.n - 1 if self.index == 0 else 0
        # cheap "probably shares a cached prefix with" key: the first 16 prompt tokens
        head = self.prompt_token_ids[:16]
        self.first_block_key = tuple(head) if len(self.prompt_token_ids) > 16 else None
        self.shifted_out: list[int] = []  # output tokens dropped from the context by a shift
        self.num_shifts = 0
        self.needs_shift = False
        # prompt token ranges [start, end) that are retrieved passages (the passage KV cache)
        self.passage_spans: list[tuple[int, int]] = []
        # the template tokens its passages are keyed under and stored after, when another prompt's
        # (None: this prompt's own tokens before its first passage; see `inference.kv_reuse`)
        self.passage_anchor: list[int] | None = None
        self.passages_counted = False  # KVReuse: prefix-cache-served passages counted once
        # KVReuse: passages a plain (batched, chunked) prefill computes, to store once it has: a
        # prompt none of whose passages is cached needs no reuse pass of its own
        self.passages_to_store: list[tuple[int, int]] = []
        # K/V from this position on is approximate (reused at a shifted position): such blocks are
        # registered only on the salted branch of the prefix chain, never where an exact prompt
        # could hit them. None: exact
        self.hash_limit: int | None = None
        # KVReuse.salt of this request (reuse settings + passage spans): the salted branch it may
        # match and register on; None: exact prefix-cache hits only
        self.reuse_salt: bytes | None = None
        self.text = ""  # detokenised output so far
        self.emitted_text_len = 0

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.shifted_out + self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.shifted_out) + len(self.token_ids) - self.num_prompt_tokens

    def shift_context(self, keep: int) -> int:
        """Drop half of the tokens after the first `keep` (context shift); returns how many.

        Dropped output tokens stay in `output_token_ids` (they were generated and returned) but
        leave the context. The caller frees the blocks first; everything is recomputed, the kept
        prefix from the prefix cache.
        """
        n = len(self.token_ids)
        keep = max(0, min(self.num_prompt_tokens if keep < 0 else keep, n - 2))
        discard = max(1, (n - keep) // 2)
        end = keep + discard
        self.shifted_out += self.token_ids[max(keep, self.num_prompt_tokens):end]
        self.num_prompt_tokens -= max(0, min(self.num_prompt_tokens, end) - keep)
        self.token_ids = self.token_ids[:keep] + self.token_ids[end:]
        self.num_computed_tokens = 0
        self.block_hashes = []
        self.num_hashed_blocks = 0
        self.passage_spans = []  # positions moved: the spans no longer describe the prompt
        self.passages_to_store = []
        self.reuse_salt = None  # recomputed in full: exact blocks only
        self.num_shifts += 1
        return discard

    @property
    def num_uncomputed(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status == Status.FINISHED

    @property
    def sort_key(self) -> tuple[int, float, int]:
        """Lower runs first: priority value, then arrival (FCFS)."""
        return (self.priority, self.arrival_time, self.seq_id)

    def append(self, token_id: int) -> None:
        self.token_ids.append(token_id)
