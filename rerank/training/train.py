"""Train a cross-encoder reranker (and fine-tune an embedder) on BEIR data with mined negatives.

No cross-encoder weights can be downloaded here, so the offline reranker is trained from the
packaged MiniLM with sentence-transformers' trainer: binary cross-entropy on (query, passage)
pairs, positives from qrels and hard negatives from our hybrid retriever. Seeds are fixed and the
examples are mined deterministically, so `resume=True` continues the same run from its last
checkpoint in `<out>/checkpoints`.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..models import minilm_dir
from .train_data import as_pairs, as_triplets, mine_examples

log = logging.getLogger(__name__)


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    datasets: list[str]
    out: str
    base: str = Field(default_factory=lambda: str(minilm_dir()))
    split: str = "train"
    negatives: int = Field(3, ge=1, description="mined negatives per positive")
    mine: str = Field("hybrid", pattern="^(bm25|hybrid)$")
    pool: int = Field(30, ge=1, description="negatives are sampled from this many top non-relevant hits")
    max_queries: int | None = Field(None, description="per dataset (quick runs)")
    holdout: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "fraction of each split's queries never trained on, for tuning on unseen queries "
        "(`rag rerank eval --split train --holdout F` scores exactly those)"))
    epochs: float = 1.0
    max_steps: int = Field(-1, description="-1 = run the epochs")
    batch_size: int = 16
    lr: float = 5e-5
    head_lr_multiplier: float | None = Field(None, gt=0, description=(
        "cross-encoder: the scoring head (pooler + classifier) learns this many times faster than "
        "the encoder. None = 40 when the base has no trained head (an embedding model: its tiny "
        "random head passes almost no gradient back and the loss sits at chance for hundreds of "
        "steps; measured here), 1 when it is already a reranker being fine-tuned"))
    freeze_embeddings: bool = Field(False, description=(
        "keep the word-embedding matrix fixed. multilingual-e5-small's 250k-token "
        "vocabulary is 82 % of its weights; AdamW still updates every row each step (with torch's "
        "per-tensor AdamW a third of a CPU step at 384 tokens, 0.8 of 2.4 s; fused, as now, ~0.07 s), "
        "while the rows a few thousand pairs touch barely move"))
    warmup_ratio: float = 0.1
    max_length: int = 256
    seed: int = 42
    save_steps: int = 100
    log_steps: int = 50
    precision: str = Field("auto", pattern="^(auto|fp32|bf16)$", description=(
        "bf16 autocast: on CPUs with AVX512-BF16/AMX it trains ~2-3x faster than fp32; auto = bf16 "
        "where the hardware has it (such CPUs, or a CUDA GPU with bf16)"))
    resume: bool = False
    progress: bool = True

    @field_validator("base")
    @classmethod
    def _packaged_alias(cls, v: str) -> str:
        """`--base multilingual-e5-small` (or `minilm`): the packaged model's local directory."""
        from indexing.models import resolve_model

        return resolve_model(v)


def _latest_checkpoint(ckpt_dir: Path) -> str | None:
    found = sorted(ckpt_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return str(found[-1]) if found else None


def _bf16(cfg: TrainConfig) -> bool:
    import torch

    if cfg.precision != "auto":
        return cfg.precision == "bf16"
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _training_args(cls, cfg: TrainConfig, ckpt_dir: Path, **extra):
    return cls(
        output_dir=str(ckpt_dir), num_train_epochs=cfg.epochs, max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size, learning_rate=cfg.lr, warmup_steps=cfg.warmup_ratio,
        seed=cfg.seed, data_seed=cfg.seed, save_strategy="steps", save_steps=cfg.save_steps,
        save_total_limit=1, logging_steps=max(1, min(cfg.log_steps, cfg.save_steps)), report_to="none",
        bf16=_bf16(cfg),
        disable_tqdm=not cfg.progress, dataloader_num_workers=0, use_cpu=not _cuda(), **extra)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _mining_embedder(cfg: TrainConfig, embedder):
    if embedder is not None or cfg.mine == "bm25":
        return embedder
    from retrieval.config import EmbedderConfig
    from retrieval.embeddings import make_embedder

    return make_embedder(EmbedderConfig(model="minilm"))


def _run(trainer, cfg: TrainConfig, ckpt_dir: Path) -> None:
    resume = _latest_checkpoint(ckpt_dir) if cfg.resume else None
    if resume:
        log.info("resuming from %s", resume)
    trainer.train(resume_from_checkpoint=resume)


def _finish(cfg: TrainConfig, out: Path, ckpt_dir: Path, kind: str, n_train: int, t0: float, steps: int) -> dict:
    info = {"kind": kind, "base": cfg.base, "datasets": cfg.datasets, "split": cfg.split, "holdout": cfg.holdout,
            "max_queries": cfg.max_queries, "train_rows": n_train,
            "steps": steps, "seed": cfg.seed, "mine": cfg.mine,
            "negatives": cfg.negatives if kind == "cross-encoder" else 1,
            "max_length": cfg.max_length, "lr": cfg.lr, "epochs": cfg.epochs, "bf16": _bf16(cfg),
            "freeze_embeddings": cfg.freeze_embeddings,
            "wall_s": round(time.time() - t0, 1)}
    (out / "training.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(ckpt_dir, ignore_errors=True)  # optimizer states are 3x the model; the run is done
    return info


def _start(cfg: TrainConfig, negatives: int, embedder=None, chooser=None) -> tuple[Path, Path, list]:
    """What both trainers do first, in this order (the seed before mining, so a run repeats): the
    output and checkpoint dirs, and the examples mined with `negatives` per positive."""
    from transformers import set_seed

    set_seed(cfg.seed)
    out, ckpt_dir = Path(cfg.out), Path(cfg.out) / "checkpoints"
    out.mkdir(parents=True, exist_ok=True)
    examples = mine_examples(cfg.datasets, cfg.split, negatives, cfg.mine, _mining_embedder(cfg, embedder),
                             cfg.seed, cfg.pool, cfg.max_queries, cfg.holdout, chooser)
    return out, ckpt_dir, examples


def train_cross_encoder(cfg: TrainConfig, embedder=None, chooser=None) -> dict:
    """Train and save a one-logit cross-encoder to `cfg.out`; returns the run summary.
    `chooser` (`mining.language_aware`) mines each corpus behind the retriever its language gets."""
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    t0 = time.time()
    out, ckpt_dir, examples = _start(cfg, cfg.negatives, embedder, chooser)
    data = Dataset.from_dict(as_pairs(examples))
    model = CrossEncoder(cfg.base, num_labels=1, max_length=cfg.max_length)
    if cfg.freeze_embeddings:
        freeze_word_embeddings(model.model)
    # Positives are 1 in (1 + negatives): weight them so the loss is not won by predicting "no".
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(float(cfg.negatives)))
    args = _training_args(CrossEncoderTrainingArguments, cfg, ckpt_dir)
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=loss,
                                  optimizers=(_head_optimizer(model.model, cfg), None))
    _run(trainer, cfg, ckpt_dir)
    model.save_pretrained(str(out))
    return _finish(cfg, out, ckpt_dir, "cross-encoder", len(data), t0, trainer.state.global_step)


