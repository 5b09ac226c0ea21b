"""The book's PDF (LaTeX builder only): proofs without an empty title bar, no empty References chapter.

Registered in _config.yml (sphinx.local_extensions). The HTML is untouched.

- sphinx-proof wraps each {prf:proof} in an admonition without a title; the LaTeX writer then
  draws a note box whose title bar is empty. In the PDF a proof is set as running text
  ("Proof. ..." after the theorem's box), as in print.
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
    _drop_references_chapter(doctree)


def setup(app):
    app.connect("doctree-resolved", on_doctree_resolved)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
