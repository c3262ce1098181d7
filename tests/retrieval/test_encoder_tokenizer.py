"""The embedder's tokenizer calls (retrieval/embeddings/encoder_tokenizer.py) against transformers'
AutoTokenizer on the same directories: the packaged MiniLM (WordPiece) and multilingual-e5-small
(SentencePiece unigram, whose special tokens live in tokenizer_config, not tokenizer.json)."""

from __future__ import annotations

import pytest
import torch

from retrieval.embeddings.encoder_tokenizer import EncoderTokenizer
from retrieval.embeddings.models import resolve_embedding_model

TEXTS = ["The capital city of Zarnovia is Velmora.", "  spaces around  ", "x", "中文文本的检索测试", "",
         "Ünïcödé café naïve e\u0301", "literal <s> and </s> and <mask> and [CLS] [SEP] [MASK]",
         "word " * 400, "A leather couch costs 900 euros.\n\n\tTabbed."]


@pytest.fixture(scope="module", params=["minilm", "multilingual-e5-small"])
def pair(request):
    from transformers import AutoTokenizer

    path = resolve_embedding_model(request.param)
    return EncoderTokenizer(path), AutoTokenizer.from_pretrained(path)


def test_batches_equal_transformers(pair):
    """Bugs caught: e5's `<s>`/`</s>`/`<mask>` read as plain text (tokenizer.json alone lacks
    them), padding on the wrong side or with the wrong id or type id, truncation cutting the
    specials or at another length, token_type_ids given to a model that takes none (or not given
    to BERT): any of these changes every vector, and every index built with it."""
    ours, ref = pair
    for max_length in (16, 256):
        got = ours(TEXTS, padding=True, truncation="longest_first", max_length=max_length, return_tensors="pt")
        want = ref(TEXTS, padding=True, truncation="longest_first", max_length=max_length, return_tensors="pt")
        assert set(got) == set(want)
        for k in want:
            assert torch.equal(got[k], want[k]), (k, max_length)
    for s in TEXTS:
        a = ours(s, add_special_tokens=False, truncation=False, return_offsets_mapping=True)
        b = ref(s, add_special_tokens=False, truncation=False, return_offsets_mapping=True)
        assert a["input_ids"] == b["input_ids"] and [tuple(o) for o in a["offset_mapping"]] == \
            [tuple(o) for o in b["offset_mapping"]], s
        assert ours(s)["input_ids"] == ref(s)["input_ids"], s
    # the settings of one call do not leak into the next
    assert len(ours(TEXTS[-2])["input_ids"]) > 256
    assert ours.model_max_length == ref.model_max_length


def test_unsupported_options_are_refused(pair):
    """Bug caught: an option the embedder never needed (pairs' truncation strategies, fixed-length
    padding, numpy tensors) silently treated as another."""
    ours, _ = pair
    for kwargs in ({"truncation": "only_second"}, {"padding": "max_length"}, {"return_tensors": "np"}):
        with pytest.raises(ValueError):
            ours(["a"], **kwargs)
