"""Loop detection on streamed answer text."""

from __future__ import annotations

from rag.loops import is_looping


def test_counting_list_loop_is_detected():
    """Catches loops that change only their numbers (what exact n-gram bans miss)."""
    text = "".join(f"{i}. {fmt}\n" for i, fmt in enumerate(["PDF", "JSON", "JSONL", "JSON", "JSONL", "CSV",
                                                             "JSONL"], start=1))
    assert is_looping(text)
    assert is_looping("The answer is: 1. The answer is: 1. The answer is: 1. ")


def test_normal_answers_are_not_loops():
    """Catches false alarms that would cut correct answers short."""
    assert not is_looping("Velmora is the capital of Zarnovia [1]. It has about 80,000 people [1].")
    assert not is_looping("1. PDF\n2. Markdown\n3. HTML\n4. DOCX\n5. CSV\n6. JSON\n")
    assert not is_looping("臺北市是首都。龍山寺建於1738年。龍山寺很有名")  # the unfinished unit does not count
