"""Cheap, offline language guess from the script of the characters (plus stop words for Latin).

Good enough to route CJK text to the right analyzers and to filter on; not a classifier.
"""

from __future__ import annotations

import re

# The scripts `detect_language` counts, as character-class bodies, each range written once.
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs: ext. A, unified, compatibility
_KANA = "\u3040-\u30ff"
_HANGUL_SYLLABLES = "\uac00-\ud7af"
_SCRIPTS = {"han": _HAN, "kana": _KANA, "hangul": _HANGUL_SYLLABLES + "\u1100-\u11ff", "cyr": "\u0400-\u04ff",
            "arab": "\u0600-\u06ff", "latin": "A-Za-z\u00c0-\u024f"}
# Kana, CJK ideographs and Hangul syllables, as a character-class body: the one definition of "CJK
# character" for analyzers, entity extraction and answer scoring.
CJK_RANGES = _KANA + _HAN + _HANGUL_SYLLABLES

_WORD = re.compile(r"[a-zà-ÿ]+")
_SCRIPT = {name: re.compile(f"[{body}]") for name, body in _SCRIPTS.items()}
_LATIN = _SCRIPT["latin"]
_NON_LATIN = re.compile("[" + "".join(body for name, body in _SCRIPTS.items() if name != "latin") + "]")
_STOP = {
    "en": {"the", "and", "of", "to", "in", "is", "that", "for", "with", "are", "this", "on"},
    "fr": {"le", "la", "les", "et", "des", "est", "une", "dans", "que", "pour", "du", "pas"},
    "de": {"der", "die", "und", "das", "ist", "nicht", "ein", "eine", "mit", "den", "zu", "auf"},
    "es": {"el", "los", "las", "y", "es", "una", "por", "que", "con", "para", "del", "se"},
}


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
    n = {name: len(p.findall(s)) for name, p in _SCRIPT.items()}
    han, kana, hangul, cyr, arab, latin = (n[k] for k in ("han", "kana", "hangul", "cyr", "arab", "latin"))
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
