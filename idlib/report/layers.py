"""The measured layer in the book's notation, for the chapters' tables.

``idlib.report.tables.layer_text`` writes a layer as its rows of :mod:`idlib.variants` spell it
('d=6 H=2 G=2 k=2 v=2 C=3 normed', 'L=2 S=2'). The book's notation page writes the latent width
$d_c$ (the query latent's $d_c'$, DeepSeek's names) and the number of consecutive layers that
share one set of keys and values $L_{kv}$, because $C$ and $S$ name other things there
(conserved quantities, training steps). ``layer_label`` is ``layer_text`` with those three
symbols renamed, nothing else changed.
"""
from __future__ import annotations

import re
from typing import Any

from .tables import layer_text

RENAMED = ((re.compile(r"(?<![\w'])C_Q="), "d_c'="), (re.compile(r"(?<![\w'])C="), "d_c="),
           (re.compile(r"(?<![\w'])S="), "L_kv="))


def layer_label(config: Any) -> str:
    """``layer_text(config)`` with the latent widths and the sharing factor in the book's
    symbols: 'd=6 H=2 G=2 k=2 v=2 d_c=3 normed', 'd=4 ... L=2 L_kv=2'."""
    text = layer_text(config)
    for pattern, new in RENAMED:
        text = pattern.sub(new, text)
    return text
