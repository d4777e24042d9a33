"""The web page in a real browser (Debian's chromium driven by Playwright) against a real service on loopback with
the bundled reader and embedder: create a collection, upload a PDF, watch it index, ask, and see the answer with its
route, cost and cited page; then the LC-vs-RAG compare view. A screenshot is written by the test run (to
LCRAG_SCREENSHOT_DIR when set, e.g. docs/, else the test's temporary directory)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from document_fixtures import crane_manual, tool_manual
from service_fixtures import running

from lcrag.pipeline.pipeline import Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
def manual(tmp_path):
    return crane_manual(tmp_path)


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "the browser test needs Debian's chromium (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def test_upload_ask_and_see_the_answer_with_its_cited_page(tmp_path, browser):
    settings = Settings(cache_dir=tmp_path / "cache", chunking="sentences:40", k=2, strategy="rag")
    answering = Answering(settings, tmp_path / "collections", price_as="gpt-4o-mini")
    pdf = manual(tmp_path)
    try:
        with running(create_app(answering)) as url:
            page = browser.new_page(viewport={"width": 390, "height": 844})  # a phone-width window
            page.goto(url)
            page.get_by_label("New collection name").fill("manuals")
            page.get_by_role("button", name="Create").click()
            page.get_by_label("Add documents (PDF, DOCX, HTML, EPUB, Markdown, text)").set_input_files(str(pdf))
            page.get_by_role("status").filter(has_text="ready").wait_for(timeout=120_000)
            page.get_by_label("Question").fill("What is the reset code for the harbour crane?")
            page.get_by_label("Strategy").select_option("rag")
            page.get_by_role("button", name="Ask", exact=True).click()
            box = page.locator(".answer-box")
            box.locator(".sources li").first.wait_for(timeout=300_000)
            assert box.locator(".answer").inner_text().strip() not in ("", "…")  # the bundled 135M reader's answer
            assert "7781" in box.locator(".sources").inner_text()  # the quoted snippet
            assert "crane.pdf p. 6 (§ Crane Controls)" in box.locator(".sources").inner_text()
            assert "route: rag" in box.locator(".summary").inner_text() and "$" in box.locator(".summary").inner_text()
            shot_dir = Path(os.environ.get("LCRAG_SCREENSHOT_DIR") or tmp_path)
            page.screenshot(path=str(shot_dir / "web-page.png"), full_page=True)
            page.get_by_role("button", name="Compare LC and RAG").click()
            page.locator(".compare .answer-box").nth(1).locator(".sources li").first.wait_for(timeout=600_000)
            compare = page.locator(".compare").inner_text()
            assert "route: lc" in compare and "route: rag" in compare and "(located)" in compare
            page.set_viewport_size({"width": 1100, "height": 900})
            page.screenshot(path=str(shot_dir / "web-page-compare.png"), full_page=True)
    finally:
        answering.close()


def ask_and_stop_while_it_streams(page, box, screenshot: Path, tries: int = 4) -> None:
    """Ask, see the answer arriving token by token, and press Stop while it is still being written. The small reader
    now and then ends its list after a dozen numbers, and an answer that finished before the click has nothing left to
    stop: that ask is repeated."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(tries):
        page.get_by_role("button", name="Ask", exact=True).click()
        # A locator, not wait_for_function: the page's CSP forbids the eval that one needs.
        box.locator(".answer").filter(has_text=re.compile(r"\S.{11,}", re.S)).wait_for(timeout=300_000)
        if "the whole document read" in box.locator(".stage").inner_text():
            page.screenshot(path=str(screenshot), full_page=True)
            try:
                box.get_by_role("button", name="Stop").click(timeout=3_000)
                return
            except PlaywrightTimeout:
                pass
        box.locator(".summary").filter(has_text="route").wait_for(timeout=300_000)
    raise AssertionError(f"the answer never streamed for long enough to be stopped: {box.inner_text()[:300]}")


def test_the_answer_streams_in_and_stop_ends_the_generation(tmp_path, browser):
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", strategy="lc", max_tokens=1500, context_window=4096)
    answering = Answering(settings, tmp_path / "collections")
    try:
        with running(create_app(answering)) as url:
            page = browser.new_page()
            page.goto(url)
            page.get_by_label("New collection name").fill("manuals")
            page.get_by_role("button", name="Create").click()
            page.get_by_label("Add documents (PDF, DOCX, HTML, EPUB, Markdown, text)").set_input_files(
                str(manual(tmp_path)))
            page.get_by_role("status").filter(has_text="ready").wait_for(timeout=120_000)
            page.get_by_label("Question").fill("Write the numbers from 1 to 500, separated by commas.")
            page.get_by_label("Strategy").select_option("lc")
            box = page.locator(".answer-box").last  # a repeated ask is the conversation's next turn
            ask_and_stop_while_it_streams(
                page, box, Path(os.environ.get("LCRAG_SCREENSHOT_DIR") or tmp_path) / "web-page-streaming.png")
            box.locator(".summary").filter(has_text="stopped").wait_for(timeout=30_000)
            reader = answering.base.reader
            base = getattr(reader, "inner", reader).base_url
            import httpx
            for _ in range(100):  # llama.cpp's slot goes idle: the generation ended with the connection
                if not httpx.get(f"{base}/slots").json()[0]["is_processing"]:
                    break
                page.wait_for_timeout(100)
            else:
                raise AssertionError("the generation went on after Stop")
            assert len(box.locator(".answer").inner_text()) < 1500  # far from the 500 numbers asked for
    finally:
        answering.close()


