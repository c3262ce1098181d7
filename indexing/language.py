"""Cheap, offline language guess from the script of the characters (plus stop words for Latin).

Good enough to route CJK text to the right analyzers and to filter on; not a classifier.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-zà-ÿ]+")
_HAN = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")
_CYR = re.compile(r"[\u0400-\u04ff]")
_ARAB = re.compile(r"[\u0600-\u06ff]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")
_STOP = {
    "en": {"the", "and", "of", "to", "in", "is", "that", "for", "with", "are", "this", "on"},
    "fr": {"le", "la", "les", "et", "des", "est", "une", "dans", "que", "pour", "du", "pas"},
    "de": {"der", "die", "und", "das", "ist", "nicht", "ein", "eine", "mit", "den", "zu", "auf"},
    "es": {"el", "los", "las", "y", "es", "una", "por", "que", "con", "para", "del", "se"},
}


def detect_language(text: str, sample: int = 2000) -> str:
    """ISO 639-1 guess: zh/ja/ko by CJK script share, ru/ar by script, en/fr/de/es by stop words."""
    s = text[:sample]
    han = len(_HAN.findall(s))
    kana = len(_KANA.findall(s))
    hangul = len(_HANGUL.findall(s))
    cyr = len(_CYR.findall(s))
    arab = len(_ARAB.findall(s))
    latin = len(_LATIN.findall(s))
    letters = han + kana + hangul + cyr + arab + latin
    if letters == 0:
        return ""
    if (han + kana + hangul) / letters >= 0.2:
        if hangul > max(han, kana) * 0.5 and hangul >= kana:
            return "ko"
        if kana >= 0.1 * (han + kana):
            return "ja"
        return "zh"
    if cyr / letters >= 0.5:
        return "ru"
    if arab / letters >= 0.5:
        return "ar"
    words = _WORD.findall(s.lower())
    if not words:
        return "en"
    scores = {lang: sum(w in stop for w in words) for lang, stop in _STOP.items()}
    best = max(scores, key=lambda k: scores[k])
    return best if scores[best] > 0 else "en"
