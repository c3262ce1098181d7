"""`rag index --warm-kv`: precompute the engine's passage KV cache for a collection's chunks.

Why: a passage is otherwise cached on its first retrieval, so the first question to retrieve it
pays its prefill in full (more, in fact: it is computed on its own, then blended). Warming computes
every chunk once, ahead of time, exactly as an answer prompt would cache it: the same template
before it (system prompt and the user template up to the first passage), the same rendering
(`prompt.cached_text`), located by the generator's own `locate_passages`, so the key matches what
`rag ask`, the server and `rag eval qa` look up later.

The cache must outlive this process, so warming needs `passage_cache.disk_path`: without it the
K/V would sit in the memory of a `rag index` that is about to exit. With it the warm-up resumes:
a chunk whose file is already there is skipped without loading it (and a file from another model
or template simply has another name, see `inference/passage_store.py`).

Each chunk is one request of the answer template cut one token after the passage (the engine
needs a token after the last span), `max_tokens=1`, keyed under the prompt's `passage_anchor` as
an answer prompt is. In short mode with `answer.check_kv: exact` also the
answerability check's template (`rag/answerability.py`), whose entries the checks key under their
own template; with `prompt` the checks name the answer prompt's anchor and read its entry. With
`shared` one request per chunk: the check's template, keyed under the answer prompt's anchor, as the
checks that run before the answer store it (`rag/answering/short.py: checks_first`). In long mode
held to the short-answer gate (a calibrated generator, `answer.long_passage_kv: gate`) a long answer
reads the entries of the gate's short prompts, so those are warmed as short mode warms them, after
the long template (which an explanatory question's long answer, not span-gated, still reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import prompt as prompt_mod
from .answer import Passage
from .config import RagConfig

WARM_QUESTION = "?"  # after the passage, so it is cut off: any question gives the same key
BATCH = 8  # requests submitted together (the engine batches their prefills)


class WarmKVError(ValueError):
    """Warming asked of a configuration that cannot keep what it computes."""


@dataclass
class WarmReport:
    chunks: int = 0
    templates: list[str] = field(default_factory=list)
    warmed: int = 0  # passage files written now
    on_disk: int = 0  # already there (a resumed or repeated warm-up)
    skipped: int = 0  # not cacheable: too short, not found in its prompt, or did not fit the cache
    duplicates: int = 0  # chunks whose text another chunk already has (same key)

    def to_dict(self) -> dict[str, Any]:
        return {"chunks": self.chunks, "templates": self.templates, "warmed": self.warmed,
                "on_disk": self.on_disk, "skipped": self.skipped, "duplicates": self.duplicates}

    def summary(self) -> str:
        return (f"passage KV cache: {self.chunks} chunks x {len(self.templates)} template(s) "
                f"({', '.join(self.templates)}): {self.warmed} warmed, {self.on_disk} already on disk, "
                f"{self.skipped} not cacheable, {self.duplicates} duplicate texts")


def check_warmable(cfg: RagConfig) -> None:
    """Refuse before loading anything when warming could not be kept or used."""
    pc = cfg.generator.engine.passage_cache
    if cfg.generator.backend != "engine":
        raise WarmKVError(f"--warm-kv needs generator.backend: engine (the passage KV cache is the in-process "
                          f"engine's), not {cfg.generator.backend!r}")
    if not pc.enabled:
        raise WarmKVError("--warm-kv needs generator.engine.passage_cache.enabled: true")
    if not pc.disk_path:
        raise WarmKVError("--warm-kv needs generator.engine.passage_cache.disk_path: without it the warmed K/V "
                          "lives only in this process's memory and is gone when `rag index` exits. Set a "
                          "directory (`rag ask` and `rag serve` read it back), or leave warming off and let a "
                          "running server cache passages on first use")


def warm_chunks(cfg: RagConfig, store: Any, collection: str) -> Iterator[Any]:
    """The chunks a prompt can show: the indexed ones, or with small-to-big their parents."""
    rc = cfg.retrieval
    s2b = rc.small_to_big
    if s2b.enabled and s2b.expand_to_parent:
        yield from (c for c in store.iter_chunks(collection) if c.metadata.get("role") == "parent")
        return
    gran = rc.index_granularity()
    for c in store.iter_chunks(collection, gran):
        if gran is None and c.metadata.get("role") == "parent":
            continue
        yield c


Request = tuple[list[int], tuple[int, int], list[int] | None]  # prompt, the passage's span, its key's anchor


def warm_requests(cfg: RagConfig, generator: Any, ch: Any, check_kv: str, gated: bool = False
                  ) -> list[Request | None]:
    """Per template (`templates`), the request that caches `ch` (prompt cut one token after the
    passage, its span, the anchor it is keyed under: None for the prompt's own template), or None
    where the passage cannot be cached. `check_kv`: the resolved `answer.check_kv` (`resolved_check_kv`);
    `gated`: long answers run the short-answer gate first and read its entries (`gate_reads`)."""
    p = Passage.of_chunk(1, ch)
    prompts: list[tuple[list[int], list[str], list[int] | None]] = []
    for mode in _answer_modes(cfg, gated):
        try:
            built = prompt_mod.build(cfg.prompt, generator.tokenizer, WARM_QUESTION, [p], generator.max_model_len,
                                     mode)
            prompts.append((built.token_ids, built.cached_texts(cfg.prompt), built.passage_anchor))
        except prompt_mod.PromptTooLong:
            prompts.append(([], [], None))
    if _warms_checks(cfg, check_kv, gated) or _shares_checks(cfg, check_kv, gated):
        from .answerability import check_prompt

        body = prompt_mod.passage_body(cfg.prompt, p)
        check = check_prompt(generator.encode_chat, WARM_QUESTION, body)
        if _shares_checks(cfg, check_kv, gated):  # the one entry both read: the check's K/V under the answer's key
            short = prompts[-1]
            prompts[-1] = (check, [body], short[2]) if short[0] else short
        else:
            prompts.append((check, [body], None))
    out: list[Request | None] = []
    for ids, texts, anchor in prompts:
        spans = generator.locate_passages(ids, texts) if ids else None
        if not spans or spans[0][1] >= len(ids):
            out.append(None)
            continue
        s, e = spans[0]
        out.append((ids[:e + 1], (s, e), anchor))
    return out


def resolved_check_kv(cfg: RagConfig) -> str:
    """`answer.check_kv` as the generator's policy resolves it (`auto`: its calibration entry's)."""
    from .answering.policy import Policies

    return Policies(cfg).for_question("").check_kv


def gate_reads(cfg: RagConfig) -> bool:
    """Whether long answers run the short-answer gate and their prompt reads the passage K/V its
    prompts computed (`answer.long_passage_kv: gate`; `rag/answering/stream.py: gate_kv_anchor`):
    then the gate's templates are what a long answer reads, so they are warmed too. Decided for
    English questions, as `resolved_check_kv` is (the calibration entry's policy)."""
    from .answering.gate import gated_by, reads_gate_kv
    from .answering.policy import Policies

    if cfg.answer.mode != "long":
        return False
    policy = Policies(cfg).for_question("")
    return gated_by(cfg, policy) and reads_gate_kv(cfg, policy.check_kv)


def _answer_modes(cfg: RagConfig, gated: bool) -> list[str]:
    """The answer templates warmed: the configured mode's, and with a reading gate the short one
    after it (a long answer to an explanatory question, which has no span gate, reads its own)."""
    return ["long", "short"] if gated else [cfg.answer.mode]


def _short_side(cfg: RagConfig, gated: bool) -> bool:
    return cfg.answer.mode == "short" or gated


def _warms_checks(cfg: RagConfig, check_kv: str, gated: bool = False) -> bool:
    return _short_side(cfg, gated) and check_kv == "exact"


def _shares_checks(cfg: RagConfig, check_kv: str, gated: bool = False) -> bool:
    return _short_side(cfg, gated) and check_kv == "shared"


def templates(cfg: RagConfig, check_kv: str, gated: bool = False) -> list[str]:
    names = [f"answer ({mode})" + (" of the gate" if gated and mode == "short" else "")
             for mode in _answer_modes(cfg, gated)]
    if _shares_checks(cfg, check_kv, gated):
        names[-1] = "answerability check, keyed for the answer (short)"
    elif _warms_checks(cfg, check_kv, gated):
        names.append("answerability check")
    return names


def warm(cfg: RagConfig, store: Any, generator: Any, collection: str,
         on_progress: Callable[[int, int], None] | None = None) -> WarmReport:
    """Cache every chunk of `collection` under each template; resumable through the files on disk."""
    from inference.sampling_params import SamplingParams

    check_warmable(cfg)
    chunks = list(warm_chunks(cfg, store, collection))
    check_kv = resolved_check_kv(cfg)
    gated = gate_reads(cfg)
    report = WarmReport(chunks=len(chunks), templates=templates(cfg, check_kv, gated))
    sp = SamplingParams(max_tokens=1, temperature=0.0)
    seen: set[Path] = set()
    pending: list[tuple[list[int], tuple[int, int], list[int] | None, Path]] = []

    def flush() -> None:
        if not pending:
            return
        generator.generate([ids for ids, *_ in pending], sp, passage_spans=[[span] for _, span, _, _ in pending],
                           passage_anchors=[anchor for _, _, anchor, _ in pending])
        for *_, path in pending:
            if path.exists():
                report.warmed += 1
            else:
                report.skipped += 1  # the engine did not store it (too short, or larger than max_gb)
        pending.clear()

    for i, ch in enumerate(chunks):
        for req in warm_requests(cfg, generator, ch, check_kv, gated):
            if req is None:
                report.skipped += 1
                continue
            ids, span, anchor = req
            path = generator.passage_cache_file(ids, span, anchor)
            if path is None:  # not an engine with a disk-backed passage cache after all
                raise WarmKVError("the generator has no disk-backed passage cache (passage_cache.disk_path)")
            if path in seen:  # another chunk with the same text: one entry serves both
                report.duplicates += 1
                continue
            seen.add(path)
            if path.exists():  # warmed by an earlier run (resuming): not loaded, not recomputed
                report.on_disk += 1
                continue
            pending.append((ids, span, anchor, path))
        if len(pending) >= BATCH:
            flush()
        if on_progress is not None:
            on_progress(i + 1, len(chunks))
    flush()
    if on_progress is not None and chunks:
        on_progress(len(chunks), len(chunks))
    return report
