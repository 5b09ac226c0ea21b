"""Every page of the built book, as a reader without network sees it at 1280 and 800 px.

One test per (page, width, check); a failure lists each defect with the section id where it
is, so a chapter's author can find it. The checks:

- network: nothing needs the network (every non-file:// request is aborted and listed);
- missing: no local file (script, style, font, image) is missing;
- math: MathJax (shipped with the book) loaded and typeset every formula without error;
- raw_table: no pipe-table text (``|---``) in prose or outputs: tables render as tables;
- raw_tex: no TeX delimiters or commands left in the visible text after typesetting, and no
  math written as plain text in prose or captions (`k^2`, `W_Q`; API docstrings excepted);
- unresolved: no ``??`` and no unresolved role (``{cite}``, ``:prf:ref:``...);
- overflow: no table, output, figure or formula wider than the content column unless it sits
  in a horizontal scroll box, and the page itself never scrolls sideways;
- clipped_text: no printed output line or display formula wider than its box (one would have
  to scroll to read it);
- code_width: no line of a code cell or code block wider than its box (it would scroll
  sideways; the book's code lines are at most 80 characters);
- uncaptioned_table: every table of a chapter (a page under chapters/) has a numbered caption
  ("Table 4.2"), so that the text can cite it as {numref}`Table %s <tab-...>`;
- parameters_visible: the cell tagged ``parameters`` is collapsed (tag hide-cell) or removed;
- figure_text: the smallest text of every figure is at least 9 px on screen;
- solution_visible: nothing of a closed solution is visible, and no answer is printed after it;
- stderr: no stderr output, no warning or error printed in an output;
- js_error: no JavaScript exception.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import matplotlib
import pytest
from PIL import Image

from conftest import HTML, WIDTHS, book_pages
from idlib.report import plotting

PAGES = book_pages()
CHECKS = ("network", "missing", "math", "raw_table", "raw_tex", "unresolved", "overflow", "clipped_text",
          "code_width", "uncaptioned_table", "parameters_visible", "figure_text", "solution_visible",
          "stderr", "js_error")
MIN_TEXT_PX = 9.0
# matplotlib's named sizes relative to font.size
NAMED = {"xx-small": 0.579, "x-small": 0.694, "small": 0.833, "smaller": 0.833, "medium": 1.0,
         "large": 1.2, "larger": 1.2, "x-large": 1.44, "xx-large": 1.728}
SIZE_ARG = re.compile(r"""(?<![A-Za-z_])(?:fontsize|labelsize|titlesize|size)["']?\]?\s*[=:]\s*"""
                      r"""([0-9]+(?:\.[0-9]+)?|["'][a-z-]+["'])""")


def style_pt() -> tuple[float, float]:
    """(font.size, smallest text size) in pt of the book's matplotlib style (labels, legends, ticks)."""
    with matplotlib.rc_context():
        plotting.style()
        rc = matplotlib.rcParams
        base = float(rc["font.size"])
        keys = ("font.size", "xtick.labelsize", "ytick.labelsize", "legend.fontsize",
                "axes.labelsize", "axes.titlesize", "figure.titlesize")
        return base, min(float(rc[k]) if not isinstance(rc[k], str) else base * NAMED.get(rc[k], 1.0)
                         for k in keys)


FONT_PT, BASE_PT = style_pt()


def min_font_pt(source: str) -> float:
    """Smallest text size (pt) in the figure a cell draws: the style's, or a smaller explicit one."""
    sizes = [BASE_PT]
    for v in SIZE_ARG.findall(source):
        v = v.strip("'\"")
        sizes.append(float(v) if v[0].isdigit() else FONT_PT * NAMED.get(v, 1.0))
    return min(sizes)


def figure_text_problems(images: list[dict]) -> list[str]:
    out = []
    for im in images:
        url = urlparse(im["src"])
        if url.scheme != "file":
            continue
        path = Path(unquote(url.path))
        if not im["complete"] or not im["naturalWidth"]:
            out.append(f"{im['where']}: image {path.name} did not load")
            continue
        if path.suffix.lower() != ".png":
            continue
        dpi = Image.open(path).info.get("dpi", (72.0, 72.0))[0]
        pt = min_font_pt(im["source"])
        px = pt * dpi / 72.0 * im["width"] / im["naturalWidth"]
        if px < MIN_TEXT_PX:
            out.append(f"{im['where']}: figure {path.name}: its {pt:g} pt text (at {dpi:.0f} dpi, "
                       f"{im['naturalWidth']} px wide) shows {px:.1f} px high at {im['width']:.0f} px "
                       f"(needs >= {MIN_TEXT_PX:g} px: smaller figsize or larger fonts)")
    return out


@pytest.mark.skipif(not PAGES, reason="no built book: run `make book`")
@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_page(audited, page: str, width: int, check: str) -> None:
    result = audited(page, width)
    if check == "figure_text":
        problems = figure_text_problems(result["images"])
    elif check == "network":
        problems = [f"needs the network: {u}" for u in result["network"]]
    elif check == "missing":
        problems = [f"missing local file: {u}" for u in result["missing"]]
    else:
        problems = result[check]
    if check == "uncaptioned_table" and problems:
        problems = [f"{len(problems)} of the page's {result['tables']} tables have no numbered caption"] + problems
    assert not problems, f"{page} at {width} px, {check}:\n  " + "\n  ".join(problems)


def test_every_page_found() -> None:
    if not HTML.is_dir():  # `make browser` refuses to start without a built book
        pytest.skip("no built book: run `make book`")
    assert PAGES, f"no pages in {HTML}"
    assert "intro.html" in PAGES
