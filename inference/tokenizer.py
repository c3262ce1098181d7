"""The engine's tokenizer for the directories our GGUF conversion writes, without transformers.

Why: `import transformers` and `AutoTokenizer.from_pretrained` cost ~2 s of every process that
loads a model (Qwen2.5 on a Zen 4 core: import 0.9 s, the tokenizer 0.9-1.1 s, of which the Rust
tokenizer itself is 0.35 s: transformers 5 first rebuilds the vocabulary and merges in Python),
a quarter of a `rag ask`. The first time a conversion directory's tokenizer is loaded,
transformers loads it and a snapshot is written beside it (`tokenizer_snapshot.json`): the Rust
tokenizer exactly as transformers built it (its tokenizer classes add parts of the pipeline in
Python that the saved tokenizer.json can lack: Qwen2's NFC normalizer), the named special tokens,
the chat template, and the transformers version (another version takes it again). Later
processes run that with `tokenizers` directly and render the template in the sandboxed jinja
environment transformers renders it in, with the same inputs (messages with `None` values
dropped, the named special tokens, `add_generation_prompt`), so prompts, ids and decoded text
are the same (tests/inference/test_tokenizer.py compares them with `AutoTokenizer` on every
packaged model). What it does not do (tools, documents, batched conversations, `tokenize=True`,
templates using transformers' own `{% generation %}` tag, any other attribute or call option)
goes to the transformers tokenizer, loaded on first use.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

SNAPSHOT = "tokenizer_snapshot.json"
_FORMAT = 1
NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_CALL_OPTIONS = {"add_special_tokens", "return_offsets_mapping", "return_attention_mask"}  # the rest: transformers
# apply_chat_template options only transformers' renderer handles
_HF_ONLY = {"tools", "documents", "chat_template", "continue_final_message", "return_assistant_tokens_mask",
            "sanitize_control_tokens", "return_dict", "tokenizer_kwargs", "padding", "truncation", "max_length",
            "return_tensors"}
_PLAIN = (str, int, float, bool, type(None))


@lru_cache(maxsize=8)
def _compile(template: str):
    """The template in transformers' environment (minus its `{% generation %}` extension: a template
    using that fails here and goes to transformers)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # jinja's own filter escapes HTML characters; transformers' does not
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


class Encoding(dict):
    """What `tokenizer(text)` returns, read as `enc.input_ids` or `enc["input_ids"]`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class FastTokenizer:
    """The part of a transformers tokenizer the project calls, on `tokenizers` and jinja2."""

    is_fast = True

    def __init__(self, model_dir: Path, backend, meta: dict, hf=None) -> None:
        backend.no_truncation()
        backend.no_padding()
        self._tk = backend
        self._dir = model_dir
        self._hf = hf
        self.name_or_path = str(model_dir)
        self.chat_template = meta["chat_template"]
        self.special_tokens_map = dict(meta["special_tokens_map"])
        for k in NAMED:
            tok = self.special_tokens_map.get(k)
            setattr(self, k, tok)
            setattr(self, f"{k}_id", None if tok is None else backend.token_to_id(tok))
        self.all_special_tokens = list(meta["all_special_tokens"])
        self.all_special_ids = [i for i in map(backend.token_to_id, self.all_special_tokens) if i is not None]
        self.model_max_length = int(meta["model_max_length"])
        self.clean_up_tokenization_spaces = bool(meta["clean_up_tokenization_spaces"])

    @classmethod
    def load(cls, model_dir: str | Path) -> FastTokenizer | None:
        """The tokenizer of a conversion directory (`source.json` marks one) from its snapshot,
        taken with transformers the first time (and again after transformers changes version);
        None for any other directory, or one whose tokenizer this class does not reproduce."""
        root = Path(model_dir)
        if not (root / "source.json").is_file():
            return None
        from tokenizers import Tokenizer

        snap, hf = _read_snapshot(root), None
        if snap is None:
            snap, hf = _take_snapshot(root)
        if not snap.get("supported"):
            return None
        return cls(root, Tokenizer.from_str(snap["tokenizer"]), snap, hf=hf)

    # ---- transformers for everything else ------------------------------------------------------

    def hf(self):
        """transformers' tokenizer of the same directory, for what this class does not do."""
        if self._hf is None:
            self._hf = hf_tokenizer(self._dir)
        return self._hf

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.hf(), name)

    # ---- encoding and decoding -----------------------------------------------------------------

    def __len__(self) -> int:
        return self._tk.get_vocab_size(with_added_tokens=True)

    @property
    def backend_tokenizer(self):
        return self._tk

    @property
    def added_tokens_decoder(self) -> dict:
        return self._tk.get_added_tokens_decoder()

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if kwargs or not isinstance(text, str):
            return self.hf().encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return self._tk.encode(text, add_special_tokens=add_special_tokens).ids

    def __call__(self, text: str | list[str], **kwargs: Any) -> Encoding:
        asked = {k for k, v in kwargs.items() if v or k not in ("truncation", "padding")}  # False: as not asked
        if not isinstance(text, (str, list)) or asked - _CALL_OPTIONS \
                or not all(isinstance(t, str) for t in (text if isinstance(text, list) else [text])):
            return self.hf()(text, **kwargs)
        add = kwargs.get("add_special_tokens", True)
        batch = isinstance(text, list)
        encs = self._tk.encode_batch(text, add_special_tokens=add) if batch \
            else [self._tk.encode(text, add_special_tokens=add)]
        out = Encoding(input_ids=[e.ids for e in encs])
        if kwargs.get("return_attention_mask", True):
            out["attention_mask"] = [e.attention_mask for e in encs]
        if kwargs.get("return_offsets_mapping"):
            out["offset_mapping"] = [e.offsets for e in encs]
        return out if batch else Encoding({k: v[0] for k, v in out.items()})

    def decode(self, ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None,
               **kwargs: Any) -> str:
        if kwargs or (ids and not isinstance(ids, int) and not isinstance(ids[0], int)):
            return self.hf().decode(ids, skip_special_tokens=skip_special_tokens,
                                    clean_up_tokenization_spaces=clean_up_tokenization_spaces, **kwargs)
        text = self._tk.decode([ids] if isinstance(ids, int) else list(ids), skip_special_tokens=skip_special_tokens)
        clean = self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None \
            else clean_up_tokenization_spaces
        if clean:  # transformers' clean-up, which it skips for BPE models (destructive there)
            return self.hf().decode(ids, skip_special_tokens=skip_special_tokens,
                                    clean_up_tokenization_spaces=True)
        return text

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        if isinstance(ids, int):
            return self._tk.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._tk.id_to_token(int(i)) for i in ids if int(i) not in skip]

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._tk.token_to_id(tokens)
        return [self._tk.token_to_id(t) for t in tokens]

    # ---- chat template -------------------------------------------------------------------------

    def apply_chat_template(self, conversation, add_generation_prompt: bool = False, tokenize: bool = True,
                            **kwargs: Any):
        """transformers' `apply_chat_template` for one conversation of plain messages, rendered as
        text (`tokenize=False`, what the project asks for); anything else goes to transformers."""
        messages = _plain_messages(conversation)
        template = self._compiled()
        if tokenize or messages is None or template is None or _HF_ONLY & set(kwargs) \
                or not all(isinstance(v, _PLAIN) for v in kwargs.values()):
            return self.hf().apply_chat_template(conversation, add_generation_prompt=add_generation_prompt,
                                                 tokenize=tokenize, **kwargs)
        return template.render(messages=messages, tools=None, documents=None,
                               add_generation_prompt=add_generation_prompt, **{**self.special_tokens_map, **kwargs})

    def _compiled(self):
        if self.chat_template is None:
            return None
        try:
            return _compile(self.chat_template)
        except Exception:  # noqa: BLE001 - e.g. transformers' own {% generation %} tag: its renderer decides
            return None


