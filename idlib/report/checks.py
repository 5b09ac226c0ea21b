"""Small helpers the chapters share: relative differences, divisors, printed lines that fit.

``max_rel`` is how a chapter shows that a group element leaves something unchanged: the
largest entry of |new - old| relative to the largest entry of |old| (print it through
``tables.format_roundoff``, whose digits do not depend on the CPU). ``divisors`` lists the
admissible head counts H of a width d (H must divide d for d_k = d_v = d/H), or the
admissible key/value head counts G of H. ``wrapped`` breaks a long printed result line so
that it fits the book's content column.
"""
from __future__ import annotations

import textwrap

from ..lazy import torch

from .parameters import Rule


def max_rel(new: torch.Tensor, old: torch.Tensor) -> float:
    """max |new - old| / max |old| (entrywise); ``old`` must not be all zeros."""
    scale = old.abs().max()
    if scale == 0:
        raise ValueError("max_rel: the reference tensor is zero")
    return ((new - old).abs().max() / scale).item()


def divisors(n: int) -> list[int]:
    """The divisors 1 <= h <= n of a positive integer n, increasing: divisors(12) = [1, 2, 3, 4, 6, 12]."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"divisors: n={n!r} must be a positive integer")
    return [h for h in range(1, n + 1) if n % h == 0]


def wrapped(text: str, width: int = 76) -> str:
    """``text`` in lines of at most ``width`` characters, broken after '; ' where possible.

    A printed result line must fit the book's content column (about 78 monospace characters
    at 1280 px); print long lines through this. Clauses separated by '; ' are kept whole when
    they fit; a longer clause is broken between words, continuation lines indented by two.
    """
    lines: list[str] = []
    for clause in text.split("; "):
        joined = f"{lines[-1]}; {clause}" if lines else clause
        if lines and len(joined) <= width:
            lines[-1] = joined
            continue
        if lines:
            lines[-1] += ";"
        lines += textwrap.wrap(clause, width=width, subsequent_indent="  ",
                               break_on_hyphens=False) or [""]
    return "\n".join(lines)


CONFIG_FIELDS = Rule("a dict of AttentionConfig fields (names to values)",
                     lambda x: isinstance(x, dict) and all(isinstance(k, str) for k in x))
"""Parameters-cell rule for a layer given as keyword arguments of ``AttentionConfig``."""
