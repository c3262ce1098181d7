"""The page at `/` in real headless Chromium, driven by selenium through Debian's chromedriver.

Needs Debian's `chromium` and `chromium-driver` (`make test` installs them when it can, and says so
when it cannot). The server is the real one on loopback with the session pipeline (SmolLM2).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tests.readiness import wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(
    not (shutil.which("chromium") and shutil.which("chromedriver")),
    reason="Debian packages chromium and chromium-driver are not installed (make browser installs them)",
)

HARBOUR = ("# Tavrin harbour\n\nTavrin harbour has 64 moorings. The harbour master of Tavrin is Ilse Brandt, "
           "appointed in 2019. A mooring costs 18 euros a day, or 26 euros for boats over 12 metres.\n")


@pytest.fixture()
def browser(tmp_path):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
              "--no-first-run", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--window-size=1400,900", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _js(driver, script: str):
    return driver.execute_script(script)


def _type(driver, css: str, text: str) -> None:
    driver.find_element(By.CSS_SELECTOR, css).send_keys(text)


def _click(driver, css: str) -> None:
    driver.find_element(By.CSS_SELECTOR, css).click()


# answers that have ended: an error in the log, or a filled-in per-answer line (the same count before
# and after, so the wait ends when this answer ends)
ENDED = ("return document.querySelectorAll('#log .error').length + "
         "[...document.querySelectorAll('#log .meta')].filter(m => m.textContent).length")


def _ask(driver, question: str) -> str:
    n = _js(driver, ENDED)
    _type(driver, "#q", question)
    _click(driver, "#send")
    wait_for(lambda: _js(driver, ENDED) > n, f"the page answered {question!r}", timeout=180, interval=0.2)
    return _js(driver, "const a = document.querySelectorAll('#log .a'); return a[a.length - 1].textContent")


def _upload(driver, path: Path) -> dict:
    """Upload through the page's file input; wait for the job to end; the upload's list item."""
    n = _js(driver, "return document.querySelectorAll('#uploads li.done, #uploads li.failed').length")
    driver.find_element(By.CSS_SELECTOR, "#file").send_keys(str(path))
    wait_for(lambda: _js(driver, "return document.querySelectorAll('#uploads li.done, #uploads li.failed').length") > n,
             f"the page's upload of {path.name} ended", timeout=120, interval=0.2)
    return _js(driver, "const li = document.querySelector('#uploads li'); "
                       "return {cls: li.className, status: li.querySelector('.status').textContent}")


def _documents(driver) -> list[str]:
    return _js(driver, "return [...document.querySelectorAll('#doclist li .name')].map(e => e.textContent)")


def test_page_upload_ask_click_a_citation_see_the_span(server, browser, tmp_path, monkeypatch):
    """Upload -> job -> ask -> click [n] -> the passage with the cited span marked. Bugs caught: an
    upload whose job status never reaches the page, a document list that does not follow uploads
    and deletes, [n] markers that do not open their passage, a passage shown without (or with the
    wrong) span, an unindexable upload shown as indexed or changing what is there, a mode switch
    that is not sent, no model or latency in the footer, a refusal shown as an answer or without the
    passages that came closest."""
    base, app = server
    browser.get(base + "/")
    wait_for(lambda: "smollm2" in _js(browser, "return document.querySelector('#model').textContent"),
             "the footer named the model", timeout=30, interval=0.2)
    # a collection of its own, so the session's other tests keep their corpus
    _type(browser, "#new-collection", "webpage")
    _click(browser, "#add-collection")
    assert _js(browser, "return document.querySelector('#collection').value") == "webpage"
    doc = tmp_path / "harbour.md"
    doc.write_text(HARBOUR, encoding="utf-8")
    up = _upload(browser, doc)
    assert "done" in up["cls"] and "1 new" in up["status"], up
    wait_for(lambda: _documents(browser) == ["harbour.md"], "the document list showed the upload", timeout=30)

    # an upload the server cannot index: its error text on the page, nothing indexed changes
    empty = tmp_path / "empty.md"
    empty.write_text("  \n\n", encoding="utf-8")
    up = _upload(browser, empty)
    assert "failed" in up["cls"] and "nothing indexed from empty.md: it has no text" in up["status"], up
    broken = tmp_path / "scan.pdf"
    broken.write_bytes(b"%PDF-1.4 not really a pdf")
    up = _upload(browser, broken)
    assert "failed" in up["cls"] and "unreadable PDF" in up["status"], up
    assert _documents(browser) == ["harbour.md"]

    _click(browser, "#mode-short")
    answer = _ask(browser, "Who is the harbour master of Tavrin?")
    assert "Ilse Brandt" in answer, answer
    assert "(short)" in _js(browser, "return document.querySelector('#latency').textContent")  # the mode was sent
    assert _js(browser, "return document.querySelectorAll('#passage:not([hidden])').length") == 0
    _click(browser, "#log .cite")
    panel = _js(browser, "const p = document.querySelector('#passage'); return {hidden: p.hidden, "
                         "text: document.querySelector('#passage-text').textContent, "
                         "mark: [...p.querySelectorAll('mark')].map(m => m.textContent)}")
    assert not panel["hidden"] and "Tavrin harbour has 64 moorings" in panel["text"]
    span = re.sub(r"\s*\[\d+\]\s*$", "", answer).strip()
    assert panel["mark"] == [span], (panel, answer)  # a grounded short answer: the span it copied
    footer = _js(browser, "return document.querySelector('#footer').textContent")
    assert "model: smollm2" in footer and re.search(r"last answer \(short\): \d+\.\d s", footer), footer

    png = browser.get_screenshot_as_png()
    (tmp_path / "page.png").write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("RAG_WEB_SCREENSHOT"):  # the docs' picture: RAG_WEB_SCREENSHOT=docs/img/page.png
        Path(os.environ["RAG_WEB_SCREENSHOT"]).write_bytes(png)

    # a refusal is shown as one, with the passages that came closest (SmolLM2 never refuses on its own:
    # `answer.refuse_below` above every score makes the pipeline refuse before decoding)
    pipe = app.state.rag.pipeline
    with monkeypatch.context() as m:
        m.setattr(pipe.cfg.answer, "refuse_below", 1e9)
        text = _ask(browser, "When does the ferry leave Tavrin?")
    last = ("const a = [...document.querySelectorAll('#log .a')].pop(); const s = [...document.querySelectorAll("
            "'#log .sources')].pop(); return {cls: a.className, badge: a.querySelector('.badge')?.textContent, "
            "label: s.previousElementSibling?.textContent, closest: [...s.querySelectorAll('li')].map(l => l.textContent), "
            "cites: a.querySelectorAll('.cite').length}")
    shown = _js(browser, last)
    assert "refusal" in shown["cls"] and shown["badge"] == "no answer" and shown["cites"] == 0, shown
    assert pipe.cfg.prompt.refusal in text and "Closest passages" in shown["label"], shown
    assert any("Tavrin harbour" in c for c in shown["closest"]), shown
    _click(browser, "#log .sources.closest li")
    assert "64 moorings" in _js(browser, "return document.querySelector('#passage-text').textContent")
    assert _js(browser, "return document.querySelectorAll('#passage mark').length") == 0  # nothing was cited

    # drag and drop: a file dropped on the box is uploaded like a chosen one
    n = _js(browser, "return document.querySelectorAll('#uploads li.done').length")
    _js(browser, "const dt = new DataTransfer(); dt.items.add(new File(['# Ferry\\n\\nThe Tavrin ferry leaves at "
                 "9 every morning.\\n'], 'ferry.md', {type: 'text/markdown'})); document.querySelector('#drop')"
                 ".dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}))")
    wait_for(lambda: _js(browser, "return document.querySelectorAll('#uploads li.done').length") > n,
             "the dropped file was indexed", timeout=60, interval=0.2)
    wait_for(lambda: sorted(_documents(browser)) == ["ferry.md", "harbour.md"], "the list showed the dropped file",
             timeout=30)

    def delete(name: str) -> None:
        for li in browser.find_elements(By.CSS_SELECTOR, "#doclist li"):
            if li.find_element(By.CSS_SELECTOR, ".name").text == name:
                li.find_element(By.CSS_SELECTOR, "button.del").click()
                return
        raise AssertionError(f"{name} is not listed")

    delete("ferry.md")  # one click only arms the button
    assert sorted(_documents(browser)) == ["ferry.md", "harbour.md"]
    delete("ferry.md")
    wait_for(lambda: _documents(browser) == ["harbour.md"], "the deleted document left the list", timeout=30)
    hits = httpx.post(base + "/v1/search", json={"query": "Tavrin ferry", "collection": "webpage"}).json()["results"]
    assert hits and not any("ferry" in h["text"] for h in hits)  # gone from the index too


def test_chat_page_streams_answer_with_clickable_citations(server, browser, tmp_path):
    base, _ = server
    browser.get(base + "/")
    answer = _ask(browser, "What is the capital city of Zarnovia?")
    assert "Velmora" in answer
    sources = _js(browser, "return [...document.querySelectorAll('#log .sources li')].map(li => li.textContent)")
    assert sources and any("Zarnovia" in s for s in sources)
    cites = _js(browser, "return document.querySelectorAll('#log .cite').length")
    if cites:  # the model wrote markers: clicking one highlights its source and opens its passage
        _click(browser, "#log .cite")
        assert _js(browser, "return document.querySelectorAll('.sources li.active').length") == 1
        assert "Velmora" in _js(browser, "return document.querySelector('#passage-text').textContent")
    else:
        assert any("(cited)" in s for s in sources)

    # an answer made of other answers shows the questions it went through (asked as a follow-up: the
    # page sends the conversation, and a question naming both options takes the path all the same)
    _click(browser, "#mode-short")
    answer = _ask(browser, "Which drone has a longer flight time, the XR-200 or the XR-300?")
    assert answer.lower().startswith("the xr-300"), answer
    parts = _js(browser, "return [...document.querySelectorAll('#log .parts li')].map(li => li.textContent)")
    assert len(parts) == 2 and "XR-200" in parts[0] and "42 minutes" in parts[0] and "55 minutes" in parts[1], parts


def test_chat_page_sends_api_key_and_collection(server, browser, monkeypatch):
    # was: only `default`, no way to send a key, the raw 401 JSON shown as the answer
    base, _ = server
    monkeypatch.setenv("RAG_API_KEYS", "page-key")
    browser.get(base + "/")
    wait_for(lambda: "default" in _js(browser, "return [...document.querySelectorAll('#collection option')]"
                                               ".map(o => o.value)"),
             "the page listed the collections", timeout=30, interval=0.2)
    _js(browser, "document.querySelector('#collection').value = 'default'")
    text = _ask(browser, "What is the capital city of Quintara?")
    assert "API key" in text and "{" not in text
    _type(browser, "#key", "page-key")
    _ask(browser, "What is the capital city of Quintara?")
    assert _js(browser, "return document.querySelectorAll('#log .error').length") == 1  # only the keyless try
    sources = _js(browser, "const s = document.querySelectorAll('#log .sources'); "
                           "return [...s[s.length - 1].querySelectorAll('li')].map(li => li.textContent)")
    assert any("Quintara" in s for s in sources)  # answered from the chosen collection, with the key


def test_chat_page_sends_the_conversation_so_follow_ups_are_condensed(server, browser):
    """Bug caught: the page asking each question alone, so "How many people live there?" is
    searched as typed and nothing of the previous turn's prompt is reused; and a "New
    conversation" that leaves the old history in the next request."""
    base, _ = server
    browser.get(base + "/")

    def ask(question: str) -> str:
        _ask(browser, question)
        return _js(browser, "const m = document.querySelectorAll('#log .meta'); return m[m.length - 1].textContent")

    first = ask("What is the capital city of Zarnovia?")
    assert "searched:" not in first
    second = ask("How many people live there?")
    assert "searched:" in second and re.search("Zarnovia|Velmora", second.split("searched:")[1]), second
    prompt1 = int(re.search(r"(\d+) prompt tokens", first).group(1))
    cached2 = int(re.search(r"\((\d+) cached\)", second).group(1))
    assert cached2 >= prompt1 // 16 * 16, (first, second)  # the server's prompt extended turn 1's
    _click(browser, "#new")
    assert _js(browser, "return document.querySelectorAll('#log > *').length") == 0
    assert "searched:" not in ask("How many people live there?")  # a new conversation: nothing to condense
