"""The book's PDF (LaTeX builder only): proofs without an empty title bar, no empty References chapter.

Registered in _config.yml (sphinx.local_extensions). The HTML is untouched.

- sphinx-proof wraps each {prf:proof} in an admonition without a title; the LaTeX writer then
  draws a note box whose title bar is empty. In the PDF a proof is set as running text
  ("Proof. ..." after the theorem's box), as in print.
- Sphinx sets a table of more than 30 rows as a longtable of ``l`` columns, which never wrap: a
  long cell runs off the page. Such a table, when its widths are not given, gets widths from
  its text (``column_weights``), so its columns are paragraphs (``\\X{w}{total}``) that wrap
  within the text width. Shorter tables stay tabulary tables, whose columns already wrap.
- What the HTML collapses behind a toggle (cells tagged hide-cell, hide-input, hide-output: the
  setup and parameters cells) cannot be collapsed on paper: the PDF leaves it out.
- Sphinx's LaTeX writer moves every citation to one "Bibliography" chapter at the end, which
  would leave chapters/references as a chapter with one sentence and a blank page: in the PDF
  that page keeps only its citations (they still make the Bibliography).
"""
from __future__ import annotations

from docutils import nodes
from sphinx import addnodes

REFERENCES_DOC = "chapters/references"


def _unbox_proofs(tree: nodes.Node) -> None:
    for adm in list(tree.findall(nodes.admonition)):
        if "proof" in adm["classes"] and not any(isinstance(c, nodes.title) for c in adm.children):
            adm.replace_self(adm.children[:])


LONGTABLE_ROWS = 30  # Sphinx's LaTeX writer: more rows than this make a longtable
LINE_CHARS = 80      # characters of a table's small font in the text width (about)
MAX_WEIGHT = 60      # characters: a column's share of the rest stops growing here (it wraps)


def column_weights(cells: list[list[str]]) -> list[int]:
    """Widths (in characters) for the columns of a table whose rows are ``cells``: each column
    gets its longest word, so that no word runs into the next column, and the characters left
    of LINE_CHARS go to the columns with longer text, in proportion to it (up to MAX_WEIGHT)."""
    n = max(len(r) for r in cells)
    need, want = [1] * n, [1] * n
    for row in cells:
        for i, text in enumerate(row):
            # + 2: the column's padding (tabcolsep on both sides) is taken from its width
            need[i] = max(need[i], max((len(w) for w in text.split()), default=1) + 2)
            want[i] = max(want[i], min(len(text), MAX_WEIGHT))
    extra = [max(w - m, 0) for w, m in zip(want, need)]
    left = LINE_CHARS - sum(need)
    if left <= 0 or not sum(extra):
        return need
    return [m + round(left * e / sum(extra)) for m, e in zip(need, extra)]


def _column_widths(tree: nodes.Node) -> None:
    for table in tree.findall(nodes.table):
        if "colwidths-given" in table["classes"]:
            continue
        for tgroup in table.findall(nodes.tgroup):
            rows = list(tgroup.findall(nodes.row))
            if len(rows) <= LONGTABLE_ROWS or any(e.get("morecols") for e in tgroup.findall(nodes.entry)):
                continue
            specs = [c for c in tgroup.children if isinstance(c, nodes.colspec)]
            cells = [[e.astext() for e in row.children if isinstance(e, nodes.entry)] for row in rows]
            for spec, width in zip(specs, column_weights(cells)):
                spec["colwidth"] = width
            table["classes"].append("colwidths-given")


BOTH = ("cell_code_source", "cell_code_output")
HIDDEN = {"all": BOTH, "input+output": BOTH, "input": ("cell_code_source",),
          "output": ("cell_code_output",)}     # myst-nb's hide_mode -> the parts left out


def _drop_collapsed(tree: nodes.Node) -> None:
    for cell in list(tree.findall(nodes.container)):
        parts = HIDDEN.get(cell.get("hide_mode"))
        if not parts or cell.get("nb_element") != "cell_code":
            continue
        for child in list(cell.children):
            if isinstance(child, nodes.container) and child.get("nb_element") in parts:
                cell.remove(child)
        if not cell.children:
            cell.parent.remove(cell)


def _drop_references_chapter(tree: nodes.Node) -> None:
    for start in tree.findall(addnodes.start_of_file):
        if start.get("docname") == REFERENCES_DOC:
            citations = list(start.findall(nodes.citation))
            for c in citations:
                c.parent.remove(c)
            start.children = []
            start.extend(citations)


def on_doctree_resolved(app, doctree, docname) -> None:
    if app.builder.format != "latex":
        return
    _unbox_proofs(doctree)
    _drop_collapsed(doctree)
    _column_widths(doctree)
    _drop_references_chapter(doctree)


def setup(app):
    app.connect("doctree-resolved", on_doctree_resolved)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
