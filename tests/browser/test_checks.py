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
