"""The generated parts of the pages this test's owner keeps: the count page's tables of fields
(idlib.studies.count_page) and the reproducibility page's includes (benchmarks/report.py):
every table captioned, the PDF linked only when it exists."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from idlib.config import AttentionConfig
from idlib.studies import count_page

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import report  # noqa: E402


def test_every_field_has_its_meaning_and_default():
    rows = count_page.field_rows()
    assert [r[0] for r in rows] == [f"`{f.name}`" for f in dataclasses.fields(AttentionConfig)]
    by_field = {r[0]: r for r in rows}
    assert by_field["`d_model`"][1] == "required"
    assert by_field["`head_dim`"][1:] == ["$d/H$", "query/key head dimension $k$"]
    assert by_field["`bias`"][1] == "none (`''`)" and by_field["`n_heads`"][1] == "`1`"


def test_a_field_without_a_meaning_is_refused(monkeypatch):
    meanings = dict(count_page.FIELD_MEANINGS)
    del meanings["sinks"]
    monkeypatch.setattr(count_page, "FIELD_MEANINGS", meanings)
    with pytest.raises(ValueError, match="missing \\['sinks'\\]"):
        count_page.field_rows()


def test_the_command_is_the_environments_idlib():
    assert count_page.command().name == "idlib" and count_page.command().is_file()
    code, out = count_page.idlib_json("count", "--d-model", 8, "--heads", 2)
    assert code == 0 and out["unidentified"] == 2 * (4 * 4 + 4 * 4)
    assert out["share"] == out["unidentified"] / out["total"]


def test_report_tables_are_captioned():
    md = "text\n\n| notebook | `default` |\n|---|---:|\n| `a.ipynb` | 1.0 s |\n\nmore\n"
    out = report.captioned(md).split("\n")
    assert out[2:6] == [":::{table} " + report.CAPTIONS["| notebook |"][0],
                        ":name: tab-repro-times", ":align: center", ""]
    assert out[9] == ":::" and out[-2] == "more"
    with pytest.raises(ValueError, match="without a caption"):
        report.captioned("| x | y |\n|---|---|\n")


def test_every_generated_table_is_captioned(tmp_path):
    """The files the reproducibility page includes, from the committed benchmark records."""
    results = Path(report.ROOT) / "benchmarks" / "results"
    for text in (report.build_md("main", tmp_path, ["chapters/a.ipynb"]),
                 report.benchmark_md(results / "rank_speed.json"),
                 report.mutation_md(results / "mutation.json")):
        wrapped = report.captioned(text).split("\n")
        starts = [i for i, line in enumerate(wrapped) if line.startswith("|")
                  and not wrapped[i - 1].startswith("|")]
        assert starts and all(wrapped[i - 4].startswith(":::{table}") for i in starts)


def test_pdf_linked_only_when_built(tmp_path):
    out = tmp_path / "generated"
    out.mkdir()
    missing = report.pdf_md(tmp_path / "none.pdf", out)
    assert "{download}" not in missing and "had not been built" in missing
    assert not (out / "book.pdf").exists()
    pdf = tmp_path / "book.pdf"
    pdf.write_bytes(b"%PDF-1.5 made up")
    linked = report.pdf_md(pdf, out)
    assert "{download}`book.pdf </_build/generated/book.pdf>`" in linked
    assert (out / "book.pdf").read_bytes() == pdf.read_bytes()
    assert linked.startswith("<!--") and "```{only} html" in linked


def test_pdf_long_table_columns_fit_their_longest_word():
    """_ext/book_latex.py: a longtable's column is at least its longest word (+2 for padding)
    wide, and the rest of the line goes to the columns with more text."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
    import book_latex

    prose = "a mechanism that is not derived, described in a sentence of some length " * 2
    widths = book_latex.column_weights([["model type", "reason"], ["qwen2_5_vl_text", prose]])
    assert widths[0] == len("qwen2_5_vl_text") + 2
    assert sum(widths) == book_latex.LINE_CHARS
    many = book_latex.column_weights([[f"column_{i}_name" for i in range(8)]])
    assert many == [len("column_0_name") + 2] * 8      # more than a line: every word still fits
