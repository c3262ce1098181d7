"""The pipeline config: one pydantic model composed of each stage's own config.

The defaults below ARE the embedded defaults; `configs/default.yaml` is their dump (a test keeps
the two equal). Each stage's package owns its config model; this file only composes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from indexing.config import IndexingConfig
from rerank.config import CompressorConfig, RerankerConfig
from retrieval.config import RetrievalConfig

from .config_loader import apply_overrides, deep_merge, read_yaml, validate
from .generation.config import GeneratorConfig
from .prompt import PromptConfig
from .query.config import QueryConfig
from .storage import StorageConfig


class AnswerConfig(BaseModel):
    """How the answer step uses passages and checks its own output."""

    model_config = ConfigDict(extra="forbid")
    context_k: int = Field(5, ge=1, le=50, description="passages given to the model")
    follow_up_k: int | None = Field(3, ge=1, le=50, description=(
        "passages given to a chat follow-up (its prompt already holds the earlier turns' passages, and "
        "every new one is prefilled: fewer keep the second turn fast); null: context_k"))
    short_k: int | None = Field(None, ge=1, le=50, description=(
        "grounded short mode: the top passages the answer reads (one span candidate and one check each; "
        "fewer checked passages, fewer distractors and a shorter prompt); null: the generator's calibration "
        "entry's `short_k` where measured for the question's language (3 for English with the shipped Qwen "
        "entries, measured on their calibration questions, docs/results.md), else all context_k"))
    attribute: bool = Field(True, description="add inferred citations when the model writes none")
    attribution_overlap: float = Field(0.3, ge=0.0, le=1.0)
    refuse_below: float | None = Field(None, description="refuse without generating if the best score is lower")
    refusal_score: str = Field("dense", description="which score refuse_below reads: dense, bm25, rerank or score")
    max_question_chars: int = Field(2000, ge=1)
    mode: Literal["short", "long"] = Field("long", description=(
        "short: the minimal answer span plus its citation; long: a cited explanation"))
    grounded: bool = Field(True, description=(
        "short mode: decode only verbatim spans of the passages (or the refusal); citations by construction"))
    short_max_tokens: int = Field(24, ge=1, description="token budget of a short answer")
    force_markers: bool = Field(True, description=(
        "long mode: before an uncited sentence ends, the model must write a [n] marker (it picks n)"))
    compare: bool = Field(True, description=(
        "English questions comparing two named options by a date or a number ('Who was born first, A or "
        "B?'): answer each option's value as a grounded short answer and compare them in code; when they "
        "do not decide, the question is answered as asked (rag/answering/compare.py)"))
    two_hop: bool | None = Field(None, description=(
        "English questions the answer refuses: the engine splits the question into a first question and a "
        "second naming its answer (bridge questions: 'the fight song of the university in Lawrence, Kansas'), "
        "each a grounded short answer; the refusal stands when they do not answer. null: where the model's "
        "calibration entry says it was measured to help (the shipped qwen2.5-1.5b) (rag/answering/two_hop.py)"))
    yes_no: bool | None = Field(None, description=(
        "English questions about two named things ('Are A and B both magazines?', 'Were A and B of the same "
        "nationality?', 'Which band is from England, A or B?', 'What occupation did A and B share?'): each one "
        "checked against its own passage, or each one's value answered and compared in code; when they do "
        "not decide, the question is answered as asked. null: the questions decided by yes/no checks ('both', "
        "'which') where the model's calibration entry holds the checks' thresholds (the shipped "
        "qwen2.5-1.5b), the others ('same', 'shared': two short answers compared in code) with every model; "
        "true: checks everywhere, with the qwen2.5-1.5b's thresholds where the entry has none; false: off "
        "(rag/answering/yes_no.py)"))
    long_grounding: Literal["strict", "check", "off"] = Field("strict", description=(
        "long mode (rag/answering/long.py): check every sentence against the passages it cites (its numbers "
        "and names must occur there, enough of its words, and the engine's answer check where calibrated) and "
        "drop the unsupported ones; strict also drops or re-cites uncited or wrongly cited sentences; nothing "
        "left: the refusal. off: the answer as generated"))
    sentence_gate: Literal["auto", "off", "record"] = Field("auto", description=(
        "long mode, English questions asking for an explanation (how do I, why, what happens): auto judges "
        "each grounded sentence with the calibration entry's sentence_refusal_model instead of holding the "
        "answer to a short answer's span (rag/answering/gate.py: SentenceGate); off keeps the span gate for "
        "them; record judges and records every sentence's signals but drops none (the run whose answers "
        "`rag eval calibrate --sentence-answers` chooses the model's cut on)"))
    long_passage_kv: Literal["gate", "own"] = Field("gate", description=(
        "long mode held to the short-answer gate: what the long prompt's passages read. gate (default): the "
        "K/V the gate's prompts computed for them (under the short prompt's anchor), copied to their "
        "positions, so the long prompt computes only its template and question (the 1.5B's probe question "
        "on a Zen 4 core: 13.6 -> ~10 s, docs/performance.md); own: the long prompt computes its passages "
        "under its own template"))
    long_passages: Literal["gate", "all"] = Field("gate", description=(
        "long mode held to the short-answer gate: which passages the long prompt holds. gate (default): the "
        "ones the gate read (its top short_k, where its span and citation come from; the sentences kept must "
        "state that span), so the long prompt computes no passage the gate did not (the 1.5B's long answer "
        "on a Zen 5 core: ~1.8 s less, docs/results.md, session 45); all: every context_k passage. An "
        "explanatory question's sentence gate and an ungated answer read all"))
    long_check_min: float | None = Field(None, description=(
        "long grounding: a sentence whose answer-check log-odds (sentence as the proposed answer, its cited "
        "passage) is below this is unsupported; null: the calibration entry's check_answer mean minus one std "
        "for the generator and question language, and no engine check where there is no entry (SmolLM2)"))
    refuse_margin: float | None = Field(None, description=(
        "grounded short mode: refuse when log P(refusal) - log P(best span) at the first token exceeds "
        "this; null: the value `rag eval calibrate` stored for the model, else the model's own choice"))
    refuse_min_logprob: float | None = Field(None, description=(
        "grounded short mode: refuse when the least likely token of the span has a lower log-probability; "
        "null: the calibrated value, else never"))
    verify: bool = Field(True, description=(
        "grounded short mode: ask the model whether the passage holding the span answers the question "
        "(two one-token prompts) when a calibrated refusal model for the generator will weigh them (or while "
        "`rag eval calibrate` runs)"))
    check_kv: Literal["auto", "exact", "prompt", "shared"] = Field("auto", description=(
        "the answerability checks' passage K/V (with generator.engine.passage_cache on; off, every check "
        "is exact and computes its passage). auto (default): what the generator's calibration entry names "
        "(shared for the shipped 1.5B, exact for the 0.5B and where none is named). shared: one decode per "
        "passage runs its checks first, each computing its passage's K/V in its own prompt, and the "
        "answer prompt reads it (checks exact, the answer prompt's prefill ~5x shorter; SQuAD dev 100 "
        "with the 1.5B: F1 0.605 -> 0.610, p50 -30%; with the 0.5B F1 0.398 -> 0.355, docs/results.md); "
        "checks that run after the answer (one decode, long mode) are exact. exact: the checks compute "
        "their passage under their own template and the answer prompt its own. prompt: the checks read "
        "what the answer prompt computed (checks ~2x faster, less exact: F1 -0.02)"))
    per_passage_prompt: Literal["own", "all"] = Field("own", description=(
        "grounded short mode with per_passage: what each passage's span decode reads. own (default): a "
        "prompt holding that passage alone (the others no longer pull its span to what they say; SQuAD v2 "
        "dev with the 1.5B: F1 0.623 -> 0.647, citation precision 0.91 -> 0.94, p50 -8%, docs/results.md). "
        "all: one prompt with every passage, the same for each decode"))
    per_passage: bool | None = Field(None, description=(
        "grounded short mode: decode one span per passage, check each and give the one the calibrated span "
        "selector scores best (citing the passage it came from); null: when the calibration entry of the "
        "generator has a selector"))
    latency_budget_s: float = Field(6.0, gt=0, description=(
        "seconds a typical answer may take: `generator.engine.model: auto` picks the largest installed "
        "catalogue model whose measured speed on this CPU fits (rag models list shows the choice)"))
    calibration: str = Field("calibration.json", description=(
        "file under storage.path where `rag eval calibrate` stores refusal thresholds per model"))


class ServerConfig(BaseModel):
    """`rag serve` settings: limits, auth, CORS, backpressure. Kept here with the other models the
    config composes, so the core config never imports the server package (which imports it)."""

    model_config = ConfigDict(extra="forbid")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_keys: list[str] = Field(default_factory=list, description="Bearer keys; empty = no auth")
    api_keys_env: str = Field("RAG_API_KEYS", description="comma-separated keys read from this env var too")
    cors_origins: list[str] = Field(default_factory=list)
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    max_tokens_limit: int = Field(1024, ge=1, description="largest max_tokens a request may ask for")
    max_concurrent: int = Field(32, ge=1, description="generation requests admitted at once")
    max_waiting: int = Field(64, ge=0, description="requests queued behind them; beyond this: 429")
    retry_after_s: int = Field(2, ge=1)
    shutdown_grace_s: float = Field(10.0, ge=0)
    model_name: str = Field("ragstack", description="id reported by /v1/models")
    chat_memory_turns: int = Field(1024, ge=0, description=(
        "chat turns whose passages the server remembers, so the next turn's prompt extends the cached one"))


class RagConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    storage: StorageConfig = Field(default_factory=StorageConfig)
    indexing: IndexingConfig = Field(default_factory=IndexingConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    query: QueryConfig = Field(default_factory=QueryConfig)
    rerank: RerankerConfig = Field(default_factory=RerankerConfig)
    compress: CompressorConfig = Field(default_factory=CompressorConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    answer: AnswerConfig = Field(default_factory=AnswerConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)

    @property
    def storage_path(self) -> Path:
        return Path(self.storage.path).expanduser()

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RagConfig:
    """Read a pipeline YAML (or the embedded defaults), apply `--set` overrides and validate."""
    data = read_yaml(path) if path else {}
    if overrides:
        # Overrides may address keys the file leaves to defaults (e.g. chunkers.0.chunk_size).
        data = apply_overrides(deep_merge(RagConfig().to_dict(), data), overrides)
    origin = str(path) if path else "embedded defaults"
    if overrides:
        origin += " + --set " + " ".join(overrides)
    return validate(RagConfig, data, origin)  # type: ignore[return-value]
