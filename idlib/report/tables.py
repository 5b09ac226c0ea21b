"""Tables for the chapters: closed-form counts against measured Jacobian ranks, as Markdown.

``compare`` measures one configuration and pairs the measured rank with the closed form (an
``idlib.verdict.Check``);
``comparison_table`` formats a list of comparisons as a Markdown table (shown in a notebook
with ``display(Markdown(...))``); ``summary`` says in one line how many agree.

Printed text must be identical from one execution to the next, on any CPU (nbval compares
it), so the gap is printed through ``format_gap`` (its decade) and a difference that should be
zero through ``format_roundoff``: its digits are round-off, which changes with the CPU and the
BLAS kernels, so only the fact that it is below ``ROUNDOFF_SHOWN`` is printed.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Iterable, Sequence

from ..lazy import torch

from ..certify import CERTIFY_GAP, CERTIFY_GAP_TEXT, GAP_SHOWN, format_gap  # noqa: F401 (re-exported)
from .. import variants
from ..config import AttentionConfig, LatentAttentionConfig
from ..verdict import Check, check, measure_and_check  # noqa: F401 (re-exported)

ROUNDOFF_SHOWN = 1e-12


def format_roundoff(x: float, digits: int = 1) -> str:
    """'< 1e-12' for a (relative) difference at round-off level, else x in ``digits`` + 1 digits.

    float64 round-off in these layers is ~1e-16 to 1e-14; its digits differ from one CPU to
    another, the fact that it is below 1e-12 does not.
    """
    return f"< {ROUNDOFF_SHOWN:.0e}" if abs(x) < ROUNDOFF_SHOWN else f"{x:.{digits}e}"


def compare(config: AttentionConfig, seed: int = 0, frequencies: torch.Tensor | None = None,
            **measure_kw: Any) -> Check:
    """Measure ``config`` and pair it with ``count(config)`` (``idlib.verdict.measure_and_check``)."""
    c = measure_and_check(config, seed, frequencies=frequencies, **measure_kw)
    if c.n_params != c.total:
        raise AssertionError(f"parameter totals differ: measured {c.n_params}, counted {c.total}")
    return c


def compare_all(configs: Iterable[AttentionConfig], seed: int = 0,
                frequencies: torch.Tensor | None = None, **measure_kw: Any) -> list[Check]:
    return [compare(c, seed, frequencies, **measure_kw) for c in configs]


def format_certified(certified: bool) -> str:
    return "yes" if certified else "not certified"


def format_fraction(numerator: int, denominator: int) -> str:
    """An exact ratio of integers in lowest terms, '1/8' ('0' and '1' when they are)."""
    return str(Fraction(numerator, denominator))


def format_share(unidentified: int, total: int) -> str:
    """The unidentified share U/P as a percentage with two decimals, '12.50%' (the book's one way);
    a share below 0.01% (but not 0) with two significant digits, '0.0028%'."""
    if total <= 0:
        raise ValueError(f"total={total} must be positive")
    share = 100 * unidentified / total
    return f"{share:.2g}%" if 0 < share < 0.01 else f"{share:.2f}%"


def layer_text(config: AttentionConfig | LatentAttentionConfig) -> str:
    """The measured layer in the book's notation, e.g. 'd=6 H=2 G=1 k=4 v=4 r=2 b_Q b_K QK-norm gain'.

    Always d, H, G, k, v; then each variant the layer uses, in the order of the rows of
    :mod:`idlib.variants` (each row writes its own part): r (rotated dims per head), the biases,
    the causal mask, QK-norm, the latent width C (and its norm), centred inputs, a stack of L
    layers sharing K/V over S, the soft-cap, ALiBi, sinks, gating.  A latent layer (DeepSeek): d, H, the latents C_Q and C,
    n, p, v, the biases, e.g. 'd=12 H=2 C_Q=6 C=5 n=3 p=4 v=3 biases'.
    """
    c = config
    if isinstance(c, LatentAttentionConfig):
        return " ".join([f"d={c.d_model}", f"H={c.n_heads}"]
                        + ([f"C_Q={c.q_latent}"] if c.q_latent is not None else [])
                        + [f"C={c.kv_latent}", f"n={c.nope_dim}", f"p={c.rope_dim}",
                           f"v={c.value_dim}"] + (["biases"] if c.bias else []))
    return variants.text(c)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
                   align: str | None = None) -> str:
    """A Markdown (GFM / MyST) table; ``align`` is one letter per column from 'lrc'."""
    rows = [[str(x) for x in row] for row in rows]
    align = align or "r" * len(headers)
    if len(align) != len(headers) or any(len(r) != len(headers) for r in rows):
        raise ValueError("markdown_table: every row and align must have one entry per header")
    rule = {"l": ":--", "r": "--:", "c": ":-:"}
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join(rule[a] for a in align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# Short headers (P parameters, I identified, J Jacobian, gamma gap, U/P unidentified share):
# a table must fit the book's content column; the caption spells them out.
STANDARD_HEADERS = ("$P$", "$I$ (closed form)", "rank $J$", "gap $\\gamma$", "cert.", "$U/P$")


def standard_cells(c: Check) -> list[str]:
    """The cells of ``STANDARD_HEADERS`` for one comparison (U/P from the closed form)."""
    return [str(c.total), str(c.identified), str(c.rank), format_gap(c.gap),
            format_certified(c.certified), format_share(c.unidentified, c.total)]


def captioned(table: str, caption: str, name: str | None = None,
              widths: Sequence[int] | None = None) -> str:
    """``table`` (Markdown) inside a MyST ``{table}`` directive: numbered, captioned, labelled.

    Display it with ``display(Markdown(...))`` from a cell whose metadata has
    ``mystnb.markdown_format = "myst"``; ``{numref}`name``` then refers to it. It is written as
    a colon fence, because a backtick fence's first line may not hold the backticks of a
    role such as {prf:ref} in the caption. ``widths``: relative column widths (the PDF then
    wraps each column within its share of the page instead of guessing from the text).
    """
    label = f":name: {name}\n" if name else ""
    sizes = f":widths: {' '.join(str(w) for w in widths)}\n" if widths else ""
    return f":::{{table}} {caption}\n{label}{sizes}:align: center\n\n{table}\n:::"


def comparison_table(comparisons: Sequence[Check],
                     labels: dict[str, Callable[[AttentionConfig], Any]] | None = None) -> str:
    """Markdown table: one row per comparison, ``labels`` columns (header -> f(config)) first."""
    labels = labels or {}
    headers = list(labels) + list(STANDARD_HEADERS)
    rows = [[f(c.config) for f in labels.values()] + standard_cells(c) for c in comparisons]
    return markdown_table(headers, rows)


def summary(comparisons: Sequence[Check]) -> str:
    """One line: agreements out of total and whether every rank is certified."""
    n = len(comparisons)
    agree = sum(c.agrees for c in comparisons)
    certified = sum(c.certified for c in comparisons)
    finite = [c.gap for c in comparisons if not math.isinf(c.gap)]
    smallest = format_gap(min(finite)) if finite else "inf"
    return (f"{agree} of {n} configurations: measured rank = closed form; "
            f"{certified} of {n} certified (gap >= {CERTIFY_GAP_TEXT}); smallest gap {smallest}")
