"""Words for the sentences of a chapter that state a computed result: glued, never typed.

A sentence such as "the measured rank equals the closed form in every row" goes stale the
moment a knob or the library changes, so the chapters build it from the data. A code cell
calls ``glue_values(glue, rope_agree=8, rope_heads=words([1, 2]))`` (``glue`` is
``myst_nb.glue``, passed in so that idlib does not depend on myst-nb) and the Markdown (or
the ``mystnb.figure.caption`` of a figure cell) cites ``{glue:text}`rope_agree```; words
that carry MyST (inline math) are glued with ``myst_nb.glue`` as Markdown and cited with
``{glue:md}`name:myst```. Values are stored as plain text (an integer as it is, any other
value as the string the caller made of it, without quotes), so that the stored output is
the same on every CPU (nbval compares it): format a float yourself (``f"{x:.2e}"``).

The recurring pieces have one spelling:

- ``tally(4, 5, "row")`` -> "4 of the 5 rows"; ``tally(5, 5, "row")`` -> "all 5 rows";
- ``words([1, 2, 3])`` -> "1, 2 and 3" (``listing`` is the same, '' for nothing);
- ``seeds_text([0, 1, 2])`` -> "seeds 0, 1 and 2";
- ``roundoff_words(3e-15)`` -> "less than $10^{-12}$".
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Iterable, Sequence

from .tables import ROUNDOFF_SHOWN


class Text:
    """A string shown as itself: its plain-text representation has no quotes (a ``str`` glued
    as it is would show as ``'1 and 2'``)."""

    def __init__(self, text: Any) -> None:
        self.text = str(text)

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Text) and other.text == self.text


def words(items: Iterable[Any], last: str = "and") -> str:
    """'1', '1 and 2', '1, 2 and 3': a short list as a reader says it."""
    items = [str(x) for x in items]
    if not items:
        raise ValueError("words: nothing to list")
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {last} " + items[-1]


def listing(items: Iterable[object]) -> str:
    """``words``, and '' for nothing."""
    items = list(items)
    return words(items) if items else ""


def glue_text(value: Any) -> Any:
    """What ``glue_values`` stores for ``value``: an integer as it is, anything else as
    ``Text``. A float is refused (its last digits differ from one CPU to another): format it
    first."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        raise TypeError(f"glue_values: format the float {value!r} first (f'{{x:.3e}}')")
    return Text(value)


def glue_values(glue: Callable[..., Any], **values: Any) -> None:
    """``glue(name, glue_text(value), display=False)`` for each value (``glue`` is
    ``myst_nb.glue``): cite each in the page as ``{glue:text}`name```."""
    for name, value in values.items():
        glue(name, glue_text(value), display=False)


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
