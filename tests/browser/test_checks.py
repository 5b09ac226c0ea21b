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


def _audit_page(path) -> dict:
    from conftest import AUDIT_JS, chromium_path
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        tab = b.new_page(viewport={"width": 800, "height": 900})
        tab.goto(path.as_uri())
        found = tab.evaluate(AUDIT_JS)
        b.close()
    return found


# A chapter's cells as myst-nb writes them: a parameters cell, shown or collapsed (hide-cell);
# a code cell; a table with or without a numbered caption.
CHAPTER = """<html><head><style>pre {{ overflow-x: auto; font: 14px monospace; }}</style></head><body>
<article class="bd-article" style="width: 600px"><section id="setup">
<div class="cell tag_parameters{hide_class}">{hide_open}<div class="cell_input"><div class="highlight-ipython3">
<pre>profile = "default"   # default or full</pre></div></div>{hide_close}</div>
</section><section id="results">
<div class="cell"><div class="cell_input"><div class="highlight-ipython3"><pre>x = 1
{code}</pre></div></div></div>
<div class="cell_output"><table class="table">{caption}<tr><th>d</th><th>share</th></tr>
<tr><td>4</td><td>12.50%</td></tr></table></div>
<div class="cell_output"><pre>{long_output}</pre></div>
</section></article></body></html>"""
HIDDEN = dict(hide_class=" tag_hide-cell", hide_open='<details class="hide above-input"><summary>Show code cell '
              "content</summary>", hide_close="</details>")
SHOWN = dict(hide_class="", hide_open="", hide_close="")


def test_audit_finds_wide_code_uncaptioned_tables_and_a_shown_parameters_cell(tmp_path):
    """The three chapter checks fail on a page with the defect and pass on the page fixed;
    the table rule applies to pages under chapters/ only, and printed outputs are not code."""
    (tmp_path / "chapters").mkdir()
    bad, good, guide = (tmp_path / "chapters" / "bad.html", tmp_path / "chapters" / "good.html",
                        tmp_path / "guide.html")
    wide = "result = compute_the_share(d_model, n_heads, n_kv_heads, head_dim, value_dim, rope)"
    bad.write_text(CHAPTER.format(code=wide + "\n" + wide + "x", caption="", long_output="y" * 120, **SHOWN))
    good.write_text(CHAPTER.format(code="share = compute_the_share(d_model, n_heads)",
                                   caption='<caption><span class="caption-number">Table 3.1 </span>'
                                           "<span>Shares.</span></caption>", long_output="y", **HIDDEN))
    guide.write_text(bad.read_text())
    found = _audit_page(bad)
    assert len(found["code_width"]) == 1 and found["code_width"][0].startswith("#results: code ")
    assert "2 line(s) over the" in found["code_width"][0] and f"the longest {len(wide) + 1}" in found["code_width"][0]
    assert found["tables"] == 1 and found["uncaptioned_table"] == [
        '#results: table without a numbered caption (columns: "d | share")']
    assert len(found["parameters_visible"]) == 1 and found["parameters_visible"][0].startswith("#setup: ")
    fixed = _audit_page(good)
    assert (fixed["code_width"], fixed["uncaptioned_table"], fixed["parameters_visible"]) == ([], [], [])
    assert fixed["tables"] == 1
    outside = _audit_page(guide)
    assert outside["uncaptioned_table"] == [] and outside["tables"] == 0 and len(outside["code_width"]) == 1
