"""Incremental detokenisation never emits half a UTF-8 character."""

from __future__ import annotations

from inference import SamplingParams
from inference.detokenizer import IncrementalDetokenizer

CJK = "检索增强生成把外部知识接入大语言模型。你好，世界！😀"


def test_cjk_deltas_are_whole_characters(llm):
    tok = llm.tokenizer
    ids = tok.encode(CJK)
    assert len(ids) > len(CJK) // 2  # byte-level BPE splits many characters across tokens
    d = IncrementalDetokenizer(tok, tok.encode("Answer:"))
    deltas = [d.add(t) for t in ids]
    deltas.append(d.flush())
    assert all("\ufffd" not in x for x in deltas)
    assert "".join(deltas) == tok.decode(ids) == CJK
    assert sum(1 for x in deltas if x == "") > 0  # some tokens were partial characters


def test_engine_streams_forced_cjk(llm):
    target = llm.tokenizer.encode(CJK)

    def force(token_ids, logits):
        logits.fill_(float("-inf"))
        logits[target[len(token_ids)]] = 0.0
        return logits

    eng = llm.engine
    eng.add_request("Say hello in Chinese:", SamplingParams(temperature=0.0, max_tokens=len(target),
                                                            logits_processors=[force]))
    deltas = []
    final = None
    while eng.has_unfinished_requests():
        for out in eng.step():
            deltas.append(out.outputs[0].delta_text)
            final = out
    assert final.token_ids == target
    assert all("\ufffd" not in x for x in deltas)
    assert "".join(deltas) == final.text == CJK
