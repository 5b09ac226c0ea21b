"""The API reference of chapters/count_your_model: signatures from autodoc, text from the page.

idlib's docstrings are written for its developers (formulas in plain text, notes on how the
modules are layered and where a rule lives). The page gives each object it documents a reader's
description, with typeset formulas, as the content of the object's autodoc directive; this
extension drops the docstring autodoc would put before that content, so a reader sees the
signature (always the code's own) and the page's text. Registered in _config.yml
(sphinx.local_extensions); nothing else in the book uses autodoc.
"""
from __future__ import annotations


def _page_text_only(app, what, name, obj, options, lines) -> None:
    if name.startswith("idlib."):
        lines.clear()


def setup(app):
    app.connect("autodoc-process-docstring", _page_text_only)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
