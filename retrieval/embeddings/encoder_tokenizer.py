"""The tokenizer calls the embedder makes, on transformers' own Rust tokenizer without transformers.

`PooledEncoder` tokenizes padded, truncated batches; the long-text windows and their budget read
ids and offsets. Those are the Rust tokenizer's work: transformers' `__call__` only switches its
truncation and padding on with the tokenizer's settings and turns the lists into tensors. Here the
tokenizer and those settings come from `indexing.tokenizer_snapshot` (taken with transformers the
first time), so ids, masks and offsets are the ones transformers gives, and a process that embeds
never imports it (~1.2 s; tests/retrieval/test_encoder_tokenizer.py compares the two).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from indexing import tokenizer_snapshot


class Features(dict):
    """`input_ids`, `attention_mask` (and `token_type_ids` where the model takes them)."""

    def to(self, device: Any) -> Features:
        return Features({k: v.to(device) if hasattr(v, "to") else v for k, v in self.items()})


class EncoderTokenizer:
    def __init__(self, path: str | Path) -> None:
        self._tk, meta = tokenizer_snapshot.load(path)
        self.padding_side: str = meta["padding_side"]
        self.truncation_side: str = meta["truncation_side"]
        self.pad_token: str | None = meta["pad_token"]
        self.pad_token_id: int | None = meta["pad_token_id"]
        self.pad_token_type_id: int = meta["pad_token_type_id"]
        self.model_input_names: list[str] = meta["model_input_names"]
        self.model_max_length: int = meta["model_max_length"]
        self._lock = threading.Lock()  # truncation and padding are the Rust tokenizer's state

    def __call__(self, text: str | list[str], add_special_tokens: bool = True, padding: bool | str = False,
                 truncation: bool | str = False, max_length: int | None = None,
                 return_offsets_mapping: bool = False, return_tensors: str | None = None) -> Features:
        if truncation not in (False, True, "longest_first", "do_not_truncate"):
            raise ValueError(f"truncation={truncation!r}: one sequence per text, so only longest_first")
        if padding not in (False, True, "longest", "do_not_pad"):
            raise ValueError(f"padding={padding!r}: only padding to the longest text of the batch")
        if return_tensors not in (None, "pt"):
            raise ValueError(f"return_tensors={return_tensors!r}: only 'pt'")
        batch = isinstance(text, list)
        with self._lock:
            encs = self._encode(text if batch else [text], add_special_tokens, padding in (True, "longest"),
                                truncation in (True, "longest_first"), max_length)
        cols = {"input_ids": [e.ids for e in encs]}
        if "token_type_ids" in self.model_input_names:
            cols["token_type_ids"] = [e.type_ids for e in encs]
        if "attention_mask" in self.model_input_names:
            cols["attention_mask"] = [e.attention_mask for e in encs]
        if return_offsets_mapping:
            cols["offset_mapping"] = [e.offsets for e in encs]
        if return_tensors == "pt":
            import torch

            return Features({k: torch.tensor(v, dtype=torch.long) for k, v in cols.items()})
        return Features(cols if batch else {k: v[0] for k, v in cols.items()})

    def _encode(self, texts: list[str], add_special_tokens: bool, pad: bool, truncate: bool,
                max_length: int | None) -> list:
        if truncate:
            self._tk.enable_truncation(max_length or self.model_max_length, strategy="longest_first",
                                       direction=self.truncation_side)
        if pad:
            if self.pad_token_id is None:
                raise ValueError("this tokenizer has no pad token, so batches cannot be padded")
            self._tk.enable_padding(direction=self.padding_side, pad_id=self.pad_token_id,
                                    pad_type_id=self.pad_token_type_id, pad_token=self.pad_token)
        try:
            return self._tk.encode_batch(texts, add_special_tokens=add_special_tokens)
        finally:
            self._tk.no_truncation()
            self._tk.no_padding()
