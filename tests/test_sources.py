"""The book's Markdown sources: mistakes the browser test would only find after a full build.

An inline formula ``$...$`` that wraps onto a line starting with ``+``, ``-`` or ``*`` and a
space turns that line into a list item: the formula is cut in two and the page shows raw TeX
(chapter 6's proof once did, chapter 9's epsilon proof later).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("*.md"), *(ROOT / "chapters").glob("*.md"),
                  *(ROOT / "chapters").glob("*.ipynb")])
LIST_MARKER = re.compile(r"^\s*(?:[-+*]|\d+[.)])\s")
FENCE = re.compile(r"^\s*(```|~~~|:::)")


def markdown_texts(path: Path) -> list[str]:
    """The Markdown of a page: the file itself, or every markdown cell of a notebook."""
    if path.suffix == ".md":
        return [path.read_text(encoding="utf-8")]
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def broken_inline_math(text: str) -> list[str]:
    """Lines that begin a list item while an inline ``$...$`` of the paragraph is still open.

    Display math (``$$``) and code fences are skipped; a blank line closes the paragraph.
    """
    problems, open_dollars, fences = [], 0, []     # fences: "directive" or "code", innermost last
    for line in text.split("\n"):
        fence = FENCE.match(line)
        if fence:
            rest = line.strip()[3:].strip()
            if rest.startswith("{"):
                fences.append("directive")
            elif rest:
                fences.append("code")
            elif fences:
                fences.pop()
            else:
                fences.append("code")
            open_dollars = 0
            continue
        if "code" in fences:
            continue
        if not line.strip():
            open_dollars = 0
            continue
        if open_dollars % 2 == 1 and LIST_MARKER.match(line):
            problems.append(line.strip()[:70])
        open_dollars += line.replace("\\$", "").replace("$$", "").count("$")
    return problems


def test_detects_a_formula_cut_by_a_list_marker():
    assert broken_inline_math("Since $a\n+ b$ holds.") == ["+ b$ holds."]
    assert broken_inline_math("Since $a + b$\n- item") == []
    assert broken_inline_math("Since $a\n\n- b") == []
    assert broken_inline_math("$$\na\n+ b\n$$") == []
    assert broken_inline_math("```{prf:proof}\nSo $a\n+ b$.\n```") == ["+ b$."]
    assert broken_inline_math("```python\nx = '$a'\n+ b\n```\nText.") == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_inline_formula_is_cut_by_a_list_marker(path: Path):
    problems = [p for text in markdown_texts(path) for p in broken_inline_math(text)]
    assert not problems, f"{path.name}: a line starts a list item inside $...$:\n  " + "\n  ".join(problems)


MAX_CODE_LINES = 25     # the style guide: a longer cell belongs in idlib
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


def long_code_cells(nb: dict) -> list[tuple[int, int]]:
    """(cell index, lines) of the code cells longer than MAX_CODE_LINES lines."""
    return [(i, n) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and (n := len("".join(c["source"]).splitlines())) > MAX_CODE_LINES]


def test_long_code_cells_are_found():
    cell = {"cell_type": "code", "source": ["x = 1\n"] * 26}
    assert long_code_cells({"cells": [dict(cell, source=cell["source"][:25]), cell]}) == [(1, 26)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_cells_are_short(path: Path):
    long = long_code_cells(json.loads(path.read_text(encoding="utf-8")))
    assert not long, f"{path.name}: code cells over {MAX_CODE_LINES} lines (cell, lines): {long}"
