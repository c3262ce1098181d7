"""Which questions ask for an explanation (rag/answering/question_form.py)."""

from __future__ import annotations

import pytest

from rag.answering.question_form import explanatory


@pytest.mark.parametrize("question", [
    "How do I get my deposit back at Riverside Bike Rental?", "Why could a bike rental cost an extra day?",
    "What happens if I damage a rented bike?", "how does the engine reuse the system prompt", "And why not?",
    "Explain how the harbour lets its moorings.", "Describe the loan rules.", "  How can a loan be renewed?"])
def test_explanations(question):
    """Catches an explanation held to a span gate (its answer cut to a copied phrase)."""
    assert explanatory(question, "en")


@pytest.mark.parametrize("question", [
    "How many moorings does the harbour have?", "How much does a city bike cost?", "How long is the trail?",
    "How old must e-bike renters be?", "How great were the losses?", "Who runs the bakery?",
    "When does the reading club meet?", "What does a rye loaf cost?", "Howard Street is where?"])
def test_phrase_questions(question):
    """Catches a factoid question ("how many", "how much") taken off the span gate, whose calibrated
    refusal it needs, or a word that merely starts with "how"."""
    assert not explanatory(question, "en")


def test_other_languages_keep_the_span_gate():
    """Catches the English rule applied to a language it was not written for."""
    assert not explanatory("How does it work?", "zh") and not explanatory("为什么?", "zh")
