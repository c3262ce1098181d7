"""The synchronous engine: owns model, KV pools, block manager and scheduler; `step()` runs
one iteration of continuous batching and returns outputs of requests that progressed."""

from __future__ import annotations

import itertools
import logging
import time
import warnings

import torch

from inference import kv_cache
from inference.block_manager import BlockManager
from inference.config import EngineConfig
from inference.cpu_alloc import keep_large_allocations, release_free_heap
from inference.errors import ContextOverflow, EmptyPrompt
from inference.kv_reuse import KVReuse, require_rope
from inference.model_loader import gguf_source, load_model, load_tokenizer, resolve_model_dir
from inference.model_runner import ModelRunner
from inference.outputs import RequestOutput
from inference.passage_store import PassageStore
from inference.postprocess import OutputProcessor
from inference.request_state import RequestState
from inference.sampling_params import SamplingParams
from inference.scheduler import Scheduler
from inference.sequence import Sequence

log = logging.getLogger(__name__)
_req_ids = itertools.count()


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        self.device = config.resolved_device()
        if self.device == "cpu":
            keep_large_allocations(config.cpu_alloc_reuse_mb)
        self.quant = config.resolved_quantization(self.device)
        if self.quant.warning:
            warnings.warn(self.quant.warning, RuntimeWarning, stacklevel=2)
        self.dtype = config.resolved_dtype(self.device, self.quant)
        gguf_blocks = self.quant.mode == "gguf"
        self.model_dir = resolve_model_dir(config.model, weights=not gguf_blocks)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.model, self.hf_config = load_model(self.model_dir, self.dtype, self.device, self.quant.mode,
                                                gguf_path=gguf_source(config.model) if gguf_blocks else None,
                                                gguf_strict=config.quantization == "gguf")
        limit = getattr(self.hf_config, "max_position_embeddings", 4096)
        self.max_model_len = min(config.max_model_len or limit, limit)
        self.eos_token_ids = self._eos_ids()
        bs = config.block_size
        int8 = config.kv_cache_dtype == "int8"
        sa = config.sparse_attention
        n_layers = len(self.model.layers)
        if sa.enabled and sa.dense_layers >= n_layers:
            raise ValueError(f"sparse_attention.dense_layers {sa.dense_layers} leaves no sparse layer: this model "
                             f"has {n_layers} layers (use fewer dense layers, or method: none)")
        per_block = kv_cache.bytes_per_block(n_layers, bs, self.model.num_kv_heads, self.model.head_dim, int8,
                                             self.dtype, bounded_layers=n_layers - sa.dense_layers if sa.enabled else 0)
        pc = config.passage_cache
        reuse = pc.enabled or config.cache_reuse > 0
        if reuse:  # refuse before allocating anything
            require_rope(self.model, "generator.engine.passage_cache" if pc.enabled else "generator.engine.cache_reuse")
        passage_blocks = int(pc.max_gb * (1 << 30) // per_block) if pc.enabled else 0
        if pc.enabled and passage_blocks < 1:
            raise ValueError(f"passage_cache.max_gb {pc.max_gb} holds no KV block (one block is "
                             f"{per_block / 2**20:.2f} MiB for this model)")
        self.passage_cache_bytes = passage_blocks * per_block
        if config.num_blocks is not None:
            num_blocks = config.num_blocks
        else:
            # the passage region is part of the K/V budget, not on top of it: turning the cache on
            # takes no memory a cache-off engine would not have taken
            budget = config.kv_cache_memory
            budget_bytes = budget * kv_cache.free_memory_bytes(self.device) if budget <= 1 else budget * (1 << 30)
            if self.passage_cache_bytes >= budget_bytes:
                raise ValueError(f"passage_cache.max_gb {pc.max_gb} leaves nothing of kv_cache_memory "
                                 f"({budget_bytes / 2**30:.2f} GiB) for the KV pool: lower max_gb or raise "
                                 "kv_cache_memory")
            cap = -(-config.max_num_seqs * self.max_model_len // bs)  # more could never be used
            num_blocks = max(1, min(int((budget_bytes - self.passage_cache_bytes) // per_block), cap))
        self.kv_bytes = num_blocks * per_block
        # with an explicit num_blocks the region comes on top of the pool, and it fills as passages are
        # cached (CPU pages on first write): refuse now what would end in an out-of-memory later
        if pc.enabled and config.num_blocks is not None and \
                self.passage_cache_bytes > (free := kv_cache.free_memory_bytes(self.device)) - self.kv_bytes:
            raise ValueError(f"passage_cache.max_gb {pc.max_gb} does not fit in memory: {free / 2**30:.1f} GiB is "
                             f"free and the KV pool takes {self.kv_bytes / 2**30:.2f} GiB of it; lower max_gb")
        self.bm = BlockManager(num_blocks, bs, config.enable_prefix_caching, track_content=config.cache_reuse > 0,
                               track_fresh=sa.enabled)
        self.runner = ModelRunner(self.model, num_blocks, bs, self.dtype, self.device, int8,
                                  use_cuda_graphs=not config.enforce_eager, max_num_seqs=config.max_num_seqs,
                                  max_model_len=self.max_model_len, extra_blocks=passage_blocks,
                                  quest_dense_layers=sa.dense_layers if sa.enabled else None,
                                  quest_blocks=sa.token_budget // bs)
        self.kv_reuse: KVReuse | None = None
        if reuse:
            store = PassageStore(self.runner.caches, self.runner.extra_block_base, passage_blocks, bs,
                                 self._kv_signature(), pc.disk_path) if pc.enabled else None
            self.kv_reuse = KVReuse(config, self.model, self.runner, self.bm, store)
        self.scheduler = Scheduler(self.bm, config.max_num_seqs, config.max_num_batched_tokens,
                                   reuse=self.kv_reuse.wants if self.kv_reuse is not None else None)
        self.requests: dict[str, RequestState] = {}
        self.output = OutputProcessor(self.scheduler, self.bm, self.requests, self.eos_token_ids, self._seed)
        self.total_prompt_tokens = 0
        self.peak_blocks_used = 0
        self.kv_efficiency_at_peak = 1.0
        log.info("KV cache: %d blocks x %d tokens = %d tokens (%.1f MiB)", num_blocks, bs,
                 num_blocks * bs, self.kv_bytes / 2**20)
        if self.device == "cpu":
            release_free_heap()

    def _kv_signature(self) -> dict:
        """What a passage's K/V depends on besides its tokens (keys the passage cache on disk)."""
        c = self.runner.caches[0]
        return {"model": self.model_dir.name, "quantization": self.quant.mode, "dtype": str(self.dtype),
                "layers": len(self.runner.caches), "kv_shape": list(c.k.shape[2:]), "kv_int8": c.int8, "format": 1}

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (getattr(self.hf_config, "eos_token_id", None), self.tokenizer.eos_token_id):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, (list, tuple)):
                ids.update(int(x) for x in src)
        return ids

    @property
    def total_generated_tokens(self) -> int:
        return self.output.total_generated_tokens

    @property
    def num_kv_tokens(self) -> int:
        return self.bm.num_blocks * self.bm.block_size

    # ---- requests ---------------------------------------------------------------------
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, priority: int = 0,
                    arrival_time: float | None = None,
                    passage_spans: list[tuple[int, int]] | None = None,
                    passage_anchor: list[int] | None = None) -> str:
        return self.submit(self.prepare_request(prompt, params, request_id, priority, arrival_time, passage_spans,
                                                passage_anchor))

    def prepare_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                        request_id: str | None = None, priority: int = 0,
                        arrival_time: float | None = None,
                        passage_spans: list[tuple[int, int]] | None = None,
                        passage_anchor: list[int] | None = None) -> RequestState:
        """Tokenise and validate without touching engine state (safe from another thread), so
        bad requests fail in the caller and the stepping thread only ever sees good ones.

        `passage_spans`: [start, end) token ranges of the prompt that are retrieved passages
        (sorted, disjoint; see `inference.kv_reuse.join_segments`); with `passage_cache.enabled`
        their K/V is cached and reused at any position. Ignored otherwise. `passage_anchor`: the
        template tokens the passages are keyed under and stored after, when not this prompt's own
        tokens before its first passage: another prompt's (`inference.kv_reuse`, "anchors")."""
        params = params or SamplingParams()
        if params.json_schema is not None:
            from inference.structured import JsonSchemaLogitsProcessor

            proc = JsonSchemaLogitsProcessor(params.json_schema, self.tokenizer, max_tokens=params.max_tokens)
            params = params.model_copy(update={"json_schema": None,
                                               "logits_processors": [*params.logits_processors, proc]})
        if params.grounded_passages is not None:
            from inference.structured import GroundedSpanProcessor

            proc = GroundedSpanProcessor(params.grounded_passages, self.tokenizer, params.grounded_refusal,
                                         eos_token_id=self.eos_token_ids, max_tokens=params.max_tokens)
            params = params.model_copy(update={"grounded_passages": None,
                                               "logits_processors": [*params.logits_processors, proc]})
        layers = len(self.model.layers)
        if params.hidden_state and params.hidden_state_layer not in (-1, *range(1, layers + 1)):
            raise ValueError(f"hidden_state_layer {params.hidden_state_layer} is not -1 (final) or a decoder "
                             f"layer 1..{layers} of this model")
        if isinstance(prompt, str):
            text, ids = prompt, self.tokenizer.encode(prompt)
        else:
            text, ids = None, [int(t) for t in prompt]
        if not ids:
            raise EmptyPrompt("prompt is empty")
        if len(ids) >= self.max_model_len:
            raise ContextOverflow(f"prompt has {len(ids)} tokens but max_model_len is {self.max_model_len} "
                             "(prompt plus at least one generated token must fit)")
        max_total = min(len(ids) + params.max_tokens, self.max_model_len)
        need = -(-max_total // self.bm.block_size)
        if need > self.bm.num_blocks:
            raise ContextOverflow(f"request needs {need} KV blocks ({max_total} tokens) but the pool only has "
                             f"{self.bm.num_blocks} blocks ({self.num_kv_tokens} tokens); it can never run")
        request_id = request_id or f"req-{next(_req_ids)}"
        seq = Sequence(request_id, ids, params, priority=priority,
                       arrival_time=arrival_time if arrival_time is not None else time.monotonic())
        if passage_spans:
            seq.passage_spans = _check_spans(passage_spans, len(ids))
            if passage_anchor is not None:
                seq.passage_anchor = [int(t) for t in passage_anchor]
        if self.kv_reuse is not None and params.prompt_logprobs is None:  # prompt log-probs must be exact
            seq.reuse_salt = self.kv_reuse.salt(seq.passage_spans, seq.passage_anchor)
        self._seed(seq)
        return RequestState(request_id, text, seq, self.tokenizer, self.eos_token_ids, self.max_model_len)

    def submit(self, state: RequestState) -> str:
        if state.request_id in self.requests:
            raise ValueError(f"duplicate request_id {state.request_id!r}")
        self.requests[state.request_id] = state
        seq = state.seqs[0]
        self.scheduler.add(seq)
        self.total_prompt_tokens += seq.num_prompt_tokens
        return state.request_id

    def _seed(self, seq: Sequence) -> None:
        if seq.params.greedy:
            return
        gen = torch.Generator(device="cpu")
        base = seq.params.seed if seq.params.seed is not None else self.config.seed * 1_000_003 + seq.seq_id
        gen.manual_seed(base + 7919 * seq.index)
        seq.generator = gen

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free every block it holds. Returns False if unknown."""
        state = self.requests.pop(request_id, None)
        if state is None:
            return False
        for s in state.seqs:
            self.scheduler.finish(s)
            if s.finish_reason is None:
                s.finish_reason = "abort"
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    # ---- stepping ---------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        """schedule -> run -> postprocess (nano-vllm's shape). The scheduler places sequences and
        commits computed tokens; the runner returns everything it computed; the output processor
        forks, samples, stops and shifts."""
        batch = self.scheduler.schedule()
        if batch.empty:
            return []
        self.runner.zero_blocks(self.bm.take_zeroes())
        self.runner.reset_bounds(self.bm.take_fresh())  # before the copy-on-write copies their bounds
        self.runner.copy_blocks(self.bm.take_copies())
        for seq in batch.blends:  # prompt[:-1] with reused K/V; the last token runs in the batch
            self.kv_reuse.prefill(seq)
        out = self.runner.run(batch)
        self.scheduler.commit(batch)
        if self.kv_reuse is not None:  # plain prefills whose passages are now computed: store them
            self.kv_reuse.store_computed(batch.seqs)
        self._track_kv()
        return self.output.postprocess(batch, out)

    def _track_kv(self) -> None:
        used = self.bm.num_used
        if used >= self.peak_blocks_used:
            self.peak_blocks_used = used
            self.kv_efficiency_at_peak = self.bm.kv_efficiency()

    def stats(self) -> dict:
        bm = self.bm
        return {
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "kv_blocks_total": bm.num_blocks,
            "kv_blocks_used": bm.num_used,
            "kv_blocks_cached": bm.num_cached,
            "kv_blocks_cached_free": bm.num_cached_free,
            "kv_blocks_free": bm.num_free,
            "kv_tokens_capacity": self.num_kv_tokens,
            "kv_cache_bytes": self.kv_bytes,
            "kv_efficiency": bm.kv_efficiency(),
            "kv_efficiency_at_peak": self.kv_efficiency_at_peak,
            "peak_kv_blocks_used": self.peak_blocks_used,
            "prefix_cache_queries": bm.query_tokens,
            "prefix_cache_hits": bm.hit_tokens,
            "prefix_cache_hit_rate": bm.hit_tokens / bm.query_tokens if bm.query_tokens else 0.0,
            "prefix_cache_evictions": bm.evictions,
            "preemptions": self.scheduler.num_preemptions,
            "prompt_tokens": self.total_prompt_tokens,
            "generation_tokens": self.total_generated_tokens,
            "passage_cache_hits": 0, "passage_cache_tokens_reused": 0, "recomputed_tokens": 0,
            "kv_shift_reused_tokens": 0, "passage_prefix_hits": 0, "passage_prefix_tokens": 0,
            "reuse_prefills": 0,
            "passage_cache_bytes": self.passage_cache_bytes,
            **(self.kv_reuse.stats() if self.kv_reuse is not None else {}),
            # QUEST: KV blocks (per decode token, sparse layer and KV head) not read / that dense would read
            "sparse_blocks_skipped": self.runner.sparse_blocks_skipped,
            "sparse_blocks_considered": self.runner.sparse_blocks_considered,
        }

    def clear_passage_cache(self) -> int:
        """Forget every passage held in memory (files under disk_path stay); returns how many."""
        store = self.kv_reuse.store if self.kv_reuse is not None else None
        return store.clear() if store is not None else 0


def _check_spans(spans: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    out = [(int(s), int(e)) for s, e in spans]
    at = 0
    for s, e in out:
        if not at <= s < e <= n:
            raise ValueError(f"passage_spans must be sorted, disjoint [start, end) ranges inside the "
                             f"{n}-token prompt; got {spans}")
        at = e
    return out
