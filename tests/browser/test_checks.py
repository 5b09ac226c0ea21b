"""The rules of the rendered-book checks themselves, on small made-up inputs (no browser)."""
from __future__ import annotations

import check_pdf
from test_book import BASE_PT, FONT_PT, min_font_pt

LOG = """Overfull \\hbox (39.2721pt too wide) in paragraph at lines 14823--14823
Overfull \\hbox (21.2721pt too wide) in paragraph at lines 14823--14823
Overfull \\hbox (0.5pt too wide) in paragraph at lines 100--100
Overfull \\vbox (1.3pt too high) detected at line 8923
"""


def test_overfull_one_entry_per_place_widest_first():
    assert check_pdf.overfull(LOG) == [(39.2721, "in paragraph at lines 14823--14823"),
                                       (0.5, "in paragraph at lines 100--100")]


def test_raw_markup_in_prose_found_and_in_code_ignored():
    tex = ("\\sphinxAtStartPar\n\\textbar{} model \\textbar{}\n"
           "\\textbar{}\\sphinxhyphen{}\\sphinxhyphen{}\\sphinxhyphen{}\\textbar{}\n"
           "see \\{prf:ref\\}`thm-x` and \\textbackslash{}sigma\n"
           "\\begin{sphinxVerbatim}\n\\textbar{}\\sphinxhyphen{}\\sphinxhyphen{} \\{cite\\}\n\\end{sphinxVerbatim}\n"
           "\\sphinxcode{\\sphinxupquote{\\{cite\\}}}\n")
    found = check_pdf.raw_markup_tex(tex)
    assert [f.split(":")[0] + ":" + f.split(":")[1].split("'")[0] for f in found] == [
        "book.tex line 3: raw pipe-table text ", "book.tex line 4: unresolved role ",
        "book.tex line 4: raw TeX "]


def test_pdf_text_checks():
    found = check_pdf.raw_markup_pdf(["fine", "see Theorem ?? and this very HTML"])
    assert [f.split(":")[0] for f in found] == ["page 2", "page 2"]


def test_figure_font_size_read_from_the_cell_source():
    assert min_font_pt("plt.subplots(figsize=(10, 3.8))\nax.legend(fontsize=8)") == 8.0
    assert min_font_pt("ax.set_title('x', fontsize='small')") == FONT_PT * 0.833
    assert min_font_pt("batch_size=3; markersize=2; ms=1") == BASE_PT


def test_audit_finds_math_written_as_plain_text(tmp_path):
    """audit.js on a made-up page in the real browser: plain-text formulas in prose are raw_tex,
    the same text in code literals and outputs is not."""
    from conftest import AUDIT_JS, chromium_path
    from playwright.sync_api import sync_playwright

    page = tmp_path / "page.html"
    page.write_text(
        '<html><body><article class="bd-article"><section id="s">'
        "<p>relative to sigma_1, the G(m+1) = 3 scale directions and the share u/P; k^2 - k.</p>"
        "<p>Fine: <code>sigma_1</code>, G (the groups), and/or, I/O, a word(s).</p>"
        '<div class="cell_output"><pre>sigma_1 = 1.0, G(m+1) = 3</pre></div>'
        "</section></article></body></html>")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        tab = b.new_page()
        tab.goto(page.as_uri())
        found = tab.evaluate(AUDIT_JS)["raw_tex"]
        b.close()
    assert sorted(m.split('"')[1] for m in found) == ["G(m+1)", "k^2", "sigma_1", "u/P"], found
