"""The rendered book in a real browser: fixtures for tests/browser/test_book.py.

Debian's chromium (``make chromium`` installs it) is driven by Playwright (pinned in
requirements.txt; ``playwright install`` is never run: the system browser is used). Pages are
loaded from ``file://`` with every other request aborted, so the book is judged as a reader
without network sees it. Each (page, width) is loaded once and audited by audit.js; the tests
then assert one check each, so a failure names the page, the width and the check.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
HTML = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html"))
SHOTS = Path(os.environ.get("BOOK_SCREENSHOTS", ROOT / "_build" / "screenshots"))
WIDTHS = (1280, 800)
# sphinx-thebe 0.3.1 adds its configuration <script> twice when Sphinx reads the environment
# twice (a redeclared const; thebe itself is off in this book: launch_buttons.thebe false).
KNOWN_JS_ERRORS = {"Identifier 'THEBE_JS_URL' has already been declared"}
AUDIT_JS = (Path(__file__).parent / "audit.js").read_text()
# Pages that are not the book's content: Sphinx's search page, the index redirect, the general index.
NOT_PAGES = {"search.html", "genindex.html", "index.html"}


def book_pages() -> list[str]:
    """Every HTML page of the built book, relative to its root, in a stable order."""
    if not HTML.is_dir():
        return []
    return sorted(str(p.relative_to(HTML)) for p in HTML.rglob("*.html")
                  if not any(part.startswith("_") for part in p.relative_to(HTML).parts)
                  and str(p.relative_to(HTML)) not in NOT_PAGES)


def chromium_path() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no chromium on PATH: run `make chromium` (apt-get install chromium)")
    return path


@pytest.fixture(scope="session")
def browser():


    if not (HTML / "intro.html").exists():
        pytest.fail(f"no built book in {HTML}: run `make book` first")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(),
                               args=["--allow-file-access-from-files", "--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def audited(browser):
    """audited(page, width) -> the audit of that page at that width (each page loaded once)."""
    cache: dict[str, dict[int, dict]] = {}

    def get(page: str, width: int) -> dict:
        if page not in cache:
            cache[page] = _audit(browser, page)
        return cache[page][width]

    return get


def _audit(browser, page: str) -> dict[int, dict]:
    """Load one page (network off), let MathJax typeset it, audit it at each width.

    The page is loaded once at the first width and then resized: MathJax's output does not
    depend on the width, the layout is redone by the browser.
    """
    ctx = browser.new_context(viewport={"width": WIDTHS[0], "height": 900}, device_scale_factor=1)
    network, missing, errors = [], [], []

    def route(r):
        url = r.request.url
        if url.startswith(("file://", "data:", "blob:")):
            r.continue_()
        else:
            network.append(f"{r.request.resource_type} {url}")
            r.abort()

    ctx.route("**/*", route)
    tab = ctx.new_page()
    tab.on("requestfailed", lambda req: req.url.startswith("file://") and missing.append(req.url))
    tab.on("pageerror", lambda e: errors.append(str(e).splitlines()[0][:200]))
    tab.goto((HTML / page).as_uri(), wait_until="load", timeout=60_000)
    # MathJax typesets asynchronously: wait for it (and for the web fonts) before looking.
    tab.evaluate("""async () => {
        if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
        await document.fonts.ready;
        await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))); }""")
    results = {}
    for width in WIDTHS:
        if width != WIDTHS[0]:
            tab.set_viewport_size({"width": width, "height": 900})
            tab.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        result = tab.evaluate(AUDIT_JS)
        result["network"] = sorted(set(network))
        result["missing"] = sorted(set(missing))
        result["js_error"] = [e for e in errors if e not in KNOWN_JS_ERRORS]
        results[width] = result
        if width == 1280:
            SHOTS.mkdir(parents=True, exist_ok=True)
            tab.screenshot(path=str(SHOTS / (re.sub(r"[/\\]", "__", page)[:-5] + ".png")), full_page=True)
    ctx.close()
    return results


def pytest_collection_modifyitems(items):
    """Run a page's tests together (the page is loaded once for all of them)."""
    items.sort(key=lambda it: json.dumps(it.callspec.params.get("page") if hasattr(it, "callspec") else ""))
