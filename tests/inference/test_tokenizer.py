"""The engine's own tokenizer for GGUF conversions (`inference/tokenizer.py`) against transformers'
AutoTokenizer on the same directory, for SmolLM2 and the packaged Qwen2.5."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from inference.model_loader import load_config, load_tokenizer, resolve_model_dir
from inference.tokenizer import SNAPSHOT, FastTokenizer

TEXTS = [
    "The ferry leaves Tavrin harbour at 11:57 — 18 € per day, 26 € over 12 m. 港口",
    "", " ", "  leading\n\n\ttabs  ", "<|im_start|>user\nhi<|im_end|>", "<|endoftext|> mid <|endoftext|>",
    "emoji 🚢⚓ and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "台北市立圖書館於1952年成立。", "def f(x):\n    return x**2  # ok",
    "e\u0301 cafe\u0301 naïve", "a" * 300,
]
CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q 你好?"},
     {"role": "assistant", "content": "A."}, {"role": "user", "content": "more"}],
    [{"role": "system", "content": "S", "name": None}, {"role": "user", "content": "x\n\ny  "}],
]


@pytest.fixture(scope="module", params=["smollm2", "qwen"])
def pair(request):
    from transformers import AutoTokenizer

    name = request.getfixturevalue("qwen_name") if request.param == "qwen" else "smollm2"
    d = resolve_model_dir(name, weights=False)
    load_tokenizer(d)  # takes the snapshot if this cache has none yet
    return load_tokenizer(d), AutoTokenizer.from_pretrained(str(d))


def test_same_ids_text_and_prompts_as_transformers(pair):
    """Bugs caught: encoding from tokenizer.json alone (Qwen2's tokenizer class adds an NFC
    normaliser in Python: "e\u0301" then encodes as two tokens where transformers gives one "é"),
    special tokens or their ids taken from the wrong place, decode skipping other tokens than
    transformers does, offsets shifted, and a chat prompt that differs by one character (the
    model then reads a template it was not trained on, and every calibrated signal moves)."""
    ours, ref = pair
    assert isinstance(ours, FastTokenizer)
    for s in TEXTS:
        for add in (True, False):
            assert ours.encode(s, add_special_tokens=add) == ref.encode(s, add_special_tokens=add), s
        a = ours(s, add_special_tokens=False, return_offsets_mapping=True)
        b = ref(s, add_special_tokens=False, return_offsets_mapping=True)
        assert a.input_ids == b.input_ids and [tuple(o) for o in a["offset_mapping"]] == \
            [tuple(o) for o in b["offset_mapping"]], s
        ids = ref.encode(s)
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), s
        # every prefix: a multi-byte character cut between tokens decodes to the same U+FFFD
        assert all(ours.decode(ids[:i]) == ref.decode(ids[:i]) for i in range(len(ids))), s
    assert ours(TEXTS, add_special_tokens=False).input_ids == ref(TEXTS, add_special_tokens=False).input_ids
    n = len(ref)
    assert len(ours) == n
    assert ours.convert_ids_to_tokens(list(range(n))) == ref.convert_ids_to_tokens(list(range(n)))
    for attr in ("all_special_ids", "all_special_tokens", "special_tokens_map", "eos_token_id", "bos_token_id",
                 "pad_token_id", "unk_token_id", "eos_token", "model_max_length", "clean_up_tokenization_spaces"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert set(ours.added_tokens_decoder) == set(ref.added_tokens_decoder)
    for conv in CONVERSATIONS:
        for gen in (True, False):
            for kw in ({}, {"enable_thinking": False}):
                assert ours.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, **kw) == \
                    ref.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, **kw)
    assert ours._hf is None  # all of the above without transformers


def test_what_it_does_not_do_goes_to_transformers(pair):
    """Bug caught: an option this class does not implement (tools in the template, tokenized
    chat output, padding) silently ignored instead of answered as transformers answers it."""
    ours, ref = pair
    tools = [{"type": "function", "function": {"name": "f", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}}]
    conv = CONVERSATIONS[0]
    assert ours.apply_chat_template(conv, tools=tools, tokenize=False) == \
        ref.apply_chat_template(conv, tools=tools, tokenize=False)
    assert list(ours.apply_chat_template(conv, tokenize=True, return_dict=False)) == \
        list(ref.apply_chat_template(conv, tokenize=True, return_dict=False))
    padded = ours(["a", "a b c"], padding=True)
    assert padded["input_ids"] == ref(["a", "a b c"], padding=True)["input_ids"]


def _conversion_copy(tmp_path):
    src = resolve_model_dir("smollm2", weights=False)
    dst = tmp_path / "conv"
    dst.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "source.json", "config.json"):
        shutil.copy(src / f, dst / f)
    return dst


def test_snapshot_taken_once_and_again_for_another_transformers_version(tmp_path):
    """Bugs caught: transformers loaded by every process anyway (the snapshot not written or
    not read), a snapshot from another transformers version trusted (its tokenizer classes may
    build another pipeline), a corrupt snapshot failing the load."""
    d = _conversion_copy(tmp_path)
    first = load_tokenizer(d)
    assert isinstance(first, FastTokenizer) and (d / SNAPSHOT).is_file()
    again = FastTokenizer.load(d)
    assert again is not None and again._hf is None  # read from the snapshot, transformers not loaded
    snap = json.loads((d / SNAPSHOT).read_text())
    snap["transformers"] = "0.0.1"
    (d / SNAPSHOT).write_text(json.dumps(snap))
    retaken = FastTokenizer.load(d)
    assert retaken is not None and retaken._hf is not None  # taken again, with transformers
    assert json.loads((d / SNAPSHOT).read_text())["transformers"] != "0.0.1"
    (d / SNAPSHOT).write_text("{not json")
    assert FastTokenizer.load(d).encode("hello world") == first.encode("hello world")
    (d / "source.json").unlink()
    assert FastTokenizer.load(d) is None  # not a conversion: transformers' own tokenizer


def test_loading_a_gguf_model_does_not_import_transformers():
    """Bug caught: a transformers import creeping back into the engine's start (0.9 s import and
    ~1 s tokenizer build in every `rag ask`): tokenizer, config and the model on its GGUF blocks
    in a fresh process, then a chat prompt encoded and decoded."""
    d = resolve_model_dir("smollm2", weights=False)
    load_tokenizer(d)  # the snapshot exists before the fresh process
    code = (
        "import sys\n"
        "from inference.model_loader import gguf_source, load_config, load_model, load_tokenizer, resolve_model_dir\n"
        "d = resolve_model_dir('smollm2', weights=False)\n"
        "tok = load_tokenizer(d)\n"
        "ids = tok.encode(tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False,"
        " add_generation_prompt=True), add_special_tokens=False)\n"
        "assert tok.decode(ids).endswith('assistant\\n'), tok.decode(ids)\n"
        "import torch\n"
        "model, cfg = load_model(d, torch.float32, 'cpu', 'gguf', gguf_path=gguf_source('smollm2'),"
        " gguf_strict=False)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_config_of_a_conversion_read_without_transformers():
    """Bug caught: the plain config missing a field the decoder reads, or differing from what
    AutoConfig gives for it (the model would be built with other sizes or another RoPE)."""
    from transformers import AutoConfig

    d = resolve_model_dir("smollm2", weights=False)
    ours, ref = load_config(d), AutoConfig.from_pretrained(str(d))
    assert not hasattr(ours, "to_dict")  # the plain one, not transformers'
    for k in ("model_type", "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
              "num_key_value_heads", "vocab_size", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
              "eos_token_id", "rope_parameters"):
        assert getattr(ours, k) == getattr(ref, k), k


def test_a_directory_that_cannot_be_written_still_loads(tmp_path, monkeypatch):
    """Bug caught: the snapshot's temporary file created outside the best-effort block, so a
    conversion in a read-only shared cache failed the engine's start instead of loading the
    tokenizer through transformers (root ignores file modes, so the OS refusal is injected)."""
    import inference.tokenizer as tokmod

    d = _conversion_copy(tmp_path)

    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied", str(d))

    monkeypatch.setattr(tokmod.tempfile, "mkstemp", refuse)
    tok = FastTokenizer.load(d)
    assert tok is not None and tok.encode("hello world") and not (d / SNAPSHOT).exists()
    monkeypatch.undo()
    (d / SNAPSHOT).mkdir()  # something in the way of the rename: same answer, nothing left behind
    assert FastTokenizer.load(d).encode("hello world") == tok.encode("hello world")
    assert [p.name for p in d.iterdir() if p.name.startswith(".snapshot-")] == []
