"""Cheap, offline language guess from the script of the characters (plus stop words for Latin).

Good enough to route CJK text to the right analyzers and to filter on; not a classifier.
"""

from __future__ import annotations

import re

# Kana, CJK ideographs (ext. A, unified, compatibility) and Hangul syllables, as a character-class
# body: the one definition of "CJK character" for analyzers, entity extraction and answer scoring.
CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"

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


_NON_LATIN = re.compile(r"[\u0400-\u04ff\u0600-\u06ff\u1100-\u11ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
                        r"\uac00-\ud7af\uf900-\ufaff]")
_STOP_LANGS: dict[str, list[str]] = {}
for _lang, _words in _STOP.items():
    for _w in _words:
        _STOP_LANGS.setdefault(_w, []).append(_lang)


def detect_language(text: str, sample: int = 2000) -> str:
    """ISO 639-1 guess: zh/ja/ko by CJK script share, ru/ar by script, en/fr/de/es by stop words."""
    s = text[:sample]
    if _NON_LATIN.search(s):
        scripted = _by_script(s)
        if scripted is not None:
            return scripted
    elif not _LATIN.search(s):
        return ""
    votes = dict.fromkeys(_STOP, 0)
    for w in _WORD.findall(s.lower()):
        for lang in _STOP_LANGS.get(w, ()):
            votes[lang] += 1
    best = max(votes, key=lambda k: votes[k])
    return best if votes[best] > 0 else "en"


def _by_script(s: str) -> str | None:
    han = len(_HAN.findall(s))
    kana = len(_KANA.findall(s))
    hangul = len(_HANGUL.findall(s))
    cyr = len(_CYR.findall(s))
    arab = len(_ARAB.findall(s))
    latin = len(_LATIN.findall(s))
    letters = han + kana + hangul + cyr + arab + latin
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
    return None