def test_an_uploaded_html_page_never_runs_on_the_services_origin(tmp_path, browser):
    """Stored XSS: an uploaded page's script would run with the web page's origin (its API key field, its API). In a
    real browser, opening it is a download; and the page itself refuses script it did not ship."""
    import httpx

    answering = Answering(Settings(cache=False, cache_dir=tmp_path / "cache"), tmp_path / "collections")
    evil = (b"<html><body><p>The crane reset code is 7781.</p><script>fetch('/v1/collections', {method: 'POST', "
            b"headers: {'Content-Type': 'application/json'}, body: JSON.stringify({name: 'pwned'})})</script></body></html>")
    try:
        with running(create_app(answering)) as url:
            httpx.post(f"{url}/v1/collections", json={"name": "ops"})
            httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("evil.html", evil)})
            page = browser.new_page(accept_downloads=True)
            page.goto(url)
            with page.expect_download() as download:
                page.evaluate("url => { const a = document.createElement('a'); a.href = url; a.click(); }",
                              "/v1/collections/ops/files/evil.html")
            assert download.value.suggested_filename == "evil.html"
            with pytest.raises(Exception, match="Content Security Policy"):  # an inline script, as an injection's
                page.add_script_tag(content="document.title = 'injected'")
            page.wait_for_timeout(500)
            assert page.title() == "lcrag"
            assert [c["name"] for c in httpx.get(f"{url}/v1/collections").json()["data"]] == ["ops"]
    finally:
        answering.close()


def test_files_picked_while_the_collection_is_still_being_created_go_to_it(tmp_path, browser):
    """A quick hand (or a slow server): the files are chosen before Create's answer has come back. They wait for it
    and go to the new collection, not nowhere."""
    import time

    text = tmp_path / "notes.txt"
    text.write_text("The harbour crane reset code is 7781. Hold the reset key for five seconds.\n")
    answering = Answering(Settings(cache_dir=tmp_path / "cache"), tmp_path / "collections")

    def slow_create(route):
        if route.request.method == "POST":
            time.sleep(1.5)
        route.continue_()

    try:
        with running(create_app(answering)) as url:
            page = browser.new_page()
            page.route("**/v1/collections", slow_create)
            page.goto(url)
            page.get_by_label("New collection name").fill("notes")
            page.get_by_role("button", name="Create").click()
            page.get_by_label("Add documents (PDF, DOCX, HTML, EPUB, Markdown, text)").set_input_files(str(text))
            page.get_by_role("status").filter(has_text="ready").wait_for(timeout=120_000)
            assert "notes: ready — notes.txt" in page.get_by_role("status").inner_text()
    finally:
        answering.close()


def test_a_two_turn_conversation_in_the_page_keeps_each_answer_with_its_sources(tmp_path, browser):
    """The follow-up "Which algorithm does it use?" is asked with the conversation so far, so its source is the fit
    command's section; New conversation starts again."""
    manual = tool_manual(tmp_path)
    settings = Settings(cache_dir=tmp_path / "cache", chunking="words:60", k=1, strategy="rag")
    answering = Answering(settings, tmp_path / "collections")
    try:
        with running(create_app(answering)) as url:
            page = browser.new_page()
            page.goto(url)
            page.get_by_label("New collection name").fill("tool")
            page.get_by_role("button", name="Create").click()
            page.get_by_label("Add documents (PDF, DOCX, HTML, EPUB, Markdown, text)").set_input_files(str(manual))
            page.get_by_role("status").filter(has_text="ready").wait_for(timeout=120_000)
            page.get_by_label("Strategy").select_option("rag")
            boxes = page.locator(".answer-box")
            for turn, question in enumerate(["What does the fit command do?", "Which algorithm does it use?"]):
                page.get_by_label("Question").fill(question)
                page.get_by_role("button", name="Ask", exact=True).click()
                boxes.nth(turn).locator(".summary").filter(has_text="route").wait_for(timeout=300_000)
            assert boxes.count() == 2 and boxes.nth(0).locator("h3").inner_text() == "What does the fit command do?"
            for turn in range(2):  # each answer keeps its own sources
                assert "manual.md" in boxes.nth(turn).locator(".sources").inner_text()
                assert "(§ The fit command)" in boxes.nth(turn).locator(".sources").inner_text()
            assert "follow-up" in boxes.nth(1).locator(".summary").inner_text()
            assert "follow-up" not in boxes.nth(0).locator(".summary").inner_text()
            page.screenshot(path=str(Path(os.environ.get("LCRAG_SCREENSHOT_DIR") or tmp_path) / "web-page-chat.png"),
                            full_page=True)
            page.get_by_role("button", name="New conversation").click()
            assert boxes.count() == 0
            page.get_by_role("button", name="Ask", exact=True).click()  # asked again, now on its own
            boxes.first.locator(".summary").filter(has_text="route").wait_for(timeout=300_000)
            assert "follow-up" not in boxes.first.locator(".summary").inner_text()
            assert "(§ The fit command)" not in boxes.first.locator(".sources").inner_text()
    finally:
        answering.close()
