"""Words for the sentences of a chapter that state a computed result.

A sentence such as "the measured rank equals the closed form in every row" goes stale the
moment a knob or the library changes, so the chapters build it from the data: a cell glues
the words (``myst_nb.glue``) and the prose shows them with ``{glue:md}`name:myst```. These
helpers give the recurring pieces one spelling:

- ``tally(4, 5, "row")`` -> "4 of the 5 rows"; ``tally(5, 5, "row")`` -> "all 5 rows";
- ``listing(["a", "b", "c"])`` -> "a, b and c";
- ``seeds_text([0, 1, 2])`` -> "seeds 0, 1 and 2";
- ``roundoff_words(3e-15)`` -> "less than $10^{-12}$".
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from .tables import ROUNDOFF_SHOWN


def plural(noun: str, n: int, plural_form: str | None = None) -> str:
    """``noun`` for n == 1, else its plural (``plural_form`` or noun + 's')."""
    return noun if n == 1 else (plural_form or noun + "s")


def tally(k: int, n: int, noun: str, plural_form: str | None = None) -> str:
    """How many of ``n`` things: 'all 5 rows', 'both rows', '4 of the 5 rows', 'none of the 5
    rows', 'the one row' / 'not the one row' (n = 1)."""
    if not 0 <= k <= n:
        raise ValueError(f"tally: need 0 <= k={k} <= n={n}")
    many = plural(noun, n, plural_form)
    if n == 1:
        return f"the one {noun}" if k == 1 else f"not the one {noun}"
    if k == n:
        return f"both {many}" if n == 2 else f"all {n} {many}"
    if k == 0:
        return f"none of the {n} {many}"
    return f"{k} of the {n} {many}"


def listing(items: Iterable[object]) -> str:
    """'a', 'a and b', 'a, b and c' (nothing: '')."""
    items = [str(x) for x in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def seeds_text(seeds: Sequence[int]) -> str:
    """'seed 0' or 'seeds 0, 1 and 2'."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds_text: no seeds")
    return f"{plural('seed', len(seeds))} {listing(seeds)}"


def roundoff_words(x: float) -> str:
    """A relative difference that should be zero, in words with inline math (MyST):
    'less than $10^{-12}$' below ``ROUNDOFF_SHOWN``, two digits from 0.01 on
    ('1.9', '0.13'), else '$3.1 \\cdot 10^{-5}$'."""
    if abs(x) >= 1e-2:
        return f"{x:.2g}"
    if abs(x) < ROUNDOFF_SHOWN:
        exponent = round(math.log10(ROUNDOFF_SHOWN))
        return f"less than $10^{{{exponent}}}$"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"${mantissa} \\cdot 10^{{{int(exponent)}}}$"


def math_values(symbol: str, values: Iterable[object]) -> str:
    """Values of one symbol as inline math: '$d = 6$', '$d = 2$, $4$ and $8$'."""
    values = [str(v) for v in values]
    if not values:
        raise ValueError("math_values: no values")
    return listing([f"${symbol} = {values[0]}$"] + [f"${v}$" for v in values[1:]])
