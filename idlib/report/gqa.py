"""Tables and generated sentences of Chapter 5 (grouped and multi-query attention).

The measurements are ``SeedRun`` objects (``idlib.studies.rope.measure_seeds``: one layer at
every seed); the closed form of the chapter's theorem is passed in as ``theorem`` (a function
of the layer, written out in the chapter). Each function returns a captioned MyST table
(``tables.captioned``) or the sentence of the prose that states what a table shows, counted
from the data, for the chapter to glue (``myst_nb.glue``).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Sequence

from ..config import AttentionConfig
from .prose import math_values, seeds_text, tally
from .runs import distinct
from .tables import (ROUNDOFF_SHOWN, captioned, format_certified, format_fraction,
                     format_gap, format_roundoff, format_share, markdown_table)

# Annotations name the measurement records of idlib.studies (SeedRun, BiasDifference, Step,
# Published) without importing them: report sits below studies and never imports it.

Theorem = Callable[[AttentionConfig], int]


def kind(config: AttentionConfig) -> str:
    """'MHA' (G = H), 'MQA' (G = 1) or 'GQA'."""
    if config.n_kv_heads == config.n_heads:
        return "MHA"
    return "MQA" if config.n_kv_heads == 1 else "GQA"


def share_cell(u: int, total: int) -> str:
    """'6.25% (1/16)'."""
    return f"{format_share(u, total)} ({format_fraction(u, total)})"


def layer_math(config: AttentionConfig) -> str:
    """'$d = 16$, $H = 8$, $G = 2$ ($m = 4$, $k = v = 2$)'."""
    c = config
    widths = (f"$k = v = {c.head_dim}$" if c.head_dim == c.value_dim
              else f"$k = {c.head_dim}$, $v = {c.value_dim}$")
    return (f"$d = {c.d_model}$, $H = {c.n_heads}$, $G = {c.n_kv_heads}$ "
            f"($m = {c.group_size}$, {widths})")


# --- the tensor demonstration ---------------------------------------------------------------

def moves_table(moves: Sequence[tuple[str, bool, float]]) -> str:
    """tab-gqa-moves: (move, in the theorem's group?, relative change of the output)."""
    rows = [[label, "yes" if symmetry else "no", format_roundoff(change, 2)]
            for label, symmetry, change in moves]
    table = markdown_table(["move", "in the group", "relative change of the output"], rows,
                           align="llr")
    caption = ("Five moves of a GQA layer's parameters. In the group: the move is an element "
               "of the group of {prf:ref}`thm-gqa-count` (one $(A_g, B_g)$ per group; with "
               "RoPE, $A_g$ in the commutant of $R(1)$); the change is "
               "$\\max|F' - F| / \\max|F|$ on random inputs.")
    return captioned(table, caption, "tab-gqa-moves")


def moves_verdict(moves: Sequence[tuple[str, bool, float]]) -> str:
    """What tab-gqa-moves shows, counted: the group's moves keep the output, the others not."""
    inside = [c for _, s, c in moves if s]
    outside = [c for _, s, c in moves if not s]
    kept = sum(c < ROUNDOFF_SHOWN for c in inside)
    moved = sum(c >= ROUNDOFF_SHOWN for c in outside)
    text = (f"In {{numref}}`tab-gqa-moves`, {tally(kept, len(inside), 'move')} of the group "
            f"{'leaves' if len(inside) == 1 else 'leave'} the output unchanged to round-off "
            f"(below $10^{{-12}}$)")
    if outside:
        text += (f", and {tally(moved, len(outside), 'other move')} change it, by at least "
                 f"{min(outside):.2g} of its size")
    return text + "."


# --- MHA, GQA and MQA -----------------------------------------------------------------------

MAIN_HEADERS = ["", "$G$", "RoPE", "$P$", "$U$ (theorem)", "$U$ (`count`)", "$U$ (meas.)",
                "gap $\\gamma$", "cert.", "$U/P$"]


def main_table(runs: Sequence[SeedRun], theorem: Theorem, seeds: Sequence[int]) -> str:
    """tab-gqa-main: every divisor G of H, without RoPE and with RoPE on every dimension."""
    rows = [[kind(r.config), r.config.n_kv_heads, "yes" if r.config.rotary_dim else "no",
             r.total, theorem(r.config), r.unidentified, distinct(r.measured),
             format_gap(r.gap), format_certified(r.certified),
             share_cell(theorem(r.config), r.total)] for r in runs]
    table = markdown_table(MAIN_HEADERS, rows, align="lrlrrrrrrr")
    c = runs[0].config
    caption = (f"MHA, GQA and MQA at $d = {c.d_model}$, $H = {c.n_heads}$, "
               f"$k = v = {c.head_dim}$, at {seeds_text(seeds)}. $U$ (theorem): "
               "{eq}`eq-gqa-count`; $U$ (`count`): `idlib.count`; $U$ (meas.): "
               "$P - \\operatorname{rank} J$, its distinct values over the seeds; gap "
               "$\\gamma$: the smallest over the seeds; cert.: every seed certified "
               "($\\gamma \\ge 10^4$); $U/P$ from the theorem.")
    return captioned(table, caption, "tab-gqa-main")


def falls_with_groups(runs: Sequence[SeedRun], theorem: Theorem) -> bool:
    """The share U/P (theorem) strictly increases with G over ``runs`` of one (d, H, RoPE)."""
    shares = sorted((r.config.n_kv_heads, Fraction(theorem(r.config), r.total)) for r in runs)
    return all(a[1] < b[1] for a, b in zip(shares, shares[1:]))


def agree(runs: Sequence[SeedRun], theorem: Theorem) -> int:
    """How many runs have theorem = count = the measured U at every seed, all certified."""
    return sum(r.agrees and r.unidentified == theorem(r.config) for r in runs)


def main_verdict(halves: Sequence[Sequence[SeedRun]], theorem: Theorem) -> str:
    """What tab-gqa-main shows, counted; ``halves``: its runs without and with RoPE."""
    runs = [r for half in halves for r in half]
    falls = sum(falls_with_groups(half, theorem) for half in halves)
    return (f"In {tally(agree(runs, theorem), len(runs), 'row')} of {{numref}}`tab-gqa-main` "
            "the theorem, `count` and the measured rank agree at every seed, all certified; "
            f"the share falls as $G$ falls in {tally(falls, len(halves), 'half', 'halves')} of "
            "the table (without and with RoPE).")


def all_verdict(runs: Sequence[SeedRun], theorem: Theorem, seeds: Sequence[int]) -> str:
    """The chapter's measurements, counted."""
    return (f"the theorem, `count` and the measured rank agree, certified at each of the "
            f"{len(seeds)} {'seed' if len(seeds) == 1 else 'seeds'}, for "
            f"{tally(agree(runs, theorem), len(runs), 'configuration')} of the tables and of "
            "{numref}`fig-gqa-ratio`")


def pairs_math(pairs: Sequence[tuple[int, int]]) -> str:
    """'$(d, H) = (16, 8)$ and $(8, 4)$'."""
    return math_values("(d, H)", [f"({d}, {H})" for d, H in pairs])


def shapes_table(runs: Sequence[SeedRun], theorem: Theorem, seeds: Sequence[int]) -> str:
    """tab-gqa-shapes: head widths other than d/H, wider than d, partial rotation."""
    rows = [[r.config.d_model, r.config.n_heads, r.config.n_kv_heads, r.config.head_dim,
             r.config.value_dim, r.config.rotary_dim, r.total, theorem(r.config),
             r.unidentified, distinct(r.measured), format_gap(r.gap),
             format_certified(r.certified)] for r in runs]
    table = markdown_table(["$d$", "$H$", "$G$", "$k$", "$v$", "$r$", "$P$", "$U$ (theorem)",
                            "$U$ (`count`)", "$U$ (meas.)", "gap $\\gamma$", "cert."], rows)
    caption = (f"Other shapes, at {seeds_text(seeds)}: heads narrower or wider than the model "
               "and partial rotation ($r$ rotated dimensions per head). Columns as in "
               "{numref}`tab-gqa-main`.")
    return captioned(table, caption, "tab-gqa-shapes")


def shapes_verdict(runs: Sequence[SeedRun], theorem: Theorem) -> str:
    return (f"The theorem, `count` and the measured rank agree in "
            f"{tally(agree(runs, theorem), len(runs), 'row')}, every seed certified.")


def removed_table(runs: Sequence[SeedRun], theorem: Theorem) -> str:
    """tab-gqa-removed: what fewer groups remove, relative to MHA (closed form)."""
    mha = next(r for r in runs if kind(r.config) == "MHA")
    rows = []
    for r in runs:
        U = theorem(r.config)
        removed, removed_U = mha.total - r.total, theorem(mha.config) - U
        rows.append([kind(r.config), r.config.n_kv_heads, r.total, r.total - U, U, removed,
                     format_fraction(removed_U, removed) if removed else "-",
                     share_cell(U, r.total)])
    table = markdown_table(["", "$G$", "$P$", "$I = P - U$", "$U$", "removed vs MHA",
                            "$U$ share of the removed", "$U/P$"], rows, align="lrrrrrrr")
    c = mha.config
    caption = (f"Without RoPE at $d = {c.d_model}$, $H = {c.n_heads}$ (closed form, "
               "{eq}`eq-gqa-count`): parameters, identified and unidentified counts, the "
               "parameters removed relative to MHA and the unidentified share of the removed.")
    return captioned(table, caption, "tab-gqa-removed")


def removed_verdict(runs: Sequence[SeedRun], theorem: Theorem) -> dict[str, str]:
    """The sentences on tab-gqa-removed: 'fewer' (parameters) and 'identified' (I falls)."""
    by_G = sorted(runs, key=lambda r: r.config.n_kv_heads)
    mqa, mha = by_G[0], by_G[-1]
    I = [(r.config.n_kv_heads, r.total - theorem(r.config)) for r in by_G]
    falls = all(a[1] < b[1] for a, b in zip(I, I[1:]))
    return {"fewer": (f"MQA has {mqa.total:,} parameters against {mha.total:,} for MHA at the "
                      "same $d$ and $H$"),
            "identified": (f"The identified count $I = P - U$, the functional dimension, "
                           f"{'falls' if falls else 'does not always fall'} with $G$, from "
                           f"{I[-1][1]:,} for MHA to {I[0][1]:,} for MQA")}


# --- exercises ------------------------------------------------------------------------------

def grows_table(rows: Sequence[tuple[int, int, bool, Fraction]]) -> str:
    """tab-gqa-grows: (H, d, the share increases with G, MHA share / MQA share)."""
    cells = [[H, d, "yes" if up else "no", str(q), str(Fraction(H + 1, 2))]
             for H, d, up, q in rows]
    table = markdown_table(["$H$", "$d$", "increases with $G$", "MHA / MQA", "$(H + 1)/2$"],
                           cells)
    return captioned(table, "The share $U/P$ from `count` over the divisors $G$ of $H$, "
                     "$k = v = 2$ ($d = 2H$): whether it increases with $G$, and the quotient "
                     "of the MHA and MQA shares against $(H + 1)/2$.", "tab-gqa-grows")


def wide_table(runs: Sequence[SeedRun], theorem: Theorem, u_qk: Sequence[int],
               seeds: Sequence[int]) -> str:
    """tab-gqa-wide: heads wider than the model, every G."""
    cells = [[r.config.n_kv_heads, r.config.group_size, u, theorem(r.config), r.unidentified,
              distinct(r.measured), format_gap(r.gap), format_certified(r.certified)]
             for r, u in zip(runs, u_qk, strict=True)]
    table = markdown_table(["$G$", "$m$", "$u_{QK}$ per group", "$U$ (theorem)",
                            "$U$ (`count`)", "$U$ (meas.)", "gap $\\gamma$", "cert."], cells)
    c = runs[0].config
    caption = (f"Query/key heads wider than the model: $d = {c.d_model}$, $H = {c.n_heads}$, "
               f"$k = {c.head_dim}$, $v = {c.value_dim}$, every $G$, at {seeds_text(seeds)}; "
               "$u_{QK}$ of {eq}`eq-gqa-count`.")
    return captioned(table, caption, "tab-gqa-wide")


def figure_verdict(runs: Sequence[SeedRun]) -> str:
    """What fig-gqa-ratio shows, counted: measured share = closed form at every seed."""
    hits = sum(all(c.measured_unidentified == r.unidentified for c in r.checks) for r in runs)
    return (f"the measured share equals the closed form at every seed for "
            f"{tally(hits, len(runs), 'point')}")
