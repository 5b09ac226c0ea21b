"""Computed values inside a page's prose and captions: glued, never typed by hand.

A sentence or a figure caption that states a computed result takes the value from the
executed notebook: a code cell calls ``glue_values(glue, rope_agree=8,
rope_heads=words([1, 2]))`` (``glue`` is ``myst_nb.glue``, passed in so that idlib does not
depend on myst-nb) and the Markdown (or the ``mystnb.figure.caption`` of a figure cell) cites
``{glue:text}`rope_agree```. The values are stored as plain text (an integer as it is, any
other value as the string the caller made of it, without quotes), so that the stored output
is the same on every CPU (nbval compares it): format a float yourself (``f"{x:.2e}"``).
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Iterable


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
