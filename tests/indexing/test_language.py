"""The cheap language guess used for every chunk."""

from __future__ import annotations

import pytest

from indexing.language import detect_language


@pytest.mark.parametrize("text,lang", [
    ("The retriever finds the passages that answer the question.", "en"),
    ("Le modèle cite les passages dans la réponse et les sources.", "fr"),
    ("Der Index ist nicht groß, aber die Suche ist schnell.", "de"),
    ("El índice y los documentos están en la base de datos.", "es"),
    ("检索增强生成把语言模型与文档联系起来。", "zh"),
    ("検索拡張生成は、言語モデルを文書に結び付けます。", "ja"),
    ("검색 증강 생성은 언어 모델을 문서와 연결합니다.", "ko"),
    ("Поиск находит документы по запросу.", "ru"),
    ("12345 ... !!!", ""),
])
def test_detect_language(text: str, lang: str):
    assert detect_language(text) == lang