def hf_tokenizer(model_dir: str | Path):
    """transformers' tokenizer without the Python copies of its vocabulary and merges that
    transformers 5 keeps beside the Rust tokenizer that does the encoding (Qwen2.5: 151,936
    entries and 151,387 pairs, 58 MiB of the 1.5B engine's resident memory; nothing reads them)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    for attr in ("_vocab", "_merges"):
        if getattr(tok, attr, None) is not None:
            setattr(tok, attr, None)
    return tok


def _transformers_version() -> str | None:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def _read_snapshot(root: Path) -> dict | None:
    try:
        snap = json.loads((root / SNAPSHOT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(snap, dict) or snap.get("format") != _FORMAT or snap.get("transformers") != _transformers_version():
        return None
    return snap


def _take_snapshot(root: Path) -> tuple[dict[str, Any], Any]:
    """(snapshot, transformers' tokenizer): load the directory's tokenizer with transformers and
    write down what `FastTokenizer` needs: the Rust tokenizer as transformers built it (its
    tokenizer classes add parts of the pipeline in Python that tokenizer.json may lack, e.g.
    Qwen2's NFC normalizer), the special tokens and the chat template. Best effort: a directory
    that cannot be written (a shared read-only cache) only means taking it again next time."""
    hf = hf_tokenizer(root)
    template = hf.chat_template
    supported = (getattr(hf, "backend_tokenizer", None) is not None and not hf.split_special_tokens
                 and (template is None or isinstance(template, str)))
    snap: dict[str, Any] = {"format": _FORMAT, "transformers": _transformers_version(), "supported": supported}
    if supported:
        snap.update(tokenizer=hf.backend_tokenizer.to_str(), chat_template=template,
                    special_tokens_map=hf.special_tokens_map, all_special_tokens=hf.all_special_tokens,
                    model_max_length=min(int(hf.model_max_length), int(1e30)),
                    clean_up_tokenization_spaces=bool(hf.clean_up_tokenization_spaces))
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".snapshot-", dir=root)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(snap, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, root / SNAPSHOT)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return snap, hf


def _plain_messages(conversation: Any) -> list[dict] | None:
    """The messages as transformers hands them to the template (keys whose value is None
    dropped), or None when they are not a single list of flat dicts of plain values."""
    if not isinstance(conversation, list) or not conversation:
        return None
    out = []
    for m in conversation:
        if not isinstance(m, dict) or not all(type(k) is str and type(v) in _PLAIN for k, v in m.items()):
            return None
        out.append({k: v for k, v in m.items() if v is not None})
    return out
