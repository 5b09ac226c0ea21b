"""The tables of chapter 6 (training inside the invariant directions), captioned and labelled.

``optimizers`` tabulates one run per task and optimizer (the share of each step and of each
gradient in the orbit's tangent space, the drift of the conserved quantities, the final loss);
``rebalancing`` the comparison with and without rebalancing over seeds, ``plot_rebalancing``
its figure. Shares below 1e-12 are round-off and printed as such (``share_text``), so the page
reads the same on every CPU.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..lazy import torch

from .plotting import COLORS
from .tables import captioned, markdown_table

MODE_NAMES = {None: "none", "project": "projection", "balance": "balancing"}


def median(values: Sequence[float]) -> float:
    """The median of a list of floats (the lower middle value for an even count)."""
    return float(torch.tensor(list(values), dtype=torch.float64).median())


def share_text(x: float) -> str:
    """A share in the tangent space: '< 1e-12' at round-off level, else three digits."""
    return "< 1e-12" if x < 1e-12 else f"{x:.3e}"


def optimizers(runs: Mapping[str, Mapping[str, Any]], steps: int) -> str:
    """``runs[task][optimizer]`` is a ``studies.training.History`` recorded with the overlap."""
    rows = [[name, o, share_text(median(h.overlap["total"])), share_text(max(h.overlap["total"])),
             share_text(max(h.grad_overlap)), f"{h.drift['total'][-1]:.3e}", f"{h.final_loss:.3e}"]
            for name, hs in runs.items() for o, h in hs.items()]
    return captioned(markdown_table(
        ["task", "optimizer", "median share of the step", "max share of the step",
         "max share of the gradient", "drift of $C$", "final loss"], rows, align="llrrrrr"),
        f"One run of {steps} steps per task and optimizer (one seed): the share "
        "$\\lVert\\operatorname{proj}_T u\\rVert / \\lVert u\\rVert$ in $T_\\theta\\mathcal O$ of "
        "each step $u$ and of each minibatch gradient, the drift "
        "$\\lVert C(\\theta_S) - C(\\theta_0)\\rVert_F$ of the conserved quantities after the "
        "last step, and the held-out loss.", "tab-train-optimizers")


def rebalancing(comparison: Mapping[tuple, Sequence[Any]], n_seeds: int, steps: int,
                mean_std: Any) -> str:
    """``comparison[task, optimizer, mode]`` lists the Histories of the seeds; ``mean_std`` is
    ``studies.training.mean_std``."""
    rows = []
    for (name, o, m), hs in comparison.items():
        finals = [h.final_loss for h in hs]
        mean, sd = mean_std(finals)
        drift, _ = mean_std([h.drift["total"][-1] for h in hs])
        rows.append([name, o, MODE_NAMES[m], f"{mean:.3e} ± {sd:.3e}", f"{min(finals):.3e}",
                     f"{max(finals):.3e}", f"{drift:.3e}"])
    return captioned(markdown_table(
        ["task", "optimizer", "rebalancing", "final loss, mean ± std", "min", "max",
         "drift of $C$, mean"], rows, align="lllrrrr"),
        f"Training with and without rebalancing after every step, {n_seeds} seeds of {steps} "
        "steps each (the seed fixes the initialisation and the minibatches): the held-out loss "
        "after the last step (mean, sample standard deviation, extremes) and the mean drift "
        "$\\lVert C(\\theta_S) - C(\\theta_0)\\rVert_F$.", "tab-train-rebalance")


def plot_rebalancing(axes: Any, comparison: Mapping[tuple, Sequence[Any]],
                     panels: Sequence[tuple], modes: Sequence[Any]) -> None:
    """One panel per (task, optimizer): for each rebalancing mode the geometric mean of the
    held-out loss over the seeds (line) and one standard deviation of its log10 (band). The
    line without rebalancing is drawn wide and beneath, the projection dashed, so that
    curves that coincide stay visible."""
    style = {None: dict(color=COLORS["baseline"], lw=2.6),
             "project": dict(color=COLORS["closed_form"], ls="--"),
             "balance": dict(color=COLORS["measured"])}
    for ax, (name, o) in zip(axes.flat, panels):
        for m in modes:
            hs = comparison[name, o, m]
            L = torch.tensor([h.eval_loss for h in hs], dtype=torch.float64).log10()
            mid, sd = L.mean(0), L.std(0)
            ax.plot(hs[0].eval_steps, 10 ** mid, label=MODE_NAMES[m], **style[m])
            ax.fill_between(hs[0].eval_steps, 10 ** (mid - sd), 10 ** (mid + sd),
                            color=style[m]["color"], alpha=0.2)
        ax.set(yscale="log", title=f"{name}, {o}", xlabel="step $s$")
    for ax in axes[:, 0]:
        ax.set_ylabel("held-out loss")
