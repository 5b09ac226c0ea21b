"""One figure style for the whole book: the same colour for the same thing in every chapter."""
from __future__ import annotations

import matplotlib.pyplot as plt
from ..lazy import torch

COLORS = {
    "closed_form": "#1f4e79",   # closed-form counts and curves
    "measured": "#c0504d",      # measured Jacobian ranks
    "unidentified": "#7f7f7f",  # the unidentified (orbit) part
    "rope": "#9b59b6",
    "gqa": "#2e8b57",
    "baseline": "#e69f00",
}
CYCLE = ["#1f4e79", "#c0504d", "#2e8b57", "#9b59b6", "#e69f00", "#17becf", "#7f7f7f"]


def style() -> None:
    """Apply the book's matplotlib style (call once per notebook).

    Readable text: the HTML column is about 670 px wide and a figure is scaled to fit it, so
    text of s pt in a figure w inches wide shows s * 670 / (72 w) px high. The browser test
    (tests/browser) wants >= 9 px: keep w (inches) <= s (pt) of the smallest text, e.g. a
    6.4 in figure with 10 pt labels; a 10 in figure needs no text below 10 pt.
    """
    plt.rcParams.update({
        "figure.figsize": (6.4, 3.8), "figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3,
        "axes.spines.top": False, "axes.spines.right": False, "font.size": 10,
        "axes.prop_cycle": plt.cycler(color=CYCLE), "legend.frameon": False,
        "svg.hashsalt": "idlib", "savefig.bbox": "tight",
    })


def spectrum(ax, singular_values: torch.Tensor, rank: int | None = None, label: str | None = None,
             color: str | None = None) -> None:
    """Singular values on a log axis, normalised by the largest, with the rank cut marked."""
    sv = singular_values.sort(descending=True).values
    rel = (sv / sv[0]).clamp_min(1e-18).numpy()
    ax.semilogy(range(1, len(rel) + 1), rel, ".", ms=3, label=label,
                color=color or COLORS["measured"])
    if rank is not None and 0 < rank < len(rel):
        ax.axvline(rank + 0.5, color=COLORS["closed_form"], ls="--", lw=1)
    ax.set_xlabel("index $i$")
    ax.set_ylabel(r"$\sigma_i / \sigma_1$")
