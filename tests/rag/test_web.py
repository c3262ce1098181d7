"""The chat page in real headless Chromium, driven over the W3C WebDriver protocol (chromedriver).

Needs Debian's `chromium` and `chromium-driver` (`make test` installs them when it can).
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess

import httpx
import pytest

from tests.readiness import process_alive, wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"

pytestmark = pytest.mark.skipif(
    not (shutil.which("chromium") and shutil.which("chromedriver")),
    reason="Debian packages chromium and chromium-driver are not installed",
)


@pytest.fixture()
def browser(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([DRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wd = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(wd + "/status", timeout=2).json()["value"]["ready"],
                 "chromedriver did not become ready", timeout=60, alive=process_alive(proc))
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}}
        sid = httpx.post(wd + "/session", json=caps, timeout=60).json()["value"]["sessionId"]
        yield f"{wd}/session/{sid}"
        httpx.delete(f"{wd}/session/{sid}", timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _find(session: str, css: str) -> str:
    return httpx.post(session + "/element", json={"using": "css selector", "value": css}).json()["value"][ELEMENT]


def _js(session: str, script: str):
    return httpx.post(session + "/execute/sync", json={"script": script, "args": []}, timeout=30).json()["value"]


def test_chat_page_streams_answer_with_clickable_citations(server, browser, tmp_path):
    base, _ = server
    httpx.post(browser + "/url", json={"url": base + "/"}, timeout=30)
    q = _find(browser, "#q")
    httpx.post(f"{browser}/element/{q}/value", json={"text": "What is the capital city of Zarnovia?"})
    httpx.post(f"{browser}/element/{_find(browser, '#send')}/click", json={})
    wait_for(lambda: _js(browser, "return document.querySelector('.meta')?.textContent"), "the page answered",
             timeout=180, interval=0.3)
    answer = _js(browser, "return document.querySelector('.a').textContent")
    assert "Velmora" in answer
    sources = _js(browser, "return [...document.querySelectorAll('.sources li')].map(li => li.textContent)")
    assert sources and any("Zarnovia" in s for s in sources)
    cites = _js(browser, "return document.querySelectorAll('.cite').length")
    if cites:  # the model wrote markers: clicking one highlights its source
        _js(browser, "document.querySelector('.cite').click()")
        assert _js(browser, "return document.querySelectorAll('.sources li.active').length") == 1
    else:
        assert any("(cited)" in s for s in sources)
    png = base64.b64decode(httpx.get(browser + "/screenshot", timeout=30).json()["value"])
    (tmp_path / "page.png").write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_chat_page_sends_api_key_and_collection(server, browser, monkeypatch):
    # was: only `default`, no way to send a key, the raw 401 JSON shown as the answer
    base, _ = server
    monkeypatch.setenv("RAG_API_KEYS", "page-key")
    httpx.post(browser + "/url", json={"url": base + "/"}, timeout=30)
    wait_for(lambda: _js(browser, "return document.querySelectorAll('#collection option').length > 1"),
             "the page listed the collections", timeout=30, interval=0.2)
    options = _js(browser, "return [...document.querySelectorAll('#collection option')].map(o => o.value)")
    assert "default" in options
    _js(browser, "document.querySelector('#collection').value = 'default'")

    # answers that have ended: an error, or a filled-in footer (the same count before and after, so
    # the wait ends when this answer ends; counting empty footers before made it wait 180 s)
    ended = ("return document.querySelectorAll('.error').length + "
             "[...document.querySelectorAll('.meta')].filter(m => m.textContent).length")

    def ask(question: str) -> str:
        n = _js(browser, ended)
        httpx.post(f"{browser}/element/{_find(browser, '#q')}/value", json={"text": question})
        httpx.post(f"{browser}/element/{_find(browser, '#send')}/click", json={})
        wait_for(lambda: _js(browser, ended) > n, f"the page answered {question!r}", timeout=180, interval=0.3)
        return _js(browser, "const a = document.querySelectorAll('.a'); return a[a.length - 1].textContent")

    text = ask("What is the capital city of Quintara?")
    assert "API key" in text and "{" not in text
    httpx.post(f"{browser}/element/{_find(browser, '#key')}/value", json={"text": "page-key"})
    ask("What is the capital city of Quintara?")
    assert _js(browser, "return document.querySelectorAll('.error').length") == 1  # only the keyless try
    sources = _js(browser, "const s = document.querySelectorAll('.sources'); "
                           "return [...s[s.length - 1].querySelectorAll('li')].map(li => li.textContent)")
    assert any("Quintara" in s for s in sources)  # answered from the chosen collection, with the key


def test_chat_page_sends_the_conversation_so_follow_ups_are_condensed(server, browser):
    """Bug caught: the page asking each question alone, so "How many people live there?" is
    searched as typed and nothing of the previous turn's prompt is reused; and a "New
    conversation" that leaves the old history in the next request."""
    import re

    base, _ = server
    httpx.post(browser + "/url", json={"url": base + "/"}, timeout=30)
    filled = "return [...document.querySelectorAll('.meta')].filter(m => m.textContent).length"

    def ask(question: str) -> str:
        n = _js(browser, filled)
        httpx.post(f"{browser}/element/{_find(browser, '#q')}/value", json={"text": question})
        httpx.post(f"{browser}/element/{_find(browser, '#send')}/click", json={})
        wait_for(lambda: _js(browser, filled) > n, f"the page answered {question!r}", timeout=180, interval=0.3)
        return _js(browser, "const m = document.querySelectorAll('.meta'); return m[m.length - 1].textContent")

    first = ask("What is the capital city of Zarnovia?")
    assert "searched:" not in first
    second = ask("How many people live there?")
    assert "searched:" in second and re.search("Zarnovia|Velmora", second.split("searched:")[1]), second
    prompt1 = int(re.search(r"(\d+) prompt tokens", first).group(1))
    cached2 = int(re.search(r"\((\d+) cached\)", second).group(1))
    assert cached2 >= prompt1 // 16 * 16, (first, second)  # the server's prompt extended turn 1's
    _js(browser, "document.querySelector('#new').click()")
    assert _js(browser, "return document.querySelectorAll('#log > *').length") == 0
    assert "searched:" not in ask("How many people live there?")  # a new conversation: nothing to condense
