"""Computed values inside a page's prose and captions: glued, never typed by hand.

A sentence or a figure caption that states a computed result takes the value from the
executed notebook: a code cell calls ``glue_values(rope_agree=8, rope_heads=words([1, 2]))``
and the Markdown (or the ``mystnb.figure.caption`` of a figure cell) cites
``{glue:text}`rope_agree```. The values are stored as plain text (an integer as it is, any
other value as the string the caller made of it, without quotes), so that the stored output
is the same on every CPU (nbval compares it): format a float yourself (``f"{x:.2e}"``).
"""
from __future__ import annotations

import numbers
from typing import Any, Iterable


def words(items: Iterable[Any], last: str = "and") -> str:
    """'1', '1 and 2', '1, 2 and 3': a short list as a reader says it."""
    items = [str(x) for x in items]
    if not items:
        raise ValueError("words: nothing to list")
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {last} " + items[-1]


def glue_text(value: Any) -> Any:
    """What ``glue_values`` stores for ``value``: an integer as it is, a string as plain text.

    A float is refused (its last digits differ from one CPU to another): format it first.
    """
    from IPython.display import Pretty

    if isinstance(value, bool) or isinstance(value, numbers.Integral):
        return int(value) if not isinstance(value, bool) else Pretty(str(value))
    if isinstance(value, numbers.Real):
        raise TypeError(f"glue_values: format the float {value!r} first (f'{{x:.3e}}')")
    return Pretty(str(value))


def glue_values(**values: Any) -> None:
    """Glue each value under its name (not displayed), for ``{glue:text}`name``` in the page."""
    from myst_nb import glue

    for name, value in values.items():
        glue(name, glue_text(value), display=False)