NEW_HEAD_LR_MULTIPLIER = 40.0


def freeze_word_embeddings(module) -> None:
    """Word embeddings out of training (position/type embeddings and LayerNorm still learn)."""
    module.get_input_embeddings().weight.requires_grad_(False)


def _has_trained_head(base: str) -> bool:
    """Is the base already a sequence classifier (a reranker), as opposed to an encoder?"""
    from transformers import AutoConfig

    try:
        archs = AutoConfig.from_pretrained(base).architectures or []
    except OSError:  # unreachable hub id: the trainer will report it when it loads the model
        return False
    return any(a.endswith("ForSequenceClassification") for a in archs)


def _head_optimizer(module, cfg: TrainConfig):
    """AdamW with the head's own learning rate (the trainer builds the warmup/decay schedule on it).
    Fused: one kernel over all parameters per step instead of a loop of small ops per tensor (on CPU
    torch's default is that loop: MiniLM's step 89-115 ms against 13-15 ms fused on a 2-core EPYC,
    ~30 % of a batch-8 training step; docs/performance.md, "Session 38"). Training runs on the CPU
    or a CUDA GPU (`_training_args`), both fused."""
    import torch

    head, body = [], []
    for name, p in module.named_parameters():
        if p.requires_grad:
            (head if name.startswith(("classifier", "bert.pooler", "pooler")) else body).append(p)
    mult = cfg.head_lr_multiplier or (1.0 if _has_trained_head(cfg.base) else NEW_HEAD_LR_MULTIPLIER)
    groups = [{"params": body, "lr": cfg.lr}]
    if head:
        groups.append({"params": head, "lr": cfg.lr * mult})
    return torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=0.01, fused=True)


def train_embedder(cfg: TrainConfig, embedder=None) -> dict:
    """Fine-tune a sentence-transformers embedder with MultipleNegativesRankingLoss + mined negatives."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    try:  # sentence-transformers >= 6 moved them (the old paths warn and are to be removed)
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    except ImportError:  # 3.x - 5.x, which `sentence-transformers>=3.0` still allows
        from sentence_transformers.losses import MultipleNegativesRankingLoss
        from sentence_transformers.training_args import BatchSamplers

    t0 = time.time()
    out, ckpt_dir, examples = _start(cfg, 1, embedder)
    data = Dataset.from_dict(as_triplets(examples))
    model = SentenceTransformer(cfg.base)
    if cfg.freeze_embeddings:
        freeze_word_embeddings(model[0].auto_model)
    serve_length = model.max_seq_length  # train short for speed, serve at the base model's window
    model.max_seq_length = cfg.max_length
    args = _training_args(SentenceTransformerTrainingArguments, cfg, ckpt_dir,
                          batch_sampler=BatchSamplers.NO_DUPLICATES)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data,
                                         loss=MultipleNegativesRankingLoss(model))
    _run(trainer, cfg, ckpt_dir)
    model.max_seq_length = max(serve_length, cfg.max_length)
    model.save_pretrained(str(out))
    return _finish(cfg, out, ckpt_dir, "embedder", len(data), t0, trainer.state.global_step)

